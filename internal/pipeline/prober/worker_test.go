package prober

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

func TestInitialDelayThenPeriod(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c", LivenessProbe: execProbe("live", func(p *v1.Probe) {
		p.InitialDelaySeconds = 5
		p.TimeoutSeconds = 3
	})})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	if h.update() != "a" {
		t.Fatal("a new instance is announced")
	}

	h.step(4 * time.Second)
	h.noCall() // 4 s < initialDelaySeconds
	h.step(time.Second)
	c := h.call() // 5 s
	if c.id != "id1" || c.timeout != 3*time.Second {
		t.Fatalf("exec in %s with timeout %v, want id1 and 3s", c.id, c.timeout)
	}
	c.reply <- execReply{}
	h.step(9 * time.Second)
	h.noCall()
	h.step(time.Second)
	h.answer("live", 0, "") // 15 s
	h.step(10 * time.Second)
	h.answer("live", 0, "") // 25 s
	if failed, _, _ := h.m.LivenessFailed("id1"); failed {
		t.Fatal("liveness failed after successes")
	}
	h.noUpdate()
}

func TestReadinessThresholdsAndUpdatesOnChangeOnly(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c", ReadinessProbe: execProbe("ready", func(p *v1.Probe) {
		p.SuccessThreshold = 2
		p.FailureThreshold = 2
	})})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	if ready, known := h.m.Ready("id1"); ready || !known {
		t.Fatalf("Ready = %v, %v before any probe, want false, true", ready, known)
	}

	h.answer("ready", 0, "") // first probe at once (no initial delay)
	h.noUpdate()             // 1 < successThreshold
	if ready, _ := h.m.Ready("id1"); ready {
		t.Fatal("ready after one success with successThreshold 2")
	}
	h.step(10 * time.Second)
	h.answer("ready", 0, "")
	if h.update() != "a" {
		t.Fatal("want an update for pod a")
	}
	if ready, _ := h.m.Ready("id1"); !ready {
		t.Fatal("not ready after two successes")
	}
	h.step(10 * time.Second)
	h.answer("ready", 0, "")
	h.noUpdate() // still ready: no change, no update

	h.step(10 * time.Second)
	h.answer("ready", 1, "nope")
	h.noUpdate()
	if ready, _ := h.m.Ready("id1"); !ready {
		t.Fatal("unready after one failure with failureThreshold 2")
	}
	h.step(10 * time.Second)
	h.answer("ready", 1, "nope")
	h.update()
	if ready, _ := h.m.Ready("id1"); ready {
		t.Fatal("ready after two failures")
	}
	// Readiness keeps probing after failures.
	h.step(10 * time.Second)
	h.answer("ready", 0, "")
	h.noUpdate()

	evs := h.rec.list()
	if len(evs) != 2 || evs[0] != (event{"pod-a", v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: nope"}) {
		t.Fatalf("events = %+v", evs)
	}
}

func TestLivenessFailureHoldsUntilNewInstance(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c", LivenessProbe: execProbe("live", func(p *v1.Probe) {
		p.InitialDelaySeconds = 1
		p.FailureThreshold = 2
	})})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()

	h.step(time.Second)
	h.answer("live", 1, "boom")
	h.noUpdate()
	h.step(10 * time.Second)
	h.answer("live", 1, "boom 2")
	h.update()
	failed, probe, msg := h.m.LivenessFailed("id1")
	if !failed || probe != ProbeLiveness || msg != "boom 2" {
		t.Fatalf("LivenessFailed = %v, %q, %q", failed, probe, msg)
	}
	h.step(time.Minute)
	h.noCall() // on hold: the container is being killed

	// The new instance starts afresh: initial delay, counters, result.
	h.step(time.Minute)
	h.run(pod, map[string]string{"c": "id2"})
	h.update()
	if failed, _, _ := h.m.LivenessFailed("id2"); failed {
		t.Fatal("new instance starts as failed")
	}
	if failed, _, _ := h.m.LivenessFailed("id1"); failed {
		t.Fatal("old instance is still remembered")
	}
	h.noCall()
	h.step(time.Second)
	h.answer("live", 1, "boom") // one failure: below threshold again
	h.noUpdate()
	if failed, _, _ := h.m.LivenessFailed("id2"); failed {
		t.Fatal("one failure counted as two: counters were not reset")
	}
}

