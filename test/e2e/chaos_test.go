//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The chaos suite (issue 14): faults injected on purpose at random moments
// on real containerd, each scenario ending with the same invariant check
// (chaosRun.check) and a one-line result with its seed. `make e2e` runs
// the short version, `make chaos` the long one (NODELET_CHAOS=long); a
// seed printed by a failed run replays it (NODELET_CHAOS_SEED).
//
// The short version leaves out the scenarios whose fault other tests of
// make test already inject, to keep make test under half an hour: the API
// server away (TestClusterAPIServerOutage), memory and disk pressure
// (TestEvictionMemoryPressure, TestEvictionLocalStorage), and many pods
// at once (TestRestartAdoptsTwentyPods; 500 manifests in the long version).

type chaosScenario struct {
	name string
	run  func(t *testing.T)
	// longOnly: only in `make chaos`.
	longOnly bool
}

// chaosScenarios is the suite.
var chaosScenarios = []chaosScenario{
	{"nodelet-kill", chaosNodeletKill, false},
	{"containerd-kill", chaosContainerdKill, false},
	{"disk-full", chaosDiskFull, false},
	{"many-manifests", chaosManyManifests, true},
	{"clock-jump", chaosClockJump, false},
	{"api-server", chaosAPIServer, true},
	{"memory-eviction", chaosMemoryEviction, true},
	{"disk-eviction", chaosDiskEviction, true},
}

func TestChaos(t *testing.T) {
	for _, s := range chaosScenarios {
		t.Run(s.name, func(t *testing.T) {
			if s.longOnly && !chaosLong() {
				t.Skipf("make chaos runs it (NODELET_CHAOS=long)")
			}
			s.run(t)
		})
	}
}

// --- standalone nodelet ---------------------------------------------------------

// chaosNodelet is a standalone nodelet on the shared runtime that a
// scenario kills and starts again.
type chaosNodelet struct {
	t    *testing.T
	r    *chaosRun
	args []string
	proc *nodeletProc
	api  *nodeAPI
}

func (r *chaosRun) standalone(t *testing.T, root string, extra ...string) *chaosNodelet {
	n := &chaosNodelet{t: t, r: r, args: append([]string{"--container-runtime-endpoint", shared.endpoint, "--root-dir", root,
		"--pod-manifest-path", r.manifests, "--hostname-override", r.node,
		"--pod-logs-dir", filepath.Join(shared.work, "pod-logs-"+r.name),
		"--file-check-frequency", "1s", "--port", freePort(t), "--address", "127.0.0.1", "--healthz-port", "0"}, extra...)}
	r.api = func() *nodeAPI { return n.api }
	n.start()
	return n
}

func (n *chaosNodelet) start() {
	n.proc = startNodelet(n.t, n.args...)
	n.r.rss.watch(n.proc.cmd.Process.Pid)
	n.api = n.proc.api(n.t)
}

// kill9 SIGKILLs nodelet and waits for it to be gone.
func (n *chaosNodelet) kill9() {
	n.proc.cmd.Process.Kill()
	<-n.proc.done
}

// waitConverged waits for the runtime to run what the manifests want, as
// the start of a scenario.
func (r *chaosRun) waitConverged(timeout time.Duration) {
	r.t.Helper()
	eventually(r.t, timeout, "the scenario's pods running", func() error {
		v, err := r.criView(context.Background())
		if err != nil {
			return err
		}
		return r.converged(v)
	})
}

// finish removes every manifest and waits until nothing of the scenario
// is left running (deletion works after the chaos, too).
func (r *chaosRun) finish(timeout time.Duration) {
	r.t.Helper()
	r.removeAll()
	eventually(r.t, timeout, "the scenario's pods stopped", func() error {
		v, err := r.criView(context.Background())
		if err != nil {
			return err
		}
		return r.converged(v)
	})
}

// churnFor does 1 to max random churn steps, a random pause of up to
// pause after each.
func (r *chaosRun) churn(maxSteps int, pause time.Duration) []string {
	var did []string
	for range 1 + r.rng.IntN(maxSteps) {
		did = append(did, r.churnStep())
		r.sleepRandom(pause)
	}
	return did
}

