package status

// Generate's decisions as golden files (testdata/*.txt; run
// `go test ./internal/pure/status -rewrite` to regenerate them, and read the
// diff first: -rewrite is datadriven's flag).
//
// Each case is a "generate" command whose input gives the facts, one a line:
//
//	pod [restart=Always|OnFailure|Never] containers=(a,...) [init=(i,...)]
//	    [sidecars=(s,...)] [readiness=(a,...)] [startup=(a,...)]
//	    [ephemeral=(d,...)] [policy=(NAME:Always|OnFailure|Never,...)]
//	    [gates=(TYPE,...)] [phase=PHASE] [deleting] [static] [hostNetwork]
//	condition TYPE STATUS              the pod's API condition (for gates)
//	sandbox [id=sb1] ready|notready [hostNetwork] [noip]
//	container NAME ID running|exited|created|unknown [at=N] [code=N]
//	    [reason=R] [restarts=N] [sandbox=ID]
//	ready ID...  |  notready ID...  |  started ID...   probe results
//	waiting NAME REASON [MESSAGE...]   why the planner/executor holds it
//	previous PHASE [REASON [MESSAGE...]]
//	previous-container NAME running|waiting|exit=N [restarts=N] [init]
//	previous-condition TYPE STATUS
//	failed|bynode|rejected REASON MESSAGE...
//	bynode-quiet REASON MESSAGE...     bynode without a DisruptionTarget
//	terminal                           the pod was stopped for good
//
// sidecars are init containers (listed in init=) with restartPolicy
// Always. Container lines make a sandbox sb1 (ready, with an IP) unless
// sandbox lines are given; without either Observed is nil. at= is when the
// instance was created, in seconds after t0 (default 1); it started a
// second later and an exited one finished 5s after it was created. The
// output is render's (helpers_test.go): times are seconds after t0.
//
// The rules of status.go, each with the file that covers it:
//
// Phase (phase, the kubelet's getPhase) — phase.txt:
//
//	P1 a regular init container that failed and will not be restarted
//	   (terminated, or waiting with that last termination): Failed.
//	P2 a regular init container not done (absent, running, waiting without
//	   a last termination): Pending.
//	P3 a sidecar not started (running without startup, waiting, absent)
//	   before the pod initialized: Pending.
//	P4 an app container waiting without a last termination: Pending.
//	P5 something running and no container unknown: Running.
//	P6 nothing running, all stopped, one will be restarted: Running (not
//	   when the pod is stopped for good, unless it is static).
//	P7 all stopped, none restarted: Succeeded if all exited 0, else Failed.
//	   A stopped sidecar does not count. Container-level restartPolicy wins.
//
// Overrides in Generate — overrides.txt:
//
//	O1 rejected: Failed, "Pod was rejected: " + message, nothing else.
//	O2 a previous terminal phase is final (not even to the other one);
//	   so is a terminal phase in the API pod's status.
//	O3 the same phase as before keeps the previous reason and message
//	   (falling back to the API status's).
//	O4 Failed facts (planner: deadline, init failed): Failed with them.
//	O5 ByNode: Failed with its reason and a DisruptionTarget condition
//	   (TerminationByKubelet), unless already terminal; a previous
//	   DisruptionTarget stays; NoDisruptionTarget: no condition (local
//	   storage evictions).
//	O6 stopped for good with nothing running: non-terminated containers
//	   become terminated ContainerStatusUnknown 137 (app containers only if
//	   the pod initialized, init containers up to the last that left
//	   waiting) and Pending/Running becomes Failed, but a static pod's.
//
// Conditions — conditions.txt:
//
//	C1 PodReadyToStartContainers: True iff the newest sandbox is the only
//	   ready one, on the network the pod asks for, with an IP (pod network).
//	C2 Initialized: True without init containers or once an app container
//	   ran; True/PodCompleted when Succeeded; else False
//	   ContainersNotInitialized listing unknown and incomplete (a regular
//	   init not exited 0, a sidecar not started).
//	C3 ContainersReady: False PodCompleted (Succeeded) / PodFailed (Failed);
//	   False ContainersNotReady listing unknown and unready app containers
//	   and sidecars; else True.
//	C4 Ready: ContainersReady, then each readiness gate's API condition
//	   must be True (ReadinessGatesNotReady).
//	C5 PodScheduled is always True.
//
// Container statuses — containers.txt:
//
//	S1 no instance: waiting ContainerCreating, PodInitializing if the pod
//	   has init containers; a previous terminated status is kept.
//	S2 a previously running container gone from the runtime: last state
//	   terminated ContainerStatusUnknown 137, restartCount+1 (not when the
//	   pod is being deleted).
//	S3 state from the newest instance, lastState from the one before,
//	   restartCount from the newest.
//	S4 exited without a runtime reason: Completed (0) or Error.
//	S5 created: waiting with no reason; unknown: waiting, or terminated
//	   ContainerStatusUnknown 137 with restartCount+1 if it ran before.
//	S6 a Waiting entry replaces the state (a terminated one moves to
//	   lastState) only if the container will be restarted: not running,
//	   not a succeeded init container, the pod not being deleted.
//	S7 an init container gone while app containers exist: Completed.
//	S8 started: running and (no startup probe or it passed); ready: a
//	   regular init container exited 0, others started and (no readiness
//	   probe or it passed). Ephemeral containers are never ready.
//	S9 app and ephemeral containers by name, init containers in order.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