func TestStartupHoldsLivenessAndReadiness(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c",
		StartupProbe:   execProbe("startup", func(p *v1.Probe) { p.PeriodSeconds = 1; p.FailureThreshold = 5 }),
		LivenessProbe:  execProbe("live", nil),
		ReadinessProbe: execProbe("ready", func(p *v1.Probe) { p.PeriodSeconds = 5 }),
	})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	if h.m.StartupDone("id1") {
		t.Fatal("started before the startup probe ran")
	}
	if failed, _, _ := h.m.LivenessFailed("id1"); failed {
		t.Fatal("liveness failed before it ran")
	}
	if ready, known := h.m.Ready("id1"); ready || !known {
		t.Fatal("ready before it ran")
	}

	h.answer("startup", 1, "not yet") // only the startup probe runs
	h.noCall()
	h.step(time.Second)
	h.answer("startup", 0, "")
	h.update()
	if !h.m.StartupDone("id1") {
		t.Fatal("startup probe succeeded but not StartupDone")
	}
	h.answer("ready", 0, "") // readiness at once after startup
	h.update()
	if ready, _ := h.m.Ready("id1"); !ready {
		t.Fatal("not ready")
	}
	h.step(5 * time.Second)
	h.answer("ready", 0, "") // t=6: readiness period; startup never again
	h.step(5 * time.Second)
	// t=11: liveness (one period after startup succeeded at t=1) and
	// readiness, in any order.
	got := map[string]bool{}
	for range 2 {
		c := h.call()
		got[c.cmd[0]] = true
		c.reply <- execReply{}
	}
	if !got["live"] || !got["ready"] {
		t.Fatalf("probes at t=11: %v, want live and ready", got)
	}
	h.noUpdate()
}

func TestStartupFailureKills(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c",
		StartupProbe:  execProbe("startup", func(p *v1.Probe) { p.FailureThreshold = 2 }),
		LivenessProbe: execProbe("live", nil),
	})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	h.answer("startup", 1, "slow")
	h.step(10 * time.Second)
	h.answer("startup", 1, "still slow")
	h.update()
	failed, probe, msg := h.m.LivenessFailed("id1")
	if !failed || probe != ProbeStartup || msg != "still slow" {
		t.Fatalf("LivenessFailed = %v, %q, %q, want true, startup, still slow", failed, probe, msg)
	}
	if h.m.StartupDone("id1") {
		t.Fatal("StartupDone after the startup probe failed")
	}
	h.step(time.Minute)
	h.noCall() // on hold, liveness held back
	if evs := h.rec.list(); len(evs) != 2 || evs[1].msg != "Startup probe failed: still slow" {
		t.Fatalf("events = %+v", evs)
	}
}

func TestNoProbesAndUnknownContainers(t *testing.T) {
	h := newHarness(t)
	if h.m.StartupDone("nope") {
		t.Fatal("unknown container started")
	}
	if ready, known := h.m.Ready("nope"); ready || !known {
		t.Fatal("unknown container ready")
	}
	pod := newPod("a", v1.Container{Name: "c"})
	h.m.AddPod(pod)
	if h.workers() != 0 {
		t.Fatal("workers for a container without probes")
	}
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	if !h.m.StartupDone("id1") {
		t.Fatal("container without startup probe not started")
	}
	if _, known := h.m.Ready("id1"); known {
		t.Fatal("readiness known without a readiness probe")
	}
	h.run(pod, map[string]string{"c": "id1"})
	h.noUpdate() // same instance: nothing changed

	h.run(pod, nil) // stopped
	if h.m.StartupDone("id1") {
		t.Fatal("results of a container that stopped are kept")
	}
}

func TestSidecarProbes(t *testing.T) {
	h := newHarness(t)
	always := v1.ContainerRestartPolicyAlways
	pod := newPod("a", v1.Container{Name: "main"})
	pod.Spec.InitContainers = []v1.Container{
		{Name: "init", LivenessProbe: execProbe("ignored", nil)}, // not a sidecar: no probes
		{Name: "side", RestartPolicy: &always, StartupProbe: execProbe("side-startup", nil)},
	}
	h.m.AddPod(pod)
	if n := h.workers(); n != 1 {
		t.Fatalf("%d workers, want 1 (the sidecar's startup probe)", n)
	}
	h.run(pod, map[string]string{"side": "s1"})
	h.update()
	h.answer("side-startup", 0, "")
	h.update()
	if !h.m.StartupDone("s1") {
		t.Fatal("sidecar not started")
	}
}

// liveWorkers counts the goroutines running a worker.
func liveWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "prober.(*worker).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestRemovePodStopsWorkers(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c",
		StartupProbe:   execProbe("startup", nil),
		LivenessProbe:  execProbe("live", nil),
		ReadinessProbe: execProbe("ready", nil),
	})
	h.m.AddPod(pod)
	if n := h.workers(); n != 3 {
		t.Fatalf("%d workers, want 3", n)
	}
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	_ = h.call() // the startup probe is in flight while the pod goes
	// (Goroutines of earlier tests may still be on their way out.)
	testutil.Eventually(t, "3 worker goroutines", func() bool { return liveWorkers() == 3 })
	h.m.RemovePod(pod) // cancels the probe in flight
	testutil.Eventually(t, "workers to stop", func() bool { return liveWorkers() == 0 })
	if h.m.StartupDone("id1") {
		t.Fatal("results kept after RemovePod")
	}
	if h.workers() != 0 {
		t.Fatal("workers kept after RemovePod")
	}
	h.noUpdate()
	h.m.RemovePod(pod) // again: nothing
}

