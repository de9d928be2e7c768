package plan_test

// The planner's decisions as golden files (testdata/*.txt, run with
// `go test ./internal/pure/plan -rewrite` to regenerate; read the diff first).
//
// Each test is a "plan" command whose input describes the pod and what the
// runtime has, one object a line:
//
//	pod [restart=Always|OnFailure|Never] containers=(app,...) [init=(a,...)]
//	    [sidecars=(a,...)] [startup=(a,...)] [liveness=(app,...)]
//	    [probegrace=SECONDS] [grace=SECONDS] [hostNetwork]
//	    [deadline=SECONDS started=DURATION]
//	    [policy=(NAME:Always|OnFailure|Never,...)]
//	    [rules=(NAME:In|NotIn:CODE+CODE...,...)]
//	    [ephemeral=(dbg,...)] [deleting]
//	sandbox [id=s1] ready|notready [attempt=N] [hostNetwork] [noip]
//	    [hash=ok|old|changed|none]
//	container NAME running|exited|created|unknown [code=N] [restarts=N]
//	    [step=N] [ran=DURATION] [finished=DURATION] [sandbox=ID]
//	    [hash=ok|old|changed|none] [liveness=failure] [startup=failure|success]
//	    [resize-restart]
//
// sidecars are init containers with restartPolicy Always; startup and
// liveness give containers those probes, probegrace their probe-level
// terminationGracePeriodSeconds. policy gives a container its own
// restartPolicy, rules one restartPolicyRule with action Restart on the
// exit codes In or NotIn the list (one rules entry per container).
// ephemeral lists ephemeral containers; deleting sets the pod's
// deletionTimestamp. Sandbox and container lines are newest
// first, as in observed.PodStatus; a container is in the first (newest)
// sandbox unless sandbox= says otherwise. Its ID is NAME.K, K counting
// earlier lines of the same name (so NAME.0 is the newest). ran is how long
// it ran (default 1h), finished how long ago it exited (default 1h). hash=ok
// (the default) is the current fingerprint of the spec, old one of an older
// HashVersion, changed a different one of the current version, none "".
// resize-restart puts the container in ResizeRestarts (an in-place
// resize requires its restart). The pod has IPs when a sandbox is ready and no sandbox line says noip.
//
// deadline is activeDeadlineSeconds, started how long ago the pod's status
// startTime is.
//
// The output lists KillPod, CreateSandbox, SandboxID, PodFailed (with its
// failure) and RequeueAfter, then the kills, starts, waits, the running
// instances kept, and the reasons.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestPlan(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "plan" {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			in, err := parseInput(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return render(in, plan.Compute(in))
		})
	})
}

// args is one input line: a kind, then words and key=value pairs.
type args struct{ testutil.GoldenLine }

func parseLine(line string) args { return args{testutil.ParseGoldenLine(line)} }

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func parseInput(input string) (plan.Input, error) {
	in := plan.Input{Now: now, Status: &observed.PodStatus{}, LivenessFailed: map[string]plan.ProbeFailure{}, StartupDone: map[string]bool{}}
	var lines []args
	for _, l := range strings.Split(input, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, parseLine(l))
		}
	}
	for _, a := range lines {
		if a.Kind == "pod" {
			pod, err := parsePod(a)
			if err != nil {
				return in, err
			}
			in.Pod = pod
			if started, ok := a.KV["started"]; ok {
				d, err := time.ParseDuration(started)
				if err != nil {
					return in, err
				}
				in.StartTime = ptr.To(now.Add(-d))
			}
		}
	}
	if in.Pod == nil {
		return in, fmt.Errorf("no pod line")
	}
	st := in.Status
	st.UID, st.Name, st.Namespace = in.Pod.UID, in.Pod.Name, in.Pod.Namespace
	seen := map[string]int{}
	noIP := false
	for i, a := range lines {
		created := now.Add(-time.Duration(i+1) * time.Minute)
		var err error
		switch a.Kind {
		case "pod":
		case "sandbox":
			err = addSandbox(&in, a, created)
			noIP = noIP || a.Has("noip")
		case "container":
			err = addContainer(&in, a, created, seen)
		default:
			err = fmt.Errorf("unknown line %q", a.Kind)
		}
		if err != nil {
			return in, err
		}
	}
	for _, s := range st.Sandboxes {
		if s.State == observed.SandboxReady && !noIP {
			st.IPs = []string{"10.88.0.2"}
		}
	}
	return in, nil
}

