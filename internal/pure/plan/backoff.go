package plan

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

// BackoffDelay is how long a container whose instance was started at back-off
// step step (Start.BackoffStep: quick crashes in a row before it) waits after
// that instance exits before it is started again: 0 for step 0 (the first
// crash is restarted at once, as the kubelet does), then 10s, 20s, 40s, ...
// doubling up to 300s.
func BackoffDelay(step int) time.Duration {
	if step <= 0 {
		return 0
	}
	d := backoffFirst
	for i := 1; i < step && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// The crash-loop back-off is derived from facts recorded on the instances,
// so a restarted nodelet continues it where it was:
//
//	instance n exits ──ran < 10m?──yes──▶ next.BackoffStep = n.BackoffStep+1,
//	       │                              start held until n.FinishedAt + BackoffDelay(n.BackoffStep)
//	       └──────────────────────no───▶ next.BackoffStep = 0, start at once
//
// A running instance that is killed now (spec change, failed probe, new
// sandbox) is restarted in the same sync, never held; its run ends now.

// ranFor is how long prev ran; its run ends at end.
func ranFor(prev *observed.Container, end time.Time) time.Duration {
	if prev.StartedAt.IsZero() || end.Before(prev.StartedAt) {
		return 0
	}
	return end.Sub(prev.StartedAt)
}

// restart is the bookkeeping of one new instance of a container.
type restart struct {
	count int
	step  int
	// until is when the start may happen; zero when it may happen now.
	until time.Time
	delay time.Duration
}

// nextInstance works out RestartCount, BackoffStep and any hold for a new
// instance of a container whose newest instance is prev (nil if none).
// freshSpec resets the back-off: the spec changed, so the old crashes are
// not this spec's.
func nextInstance(prev *observed.Container, now time.Time, freshSpec bool) restart {
	if prev == nil {
		return restart{}
	}
	r := restart{count: prev.RestartCount + 1}
	end := now // a running, created or unknown instance is killed now
	if prev.State == observed.ContainerExited {
		end = prev.FinishedAt
	}
	quick := ranFor(prev, end) < backoffReset
	if quick && !freshSpec {
		r.step = prev.BackoffStep + 1
	}
	if prev.State == observed.ContainerExited && quick && !freshSpec {
		r.delay = BackoffDelay(prev.BackoffStep)
		if until := prev.FinishedAt.Add(r.delay); now.Before(until) {
			r.until = until
		}
	}
	return r
}

// backoffMessage is the kubelet's CrashLoopBackOff message.
func backoffMessage(pod *v1.Pod, name string, delay time.Duration) string {
	return fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
		delay, name, pod.Name, pod.Namespace, pod.UID)
}
