package eviction

import (
	"strings"
	"testing"
	"time"
)

// decideStep is one look at the signals: when, what is available of each
// signal observed (absent: not observed), and what should be decided.
type decideStep struct {
	at         time.Duration
	avail      map[Signal]int64
	conditions string // sorted, comma-separated
	met        string // signals of the thresholds met, grace periods over
	reclaim    string // the signal to reclaim, "" for none
}

func runDecide(t *testing.T, c Config, transition time.Duration, capacity map[Signal]int64, steps []decideStep) {
	t.Helper()
	ths := mustThresholds(t, c)
	t0 := time.Unix(1000, 0)
	var st State
	for i, s := range steps {
		obs := Observations{}
		for sig, a := range s.avail {
			obs[sig] = Observation{Available: a, Capacity: capacity[sig], Time: t0.Add(s.at)}
		}
		d := Decide(ths, &st, obs, transition, t0.Add(s.at))
		var conds, met []string
		for _, c := range d.Conditions {
			conds = append(conds, string(c))
		}
		for _, m := range d.Met {
			met = append(met, string(m.Signal))
		}
		reclaim := ""
		if d.Reclaim != nil {
			reclaim = string(d.Reclaim.Signal)
			if want := signalInfo[d.Reclaim.Signal].resource; d.Resource != want {
				t.Errorf("step %d: resource %s, want %s", i, d.Resource, want)
			}
		}
		if got := strings.Join(conds, ","); got != s.conditions {
			t.Errorf("step %d (%s): conditions %q, want %q", i, s.at, got, s.conditions)
		}
		if got := strings.Join(met, ","); got != s.met {
			t.Errorf("step %d (%s): met %q, want %q", i, s.at, got, s.met)
		}
		if reclaim != s.reclaim {
			t.Errorf("step %d (%s): reclaim %q, want %q", i, s.at, reclaim, s.reclaim)
		}
	}
}

const gi = 1 << 30

// A signal that is not observed meets none of its thresholds.
func TestDecideUnobservedSignal(t *testing.T) {
	runDecide(t, Config{EvictionHard: map[string]string{"memory.available": "1Gi", "nodefs.available": "1Gi"}},
		time.Minute, map[Signal]int64{SignalMemoryAvailable: 8 * gi}, []decideStep{
			{at: 0, avail: map[Signal]int64{SignalMemoryAvailable: 4 * gi}},
			{at: time.Second, avail: map[Signal]int64{SignalMemoryAvailable: 512 * mi},
				conditions: "MemoryPressure", met: "memory.available", reclaim: "memory.available"},
		})
}

// A soft threshold's grace period counts from when it was first met in a
// row: unmet once, it starts again.
func TestDecideSoftGraceRestarts(t *testing.T) {
	low := map[Signal]int64{SignalMemoryAvailable: 512 * mi}
	ok := map[Signal]int64{SignalMemoryAvailable: 4 * gi}
	runDecide(t, Config{
		EvictionSoft:            map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"},
	}, time.Minute, map[Signal]int64{SignalMemoryAvailable: 8 * gi}, []decideStep{
		{at: 0, avail: low, conditions: "MemoryPressure"},
		{at: 20 * time.Second, avail: ok, conditions: "MemoryPressure"},
		// 30s after it was first met, but it was not met in between.
		{at: 30 * time.Second, avail: low, conditions: "MemoryPressure"},
		{at: 59 * time.Second, avail: low, conditions: "MemoryPressure"},
		{at: 60 * time.Second, avail: low, conditions: "MemoryPressure", met: "memory.available", reclaim: "memory.available"},
	})
}

// Memory is reclaimed before disk when both are met at once (imagefs
// sorts before memory by name); the other stays met.
func TestDecideMemoryFirst(t *testing.T) {
	runDecide(t, Config{EvictionHard: map[string]string{"memory.available": "1Gi", "imagefs.available": "1Gi"}},
		time.Minute, map[Signal]int64{SignalMemoryAvailable: 8 * gi, SignalImageFsAvailable: 100 * gi}, []decideStep{
			{at: 0, avail: map[Signal]int64{SignalMemoryAvailable: 512 * mi, SignalImageFsAvailable: 512 * mi},
				conditions: "DiskPressure,MemoryPressure", met: "imagefs.available,memory.available", reclaim: "memory.available"},
		})
}

// A percentage threshold is a share of the signal's capacity, and so is
// its minimum reclaim; a threshold met stays met until it is reclaimed,
// one that was not met is not met for its minimum reclaim alone.
func TestDecidePercentagesAndMinReclaim(t *testing.T) {
	c := Config{
		EvictionHard:           map[string]string{"nodefs.available": "10%"},
		EvictionMinimumReclaim: map[string]string{"nodefs.available": "5%"},
	}
	capacity := map[Signal]int64{SignalNodeFsAvailable: 100 * gi}
	at := func(avail int64) map[Signal]int64 { return map[Signal]int64{SignalNodeFsAvailable: avail} }
	runDecide(t, c, 0, capacity, []decideStep{
		// Above 10% plus 5%: never met, so the minimum reclaim is not asked.
		{at: 0, avail: at(12 * gi)},
		{at: 1 * time.Second, avail: at(9 * gi), met: "nodefs.available", reclaim: "nodefs.available"},
		// Above 10%, below 15%: still met.
		{at: 2 * time.Second, avail: at(12 * gi), met: "nodefs.available", reclaim: "nodefs.available"},
		{at: 3 * time.Second, avail: at(16 * gi)},
		// Reclaimed: 12 GiB is not met again.
		{at: 4 * time.Second, avail: at(12 * gi)},
	})
}

// StillMet: thresholds met with their minimum reclaim, grace ignored.
func TestStillMet(t *testing.T) {
	ths := mustThresholds(t, Config{
		EvictionHard:            map[string]string{"nodefs.available": "1Gi", "memory.available": "100Mi"},
		EvictionSoft:            map[string]string{"imagefs.available": "2Gi"},
		EvictionSoftGracePeriod: map[string]string{"imagefs.available": "1h"},
		EvictionMinimumReclaim:  map[string]string{"nodefs.available": "1Gi"},
	})
	obs := Observations{
		SignalNodeFsAvailable:  {Available: 1536 * mi, Capacity: 100 * gi},
		SignalImageFsAvailable: {Available: 1 * gi, Capacity: 100 * gi},
		SignalMemoryAvailable:  {Available: 200 * mi, Capacity: 8 * gi},
	}
	var got []string
	for _, th := range StillMet(ths, obs) {
		got = append(got, string(th.Signal))
	}
	if g := strings.Join(got, ","); g != "imagefs.available,nodefs.available" && g != "nodefs.available,imagefs.available" {
		t.Errorf("still met %q, want imagefs.available and nodefs.available", g)
	}
}
