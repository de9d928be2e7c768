package devicemanager

import (
	"math/rand"
	"slices"
	"testing"
	"testing/quick"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name    string
		c       choice
		want    []string
		wantErr string
	}{
		{name: "in the plugin's order", c: choice{need: 2, available: []string{"d1", "d2", "d3"}}, want: []string{"d1", "d2"}},
		{name: "reusable first", c: choice{need: 2, available: []string{"d1", "d2"}, reusable: []string{"d9"}}, want: []string{"d9", "d1"}},
		{name: "preferred before the rest", c: choice{need: 2, available: []string{"d1", "d2", "d3"}, preferred: []string{"d3", "d2"}}, want: []string{"d3", "d2"}},
		{name: "a preferred device that is not available is ignored",
			c: choice{need: 1, available: []string{"d1"}, preferred: []string{"taken"}}, want: []string{"d1"}},
		{name: "a device named twice is taken once",
			c: choice{need: 2, available: []string{"d1", "d2"}, preferred: []string{"d1", "d1"}}, want: []string{"d1", "d2"}},
		{name: "not enough", c: choice{need: 3, available: []string{"d1", "d2"}},
			wantErr: "requested number of devices unavailable for example.com/r. Requested: 3, Available: 2"},
		{name: "none", c: choice{need: 1},
			wantErr: "requested number of devices unavailable for example.com/r. Requested: 1, Available: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := choose("example.com/r", tc.c)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("choose = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Whatever the plugin prefers, choose hands out exactly need distinct
// devices, each available or reusable, when there are enough of them.
func TestChooseQuick(t *testing.T) {
	name := func(r *rand.Rand) string { return string(rune('a' + r.Intn(8))) }
	list := func(r *rand.Rand) []string {
		out := make([]string, r.Intn(6))
		for i := range out {
			out[i] = name(r)
		}
		return out
	}
	f := func(seed int64) bool {
		r := rand.New(rand.NewSource(seed))
		c := choice{need: r.Intn(6), available: list(r), reusable: list(r), preferred: list(r)}
		pool := map[string]bool{}
		for _, d := range slices.Concat(c.available, c.reusable) {
			pool[d] = true
		}
		got, err := choose("r", c)
		if len(pool) < c.need {
			return err != nil
		}
		if err != nil || len(got) != c.need {
			return false
		}
		seen := map[string]bool{}
		for _, d := range got {
			if !pool[d] || seen[d] {
				return false
			}
			seen[d] = true
		}
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}
