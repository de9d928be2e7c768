package stats

import (
	"strings"
	"testing"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fakeVolumes reports fixed driver volume stats.
type fakeVolumes map[string][]v1alpha1.VolumeStats

func (f fakeVolumes) PodVolumeStats(uid string) []v1alpha1.VolumeStats { return f[uid] }

func (f fakeVolumes) ClaimVolumeStats() []v1alpha1.VolumeStats {
	var out []v1alpha1.VolumeStats
	for _, list := range f {
		for _, v := range list {
			if v.PVCRef != nil {
				out = append(out, v)
			}
		}
	}
	return out
}

func u64(n uint64) *uint64 { return &n }

var driverVolumes = fakeVolumes{"uid-a": {{Name: "data", PVCRef: &v1alpha1.PVCReference{Name: "claim", Namespace: "default"},
	FsStats: v1alpha1.FsStats{CapacityBytes: u64(1000), AvailableBytes: u64(600), UsedBytes: u64(400),
		Inodes: u64(100), InodesFree: u64(90), InodesUsed: u64(10)}}}}

// A driver's volume stats are the pod's volume stats, not its ephemeral
// storage.
func TestDriverVolumeStats(t *testing.T) {
	e := newEnv(t, WithVolumes(driverVolumes))
	e.rt.addPod(podSpec{ns: "default", name: "web", uid: "uid-a", state: ready, created: t0, containers: []ctrSpec{
		{name: "app", state: running, cpu: 1, ws: 1, writable: 1000},
	}})
	s := summary(t, e.p, false)
	web := findPod(s, "web")
	if len(web.VolumeStats) != 1 || web.VolumeStats[0].Name != "data" || web.VolumeStats[0].PVCRef.Name != "claim" {
		t.Fatalf("volume stats %+v", web.VolumeStats)
	}
	checkU64(t, "capacity", web.VolumeStats[0].CapacityBytes, 1000)
	checkU64(t, "ephemeral used", web.EphemeralStorage.UsedBytes, 1000)
}

func TestVolumeMetrics(t *testing.T) {
	want := `
# HELP kubelet_volume_stats_available_bytes [ALPHA] Number of available bytes in the volume
# TYPE kubelet_volume_stats_available_bytes gauge
kubelet_volume_stats_available_bytes{namespace="default",persistentvolumeclaim="claim"} 600
# HELP kubelet_volume_stats_capacity_bytes [ALPHA] Capacity in bytes of the volume
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="claim"} 1000
# HELP kubelet_volume_stats_inodes [ALPHA] Maximum number of inodes in the volume
# TYPE kubelet_volume_stats_inodes gauge
kubelet_volume_stats_inodes{namespace="default",persistentvolumeclaim="claim"} 100
# HELP kubelet_volume_stats_inodes_free [ALPHA] Number of free inodes in the volume
# TYPE kubelet_volume_stats_inodes_free gauge
kubelet_volume_stats_inodes_free{namespace="default",persistentvolumeclaim="claim"} 90
# HELP kubelet_volume_stats_inodes_used [ALPHA] Number of used inodes in the volume
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="default",persistentvolumeclaim="claim"} 10
# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="claim"} 400
`
	if err := promtestutil.CollectAndCompare(NewVolumeMetrics(driverVolumes), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := promtestutil.CollectAndCount(NewVolumeMetrics(fakeVolumes{})); n != 0 {
		t.Errorf("%d metrics without volumes", n)
	}
}