// a. nodelet SIGKILLed at random points of a churn of pods: creates,
// edits, deletes and crash-looping containers; it starts again each time.
func chaosNodeletKill(t *testing.T) {
	r := newChaosRun(t, "nodelet-kill", shared.rt, filepath.Join(shared.work, "manifests-chaos-kill"), "e2e")
	pods, kills := size(15, 50), size(3, 20)
	for i := range pods {
		r.create(i < pods/4, 0.2)
	}
	n := r.standalone(t, filepath.Join(shared.work, "chaos-kill"))
	r.waitConverged(size(2*time.Minute, 5*time.Minute))
	stable := r.stableIDs()
	for i := range kills {
		did := r.churn(4, time.Second)
		r.sleepRandom(2 * time.Second)
		n.kill9()
		r.runs++
		if r.rng.IntN(2) == 0 { // a change nodelet did not see happen
			did = append(did, r.churnStep())
		}
		t.Logf("kill %d after %s", i+1, strings.Join(did, ", "))
		n.start()
	}
	r.check(stable)
	r.report()
	r.finish(2 * time.Minute)
}

// b. The managed containerd SIGKILLed at random points of the same churn:
// nodelet starts a new one and carries on.
func chaosContainerdKill(t *testing.T) {
	m := startManaged(t, "chaos-ctrd", "nlchaos1", "10.61.0.0/24", "--port", freePort(t), "--address", "127.0.0.1",
		"--file-check-frequency", "1s", "--healthz-port", "0")
	r := newChaosRun(t, "containerd-kill", m.rt, m.manifests, "e2e")
	api := m.n.api(t)
	r.api = func() *nodeAPI { return api }
	r.rss.watch(m.n.cmd.Process.Pid)
	pods, kills := size(15, 50), size(3, 20)
	for i := range pods {
		r.create(i < pods/4, 0.2)
	}
	r.waitConverged(size(2*time.Minute, 5*time.Minute))
	stable := r.stableIDs()
	for i := range kills {
		did := r.churn(4, time.Second)
		r.sleepRandom(2 * time.Second)
		pid := readPID(t, m.cfg.PIDFile())
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r.runs++
		t.Logf("containerd kill %d after %s", i+1, strings.Join(did, ", "))
		eventually(t, 60*time.Second, "containerd restarted", func() error {
			if got := readPIDMaybe(m.cfg.PIDFile()); got == 0 || got == pid || !alive(got) {
				return fmt.Errorf("pid file says %d", got)
			}
			_, err := m.rt.Version(context.Background())
			return err
		})
	}
	r.check(stable)
	r.report()
	r.finish(2 * time.Minute)
}

// c. The root dir's filesystem full (a small tmpfs), while pods come and
// go; then freed. Nothing running is killed, new pods start once there is
// room, and nodelet says why they did not before.
func chaosDiskFull(t *testing.T) {
	root := filepath.Join(shared.work, "chaos-disk")
	if err := os.MkdirAll(root, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,nr_inodes=4096,mode=0711", "nlchaos", root).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	// After nodelet has stopped (cleanups run last first).
	t.Cleanup(func() { unmountBelow(root); exec.Command("umount", "-l", root).Run() })
	r := newChaosRun(t, "disk-full", shared.rt, filepath.Join(shared.work, "manifests-chaos-disk"), "e2e")
	for i := range 6 {
		r.create(i < 3, 0)
	}
	n := r.standalone(t, root)
	r.waitConverged(2 * time.Minute)
	stable := r.stableIDs()

	fill := filepath.Join(root, "fill")
	filled, err := fillUp(fill)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filled.free() })
	r.runs++
	var did []string
	for range size(2, 10) {
		did = append(did, r.churnStep())
		r.sleepRandom(2 * time.Second)
	}
	// At least one new pod, which needs room under the root dir.
	did = append(did, "create "+r.create(false, 0).name)
	t.Logf("with %s full: %s", root, strings.Join(did, ", "))
	time.Sleep(size(6*time.Second, 60*time.Second))
	// Nothing that ran was stopped for want of room.
	v, err := r.criView(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for key, id := range stable {
		if running := v.running(v.sandboxUID[key], "main"); len(running) != 1 || running[0].Id != id {
			r.violate("container killed that should run: with the disk full, stable pod %s no longer runs %s", key, id)
		}
	}
	// What the fault did (not an invariant): the pods made meanwhile wait.
	waiting := 0
	for key := range r.pods {
		if _, ok := stable[key]; !ok && len(v.running(v.sandboxUID[key], "main")) == 0 {
			waiting++
		}
	}
	t.Logf("with the disk full: %d of %d wanted pods not running", waiting, len(r.pods))
	if log := n.proc.stderr.String(); !strings.Contains(log, "no space left on device") {
		r.violate("nodelet's log does not say the disk is full (no %q)", "no space left on device")
	}
	if err := filled.free(); err != nil {
		t.Fatal(err)
	}
	r.check(stable)
	r.report()
	r.finish(2 * time.Minute)
}

