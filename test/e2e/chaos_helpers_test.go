//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The chaos suite's harness: a seeded random source, the pods a scenario
// wants (its manifests), and the invariant check every scenario ends with.

const (
	// chaosEnv set to "long" runs the long version (make chaos); unset,
	// the short one (make e2e).
	chaosEnv = "NODELET_CHAOS"
	// chaosSeedEnv replays a run: every scenario prints its seed.
	chaosSeedEnv = "NODELET_CHAOS_SEED"
	// chaosRSSLimit bounds nodelet's resident memory in every scenario.
	chaosRSSLimit = 150.0 // MiB
	// chaosStatusLag is how long after the runtime settled nodelet's /pods
	// may still disagree with it.
	chaosStatusLag = 10 * time.Second
	// chaosAnnotation carries a pod's version: an edit increments it (and
	// changes the container's command, so the container is replaced).
	chaosAnnotation = "chaos.nodelet.io/version"
)

func chaosLong() bool { return os.Getenv(chaosEnv) == "long" }

// size picks the short or long figure.
func size[T any](short, long T) T {
	if chaosLong() {
		return long
	}
	return short
}

// chaosPod is a pod a scenario wants to run: its manifest is in the
// scenario's manifest directory (static pods), or it is bound to the node
// through the API (cluster mode, version 0).
type chaosPod struct {
	namespace, name string // name as nodelet runs it (a static pod's with the node name)
	file            string // the manifest's base name; "" for an API pod
	version         int
	crash           bool // exits 1 after a second, restartPolicy Always
	stable          bool // never touched by the scenario: its container must never change
}

func (p *chaosPod) key() string { return p.namespace + "/" + p.name }

// chaosRun is one scenario's run: its seed and random source, the pods it
// wants, and what the invariant checks found.
type chaosRun struct {
	t         *testing.T
	name      string
	seed      uint64
	rng       *rand.Rand
	rt        *cri.Client
	api       func() *nodeAPI // the current nodelet's API
	manifests string
	node      string // hostname-override: static pods' name suffix
	prefix    string // every pod name of the scenario starts with it
	pods      map[string]*chaosPod
	nextID    int
	runs      int // fault injections
	settle    time.Duration

	mu         sync.Mutex
	violations []string
	seen       map[string]bool // violateOnce's keys
	worstLag   time.Duration
	rss        *rssWatch
}

// newChaosRun seeds the scenario (from NODELET_CHAOS_SEED, else the clock)
// and prints the seed first, so that a failure replays.
func newChaosRun(t *testing.T, name string, rt *cri.Client, manifests, node string) *chaosRun {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("chaos %s: seed %d (replay: %s=%d %s=%s)", name, seed, chaosSeedEnv, seed, chaosEnv, os.Getenv(chaosEnv))
	r := &chaosRun{t: t, name: name, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rt: rt,
		manifests: manifests, node: node, prefix: "c" + strings.ReplaceAll(name, "-", "") + "-",
		pods: map[string]*chaosPod{}, seen: map[string]bool{}, settle: size(3*time.Minute, 6*time.Minute), rss: newRSSWatch()}
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.rss.stop)
	// The scenario's pods go with it, whatever happened to its nodelet.
	t.Cleanup(func() { removePodsWithPrefix(rt, r.prefix) })
	return r
}

// --- the pods a scenario wants --------------------------------------------

const chaosManifest = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {%s: "%d"}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", %q]
    volumeMounts: [{name: info, mountPath: /etc/podinfo}]
  volumes:
  - name: info
    downwardAPI:
      items: [{path: annotations, fieldRef: {fieldPath: metadata.annotations}}]
