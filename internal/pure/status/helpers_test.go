package status

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
)

var (
	t0  = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	now = t0.Add(time.Hour)
)

// at is t0 plus n seconds.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

type podOpt func(*v1.Pod)

func newPod(opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func policy(rp v1.RestartPolicy) podOpt { return func(p *v1.Pod) { p.Spec.RestartPolicy = rp } }

func app(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: n + ":1"})
		}
	}
}

func initc(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: n + ":1"})
		}
	}
}

func ephemeral(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{
				EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: n, Image: n + ":1"}, TargetContainerName: "app",
			})
		}
	}
}

// withContainer edits the named container (init or app).
func withContainer(name string, f func(*v1.Container)) podOpt {
	return func(p *v1.Pod) {
		for i := range p.Spec.InitContainers {
			if p.Spec.InitContainers[i].Name == name {
				f(&p.Spec.InitContainers[i])
			}
		}
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == name {
				f(&p.Spec.Containers[i])
			}
		}
	}
}

func readinessProbe(name string) podOpt {
	return withContainer(name, func(c *v1.Container) { c.ReadinessProbe = &v1.Probe{} })
}

func startupProbe(name string) podOpt {
	return withContainer(name, func(c *v1.Container) { c.StartupProbe = &v1.Probe{} })
}

// runtime state builders.

func sandbox() observed.Sandbox {
	return observed.Sandbox{ID: "sb1", State: observed.SandboxReady, CreatedAt: t0}
}

func running(name, id string, created int) observed.Container {
	return observed.Container{
		ID: id, Name: name, SandboxID: "sb1", State: observed.ContainerRunning,
		CreatedAt: at(created), StartedAt: at(created + 1), Image: name + ":1", ImageRef: "sha256:" + name,
	}
}

func exited(name, id string, created int, code int32, reason string) observed.Container {
	c := running(name, id, created)
	c.State = observed.ContainerExited
	c.ExitCode = code
	c.Reason = reason
	c.StartedAt = at(created)
	c.FinishedAt = at(created + 5)
	return c
}

func restarts(n int, c observed.Container) observed.Container {
	c.RestartCount = n
	return c
}

// obs is a pod with a ready sandbox holding the given containers.
func obs(cs ...observed.Container) *observed.PodStatus {
	// Newest first, as podruntime reports them.
	for i := 0; i < len(cs); i++ {
		for j := i + 1; j < len(cs); j++ {
			if cs[j].CreatedAt.After(cs[i].CreatedAt) {
				cs[i], cs[j] = cs[j], cs[i]
			}
		}
	}
	return &observed.PodStatus{
		UID: "uid", Name: "p", Namespace: "default",
		Sandboxes:  []observed.Sandbox{sandbox()},
		Containers: cs,
		IPs:        []string{"10.88.0.5"},
	}
}

func facts(pod *v1.Pod, o *observed.PodStatus) Facts {
	return Facts{Pod: pod, Observed: o, HostIP: "192.168.1.10", Now: now}
}

func waiting(name, reason, msg string) map[string]plan.Waiting {
	return map[string]plan.Waiting{name: {Reason: reason, Message: msg}}
}

// render is a compact text form of a status for golden comparisons. Times
// are shown as seconds after t0.
func render(s v1.PodStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase: %s", s.Phase)
	if s.Reason != "" || s.Message != "" {
		fmt.Fprintf(&b, " (%s: %s)", s.Reason, s.Message)
	}
	b.WriteString("\n")
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, "cond %s=%s", c.Type, c.Status)
		if c.Reason != "" || c.Message != "" {
			fmt.Fprintf(&b, " (%s: %s)", c.Reason, c.Message)
		}
		b.WriteString("\n")
	}
	line := func(kind string, cs v1.ContainerStatus) {
		fmt.Fprintf(&b, "%s %s: %s", kind, cs.Name, renderState(cs.State))
		if cs.LastTerminationState != (v1.ContainerState{}) {
			fmt.Fprintf(&b, " last=%s", renderState(cs.LastTerminationState))
		}
		started := "nil"
		if cs.Started != nil {
			started = fmt.Sprint(*cs.Started)
		}
		fmt.Fprintf(&b, " restarts=%d ready=%v started=%s", cs.RestartCount, cs.Ready, started)
		if cs.ContainerID != "" {
			fmt.Fprintf(&b, " id=%s", cs.ContainerID)
		}
		b.WriteString("\n")
	}
	for _, cs := range s.InitContainerStatuses {
		line("init", cs)
	}
	for _, cs := range s.ContainerStatuses {
		line("app", cs)
	}
	for _, cs := range s.EphemeralContainerStatuses {
		line("ephemeral", cs)
	}
	return b.String()
}

func secs(t metav1.Time) string {
	if t.IsZero() {
		return "0"
	}
	return fmt.Sprint(int(t.Sub(t0) / time.Second))
}

func renderState(s v1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running@" + secs(s.Running.StartedAt)
	case s.Terminated != nil:
		t := s.Terminated
		out := fmt.Sprintf("terminated(%s exit=%d %s-%s", t.Reason, t.ExitCode, secs(t.StartedAt), secs(t.FinishedAt))
		if t.Message != "" {
			out += " " + t.Message
		}
		return out + ")"
	case s.Waiting != nil:
		out := "waiting(" + s.Waiting.Reason
		if s.Waiting.Message != "" {
			out += ": " + s.Waiting.Message
		}
		return out + ")"
	}
	return "none"
}

func checkGolden(t *testing.T, got v1.PodStatus, want string) {
	t.Helper()
	want = strings.TrimLeft(want, "\n")
	if g := render(got); g != want {
		t.Errorf("status mismatch\n--- got\n%s--- want\n%s", g, want)
	}
}