// filler keeps a filesystem full: its bytes (a growing file), then its
// inodes (empty files), so that neither a file nor a directory can be
// made, and again whenever something frees room (a pod deleted meanwhile).
type filler struct {
	dir   string
	files int
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// fillUp fills the filesystem of dir (which it creates) and keeps it full
// until stopFill.
func fillUp(dir string) (*filler, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	f := &filler{dir: dir, stop: make(chan struct{}), done: make(chan struct{})}
	if err := f.fill(); err != nil {
		return nil, err
	}
	go func() {
		defer close(f.done)
		for {
			select {
			case <-f.stop:
				return
			case <-time.After(50 * time.Millisecond):
				f.fill()
			}
		}
	}()
	return f, nil
}

func (f *filler) fill() error {
	data, err := os.OpenFile(filepath.Join(f.dir, "data"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil && !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	if err == nil {
		chunk := make([]byte, 1<<20)
		for n := len(chunk); n > 0; {
			if _, err := data.Write(chunk[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					data.Close()
					return err
				}
				n /= 2 // and the last bytes a smaller write still finds
			}
		}
		data.Close()
	}
	for {
		e, err := os.OpenFile(filepath.Join(f.dir, strconv.Itoa(f.files)), os.O_CREATE|os.O_WRONLY, 0o600)
		if errors.Is(err, syscall.ENOSPC) {
			return nil
		}
		if err != nil {
			return err
		}
		e.Close()
		f.files++
	}
}

// free stops filling and removes what it wrote.
func (f *filler) free() error {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	return os.RemoveAll(f.dir)
}

// d. Many manifests written at once, then deleted at once: all run, then
// nothing of them is left: no sandbox, no container, no pod directory.
func chaosManyManifests(t *testing.T) {
	// --max-pods: the kubelet's default (110) would refuse most of them
	// (OutOfpods), as it should.
	m := startManaged(t, "chaos-many", "nlchaos2", "10.62.0.0/22", "--port", freePort(t), "--address", "127.0.0.1",
		"--file-check-frequency", "1s", "--healthz-port", "0", "--max-pods", "600")
	r := newChaosRun(t, "many-manifests", m.rt, m.manifests, "e2e")
	api := m.n.api(t)
	r.api = func() *nodeAPI { return api }
	r.rss.watch(m.n.cmd.Process.Pid)
	count := size(100, 500)
	for range count {
		r.create(false, 0)
	}
	r.runs++
	start := time.Now()
	r.check(nil)
	t.Logf("%d pods written at once: all running and their status true after %v", count, time.Since(start).Round(time.Second))

	start = time.Now()
	r.removeAll()
	ctx := context.Background()
	var last error
	deadline := time.Now().Add(size(3*time.Minute, 10*time.Minute))
	for time.Now().Before(deadline) {
		if last = leftovers(ctx, r, filepath.Join(m.root, "pods"), chaosLong()); last == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if last != nil {
		r.violate("%d manifests deleted at once: %v", count, last)
	} else {
		t.Logf("%d manifests deleted at once: nothing left (removed: %v) after %v", count, chaosLong(), time.Since(start).Round(time.Second))
	}
	r.report()
}

// leftovers says what is left of the scenario's pods: pod directories,
// and sandboxes and containers: running ones, or (removed) any. The
// container GC removes the dead ones of deleted pods once a minute, a wait
// only the long version affords.
func leftovers(ctx context.Context, r *chaosRun, podsDir string, removed bool) error {
	sbs, err := r.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	var left []string
	for _, s := range sbs {
		if strings.HasPrefix(s.Labels[podspec.LabelPodName], r.prefix) && (removed || s.State == runtimeapi.PodSandboxState_SANDBOX_READY) {
			left = append(left, "sandbox "+s.Labels[podspec.LabelPodName]+" "+s.State.String())
		}
	}
	cs, err := r.rt.ListContainers(ctx, nil)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if strings.HasPrefix(c.Labels[podspec.LabelPodName], r.prefix) && (removed || c.State == runtimeapi.ContainerState_CONTAINER_RUNNING) {
			left = append(left, "container "+c.Labels[podspec.LabelPodName]+" "+c.State.String())
		}
	}
	dirs, _ := os.ReadDir(podsDir)
	for _, d := range dirs {
		left = append(left, "pod dir "+d.Name())
	}
	if len(left) > 0 {
		return fmt.Errorf("%d left, such as %v", len(left), left[:min(len(left), 5)])
	}
	return nil
}

// e. The wall clock jumped an hour forward, then back: nothing restarts,
// and the status stays true throughout.
func chaosClockJump(t *testing.T) {
	r := newChaosRun(t, "clock-jump", shared.rt, filepath.Join(shared.work, "manifests-chaos-clock"), "e2e")
	for range 5 {
		r.create(true, 0)
	}
	r.standalone(t, filepath.Join(shared.work, "chaos-clock"))
	r.waitConverged(2 * time.Minute)
	stable := r.stableIDs()

	// The true time is that of before plus what the monotonic clock says
	// has passed; put back however the test ends.
	before := time.Now()
	restore := func() {
		if err := setClock(before.Add(time.Since(before))); err != nil {
			t.Errorf("put the clock back: %v", err)
		}
	}
	jumped := false
	t.Cleanup(func() {
		if jumped {
			restore()
		}
	})
	hold := size(8*time.Second, 60*time.Second)
	for _, jump := range []time.Duration{time.Hour, -time.Hour} {
		now := time.Now()
		if err := setClock(now.Add(jump)); err != nil {
			t.Fatalf("clock_settime: %v", err)
		}
		jumped = jump > 0
		if !jumped {
			restore() // exactly, not "one hour back"
		}
		r.runs++
		t.Logf("clock jumped %v", jump)
		r.statusStaysTrue(hold)
	}
	r.check(stable)
	r.report()
	r.finish(time.Minute)
}

func setClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// statusStaysTrue watches /pods against the runtime for d: any
// disagreement must end within chaosStatusLag; the longest is kept.
func (r *chaosRun) statusStaysTrue(d time.Duration) {
	end := time.Now().Add(d)
	var since time.Time
	for time.Now().Before(end) {
		v, err := r.criView(context.Background())
		if err == nil {
			r.checkNoTwins(v)
			err = r.statusAgrees(v)
		}
		switch {
		case err == nil && !since.IsZero():
			r.noteLag(time.Since(since))
			since = time.Time{}
		case err != nil && since.IsZero():
			since = time.Now()
		case err != nil && time.Since(since) > chaosStatusLag:
			r.violate("status not true for %v: %v", chaosStatusLag, err)
			r.noteLag(time.Since(since))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// f. Cluster mode: the API server killed and restarted, then the network
// to it cut. nodelet reaches the API server at an address of its own
// (127.0.0.77, translated to the API server's 127.0.0.1); the cut drops
// exactly the connections to that address, nobody else's.
func chaosAPIServer(t *testing.T) {
	const node, ns = "chaos-api", "chaos-api"
	cp := startCluster(t)
	cp.logsOnFailure(t)
	port := strings.TrimPrefix(cp.Server, "https://127.0.0.1:")
	const alias = "127.0.0.77"
	nat := []string{"OUTPUT", "-t", "nat", "-d", alias, "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", "127.0.0.1:" + port,
		"-m", "comment", "--comment", "nodelet-chaos"}
	iptables(t, "-I", nat...)
	t.Cleanup(func() { exec.Command("iptables", append([]string{"-D"}, nat...)...).Run() })
	bootstrap := aliasKubeconfig(t, cp.BootstrapKubeconfig, "https://"+alias+":"+port)
	n := joinNode(t, cp, node, "--bootstrap-kubeconfig", bootstrap)
	resilNamespace(t, cp.Admin, ns)
	c := cp.Admin

	r := newChaosRun(t, "api-server", shared.rt, n.manifests, node)
	api := n.proc.api(t)
	r.api = func() *nodeAPI { return api }
	r.rss.watch(n.proc.cmd.Process.Pid)
	resilCreate(t, c, resilWeb(ns, "web", node, 3))
	for _, p := range waitPodsReady(t, c, ns, "app=web", 3, 2*time.Minute) {
		cp := &chaosPod{namespace: ns, name: p.Name, stable: true}
		r.pods[cp.key()] = cp
	}
	for range 2 {
		r.create(true, 0)
	}
	r.waitConverged(2 * time.Minute)
	stable := r.stableIDs()

	// The API server SIGKILLed, and back after a while (stop-apiserver
	// then only forgets its pid).
	pidFile := filepath.Join(cp.Dir, "run", "kube-apiserver.pid")
	data, err := os.ReadFile(pidFile) // "<pid> <binary>"
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(data) + " x")[0])
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.script("stop-apiserver"); err != nil {
		t.Fatalf("hack/cluster.sh stop-apiserver: %v\n%s", err, out)
	}
	t.Cleanup(func() { cp.script("start-apiserver") })
	r.runs++
	added := []*chaosPod{r.create(false, 0)}
	time.Sleep(size(5*time.Second, 60*time.Second))
	if out, err := cp.script("start-apiserver"); err != nil {
		t.Fatalf("hack/cluster.sh start-apiserver: %v\n%s", err, out)
	}
	r.apiCatchesUp(c, added)

	// The network to it cut.
	cut := []string{"OUTPUT", "-m", "conntrack", "--ctorigdst", alias, "-j", "DROP", "-m", "comment", "--comment", "nodelet-chaos"}
	iptables(t, "-I", cut...)
	t.Cleanup(func() { exec.Command("iptables", append([]string{"-D"}, cut...)...).Run() })
	r.runs++
	added = []*chaosPod{r.create(false, 0)}
	r.statusStaysTrue(size(20*time.Second, 2*time.Minute))
	// The cut is real: what nodelet would have told the API server meanwhile
	// is not there (the test's own client goes to 127.0.0.1).
	if _, err := c.CoreV1().Pods(added[0].namespace).Get(context.Background(), added[0].name, metav1.GetOptions{}); err == nil {
		r.violate("the network cut let the mirror pod %s through", added[0].key())
	}
	iptables(t, "-D", cut...)
	r.apiCatchesUp(c, added)

	r.check(stable)
	r.report()
	r.finish(time.Minute)
}

func iptables(t *testing.T, op string, rule ...string) {
	t.Helper()
	if out, err := exec.Command("iptables", append([]string{op}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s %v: %v: %s", op, rule, err, out)
	}
}

// aliasKubeconfig writes a copy of the kubeconfig at path whose server is
// server, verified as the API server's name localhost.
func aliasKubeconfig(t *testing.T, path, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server, c.TLSServerName = server, "localhost"
	}
	out := filepath.Join(t.TempDir(), "bootstrap.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// apiCatchesUp waits for the API server to show every pod of the scenario
// Running with the runtime's container (the static pods added while it
// was away through their mirror pods), and records how long it took.
func (r *chaosRun) apiCatchesUp(c kubernetes.Interface, added []*chaosPod) {
	r.t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < time.Minute {
		if last = r.apiAgrees(c); last == nil {
			r.t.Logf("chaos %s: the API server shows every pod's status %v after it is reachable again (%d added meanwhile)",
				r.name, time.Since(start).Round(100*time.Millisecond), len(added))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.violate("the API server does not show the pods' status a minute after it is reachable again: %v", last)
}

func (r *chaosRun) apiAgrees(c kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := r.criView(ctx)
	if err != nil {
		return err
	}
	for _, p := range r.pods {
		ap, err := c.CoreV1().Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uid := v.sandboxUID[p.key()]
		running := v.running(uid, "main")
		cs := containerStatus(ap, "main")
		if ap.Status.Phase != v1.PodRunning || !podReady(ap) || cs.State.Running == nil || len(running) != 1 ||
			strings.TrimPrefix(cs.ContainerID, "containerd://") != running[0].Id {
			return fmt.Errorf("%s: the API says %s ready %v %s, the runtime runs %d", p.key(), ap.Status.Phase, podReady(ap), cs.ContainerID, len(running))
		}
	}
	return nil
}
