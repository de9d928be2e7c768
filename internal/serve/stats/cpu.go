package stats

import (
	"sync"
	"time"
)

// minCPUWindow is the shortest interval a CPU rate is computed over; a
// sample closer than that to the previous one gets the last rate.
const minCPUWindow = time.Second

// cpuTracker keeps the previous cumulative CPU sample of every object to
// derive usage rates (the kubelet's cpuUsageCache).
type cpuTracker struct {
	mu      sync.Mutex
	samples map[string]*cpuSample
}

type cpuSample struct {
	ts    int64  // sample time, Unix nanoseconds
	usage uint64 // cumulative core-nanoseconds
	rate  uint64 // last rate computed, nanocores
	rated bool   // whether rate is set
	seen  time.Time
}

// nanoCores records the sample (ts, usage) of object key and returns the
// rate since the previous sample, nil when there is none yet.
func (t *cpuTracker) nanoCores(key string, now time.Time, ts int64, usage uint64) *uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.samples[key]
	if s == nil {
		t.samples[key] = &cpuSample{ts: ts, usage: usage, seen: now}
		return nil
	}
	s.seen = now
	if usage < s.usage || ts < s.ts {
		// A counter that went backwards: start over.
		*s = cpuSample{ts: ts, usage: usage, seen: now}
		return nil
	}
	if time.Duration(ts-s.ts) >= minCPUWindow {
		s.rate = uint64(float64(usage-s.usage) / float64(ts-s.ts) * float64(time.Second))
		s.rated = true
		s.ts, s.usage = ts, usage
	}
	if !s.rated {
		return nil
	}
	r := s.rate
	return &r
}

// forget drops the samples of objects not seen for forgetAfter.
func (t *cpuTracker) forget(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, s := range t.samples {
		if now.Sub(s.seen) > forgetAfter {
			delete(t.samples, k)
		}
	}
}
