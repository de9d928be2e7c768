package stats

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The pod cgroups are looked for under the QoS tops given, the instance's
// own cgroupRoot, and nowhere else: another nodelet's /kubepods on the
// same host is not this one's.
func TestFindCgroupsUnderTheCgroupRoot(t *testing.T) {
	root := t.TempDir()
	own, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, d := range []string{
		"nodelet-a/kubepods/besteffort/pod1/" + own,
		"kubepods/besteffort/pod2/" + other,
		"nodelet_a.slice/nodelet_a-kubepods.slice/nodelet_a-kubepods-besteffort.slice/x/cri-containerd-" + strings.Repeat("c", 64) + ".scope",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{own: true, other: true, strings.Repeat("c", 64): true}
	for _, tc := range []struct {
		tops []string
		want map[string]string
	}{
		{[]string{"nodelet-a/kubepods", "nodelet_a.slice/nodelet_a-kubepods.slice"}, map[string]string{
			own:                     "/nodelet-a/kubepods/besteffort/pod1/" + own,
			strings.Repeat("c", 64): "/nodelet_a.slice/nodelet_a-kubepods.slice/nodelet_a-kubepods-besteffort.slice/x/cri-containerd-" + strings.Repeat("c", 64) + ".scope",
		}},
		{[]string{"kubepods", "kubepods.slice"}, map[string]string{other: "/kubepods/besteffort/pod2/" + other}},
	} {
		if got := findCgroups(root, tc.tops, want); !maps.Equal(got, tc.want) {
			t.Errorf("tops %v: %v, want %v", tc.tops, got, tc.want)
		}
	}
}