func parsePod(a args) (*v1.Pod, error) {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "web", "default", "uid-1"
	pod.Spec.RestartPolicy = v1.RestartPolicy(a.KV["restart"])
	pod.Spec.HostNetwork = a.Has("hostNetwork")
	if a.Has("deleting") {
		pod.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
	}
	if _, ok := a.KV["deadline"]; ok {
		d, err := a.Int("deadline", 0)
		if err != nil {
			return nil, err
		}
		pod.Spec.ActiveDeadlineSeconds = ptr.To(int64(d))
	}
	if _, ok := a.KV["grace"]; ok {
		g, err := a.Int("grace", 0)
		if err != nil {
			return nil, err
		}
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(g))
	}
	probeGrace, err := a.Int("probegrace", -1)
	if err != nil {
		return nil, err
	}
	probe := func() *v1.Probe {
		p := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
		if probeGrace >= 0 {
			p.TerminationGracePeriodSeconds = ptr.To(int64(probeGrace))
		}
		return p
	}
	container := func(name string) v1.Container {
		c := v1.Container{Name: name, Image: "registry.local/" + name + ":1"}
		if contains(a.List("sidecars"), name) {
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
		}
		if contains(a.List("startup"), name) {
			c.StartupProbe = probe()
		}
		if contains(a.List("liveness"), name) {
			c.LivenessProbe = probe()
		}
		for _, e := range a.List("policy") {
			if n, policy, _ := strings.Cut(e, ":"); n == name {
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicy(policy))
			}
		}
		for _, e := range a.List("rules") {
			if f := strings.Split(e, ":"); len(f) == 3 && f[0] == name {
				var codes []int32
				for _, v := range strings.Split(f[2], "+") {
					n, _ := strconv.Atoi(v)
					codes = append(codes, int32(n))
				}
				c.RestartPolicyRules = append(c.RestartPolicyRules, v1.ContainerRestartRule{
					Action:    v1.ContainerRestartRuleActionRestart,
					ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOperator(f[1]), Values: codes},
				})
			}
		}
		return c
	}
	for _, n := range a.List("init") {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, container(n))
	}
	for _, n := range a.List("containers") {
		pod.Spec.Containers = append(pod.Spec.Containers, container(n))
	}
	for _, n := range a.List("ephemeral") {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, v1.EphemeralContainer{
			EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: n, Image: "registry.local/" + n + ":1"},
		})
	}
	return pod, nil
}

func hashOf(kind, current string) (string, error) {
	switch kind {
	case "", "ok":
		return current, nil
	case "old":
		return "v0:0123456789abcdef", nil
	case "changed":
		return plan.HashVersion + ":ffffffffffffffff", nil
	case "none":
		return "", nil
	}
	return "", fmt.Errorf("unknown hash=%s", kind)
}

func addSandbox(in *plan.Input, a args, created time.Time) error {
	st := in.Status
	s := observed.Sandbox{ID: a.KV["id"], CreatedAt: created, NetworkNode: a.Has("hostNetwork")}
	if s.ID == "" {
		s.ID = fmt.Sprintf("s%d", len(st.Sandboxes)+1)
	}
	switch {
	case a.Has("ready"):
		s.State = observed.SandboxReady
	case a.Has("notready"):
		s.State = observed.SandboxNotReady
	default:
		return fmt.Errorf("sandbox %s: ready or notready?", s.ID)
	}
	attempt, err := a.Int("attempt", 0)
	if err != nil {
		return err
	}
	s.Attempt = uint32(attempt)
	if s.Hash, err = hashOf(a.KV["hash"], plan.SandboxHash(in.Pod)); err != nil {
		return err
	}
	st.Sandboxes = append(st.Sandboxes, s)
	return nil
}

