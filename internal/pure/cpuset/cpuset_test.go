package cpuset

import (
	"strings"
	"testing"
	"testing/quick"
)

func TestParseAndString(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "", want: ""},
		{in: "0", want: "0"},
		{in: "0-3", want: "0-3"},
		{in: "0,1", want: "0-1"},
		{in: "3,1,2,7,9-10", want: "1-3,7,9-10"},
		{in: " 0-1, 1-2 ", want: "0-2"},
		{in: "a", err: `CPU "a"`},
		{in: "3-1", err: "reversed"},
		{in: "-1", err: `CPU ""`},
		{in: "0-99999999", err: "want an integer from 0 to 16384"},
		{in: "1,", err: `CPU ""`},
	} {
		s, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q): err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, s, err, tc.want)
		}
	}
}

func TestOperations(t *testing.T) {
	a, b := New(0, 1, 2, 5), New(2, 3, 5)
	if got := a.Union(b).String(); got != "0-3,5" {
		t.Errorf("union %s", got)
	}
	if got := a.Intersection(b).String(); got != "2,5" {
		t.Errorf("intersection %s", got)
	}
	if got := a.Difference(b).String(); got != "0-1" {
		t.Errorf("difference %s", got)
	}
	if !New(2, 5).IsSubsetOf(a) || b.IsSubsetOf(a) || !a.Contains(5) || a.Contains(3) || a.Size() != 4 {
		t.Error("subset, contains or size wrong")
	}
}

// Printing and parsing back is the identity, against a naive set.
func TestRoundTrip(t *testing.T) {
	f := func(raw []uint8) bool {
		ids := make([]int, len(raw))
		naive := map[int]bool{}
		for i, r := range raw {
			ids[i] = int(r % 64)
			naive[ids[i]] = true
		}
		s := New(ids...)
		back, err := Parse(s.String())
		if err != nil || !back.Equals(s) || back.Size() != len(naive) {
			return false
		}
		for id := range naive {
			if !back.Contains(id) {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}
