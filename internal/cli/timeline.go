package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/events"
)

// step is one point of a pod's startup.
type step struct {
	at   time.Time
	what string
}

// timeline puts in order the points of the pod's startup that happened:
// admitted (the earlier of the status's start time and the first event),
// each image pulled (Pulled events), sandbox ready (the
// PodReadyToStartContainers condition), each init container done, each
// container started, and ready (the Ready condition).
func timeline(pod *v1.Pod, evs []events.Event) []step {
	var admitted time.Time
	if pod.Status.StartTime != nil {
		admitted = pod.Status.StartTime.Time
	}
	for _, e := range evs {
		if !e.FirstTime.IsZero() && (admitted.IsZero() || e.FirstTime.Before(admitted)) {
			admitted = e.FirstTime
		}
	}
	if admitted.IsZero() {
		return nil
	}
	steps := []step{{admitted, "admitted"}}
	add := func(t time.Time, what string) {
		if !t.IsZero() {
			steps = append(steps, step{t, what})
		}
	}
	for _, e := range evs {
		if e.Reason != "Pulled" {
			continue
		}
		what := "image pulled"
		// The image is the quoted part of the message.
		if _, rest, ok := strings.Cut(e.Message, `"`); ok {
			if image, _, ok := strings.Cut(rest, `"`); ok && image != "" {
				what += " " + image
			}
		}
		add(e.FirstTime, what)
	}
	if c := condition(pod, v1.PodReadyToStartContainers); c != nil && c.Status == v1.ConditionTrue {
		add(c.LastTransitionTime.Time, "sandbox ready")
	}
	for _, s := range pod.Status.InitContainerStatuses {
		if t := s.State.Terminated; t != nil && t.ExitCode == 0 {
			add(t.FinishedAt.Time, "init container "+s.Name+" done")
		} else if r := s.State.Running; r != nil {
			add(r.StartedAt.Time, "started init container "+s.Name)
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		switch {
		case s.State.Running != nil:
			add(s.State.Running.StartedAt.Time, "started "+s.Name)
		case s.State.Terminated != nil:
			add(s.State.Terminated.StartedAt.Time, "started "+s.Name)
		}
	}
	if c := condition(pod, v1.PodReady); c != nil && c.Status == v1.ConditionTrue {
		add(c.LastTransitionTime.Time, "ready")
	}
	// Stable: steps at the same time keep the order above.
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	return steps
}

// timeline writes the steps with their offset from admission and the time
// each took since the one before:
//
//	Timeline:
//	  0s     admitted
//	  +0.3s  image pulled busybox  (0.3s)
func (d *describer) timeline(steps []step) {
	if len(steps) == 0 {
		return
	}
	d.title(0, "Timeline")
	for i, s := range steps {
		if i == 0 {
			d.row(1, "0s", s.what)
			continue
		}
		took := s.at.Sub(steps[i-1].at)
		d.row(1, "+"+seconds(s.at.Sub(steps[0].at)), s.what, "("+seconds(took)+")")
	}
}

// seconds is a short duration to a tenth of a second: "0.3s", "12s",
// "2m5.5s".
func seconds(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)
	if d < 0 {
		return "-" + seconds(-d)
	}
	var prefix string
	if d >= time.Minute {
		prefix = (d / time.Minute * time.Minute).String()
		prefix = prefix[:len(prefix)-len("0s")]
		d %= time.Minute
	}
	tenths := int64(d / (100 * time.Millisecond))
	if tenths%10 == 0 {
		return prefix + strconv.FormatInt(tenths/10, 10) + "s"
	}
	return prefix + fmt.Sprintf("%d.%ds", tenths/10, tenths%10)
}
