package eviction

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// storage builds a pod and its stats for the local storage tables.
type storage struct {
	pod *v1.Pod
	ps  statsapi.PodStats
}

func newStorage(name string) *storage {
	return &storage{
		pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}},
		ps:  statsapi.PodStats{PodRef: statsapi.PodReference{Name: name, Namespace: "default", UID: name}},
	}
}

// container adds a container (kind "", "init" or "sidecar") with an
// ephemeral-storage limit ("" for none) that uses rootfs and logs bytes
// (negative: no stats of it).
func (s *storage) container(kind, name, limit string, rootfs, logs int64) *storage {
	c := v1.Container{Name: name, Image: "busybox"}
	if limit != "" {
		c.Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(limit)}
	}
	switch kind {
	case "init":
		s.pod.Spec.InitContainers = append(s.pod.Spec.InitContainers, c)
	case "sidecar":
		always := v1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
		s.pod.Spec.InitContainers = append(s.pod.Spec.InitContainers, c)
	default:
		s.pod.Spec.Containers = append(s.pod.Spec.Containers, c)
	}
	cs := statsapi.ContainerStats{Name: name}
	if rootfs >= 0 {
		cs.Rootfs = &statsapi.FsStats{UsedBytes: ptr(uint64(rootfs))}
	}
	if logs >= 0 {
		cs.Logs = &statsapi.FsStats{UsedBytes: ptr(uint64(logs))}
	}
	s.ps.Containers = append(s.ps.Containers, cs)
	s.addEphemeral(max(rootfs, 0) + max(logs, 0))
	return s
}

// emptyDir adds an emptyDir volume (medium "" or "Memory", sizeLimit ""
// for none) using used bytes (negative: no usage in its stats); a
// disk-backed one counts in the pod's ephemeral storage, as the stats
// count it.
func (s *storage) emptyDir(name, medium, sizeLimit string, used int64) *storage {
	ed := &v1.EmptyDirVolumeSource{Medium: v1.StorageMedium(medium)}
	if sizeLimit != "" {
		q := resource.MustParse(sizeLimit)
		ed.SizeLimit = &q
	}
	s.pod.Spec.Volumes = append(s.pod.Spec.Volumes, v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: ed}})
	vs := statsapi.VolumeStats{Name: name}
	if used >= 0 {
		vs.UsedBytes = ptr(uint64(used))
	}
	s.ps.VolumeStats = append(s.ps.VolumeStats, vs)
	if medium == "" {
		s.addEphemeral(max(used, 0))
	}
	return s
}

func (s *storage) addEphemeral(n int64) {
	if s.ps.EphemeralStorage == nil {
		s.ps.EphemeralStorage = &statsapi.FsStats{UsedBytes: ptr(uint64(0))}
	}
	*s.ps.EphemeralStorage.UsedBytes += uint64(n)
}

func (s *storage) critical() *storage {
	s.pod.Spec.PriorityClassName = "system-node-critical"
	return s
}

func (s *storage) noStats() *storage {
	s.ps.PodRef.UID = "gone"
	return s
}

func found(list []LocalStorageEviction) string {
	var out []string
	for _, e := range list {
		out = append(out, fmt.Sprintf("%s %s %s", e.Pod.Name, e.Signal, e.Message))
	}
	return strings.Join(out, "\n")
}