`

func (p *chaosPod) manifest() string {
	script := fmt.Sprintf("trap 'exit 0' TERM; echo v%d; while true; do sleep 1; done", p.version)
	if p.crash {
		script = fmt.Sprintf("echo v%d; sleep 1; exit 1", p.version)
	}
	base := strings.TrimSuffix(p.file, ".yaml")
	return fmt.Sprintf(chaosManifest, base, chaosAnnotation, p.version, script)
}

// write (re)writes the pod's manifest atomically: nodelet never reads half
// a file (a scenario is about faults of nodelet, not of the writer).
func (r *chaosRun) write(p *chaosPod) {
	tmp := filepath.Join(r.manifests, "."+p.file+".tmp")
	if err := os.WriteFile(tmp, []byte(p.manifest()), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(r.manifests, p.file)); err != nil {
		r.t.Fatal(err)
	}
}

// create adds a new pod: crash-looping with probability crash.
func (r *chaosRun) create(stable bool, crash float64) *chaosPod {
	r.nextID++
	base := fmt.Sprintf("%s%d", r.prefix, r.nextID)
	p := &chaosPod{namespace: "default", name: base + "-" + r.node, file: base + ".yaml", version: 1, stable: stable,
		crash: !stable && r.rng.Float64() < crash}
	r.pods[p.key()] = p
	r.write(p)
	return p
}

// touchable are the pods the churn may edit or delete, in a stable order
// (the random choices must replay).
func (r *chaosRun) touchable() []*chaosPod {
	var out []*chaosPod
	for _, p := range r.pods {
		if !p.stable && p.file != "" {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *chaosPod) int { return strings.Compare(a.name, b.name) })
	return out
}

// churnStep does one random change: create (a fifth crash-loop), edit (a
// new command: the container is replaced) or delete. It returns what it did.
func (r *chaosRun) churnStep() string {
	pods := r.touchable()
	switch op := r.rng.IntN(3); {
	case op == 0 || len(pods) == 0:
		p := r.create(false, 0.2)
		return "create " + p.name
	case op == 1:
		p := pods[r.rng.IntN(len(pods))]
		p.version++
		r.write(p)
		return "edit " + p.name
	default:
		p := pods[r.rng.IntN(len(pods))]
		if err := os.Remove(filepath.Join(r.manifests, p.file)); err != nil {
			r.t.Fatal(err)
		}
		delete(r.pods, p.key())
		return "delete " + p.name
	}
}

// removeAll deletes every manifest of the scenario.
func (r *chaosRun) removeAll() {
	for k, p := range r.pods {
		if p.file != "" {
			os.Remove(filepath.Join(r.manifests, p.file))
			delete(r.pods, k)
		}
	}
}

// violate records an invariant violation (the test fails at the end).
func (r *chaosRun) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	r.violations = append(r.violations, msg)
	r.t.Errorf("chaos %s (seed %d): %s", r.name, r.seed, msg)
}

// --- the runtime's view -----------------------------------------------------

// criView is what the runtime runs of the scenario's pods.
type criView struct {
	readySandboxes map[string][]string                // pod UID → IDs
	sandboxUID     map[string]string                  // namespace/name → UID of its ready sandbox
	containers     map[string][]*runtimeapi.Container // pod UID/container name → all instances
}

func (v criView) running(uid, name string) []*runtimeapi.Container {
	var out []*runtimeapi.Container
	for _, c := range v.containers[uid+"/"+name] {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out = append(out, c)
		}
	}
	return out
}

func (r *chaosRun) criView(ctx context.Context) (criView, error) {
	v := criView{readySandboxes: map[string][]string{}, sandboxUID: map[string]string{}, containers: map[string][]*runtimeapi.Container{}}
	sbs, err := r.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		return v, err
	}
	for _, s := range sbs {
		if !r.ours(s.Labels) {
			continue
		}
		uid := s.Labels[podspec.LabelPodUID]
		v.readySandboxes[uid] = append(v.readySandboxes[uid], s.Id)
		v.sandboxUID[s.Labels[podspec.LabelPodNamespace]+"/"+s.Labels[podspec.LabelPodName]] = uid
	}
	cs, err := r.rt.ListContainers(ctx, nil)
	if err != nil {
		return v, err
	}
	for _, c := range cs {
		if !r.ours(c.Labels) {
			continue
		}
		k := c.Labels[podspec.LabelPodUID] + "/" + c.Labels[podspec.LabelContainerName]
		v.containers[k] = append(v.containers[k], c)
	}
	return v, nil
}

func (r *chaosRun) ours(labels map[string]string) bool {
	name := labels[podspec.LabelPodName]
	if strings.HasPrefix(name, r.prefix) {
		return true
	}
	_, ok := r.pods[labels[podspec.LabelPodNamespace]+"/"+name]
	return ok
}

// stableIDs records the container of every stable pod: the scenario must
// leave them running, untouched.
func (r *chaosRun) stableIDs() map[string]string {
	r.t.Helper()
	v, err := r.criView(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	ids := map[string]string{}
	for _, p := range r.pods {
		if !p.stable {
			continue
		}
		running := v.running(v.sandboxUID[p.key()], "main")
		if len(running) != 1 {
			r.t.Fatalf("stable pod %s runs %d containers before the fault", p.key(), len(running))
		}
		ids[p.key()] = running[0].Id
	}
	return ids
}

// --- nodelet's view ---------------------------------------------------------

func (r *chaosRun) nodeletPods() (map[string]*v1.Pod, error) {
	body, err := r.api().get("/pods")
	if err != nil {
		return nil, err
	}
	var list v1.PodList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("/pods: %w", err)
	}
	out := map[string]*v1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		out[p.Namespace+"/"+p.Name] = p
	}
	return out, nil
}

// --- the invariants ---------------------------------------------------------

// check is the end of every scenario:
//  1. no pod lost: every wanted pod runs its latest version (crash-loopers:
//     restarting), and nothing else of the scenario runs;
//  2. no container running twice: per pod UID at most one running
//     container per name and one ready sandbox;
//  3. no container killed that should run: the stable pods' containers are
//     those of before (stable, from stableIDs);
//  4. every pod's status true: /pods agrees with the runtime within 10 s of
//     the runtime settling (the worst lag is kept);
//  5. nodelet's RSS stayed under chaosRSSLimit.
func (r *chaosRun) check(stable map[string]string) {
	r.t.Helper()
	ctx := context.Background()
	start := time.Now()
	var v criView
	var lastErr error
	for {
		var err error
		if v, err = r.criView(ctx); err == nil {
			r.checkNoTwins(v)
			err = r.converged(v)
		}
		if err == nil {
			break
		}
		lastErr = err
		if time.Since(start) > r.settle {
			r.violate("pod lost: the runtime did not converge within %v: %v", r.settle, lastErr)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	settled := time.Now()
	r.t.Logf("chaos %s: the runtime converged %v after the check began", r.name, settled.Sub(start).Round(100*time.Millisecond))

	for key, id := range stable {
		p := r.pods[key]
		if p == nil {
			continue
		}
		running := v.running(v.sandboxUID[key], "main")
		if len(running) != 1 || running[0].Id != id {
			var got []string
			for _, c := range running {
				got = append(got, c.Id)
			}
			r.violate("container killed that should run: stable pod %s ran %s, now %v", key, id, got)
		}
	}

	// Status: /pods against the runtime, each time a fresh look at both.
	for {
		v, err := r.criView(ctx)
		if err == nil {
			err = r.statusAgrees(v)
		}
		lag := time.Since(settled)
		if err == nil {
			r.noteLag(lag)
			break
		}
		if lag > chaosStatusLag {
			r.noteLag(lag)
			r.violate("status not true %v after the runtime settled: %v", chaosStatusLag, err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if peak := r.rss.peak(); peak > chaosRSSLimit {
		r.violate("nodelet's RSS peaked at %.0f MiB (limit %.0f)", peak, chaosRSSLimit)
	}
}

// converged says what keeps the runtime from being what the manifests want.
func (r *chaosRun) converged(v criView) error {
	pods, err := r.nodeletPods()
	if err != nil {
		return err
	}
	wanted := map[string]bool{}
	for key, p := range r.pods {
		np := pods[key]
		if np == nil {
			return fmt.Errorf("%s not in /pods", key)
		}
		if p.version != 0 && np.Annotations[chaosAnnotation] != strconv.Itoa(p.version) {
			return fmt.Errorf("%s: /pods has version %q, want %d", key, np.Annotations[chaosAnnotation], p.version)
		}
		uid := string(np.UID)
		wanted[uid] = true
		if len(v.readySandboxes[uid]) == 0 {
			return fmt.Errorf("%s (uid %s): no ready sandbox", key, uid)
		}
		if p.crash {
			if len(v.containers[uid+"/main"]) == 0 {
				return fmt.Errorf("%s (uid %s): crash-looper has no container", key, uid)
			}
		} else if len(v.running(uid, "main")) == 0 {
			return fmt.Errorf("%s (uid %s): main not running", key, uid)
		}
	}
	for uid := range v.readySandboxes {
		if !wanted[uid] {
			return fmt.Errorf("a sandbox of pod uid %s that no manifest wants is ready", uid)
		}
	}
	for k, cs := range v.containers {
		uid, _, _ := strings.Cut(k, "/")
		for _, c := range cs {
			if !wanted[uid] && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return fmt.Errorf("container %s of %s (uid %s) runs, no manifest wants it", c.Id, c.Labels[podspec.LabelPodName], uid)
			}
		}
	}
	return nil
}

// checkNoTwins records invariant 2's violations (each once).
func (r *chaosRun) checkNoTwins(v criView) {
	for uid, ids := range v.readySandboxes {
		if len(ids) > 1 {
			r.violateOnce("sandboxes "+uid, "pod uid %s has %d ready sandboxes: %v", uid, len(ids), ids)
		}
	}
	for k := range v.containers {
		uid, name, _ := strings.Cut(k, "/")
		if running := v.running(uid, name); len(running) > 1 {
			r.violateOnce("containers "+k, "container %s of pod uid %s runs %d times", name, uid, len(running))
		}
	}
}

func (r *chaosRun) violateOnce(key, format string, args ...any) {
	r.mu.Lock()
	dup := r.seen[key]
	r.seen[key] = true
	r.mu.Unlock()
	if !dup {
		r.violate(format, args...)
	}
}

// statusAgrees compares /pods with the runtime: each wanted pod Running,
// its container's status naming the runtime's container (the running one;
// for a crash-looper, one that exists).
func (r *chaosRun) statusAgrees(v criView) error {
	pods, err := r.nodeletPods()
	if err != nil {
		return err
	}
	for key, p := range r.pods {
		np := pods[key]
		if np == nil {
			return fmt.Errorf("%s not in /pods", key)
		}
		uid := string(np.UID)
		if np.Status.Phase != v1.PodRunning {
			return fmt.Errorf("%s: phase %s", key, np.Status.Phase)
		}
		cs := containerStatus(np, "main")
		id := strings.TrimPrefix(cs.ContainerID, "containerd://")
		if p.crash {
			if id == "" && cs.LastTerminationState.Terminated != nil {
				id = strings.TrimPrefix(cs.LastTerminationState.Terminated.ContainerID, "containerd://")
			}
			if !slices.ContainsFunc(v.containers[uid+"/main"], func(c *runtimeapi.Container) bool { return c.Id == id }) {
				return fmt.Errorf("%s: status names container %q, not one of the runtime's", key, id)
			}
			continue
		}
		running := v.running(uid, "main")
		if cs.State.Running == nil || len(running) != 1 || running[0].Id != id {
			return fmt.Errorf("%s: status says %q %+v, the runtime runs %d", key, id, cs.State, len(running))
		}
	}
	return nil
}

func (r *chaosRun) noteLag(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.worstLag = max(r.worstLag, d)
}

// report prints the scenario's one-line result (the table).
func (r *chaosRun) report() {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := fmt.Sprintf("chaos result: %-14s seed=%d runs=%d violations=%d worst-status-lag=%v max-rss=%.0fMiB long=%v",
		r.name, r.seed, r.runs, len(r.violations), r.worstLag.Round(10*time.Millisecond), r.rss.peak(), chaosLong())
	r.t.Log(line)
	fmt.Fprintln(os.Stderr, "e2e: "+line)
}

// --- helpers -----------------------------------------------------------------

// rssWatch samples the RSS of whatever nodelet runs now (the scenario
// restarts it) every 200 ms and keeps the peak.
type rssWatch struct {
	mu   sync.Mutex
	pid  int
	max  float64
	done chan struct{}
	once sync.Once
}

func newRSSWatch() *rssWatch {
	w := &rssWatch{done: make(chan struct{})}
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			w.mu.Lock()
			if w.pid > 0 {
				w.max = max(w.max, rssMiB(w.pid))
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *rssWatch) watch(pid int) { w.mu.Lock(); w.pid = pid; w.mu.Unlock() }
func (w *rssWatch) stop()         { w.once.Do(func() { close(w.done) }) }
func (w *rssWatch) peak() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pid > 0 {
		w.max = max(w.max, rssMiB(w.pid))
	}
	return w.max
}

// removePodsWithPrefix stops and removes every sandbox whose pod name
// starts with prefix.
func removePodsWithPrefix(rt *cri.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sbs, _ := rt.ListPodSandbox(ctx, nil)
	for _, s := range sbs {
		if strings.HasPrefix(s.Labels[podspec.LabelPodName], prefix) {
			rt.StopPodSandbox(ctx, s.Id)
			rt.RemovePodSandbox(ctx, s.Id)
		}
	}
}

// sleepRandom sleeps up to d, chosen by the scenario's random source.
func (r *chaosRun) sleepRandom(d time.Duration) {
	time.Sleep(time.Duration(r.rng.Int64N(int64(d) + 1)))
}