func findSpec(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers, podspec.EphemeralContainers(pod)} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func addContainer(in *plan.Input, a args, created time.Time, seen map[string]int) error {
	if len(a.Words) < 2 {
		return fmt.Errorf("container line needs a name and a state")
	}
	name := a.Words[0]
	spec := findSpec(in.Pod, name)
	if spec == nil {
		return fmt.Errorf("container %s is not in the pod", name)
	}
	c := observed.Container{Name: name, ID: fmt.Sprintf("%s.%d", name, seen[name]), CreatedAt: created, Image: spec.Image}
	seen[name]++
	c.SandboxID = a.KV["sandbox"]
	if c.SandboxID == "" && len(in.Status.Sandboxes) > 0 {
		c.SandboxID = in.Status.Sandboxes[0].ID
	}
	var err error
	if c.Hash, err = hashOf(a.KV["hash"], plan.ContainerHash(spec)); err != nil {
		return err
	}
	if c.RestartCount, err = a.Int("restarts", 0); err != nil {
		return err
	}
	if c.BackoffStep, err = a.Int("step", 0); err != nil {
		return err
	}
	code, err := a.Int("code", 0)
	if err != nil {
		return err
	}
	c.ExitCode = int32(code)
	ran, err := a.Duration("ran", time.Hour)
	if err != nil {
		return err
	}
	finished, err := a.Duration("finished", time.Hour)
	if err != nil {
		return err
	}
	switch a.Words[1] {
	case "running":
		c.State, c.StartedAt = observed.ContainerRunning, now.Add(-ran)
	case "exited":
		c.State, c.FinishedAt = observed.ContainerExited, now.Add(-finished)
		c.StartedAt = c.FinishedAt.Add(-ran)
	case "created":
		c.State = observed.ContainerCreated
	case "unknown":
		c.State = observed.ContainerUnknown
	default:
		return fmt.Errorf("container %s: unknown state %q", name, a.Words[1])
	}
	switch a.KV["liveness"] {
	case "":
	case "failure":
		in.LivenessFailed[c.ID] = plan.ProbeFailure{Probe: plan.ProbeLiveness, Message: "exec probe exited 1"}
	default:
		return fmt.Errorf("liveness=%s", a.KV["liveness"])
	}
	if a.Has("resize-restart") {
		if in.ResizeRestarts == nil {
			in.ResizeRestarts = map[string]string{}
		}
		in.ResizeRestarts[c.ID] = "Container " + name + " resize requires restart"
	}
	switch a.KV["startup"] {
	case "":
	case "failure":
		in.LivenessFailed[c.ID] = plan.ProbeFailure{Probe: plan.ProbeStartup, Message: "exec probe exited 1"}
	case "success":
		in.StartupDone[c.ID] = true
	default:
		return fmt.Errorf("startup=%s", a.KV["startup"])
	}
	in.Status.Containers = append(in.Status.Containers, c)
	return nil
}

func render(in plan.Input, a plan.Actions) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	if a.KillPod {
		line("kill-pod")
	}
	if a.CreateSandbox {
		line("create-sandbox attempt=%d", a.Attempt)
	}
	if a.SandboxID != "" {
		line("use-sandbox %s", a.SandboxID)
	}
	if a.PodFailed {
		line("pod-failed %s: %s", a.Failure.Reason, a.Failure.Message)
	}
	if a.RequeueAfter > 0 {
		line("requeue-after %s", a.RequeueAfter)
	}
	killed := map[string]bool{}
	for _, k := range a.ContainersToKill {
		killed[k.ID] = true
		line("kill %s reason=%s grace=%s", k.ID, k.Reason, k.GracePeriod)
	}
	for _, s := range a.InitContainersToStart {
		line("start init %s restarts=%d step=%d", in.Pod.Spec.InitContainers[s.Index].Name, s.RestartCount, s.BackoffStep)
	}
	for _, s := range a.ContainersToStart {
		line("start %s restarts=%d step=%d", in.Pod.Spec.Containers[s.Index].Name, s.RestartCount, s.BackoffStep)
	}
	for _, s := range a.EphemeralContainersToStart {
		line("start ephemeral %s restarts=%d", in.Pod.Spec.EphemeralContainers[s.Index].Name, s.RestartCount)
	}
	names := make([]string, 0, len(a.Waiting))
	for n := range a.Waiting {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w := a.Waiting[n]
		s := "wait " + n + " " + w.Reason
		if !w.Until.IsZero() {
			s += " until=+" + w.Until.Sub(now).String()
		}
		if w.Message != "" {
			s += ": " + w.Message
		}
		line("%s", s)
	}
	if !a.KillPod {
		for _, c := range in.Status.Running() {
			if !killed[c.ID] {
				line("keep %s", c.ID)
			}
		}
	}
	line("reasons:")
	for _, r := range a.Reasons {
		line("  %s", r)
	}
	return b.String()
}
