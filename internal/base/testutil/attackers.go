package testutil

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Attackers keep running attacks (a swap of two directory entries, say)
// concurrently with the code under test. The test calls WaitProgress
// before each try of that code: that every attacker has run since the
// previous try is a precondition the test waits for, not something it
// hopes the scheduler grants.
type Attackers struct {
	t     testing.TB
	done  chan struct{}
	wg    sync.WaitGroup
	count []atomic.Int64
	seen  []int64
}

// StartAttackers starts one goroutine per attack that runs it again and
// again until Stop (registered as a clean-up too). An attack that fails
// fails the test and ends that attacker.
func StartAttackers(t testing.TB, attacks ...func() error) *Attackers {
	a := &Attackers{t: t, done: make(chan struct{}), count: make([]atomic.Int64, len(attacks)), seen: make([]int64, len(attacks))}
	for i, attack := range attacks {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for {
				select {
				case <-a.done:
					return
				default:
				}
				if err := attack(); err != nil {
					t.Errorf("attacker %d: %v", i, err)
					return
				}
				a.count[i].Add(1)
				// Let the code under test run, even on one CPU.
				runtime.Gosched()
			}
		}()
	}
	t.Cleanup(a.Stop)
	return a
}

// WaitProgress returns once every attacker has run since the last call.
// The bound only catches attackers that are stuck.
func (a *Attackers) WaitProgress() {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i := range a.count {
		for a.count[i].Load() == a.seen[i] {
			if time.Now().After(deadline) {
				a.t.Fatalf("attacker %d made no progress in a minute", i)
			}
			runtime.Gosched()
		}
		a.seen[i] = a.count[i].Load()
	}
}

// Stop ends the attackers and waits for them; each has finished its last
// attack.
func (a *Attackers) Stop() {
	select {
	case <-a.done:
		return
	default:
	}
	close(a.done)
	a.wg.Wait()
}
