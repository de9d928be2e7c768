package eviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestParseThresholds(t *testing.T) {
	ths, err := ParseThresholds(Config{
		EvictionHard:            map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "0%"},
		EvictionSoft:            map[string]string{"memory.available": "300Mi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "1m30s"},
		EvictionMinimumReclaim:  map[string]string{"memory.available": "50Mi", "nodefs.available": "1%"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range ths {
		s := string(th.Signal) + "<" + th.Value.String() + " grace=" + th.GracePeriod.String()
		if th.MinReclaim != nil {
			s += " min=" + th.MinReclaim.String()
		}
		got = append(got, s)
	}
	want := "memory.available<100Mi grace=0s min=50Mi|memory.available<300Mi grace=1m30s min=50Mi|nodefs.available<10% grace=0s min=1%"
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	for name, c := range map[string]Config{
		"unknown signal":    {EvictionHard: map[string]string{"memory.free": "1Gi"}},
		"negative":          {EvictionHard: map[string]string{"memory.available": "-1Gi"}},
		"over 100%":         {EvictionHard: map[string]string{"nodefs.available": "120%"}},
		"soft without":      {EvictionSoft: map[string]string{"memory.available": "1Gi"}},
		"soft bad grace":    {EvictionSoft: map[string]string{"memory.available": "1Gi"}, EvictionSoftGracePeriod: map[string]string{"memory.available": "-1s"}},
		"grace of unknown":  {EvictionSoftGracePeriod: map[string]string{"memory.free": "1s"}},
		"reclaim unknown":   {EvictionMinimumReclaim: map[string]string{"disk": "1Gi"}},
		"reclaim not value": {EvictionMinimumReclaim: map[string]string{"memory.available": "lots"}},
	} {
		if _, err := ParseThresholds(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustThresholds(t *testing.T, c Config) []Threshold {
	t.Helper()
	ths, err := ParseThresholds(c)
	if err != nil {
		t.Fatal(err)
	}
	return ths
}

// A soft threshold evicts only after its grace period; the condition is
// set at once and held for the transition period; a threshold met stays
// met until its minimum reclaim is reclaimed.
func TestDecide(t *testing.T) {
	ths := mustThresholds(t, Config{
		EvictionHard:            map[string]string{"nodefs.available": "1Gi"},
		EvictionSoft:            map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"},
		EvictionMinimumReclaim:  map[string]string{"nodefs.available": "500Mi"},
	})
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	obs := func(d time.Duration, memAvail, diskAvail int64) Observations {
		return Observations{
			SignalMemoryAvailable: {Available: memAvail, Capacity: 8 << 30, Time: at(d)},
			SignalNodeFsAvailable: {Available: diskAvail, Capacity: 100 << 30, Time: at(d)},
		}
	}
	var st State
	transition := 5 * time.Minute
	reclaim := func(d Decision) string {
		if d.Reclaim == nil {
			return ""
		}
		return string(d.Reclaim.Signal)
	}
	steps := []struct {
		at             time.Duration
		memAvail, disk int64

		conditions, recl string
	}{
		{0, 4 << 30, 50 << 30, "", ""},
		// memory below the soft threshold: the condition now, no eviction
		{10 * time.Second, 512 << 20, 50 << 30, "MemoryPressure", ""},
		{30 * time.Second, 512 << 20, 50 << 30, "MemoryPressure", ""},
		// 30 s after first met: evict for memory
		{40 * time.Second, 512 << 20, 50 << 30, "MemoryPressure", "memory.available"},
		// the same stats again: nothing new to act on
		{40 * time.Second, 512 << 20, 50 << 30, "MemoryPressure", ""},
		// memory back, disk short: disk at once (hard); memory held
		{50 * time.Second, 4 << 30, 512 << 20, "DiskPressure,MemoryPressure", "nodefs.available"},
		// disk above the threshold but not above threshold + min reclaim
		{60 * time.Second, 4 << 30, 1200 << 20, "DiskPressure,MemoryPressure", "nodefs.available"},
		// enough reclaimed
		{70 * time.Second, 4 << 30, 2 << 30, "DiskPressure,MemoryPressure", ""},
		// the transition period over for memory (last met at 40 s)
		{40*time.Second + transition, 4 << 30, 2 << 30, "DiskPressure", ""},
		{70*time.Second + transition, 4 << 30, 2 << 30, "", ""},
	}
	for i, s := range steps {
		o := obs(s.at, s.memAvail, s.disk)
		d := Decide(ths, &st, o, transition, at(s.at))
		var conds []string
		for _, c := range d.Conditions {
			conds = append(conds, string(c))
		}
		if got := strings.Join(conds, ","); got != s.conditions {
			t.Errorf("step %d: conditions %q, want %q", i, got, s.conditions)
		}
		if got := reclaim(d); got != s.recl {
			t.Errorf("step %d: reclaim %q, want %q", i, got, s.recl)
		}
	}
}

func podStats(uid string, memWS uint64, eph uint64) statsapi.PodStats {
	return statsapi.PodStats{PodRef: statsapi.PodReference{Name: uid, Namespace: "default", UID: uid},
		Memory:           &statsapi.MemoryStats{WorkingSetBytes: &memWS},
		EphemeralStorage: &statsapi.FsStats{UsedBytes: &eph},
		Containers: []statsapi.ContainerStats{{Name: "c", Memory: &statsapi.MemoryStats{WorkingSetBytes: &memWS},
			Rootfs: &statsapi.FsStats{UsedBytes: ptr(eph / 2)}, Logs: &statsapi.FsStats{UsedBytes: ptr(eph / 2)}}},
	}
}

func ptr[T any](v T) *T { return &v }

func testPod(uid, memRequest string, priority int32) *v1.Pod {
	c := v1.Container{Name: "c"}
	if memRequest != "" {
		c.Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse(memRequest)}
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{c}, Priority: &priority}}
}

func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

// The kubelet's ranking: over requests first, then lower priority, then
// more usage above the request; pods without stats before all.
func TestRankMemory(t *testing.T) {
	summary := &statsapi.Summary{Pods: []statsapi.PodStats{
		podStats("under", 50<<20, 0),       // request 100Mi: under
		podStats("over-small", 120<<20, 0), // request 100Mi: 20Mi over
		podStats("over-big", 300<<20, 0),   // request 100Mi: 200Mi over
		podStats("besteffort", 10<<20, 0),  // no request: 10Mi over
		podStats("important", 900<<20, 0),  // over, but high priority
	}}
	pods := []*v1.Pod{
		testPod("under", "100Mi", 0), testPod("important", "", 1000), testPod("over-small", "100Mi", 0),
		testPod("nostats", "", 0), testPod("besteffort", "", 0), testPod("over-big", "100Mi", 0),
	}
	Rank(SignalMemoryAvailable, false, pods, StatsFrom(summary))
	if got, want := names(pods), "nostats,over-big,over-small,besteffort,important,under"; got != want {
		t.Errorf("ranked %s\nwant   %s", got, want)
	}
}

func TestRankDisk(t *testing.T) {
	summary := &statsapi.Summary{Pods: []statsapi.PodStats{podStats("a", 0, 10<<20), podStats("b", 0, 200<<20), podStats("c", 0, 50<<20)}}
	pods := []*v1.Pod{testPod("a", "", 0), testPod("b", "", 0), testPod("c", "", -5)}
	Rank(SignalNodeFsAvailable, false, pods, StatsFrom(summary))
	if got, want := names(pods), "c,b,a"; got != want {
		t.Errorf("ranked %s, want %s", got, want)
	}
}

func TestMessage(t *testing.T) {
	ths := mustThresholds(t, Config{EvictionHard: map[string]string{"memory.available": "100Mi"}})
	obs := Observations{SignalMemoryAvailable: {Available: 50 << 20, Capacity: 8 << 30}}
	summary := &statsapi.Summary{Pods: []statsapi.PodStats{podStats("p", 300<<20, 0)}}
	got := Message(v1.ResourceMemory, testPod("p", "100Mi", 0), StatsFrom(summary), ths, obs)
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container c was using 300Mi, request is 100Mi, has larger consumption of memory. "
	if got != want {
		t.Errorf("message\n%q\nwant\n%q", got, want)
	}
}
