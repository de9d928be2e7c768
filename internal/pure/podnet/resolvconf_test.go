package podnet

import (
	"slices"
	"testing"
)

func TestParseResolvConf(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ResolvConf
		err      bool
	}{
		{name: "empty"},
		{name: "comments and blanks", in: "# nameserver 1.1.1.1\n  ; search x\n\n   \nnameserver 8.8.8.8\n",
			want: ResolvConf{Nameservers: []string{"8.8.8.8"}}},
		{name: "full", in: "nameserver 10.0.0.1\nnameserver  10.0.0.2 extra\r\nsearch a.example b.example.\noptions ndots:2 rotate\n",
			want: ResolvConf{Nameservers: []string{"10.0.0.1", "10.0.0.2"}, Searches: []string{"a.example", "b.example"}, Options: []string{"ndots:2", "rotate"}}},
		{name: "last search line wins", in: "search a b\nsearch c d\n",
			want: ResolvConf{Searches: []string{"c", "d"}}},
		{name: "domain is a search line", in: "search a b\ndomain corp.example\n",
			want: ResolvConf{Searches: []string{"corp.example"}}},
		{name: "search after domain", in: "domain corp.example\nsearch a\n",
			want: ResolvConf{Searches: []string{"a"}}},
		{name: "empty search clears", in: "search a\nsearch\n"},
		{name: "dot and duplicate searches", in: "search . a.b. a.b c\n",
			want: ResolvConf{Searches: []string{"a.b", "c"}}},
		{name: "options merge across lines", in: "options ndots:2 timeout:1\noptions attempts:3 ndots:4\noptions edns0\n",
			want: ResolvConf{Options: []string{"ndots:4", "timeout:1", "attempts:3", "edns0"}}},
		{name: "no final newline", in: "nameserver ::1",
			want: ResolvConf{Nameservers: []string{"::1"}}},
		{name: "tabs", in: "nameserver\t1.2.3.4\nsearch\tx\ty\n",
			want: ResolvConf{Nameservers: []string{"1.2.3.4"}, Searches: []string{"x", "y"}}},
		{name: "unknown lines ignored", in: "sortlist 130.155.160.0\nlookup file bind\nnameserver 1.1.1.1\n",
			want: ResolvConf{Nameservers: []string{"1.1.1.1"}}},
		{name: "empty nameserver", in: "nameserver 1.1.1.1\nnameserver\n", err: true,
			want: ResolvConf{Nameservers: []string{"1.1.1.1"}}},
	} {
		got, err := ParseResolvConf([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("%s: err = %v", tc.name, err)
		}
		if !slices.Equal(got.Nameservers, tc.want.Nameservers) || !slices.Equal(got.Searches, tc.want.Searches) || !slices.Equal(got.Options, tc.want.Options) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
