package testutil

import (
	"sync/atomic"
	"testing"
)

func TestEventually(t *testing.T) {
	var n atomic.Int64
	go func() {
		for range 5000 {
			n.Add(1)
		}
	}()
	tries := 0
	Eventually(t, "the counter", func() bool { tries++; return n.Load() == 5000 })
	if tries == 0 {
		t.Error("cond never ran")
	}
}