func TestAddPodBeforeRunAndStop(t *testing.T) {
	m := New(Deps{Exec: &fakeExec{calls: make(chan *execCall)}, Clock: testingclock.NewFakeClock(epoch)})
	pod := newPod("a", v1.Container{Name: "c", LivenessProbe: execProbe("live", nil)})
	m.AddPod(pod)
	testutil.Eventually(t, "no worker before Run", func() bool { return liveWorkers() == 0 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	testutil.Eventually(t, "the worker to start", func() bool { return liveWorkers() == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Run did not return")
	}
	testutil.Eventually(t, "workers to end", func() bool { return liveWorkers() == 0 })
	b := newPod("b", v1.Container{Name: "c", LivenessProbe: execProbe("live", nil)})
	m.AddPod(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods[b.UID].containers["c"].workers[liveness].cancel != nil {
		t.Fatal("worker started after Run returned")
	}
}

func TestDeletionStopsLivenessAndStartup(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c",
		StartupProbe:   execProbe("startup", nil),
		ReadinessProbe: execProbe("ready", nil),
	})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	h.answer("startup", 1, "") // below threshold
	deleting := pod.DeepCopy()
	now := metav1.NewTime(h.clock.Now())
	deleting.DeletionTimestamp = &now
	h.m.AddPod(deleting)
	h.update()
	if !h.m.StartupDone("id1") {
		t.Fatal("startup not reported done on deletion")
	}
	h.answer("ready", 0, "") // readiness goes on
	h.update()
	h.step(10 * time.Second)
	h.answer("ready", 0, "")
	h.noCall()
}

func TestProbeErrorIsThrownAway(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c", LivenessProbe: &v1.Probe{
		ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("nope")}},
	}})
	h.m.AddPod(pod)
	h.run(pod, map[string]string{"c": "id1"})
	h.update()
	h.settle()
	for range 5 {
		h.step(10 * time.Second)
	}
	h.settle()
	if failed, _, _ := h.m.LivenessFailed("id1"); failed {
		t.Fatal("a probe that cannot run failed the container")
	}
	evs := h.rec.list()
	if len(evs) == 0 || evs[0].msg != `Liveness probe errored: port "nope" not found in container c` {
		t.Fatalf("events = %+v", evs)
	}
	h.noUpdate()
}

// A container that outlived a nodelet restart keeps the readiness its pod
// last had until its first probe, as the kubelet's: a restart must not
// make Ready pods flap NotReady in the API. A new container is not ready
// until probed.
func TestReadinessAcrossRestart(t *testing.T) {
	h := newHarness(t)
	pod := newPod("a", v1.Container{Name: "c", ReadinessProbe: execProbe("ready", func(p *v1.Probe) { p.FailureThreshold = 1 })},
		v1.Container{Name: "plain"})
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	before := h.clock.Now().Add(-time.Minute) // started before this nodelet
	after := h.clock.Now()

	if !h.m.ReadyUnbound(pod, "c", before) || !h.m.ReadyUnbound(pod, "plain", before) {
		t.Error("containers of a Ready pod that outlived the restart are not ready before binding")
	}
	if h.m.ReadyUnbound(pod, "c", after) || h.m.ReadyUnbound(pod, "plain", after) {
		t.Error("new containers are ready before binding")
	}
	notReady := pod.DeepCopy()
	notReady.Status.Conditions[0].Status = v1.ConditionFalse
	if h.m.ReadyUnbound(notReady, "c", before) || !h.m.ReadyUnbound(notReady, "plain", before) {
		t.Error("a probed container of a NotReady pod is ready, or an unprobed one is not")
	}

	h.m.AddPod(pod)
	if h.m.Bound("id1") {
		t.Fatal("bound before SetContainers")
	}
	h.m.SetContainers(pod, "127.0.0.1", map[string]RunningContainer{"c": {ID: "id1", StartedAt: before}})
	h.update()
	if !h.m.Bound("id1") {
		t.Fatal("not bound after SetContainers")
	}
	if ready, known := h.m.Ready("id1"); !ready || !known {
		t.Errorf("Ready after binding a restarted container = %v, %v; want the pod's readiness (true) until probed", ready, known)
	}
	h.answer("ready", 1, "not yet") // due at once: the initial delay passed long ago
	h.update()
	if ready, _ := h.m.Ready("id1"); ready {
		t.Error("the first probe's failure did not count")
	}
}