// Which pods the kubelet's localStorageEviction finds over their limits,
// under which signal and with which message.
func TestLocalStorage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pods      []*storage
		dedicated bool
		want      string
	}{
		{name: "nothing limited", pods: []*storage{
			newStorage("a").container("", "c", "", 50*mi, 50*mi).emptyDir("v", "", "", 900*mi)}},
		{name: "emptyDir over its sizeLimit", pods: []*storage{
			newStorage("a").container("", "c", "", 0, 0).emptyDir("scratch", "", "4Mi", 4*mi+1)},
			want: `a emptydirfs.limit Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". `},
		{name: "emptyDir at its sizeLimit stays", pods: []*storage{
			newStorage("a").container("", "c", "", 0, 0).emptyDir("scratch", "", "4Mi", 4*mi)}},
		{name: "emptyDir without usage stats stays", pods: []*storage{
			newStorage("a").container("", "c", "", 0, 0).emptyDir("scratch", "", "4Mi", -1)}},
		{name: "memory emptyDir over its sizeLimit (cannot happen: the tmpfs is that size)", pods: []*storage{
			newStorage("a").container("", "c", "", 0, 0).emptyDir("ram", "Memory", "4Mi", 5*mi)},
			want: `a emptydirfs.limit Usage of EmptyDir volume "ram" exceeds the limit "4Mi". `},
		{name: "memory emptyDir is not ephemeral storage", pods: []*storage{
			newStorage("a").container("", "c", "8Mi", 1*mi, 0).emptyDir("ram", "Memory", "", 64*mi)}},
		{name: "disk emptyDir counts in the pod's total", pods: []*storage{
			newStorage("a").container("", "c", "8Mi", 1*mi, 0).emptyDir("disk", "", "", 8*mi)},
			want: `a ephemeralpodfs.limit Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. `},
		{name: "pod total is the sum of the containers' limits", pods: []*storage{
			newStorage("a").container("", "c1", "8Mi", 6*mi, 0).container("", "c2", "8Mi", 6*mi, 0).emptyDir("disk", "", "", 5*mi)},
			want: `a ephemeralpodfs.limit Pod ephemeral local storage usage exceeds the total limit of containers 16Mi. `},
		{name: "within the pod's total", pods: []*storage{
			newStorage("a").container("", "c1", "8Mi", 6*mi, 0).container("", "c2", "8Mi", 6*mi, 0).emptyDir("disk", "", "", 4*mi)}},
		{name: "container over its limit: writable layer and logs", pods: []*storage{
			newStorage("a").container("", "small", "2Mi", 2*mi, 1).container("", "big", "1Gi", 0, 0)},
			want: `a ephemeralcontainerfs.limit Container small exceeded its local ephemeral storage limit "2Mi". `},
		{name: "container at its limit stays", pods: []*storage{
			newStorage("a").container("", "small", "2Mi", 1*mi, 1*mi).container("", "big", "1Gi", 0, 0)}},
		{name: "with a dedicated image filesystem the writable layer is not counted", dedicated: true, pods: []*storage{
			newStorage("a").container("", "small", "2Mi", 3*mi, 1*mi).container("", "big", "1Gi", 0, 0)}},
		{name: "with a dedicated image filesystem the logs still count", dedicated: true, pods: []*storage{
			newStorage("a").container("", "small", "2Mi", 0, 3*mi).container("", "big", "1Gi", 0, 0)},
			want: `a ephemeralcontainerfs.limit Container small exceeded its local ephemeral storage limit "2Mi". `},
		{name: "sidecar over its limit", pods: []*storage{
			newStorage("a").container("sidecar", "side", "2Mi", 3*mi, 0).container("", "main", "1Gi", 0, 0)},
			want: `a ephemeralcontainerfs.limit Container side exceeded its local ephemeral storage limit "2Mi". `},
		{name: "a finished init container's limit is not a container's", pods: []*storage{
			newStorage("a").container("init", "setup", "2Mi", 3*mi, 0).container("", "main", "1Gi", 0, 0)}},
		{name: "no container stats: nothing used", pods: []*storage{
			newStorage("a").container("", "c", "2Mi", -1, -1)}},
		{name: "emptyDir first, then the pod's total, then a container", pods: []*storage{
			newStorage("a").container("", "c", "2Mi", 3*mi, 0).emptyDir("v", "", "1Mi", 2*mi)},
			want: `a emptydirfs.limit Usage of EmptyDir volume "v" exceeds the limit "1Mi". `},
		{name: "the pod's total before a container", pods: []*storage{
			newStorage("a").container("", "c", "2Mi", 3*mi, 0)},
			want: `a ephemeralpodfs.limit Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. `},
		{name: "every pod over, in order; pods without stats skipped", pods: []*storage{
			newStorage("a").container("", "c", "", 0, 0).emptyDir("v", "", "1Mi", 2*mi),
			newStorage("ok").container("", "c", "1Gi", 1*mi, 0),
			newStorage("nostats").container("", "c", "1Mi", 5*mi, 0).noStats(),
			newStorage("b").container("", "c", "1Mi", 0, 2*mi).critical()},
			want: "a emptydirfs.limit Usage of EmptyDir volume \"v\" exceeds the limit \"1Mi\". \n" +
				"b ephemeralpodfs.limit Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []*v1.Pod
			summary := &statsapi.Summary{}
			for _, s := range tc.pods {
				pods = append(pods, s.pod)
				summary.Pods = append(summary.Pods, s.ps)
			}
			if got := found(LocalStorage(pods, StatsFrom(summary), tc.dedicated)); got != tc.want {
				t.Errorf("found\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// With local storage capacity isolation and no threshold at all, the
// manager evicts every pod over its limits in one look, at once, with the
// kubelet's status and event but no DisruptionTarget, counts each under
// its signal, and leaves critical pods and pods within their limits be.
func TestManagerLocalStorage(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	h.m.opts.LocalStorageCapacityIsolation = true
	pods := []*storage{
		newStorage("dir").container("", "c", "", 0, 0).emptyDir("v", "", "1Mi", 2*mi),
		newStorage("layer").container("", "c", "4Mi", 5*mi, 0).container("", "d", "4Mi", 0, 0),
		newStorage("fine").container("", "c", "1Gi", 1*mi, 0),
		newStorage("critical").container("", "c", "1Mi", 5*mi, 0).critical(),
	}
	for _, s := range pods {
		h.pods = append(h.pods, s.pod)
		h.sum.pods = append(h.sum.pods, s.ps)
	}
	evicted := h.m.Synchronize(t.Context())
	if got := names(evicted); got != "dir,layer" {
		t.Fatalf("evicted %s, want dir,layer", got)
	}
	want := map[types.UID]string{
		"dir":   `Evicted: Usage of EmptyDir volume "v" exceeds the limit "1Mi".  (no DisruptionTarget)`,
		"layer": `Evicted: Container c exceeded its local ephemeral storage limit "4Mi".  (no DisruptionTarget)`,
	}
	if len(h.statuses) != len(want) {
		t.Errorf("statuses %v", h.statuses)
	}
	for uid, w := range want {
		if h.statuses[uid] != w {
			t.Errorf("%s: status %q, want %q", uid, h.statuses[uid], w)
		}
	}
	for _, u := range h.workers.updates {
		if u.KillPodOptions == nil || !u.KillPodOptions.Evict || *u.KillPodOptions.PodTerminationGracePeriodSecondsOverride != 1 {
			t.Errorf("kill %s: %+v", u.Pod.Name, u.KillPodOptions)
		}
	}
	if got := strings.Join(h.rec.events, "|"); got != "dir Evicted|layer Evicted" {
		t.Errorf("events %s", got)
	}
	for sig, n := range map[string]float64{SignalEmptyDirFsLimit: 1, SignalEphemeralContainerFsLimit: 1, SignalEphemeralPodFsLimit: 0} {
		if v := testutil.ToFloat64(h.m.evictions.WithLabelValues(sig)); v != n {
			t.Errorf("kubelet_evictions{%s} = %v, want %v", sig, v, n)
		}
	}

	// Without it, the same pods stay.
	h2 := newHarness(t, Config{}, nil)
	h2.pods, h2.sum.pods = h.pods, h.sum.pods
	if got := h2.m.Synchronize(t.Context()); len(got) != 0 {
		t.Errorf("evicted %s without local storage capacity isolation", names(got))
	}
}

// A local storage eviction comes before the thresholds: in that look no
// pod is evicted for memory, though memory is short.
func TestManagerLocalStorageFirst(t *testing.T) {
	h := newHarness(t, Config{EvictionHard: map[string]string{"memory.available": "1Gi"}}, nil)
	h.m.opts.LocalStorageCapacityIsolation = true
	s := newStorage("dir").container("", "c", "", 0, 0).emptyDir("v", "", "1Mi", 2*mi)
	hog := testPod("hog", "", 0)
	h.pods = []*v1.Pod{hog, s.pod}
	h.sum.pods = []statsapi.PodStats{podStats("hog", 3<<30, 0), s.ps}
	h.sum.mem = 100 << 20
	if got := names(h.m.Synchronize(t.Context())); got != "dir" {
		t.Fatalf("evicted %s, want dir", got)
	}
	if got := h.m.Conditions(); len(got) != 1 || got[0] != v1.NodeMemoryPressure {
		t.Errorf("conditions %v, want MemoryPressure all the same", got)
	}
	h.pods = []*v1.Pod{hog} // dir is gone
	h.sum.clk.Step(10 * time.Second)
	if got := syncOne(t, h.m); got == nil || got.Name != "hog" {
		t.Errorf("next look evicted %v, want hog", got)
	}
}

// The pods' stats are read only when a pod has a local storage limit to
// check, or must be ranked: otherwise each look reads the node's alone.
func TestManagerReadsPodStatsOnlyWhenNeeded(t *testing.T) {
	h := newHarness(t, Config{EvictionHard: map[string]string{"memory.available": "1Gi"}}, nil)
	h.m.opts.LocalStorageCapacityIsolation = true
	limited := newStorage("dir").container("", "c", "", 0, 0).emptyDir("v", "", "1Mi", 2*mi)
	hog := testPod("hog", "", 0)
	h.pods = []*v1.Pod{hog}
	h.sum.pods = []statsapi.PodStats{podStats("hog", 3<<30, 0), limited.ps}
	look := func(want string) {
		t.Helper()
		h.sum.reads = nil
		h.m.Synchronize(t.Context())
		if got := strings.Join(h.sum.reads, ","); got != want {
			t.Errorf("reads %s, want %s", got, want)
		}
		h.sum.clk.Step(10 * time.Second)
	}
	look("node")
	// A pod with a limit: the look reads the pods, and finds it over.
	h.pods = append(h.pods, limited.pod)
	look("full")
	if got := h.statuses["dir"]; !strings.HasPrefix(got, "Evicted: Usage of EmptyDir") {
		t.Errorf("status of dir %q", got)
	}
	// Gone again: the node's alone, until memory runs short and a pod
	// must be ranked.
	h.pods = []*v1.Pod{hog}
	look("node")
	h.sum.mem = 100 << 20
	look("node,fresh")
	if got := h.statuses["hog"]; !strings.HasPrefix(got, "Evicted:") {
		t.Errorf("status of hog %q", got)
	}
	// Without local storage capacity isolation limits need no pod stats.
	h.sum.mem = 4 << 30
	h.m.opts.LocalStorageCapacityIsolation = false
	h.pods = append(h.pods, limited.pod)
	look("node")
}

func TestHasLocalStorageLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *storage
		want bool
	}{
		{"none", newStorage("p").container("", "c", "", 0, 0), false},
		{"emptyDir without a size limit", newStorage("p").container("", "c", "", 0, 0).emptyDir("v", "", "", 0), false},
		{"emptyDir size limit", newStorage("p").container("", "c", "", 0, 0).emptyDir("v", "", "1Mi", 0), true},
		{"memory emptyDir size limit", newStorage("p").container("", "c", "", 0, 0).emptyDir("v", "Memory", "1Mi", 0), true},
		{"container limit", newStorage("p").container("", "c", "", 0, 0).container("", "d", "1Gi", 0, 0), true},
		{"sidecar limit", newStorage("p").container("", "c", "", 0, 0).container("sidecar", "s", "1Gi", 0, 0), true},
		{"init container limit", newStorage("p").container("", "c", "", 0, 0).container("init", "i", "1Gi", 0, 0), true},
	} {
		if got := HasLocalStorageLimits(tc.s.pod); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
