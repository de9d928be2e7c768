package testutil

import (
	"runtime"
	"testing"
	"time"
)

// eventuallyBound is how long Eventually waits. It only tells "happens"
// from "never happens" on a loaded machine; no test measures time with it.
const eventuallyBound = time.Minute

// Eventually returns once cond holds and fails the test, naming what it
// waited for, if cond still does not hold after a generous bound. cond
// runs on the test's goroutine, so it may call t.Fatal. It first yields
// the processor between tries, so that a condition reached by other
// goroutines within microseconds (a worker parking on a fake clock) costs
// no sleep, then polls every millisecond.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventuallyBound)
	for try := 0; !cond(); try++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if try < 1000 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}
