package eviction

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// rankPod is one pod of a ranking case: its requests and priority, and
// what its stats say (stats false: the summary has none for it).
type rankPod struct {
	name         string
	memReq       string // "" for none
	diskReq      string // ephemeral-storage request, "" for none
	priority     int32
	stats        bool
	mem          uint64 // working set
	rootfs, disk uint64 // writable layers; all its ephemeral storage
	inodes       uint64 // inodes used, in rootfs and in all
}

func (p rankPod) pod() *v1.Pod {
	c := v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}
	if p.memReq != "" {
		c.Resources.Requests[v1.ResourceMemory] = resource.MustParse(p.memReq)
	}
	if p.diskReq != "" {
		c.Resources.Requests[v1.ResourceEphemeralStorage] = resource.MustParse(p.diskReq)
	}
	prio := p.priority
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", UID: types.UID(p.name)},
		Spec: v1.PodSpec{Containers: []v1.Container{c}, Priority: &prio}}
}

func (p rankPod) podStats() statsapi.PodStats {
	return statsapi.PodStats{
		PodRef:           statsapi.PodReference{Name: p.name, Namespace: "default", UID: p.name},
		Memory:           &statsapi.MemoryStats{WorkingSetBytes: ptr(p.mem)},
		EphemeralStorage: &statsapi.FsStats{UsedBytes: ptr(p.disk), InodesUsed: ptr(p.inodes)},
		Containers: []statsapi.ContainerStats{{Name: "c",
			Rootfs: &statsapi.FsStats{UsedBytes: ptr(p.rootfs), InodesUsed: ptr(p.inodes / 2)}}},
	}
}

const mi = 1 << 20

// The kubelet's rank functions, one case per rule: for memory and disk,
// pods over their requests, then lower priority, then more usage above the
// request; for processes priority only; pods without stats first; ties
// keep their order. With the images on a filesystem of their own, imagefs
// counts the writable layers and nodefs the rest.
func TestRank(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sig       Signal
		dedicated bool
		pods      []rankPod
		want      string
	}{
		{"memory: pods without stats first, whatever their priority", SignalMemoryAvailable, false, []rankPod{
			{name: "a", stats: true, mem: 500 * mi},
			{name: "nostats", priority: 1000},
		}, "nostats,a"},
		{"memory: over its request before under, whatever the priority", SignalMemoryAvailable, false, []rankPod{
			{name: "under", memReq: "100Mi", stats: true, mem: 50 * mi},
			{name: "over", memReq: "100Mi", priority: 1000, stats: true, mem: 101 * mi},
		}, "over,under"},
		{"memory: among the pods over their requests, priority before usage", SignalMemoryAvailable, false, []rankPod{
			{name: "big-important", memReq: "100Mi", priority: 10, stats: true, mem: 900 * mi},
			{name: "small", memReq: "100Mi", stats: true, mem: 110 * mi},
		}, "small,big-important"},
		{"memory: same priority, more above the request first (not more used)", SignalMemoryAvailable, false, []rankPod{
			{name: "uses-more", memReq: "1Gi", stats: true, mem: 1100 * mi},
			{name: "over-more", memReq: "100Mi", stats: true, mem: 400 * mi},
		}, "over-more,uses-more"},
		{"memory: no request means all of it is above the request", SignalMemoryAvailable, false, []rankPod{
			{name: "requested", memReq: "100Mi", stats: true, mem: 150 * mi},
			{name: "besteffort", stats: true, mem: 60 * mi},
		}, "besteffort,requested"},
		{"memory: ties keep their order", SignalMemoryAvailable, false, []rankPod{
			{name: "b", stats: true, mem: 10 * mi}, {name: "a", stats: true, mem: 10 * mi},
		}, "b,a"},
		{"nodefs: ephemeral-storage requests count", SignalNodeFsAvailable, false, []rankPod{
			{name: "requested", diskReq: "1Gi", stats: true, disk: 800 * mi, rootfs: 400 * mi},
			{name: "small", stats: true, disk: 10 * mi, rootfs: 5 * mi},
		}, "small,requested"},
		{"nodefs: memory requests do not", SignalNodeFsAvailable, false, []rankPod{
			{name: "b", stats: true, disk: 10 * mi},
			{name: "a", memReq: "1Gi", stats: true, disk: 200 * mi},
		}, "a,b"},
		{"nodefs shared with the images: all of a pod's storage", SignalNodeFsAvailable, false, []rankPod{
			{name: "logs", stats: true, disk: 500 * mi, rootfs: 10 * mi},
			{name: "layers", stats: true, disk: 600 * mi, rootfs: 590 * mi},
		}, "layers,logs"},
		{"nodefs, dedicated imagefs: all but the writable layers", SignalNodeFsAvailable, true, []rankPod{
			{name: "layers", stats: true, disk: 600 * mi, rootfs: 590 * mi},
			{name: "logs", stats: true, disk: 500 * mi, rootfs: 10 * mi},
		}, "logs,layers"},
		{"imagefs, dedicated: the writable layers only", SignalImageFsAvailable, true, []rankPod{
			{name: "logs", stats: true, disk: 500 * mi, rootfs: 10 * mi},
			{name: "layers", stats: true, disk: 100 * mi, rootfs: 90 * mi},
		}, "layers,logs"},
		{"inodes: no request, more inodes first", SignalNodeFsInodesFree, false, []rankPod{
			{name: "few", diskReq: "10Gi", stats: true, inodes: 10, disk: 900 * mi},
			{name: "many", stats: true, inodes: 5000},
		}, "many,few"},
		{"inodes: lower priority before more inodes", SignalNodeFsInodesFree, false, []rankPod{
			{name: "many", priority: 5, stats: true, inodes: 5000},
			{name: "few", stats: true, inodes: 10},
		}, "few,many"},
		{"pids: priority only", SignalPIDAvailable, false, []rankPod{
			{name: "high", priority: 100, stats: true, mem: 900 * mi},
			{name: "low-b", stats: true},
			{name: "low-a", memReq: "1Mi", stats: true, mem: 500 * mi},
		}, "low-b,low-a,high"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []*v1.Pod
			summary := &statsapi.Summary{}
			for _, p := range tc.pods {
				pods = append(pods, p.pod())
				if p.stats {
					summary.Pods = append(summary.Pods, p.podStats())
				}
			}
			Rank(tc.sig, tc.dedicated, pods, StatsFrom(summary))
			if got := names(pods); got != tc.want {
				t.Errorf("ranked %s, want %s", got, tc.want)
			}
		})
	}
}

// Ties keep the order they came in, however many there are (enough for
// an unstable sort to show).
func TestRankStable(t *testing.T) {
	var pods []*v1.Pod
	summary := &statsapi.Summary{}
	var over, rest []string
	for i := range 40 {
		p := rankPod{name: fmt.Sprintf("p%02d", i), stats: true, mem: 10 * mi}
		if i%3 == 0 {
			p.mem = 20 * mi
			over = append(over, p.name)
		} else {
			rest = append(rest, p.name)
		}
		pods = append(pods, p.pod())
		summary.Pods = append(summary.Pods, p.podStats())
	}
	want := strings.Join(append(over, rest...), ",")
	Rank(SignalMemoryAvailable, false, pods, StatsFrom(summary))
	if got := names(pods); got != want {
		t.Errorf("ranked %s\nwant   %s", got, want)
	}
}
