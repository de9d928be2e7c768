package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/events"
)

// step is one point of a pod's startup.
type step struct {
	at   time.Time
	what string
}

// The reasons of the events nodelet's runtime manager records at the
// start-up steps no kubelet event marks (podruntime.ReasonAdmitted and
// the others; a test keeps them equal).
const (
	reasonAdmitted               = "Admitted"
	reasonSandboxReady           = "SandboxReady"
	reasonInitContainerCompleted = "InitContainerCompleted"
	reasonPodReady               = "PodReady"
)

// timeline puts in order the points of the pod's start-up that happened:
// admitted, each image pulled, sandbox ready, each init container started
// and completed, each container started, and ready. Their times are those
// of the events nodelet recorded as each step completed (to the
// nanosecond; a step recorded more than once counts from its first time).
// A pod without an Admitted event (nodelet found it running after a
// restart) has only its status's times, in whole seconds.
func timeline(pod *v1.Pod, evs []events.Event) []step {
	if steps := eventSteps(pod, evs); steps != nil {
		return steps
	}
	return statusSteps(pod)
}

// eventSteps is the timeline from the pod's events, nil without an
// Admitted event.
func eventSteps(pod *v1.Pod, evs []events.Event) []step {
	init := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		init[c.Name] = true
	}
	first := map[string]time.Time{} // step → its earliest time
	var order []string
	add := func(t time.Time, what string) {
		if t.IsZero() {
			return
		}
		if at, ok := first[what]; !ok || t.Before(at) {
			if !ok {
				order = append(order, what)
			}
			first[what] = t
		}
	}
	for _, e := range evs {
		switch e.Reason {
		case reasonAdmitted:
			add(e.FirstTime, "admitted")
		case "Pulled":
			what := "image pulled"
			// The image is the quoted part of the message.
			if _, rest, ok := strings.Cut(e.Message, `"`); ok {
				if image, _, ok := strings.Cut(rest, `"`); ok && image != "" {
					what += " " + image
				}
			}
			add(e.FirstTime, what)
		case reasonSandboxReady:
			add(e.FirstTime, "sandbox ready")
		case "Started":
			// "Started container web", or "Started container: web".
			name, ok := strings.CutPrefix(e.Message, "Started container")
			name = strings.TrimSpace(strings.TrimPrefix(name, ":"))
			if !ok || name == "" {
				continue
			}
			if init[name] {
				add(e.FirstTime, "started init container "+name)
			} else {
				add(e.FirstTime, "started "+name)
			}
		case reasonInitContainerCompleted:
			if name, ok := strings.CutPrefix(e.Message, "Init container "); ok {
				add(e.FirstTime, "init container "+strings.TrimSuffix(name, " completed")+" done")
			}
		case reasonPodReady:
			add(e.FirstTime, "ready")
		}
	}
	if _, ok := first["admitted"]; !ok {
		return nil
	}
	steps := make([]step, 0, len(order))
	for _, what := range order {
		steps = append(steps, step{first[what], what})
	}
	// Stable: steps at the same time keep the order they were recorded in.
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	return steps
}

// statusSteps is the timeline from the status alone: its start time,
// conditions and container states, all in whole seconds.
func statusSteps(pod *v1.Pod) []step {
	if pod.Status.StartTime == nil || pod.Status.StartTime.IsZero() {
		return nil
	}
	steps := []step{{pod.Status.StartTime.Time, "admitted"}}
	add := func(t time.Time, what string) {
		if !t.IsZero() {
			steps = append(steps, step{t, what})
		}
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
// each took since the one before, to the millisecond:
//
//	Timeline:
//	  0s       admitted
//	  +0.146s  sandbox ready  (0.146s)
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

// seconds is a short duration to the millisecond: "0.146s", "0.3s",
// "12s", "2m5.5s".
func seconds(d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d < 0 {
		return "-" + seconds(-d)
	}
	var prefix string
	if d >= time.Minute {
		prefix = (d / time.Minute * time.Minute).String()
		prefix = prefix[:len(prefix)-len("0s")]
		d %= time.Minute
	}
	ms := int64(d / time.Millisecond)
	if ms%1000 == 0 {
		return prefix + strconv.FormatInt(ms/1000, 10) + "s"
	}
	frac := strings.TrimRight(fmt.Sprintf("%03d", ms%1000), "0")
	return prefix + strconv.FormatInt(ms/1000, 10) + "." + frac + "s"
}