func TestGenerate(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "generate" {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			f, err := parseFacts(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return render(Generate(f))
		})
	})
}

// line is one input line: a kind, its words and key=value pairs, and the
// fields in order (messages are the words from some point on).
type line struct{ testutil.GoldenLine }

func parseLine(s string) line { return line{testutil.ParseGoldenLine(s)} }

// message is the words from i on, as one string.
func (l line) message(i int) string {
	if i >= len(l.Fields) {
		return ""
	}
	return strings.Join(l.Fields[i:], " ")
}

func (l line) rejection() (*Rejection, error) {
	if len(l.Fields) < 1 {
		return nil, fmt.Errorf("%s: want REASON MESSAGE", l.Kind)
	}
	return &Rejection{Reason: l.Fields[0], Message: l.message(1)}, nil
}

func parsePod(l line) (*v1.Pod, error) {
	pod := newPod()
	if rp := l.KV["restart"]; rp != "" {
		pod.Spec.RestartPolicy = v1.RestartPolicy(rp)
	}
	sidecars := l.List("sidecars")
	for _, n := range l.List("init") {
		c := v1.Container{Name: n, Image: n + ":1"}
		if contains(sidecars, n) {
			c.RestartPolicy = ptrTo(v1.ContainerRestartPolicyAlways)
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	app(l.List("containers")...)(pod)
	ephemeral(l.List("ephemeral")...)(pod)
	for _, n := range l.List("readiness") {
		readinessProbe(n)(pod)
	}
	for _, n := range l.List("startup") {
		startupProbe(n)(pod)
	}
	for _, p := range l.List("policy") {
		name, pol, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("policy %q: want NAME:POLICY", p)
		}
		withContainer(name, func(c *v1.Container) {
			c.RestartPolicy = ptrTo(v1.ContainerRestartPolicy(pol))
		})(pod)
	}
	for _, g := range l.List("gates") {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: v1.PodConditionType(g)})
	}
	pod.Status.Phase = v1.PodPhase(l.KV["phase"])
	if l.Has("deleting") {
		pod.DeletionTimestamp = &metav1.Time{Time: now}
	}
	if l.Has("static") {
		pod.Annotations = map[string]string{podspec.AnnotationConfigSource: "file"}
	}
	pod.Spec.HostNetwork = l.Has("hostNetwork")
	return pod, nil
}

func parseContainer(l line) (observed.Container, error) {
	if len(l.Words) != 3 {
		return observed.Container{}, fmt.Errorf("container: want NAME ID STATE, got %v", l.Words)
	}
	at, err := l.Int("at", 1)
	if err != nil {
		return observed.Container{}, err
	}
	code, err := l.Int("code", 0)
	if err != nil {
		return observed.Container{}, err
	}
	n, err := l.Int("restarts", 0)
	if err != nil {
		return observed.Container{}, err
	}
	name, id := l.Words[0], l.Words[1]
	c := running(name, id, at)
	switch l.Words[2] {
	case "running":
	case "exited":
		c = exited(name, id, at, int32(code), l.KV["reason"])
	case "created":
		c.State, c.StartedAt = observed.ContainerCreated, time.Time{}
	case "unknown":
		c.State, c.StartedAt = observed.ContainerUnknown, time.Time{}
	default:
		return observed.Container{}, fmt.Errorf("container state %q", l.Words[2])
	}
	if sb := l.KV["sandbox"]; sb != "" {
		c.SandboxID = sb
	}
	return restarts(n, c), nil
}

