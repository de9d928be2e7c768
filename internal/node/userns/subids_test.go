package userns

import (
	"strings"
	"testing"
)

func TestParseSubIDs(t *testing.T) {
	for name, tc := range map[string]struct {
		data    string
		want    Range
		wantErr string
	}{
		"by name":                {data: "root:100000:65536\nkubelet:65536:2147483648\n", want: Range{65536, 1 << 31}},
		"by uid":                 {data: "999:131072:65536", want: Range{131072, 65536}},
		"comments, blanks, CRLF": {data: "# subordinate IDs\r\n\r\n  kubelet:65536:65536  \r\n", want: Range{65536, 65536}},
		"to the last ID":         {data: "kubelet:4294901760:65536", want: Range{4294901760, 65536}},
		"empty file":             {data: "", wantErr: "no entry for user \"kubelet\""},
		"other users only":       {data: "alice:100000:65536\n", wantErr: "no entry for user \"kubelet\""},
		"two entries":            {data: "kubelet:65536:65536\n999:131072:65536\n", wantErr: "2 entries for user \"kubelet\": want exactly one"},
		"too few fields":         {data: "kubelet:65536\n", wantErr: "line 1: \"kubelet:65536\": want owner:first:count"},
		"too many fields":        {data: "x:1:1\nkubelet:65536:65536:1\n", wantErr: "line 2:"},
		"no owner":               {data: ":65536:65536", wantErr: "want owner:first:count"},
		"first not a number":     {data: "kubelet:abc:65536", wantErr: "first ID: want a number below 2^32"},
		"first negative":         {data: "kubelet:-65536:65536", wantErr: "first ID"},
		"first past 32 bits":     {data: "kubelet:4294967296:1", wantErr: "first ID"},
		"count zero":             {data: "kubelet:65536:0", wantErr: "count: want a positive number"},
		"count past 32 bits":     {data: "kubelet:0:4294967296", wantErr: "count"},
		"range past 2^32":        {data: "kubelet:4294901760:65537", wantErr: "the range ends past 2^32"},
		"hex":                    {data: "kubelet:0x10000:65536", wantErr: "first ID"},
		"a bad line of another":  {data: "alice:oops:1\nkubelet:65536:65536", wantErr: "line 1"},
		"NUL bytes":              {data: "kubelet\x00:65536:65536", wantErr: "no entry"},
		"long line truncated":    {data: strings.Repeat("k", 10000) + ":1", wantErr: "...\": want owner:first:count"},
		"too large":              {data: strings.Repeat("#\n", MaxSubIDFile/2+1), wantErr: "larger than 1048576 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSubIDs([]byte(tc.data), "kubelet", "999")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if len(err.Error()) > 200 {
					t.Errorf("error of %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestDefaultRange(t *testing.T) {
	if r := DefaultRange(65536); r != (Range{65536, 4294901760}) {
		t.Errorf("default range %+v", r)
	}
	if err := checkRange(DefaultRange(65536), 65536, 65535); err != nil {
		t.Errorf("the default range holds 65535 pods: %v", err)
	}
	if r := DefaultRange(1 << 31); r != (Range{1 << 31, 1 << 31}) {
		t.Errorf("default range of 2^31 a pod %+v", r)
	}
}

// FuzzParseSubIDs: whatever the file holds, parsing ends with a range
// within 32 bits or an error of bounded length, and never panics.
func FuzzParseSubIDs(f *testing.F) {
	for _, seed := range []string{
		"kubelet:65536:65536\n", "999:65536:2147483648", "# c\nkubelet:1:1", "kubelet:4294967295:1",
		"kubelet:::", "kubelet:1:1\nkubelet:2:2", "\x00:\xff:\n", "kubelet:+1:1", "kubelet: 1:1",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseSubIDs(data, "kubelet", "999")
		if err != nil {
			if len(err.Error()) > 300 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if r.Length == 0 || uint64(r.First)+uint64(r.Length) > 1<<32 {
			t.Errorf("range %+v", r)
		}
	})
}