func parsePreviousContainer(l line) (v1.ContainerStatus, bool, error) {
	_, exit := l.KV["exit"]
	if len(l.Words) < 1 || (len(l.Words) < 2 && !exit) {
		return v1.ContainerStatus{}, false, fmt.Errorf("previous-container: want NAME STATE")
	}
	n, err := l.Int("restarts", 0)
	if err != nil {
		return v1.ContainerStatus{}, false, err
	}
	st := v1.ContainerStatus{Name: l.Words[0], Image: l.Words[0] + ":1", RestartCount: int32(n)}
	switch {
	case exit:
	case l.Words[1] == "running":
		st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(at(1))}
	case l.Words[1] == "waiting":
		st.State.Waiting = &v1.ContainerStateWaiting{Reason: ReasonContainerCreating}
	default:
		return v1.ContainerStatus{}, false, fmt.Errorf("previous-container state %q", l.Words[1])
	}
	if v, ok := l.KV["exit"]; ok {
		code, err := strconv.Atoi(v)
		if err != nil {
			return v1.ContainerStatus{}, false, err
		}
		reason := ReasonError
		if code == 0 {
			reason = ReasonCompleted
		}
		st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: int32(code), Reason: reason, StartedAt: metav1.NewTime(at(1)), FinishedAt: metav1.NewTime(at(6)),
		}}
	}
	return st, l.Has("init"), nil
}

func parseFacts(input string) (Facts, error) {
	var (
		f          Facts
		sandboxes  []observed.Sandbox
		containers []observed.Container
		noIP       bool
		prev       *v1.PodStatus
	)
	previous := func() *v1.PodStatus {
		if prev == nil {
			prev = &v1.PodStatus{}
		}
		return prev
	}
	setProbes := func(m *map[string]bool, ids []string, v bool) {
		if *m == nil {
			*m = map[string]bool{}
		}
		for _, id := range ids {
			(*m)[id] = v
		}
	}
	var err error
	for _, s := range strings.Split(input, "\n") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		l := parseLine(s)
		switch l.Kind {
		case "pod":
			f.Pod, err = parsePod(l)
		case "condition":
			if len(l.Fields) != 2 {
				return f, fmt.Errorf("condition: want TYPE STATUS")
			}
			f.Pod.Status.Conditions = append(f.Pod.Status.Conditions, v1.PodCondition{
				Type: v1.PodConditionType(l.Fields[0]), Status: v1.ConditionStatus(l.Fields[1])})
		case "sandbox":
			sb := sandbox()
			if id := l.KV["id"]; id != "" {
				sb.ID = id
			}
			if l.Has("notready") {
				sb.State = observed.SandboxNotReady
			}
			sb.NetworkNode = l.Has("hostNetwork")
			noIP = noIP || l.Has("noip")
			sandboxes = append(sandboxes, sb)
		case "container":
			var c observed.Container
			c, err = parseContainer(l)
			containers = append(containers, c)
		case "ready":
			setProbes(&f.Ready, l.Fields, true)
		case "notready":
			setProbes(&f.Ready, l.Fields, false)
		case "started":
			setProbes(&f.Started, l.Fields, true)
		case "waiting":
			if len(l.Fields) < 2 {
				return f, fmt.Errorf("waiting: want NAME REASON [MESSAGE]")
			}
			if f.Waiting == nil {
				f.Waiting = map[string]plan.Waiting{}
			}
			f.Waiting[l.Fields[0]] = plan.Waiting{Reason: l.Fields[1], Message: l.message(2)}
		case "previous":
			p := previous()
			if len(l.Fields) > 0 {
				p.Phase = v1.PodPhase(l.Fields[0])
			}
			if len(l.Fields) > 1 {
				p.Reason = l.Fields[1]
			}
			p.Message = l.message(2)
		case "previous-container":
			st, isInit, e := parsePreviousContainer(l)
			if isInit {
				previous().InitContainerStatuses = append(previous().InitContainerStatuses, st)
			} else {
				previous().ContainerStatuses = append(previous().ContainerStatuses, st)
			}
			err = e
		case "previous-condition":
			if len(l.Fields) != 2 {
				return f, fmt.Errorf("previous-condition: want TYPE STATUS")
			}
			previous().Conditions = append(previous().Conditions, v1.PodCondition{
				Type: v1.PodConditionType(l.Fields[0]), Status: v1.ConditionStatus(l.Fields[1]), Reason: "Previous"})
		case "failed":
			f.Failed, err = l.rejection()
		case "bynode":
			f.ByNode, err = l.rejection()
		case "bynode-quiet":
			if f.ByNode, err = l.rejection(); err == nil {
				f.ByNode.NoDisruptionTarget = true
			}
		case "rejected":
			f.Rejected, err = l.rejection()
		case "terminal":
			f.Terminal = true
		default:
			return f, fmt.Errorf("unknown line %q", s)
		}
		if err != nil {
			return f, err
		}
	}
	if f.Pod == nil {
		return f, fmt.Errorf("no pod line")
	}
	if len(sandboxes) > 0 || len(containers) > 0 {
		o := obs(containers...)
		if len(sandboxes) > 0 {
			o.Sandboxes = sandboxes
		}
		if noIP {
			o.IPs = nil
		}
		f.Observed = o
	}
	f.HostIP, f.Now, f.Previous = "192.168.1.10", now, prev
	return f, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ptrTo[T any](v T) *T { return &v }
