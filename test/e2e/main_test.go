//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// env is the shared test environment.
type env struct {
	work       string // scratch root, short so socket paths fit
	nodelet    string // built binary
	pause      string
	rootDir    string // root dir of the shared runtime
	endpoint   string
	rt         *cri.Client
	store      *registry.Store
	registry   *registry.Server
	containerd *containerd.Manager
	// containerdBin is the containerd every test runs: bin/containerd
	// (2.x, built by make build) unless NODELET_E2E_CONTAINERD names
	// another, such as Debian's /usr/bin/containerd (1.6).
	containerdBin string
	repoRoot      string
	stopRuntime   context.CancelFunc
	// cgroupRoot is the --cgroup-root of every node agent the run starts
	// (unless a test gives its own): a top cgroup of the run's own, made in
	// every hierarchy. On the default root (/kubepods) a test's agent would
	// take the pods of the host's own node agent (make run's nodelet, a
	// kubelet) for orphans and kill them, as two kubelets on one root do.
	cgroupRoot string
}

var shared env

func TestMain(m *testing.M) {
	if addr := os.Getenv(registryClientEnv); addr != "" {
		// Re-executed as an unprivileged user by TestManagedRuntime.
		os.Exit(registryClient(addr))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	closeInheritedOnExec()
	if os.Getenv("NODELET_BENCH_HOLLOW_REPORT") != "" {
		// BenchmarkHollow prints a table of kept results: no runtime,
		// nothing on the host.
		return m.Run()
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: must run as root (containerd, runc and CNI need it)")
		return 1
	}
	if err := parseLane(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	before := recordHost()
	var err error
	if shared.work, err = os.MkdirTemp("/tmp", e2eWorkPrefix); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(shared.work)
	// Like /var/lib/nodelet (0755), the runtime's state under it must be
	// traversable by a user-namespaced pod's root (host IDs 65536 and up);
	// MkdirTemp makes it 0700, and runc then fails with
	// "remount-private dst=.../rootfs, flags=MS_PRIVATE: permission denied".
	if err := os.Chmod(shared.work, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	warnLowDisk(shared.work)
	hostPods := foreignPodProcesses()
	shared.cgroupRoot = "/" + filepath.Base(shared.work)
	// Removed at the end (below, then by the sweep), and here when the
	// run ends before that.
	defer func() { _ = removeCgroupRoot(shared.cgroupRoot) }()
	if err := makeCgroupRootB(shared.cgroupRoot); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cgroup root:", err)
		return 1
	}
	if err := setUp(&shared); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: set up:", err)
		tearDown(&shared)
		return 1
	}
	code := m.Run()
	stopCluster()
	tearDown(&shared)
	// Best effort: what is still busy the sweep removes after it has
	// killed the run's leftovers.
	_ = removeCgroupRoot(shared.cgroupRoot)
	removed, err := sweep(shared.work, before)
	for _, r := range removed {
		fmt.Fprintln(os.Stderr, "e2e: left behind by the tests, removed at the end:", r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: the run leaves behind:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: nothing of the run is left on the host (processes, mounts, cgroups, %s)\n", shared.work)
	if gone := hostPods.gone(); len(gone) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: processes of pods the run did not start (in /kubepods before it began) are gone: %s\n", strings.Join(gone, "; "))
		return 1
	}
	if len(hostPods) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: the %d processes of the host's own pods (in /kubepods before the run) are all still running\n", len(hostPods))
	}
	return code
}

// closeInheritedOnExec keeps what the tests start (containerd and its
// shims, agents) from inheriting the descriptors this process inherited,
// such as the lock of `flock /tmp/nodelet-e2e.lock make e2e`: held by a
// process that outlives the tests, it would keep the next run waiting. Go
// opens its own descriptors close-on-exec; these it did not open.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func setUp(e *env) error {
	_, file, _, _ := runtime.Caller(0)
	e.repoRoot = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	bin := filepath.Join(e.work, "bin")
	e.nodelet, e.pause = filepath.Join(bin, "nodelet"), filepath.Join(bin, "pause")
	if err := goBuild(e.repoRoot, e.nodelet, "./cmd/nodelet", false); err != nil {
		return err
	}
	if err := goBuild(e.repoRoot, e.pause, "./cmd/pause", true); err != nil {
		return err
	}
	if err := linkContainerd(e, bin); err != nil {
		return err
	}
	e.rootDir = filepath.Join(e.work, "rt")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := registry.OpenStore(registry.StoreDir(e.rootDir), log)
	if err != nil {
		return err
	}
	e.store = store
	if _, err := registry.Seed(store, registry.SeedSpec{PauseBinary: e.pause, BusyboxBinary: "/bin/busybox"}, log); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stopRuntime = cancel
	e.registry = registry.NewServer(store, "127.0.0.1:0", log)
	if err := e.registry.Start(ctx); err != nil {
		return err
	}
	cfg := containerd.DefaultConfig(e.rootDir)
	cfg.BridgeName, cfg.PodCIDR = laneNetwork("nle2e0", "10.43.0.0/24")
	cfg.Mirror = e.registry.Addr()
	cfg.Env, cfg.Binary = os.Environ(), e.containerdBin
	// A second runc-based handler, for RuntimeClasses to name, and the
	// one the upstream suites' RuntimeClasses name (conformanceHandler).
	runc, err := secondHandlerRunc(bin)
	if err != nil {
		return err
	}
	cfg.Handlers = []containerd.Handler{{Name: secondHandler, BinaryName: runc}, {Name: conformanceHandler, BinaryName: runc}}
	e.containerd = containerd.New(cfg, containerd.Deps{Log: log})
	if err := e.containerd.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "e2e: containerd %d.x (%s)\n", e.containerd.Config().Major, e.containerdBin)
	e.endpoint = cfg.Endpoint()
	e.rt, err = cri.Dial(ctx, e.endpoint, cri.DefaultTimeouts(), log)
	return err
}

// secondHandler is the shared runtime's runtime handler beside runc: runc
// again, through containerd's BinaryName option.
const secondHandler = "runc-e2e"

// conformanceHandler is the handler upstream's e2e framework expects a
// node's runtime to have (e2eruntimeclass.PreconfiguredRuntimeClassHandler):
// the RuntimeClass specs' pods name it, runc here as in upstream's CI.
const conformanceHandler = "test-handler"

// secondHandlerRunc is the runc the second handler runs: the one linked
// beside the tests' containerd, else the one in PATH.
func secondHandlerRunc(bin string) (string, error) {
	if p := filepath.Join(bin, "runc"); fileExists(p) {
		return p, nil
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("runc for the %s handler: %w", secondHandler, err)
	}
	return filepath.Abs(p)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// containerdEnv names the containerd the tests run instead of bin/containerd.
const containerdEnv = "NODELET_E2E_CONTAINERD"

// linkContainerd picks the tests' containerd and links it, with the shim
// and the runc of its directory, beside the nodelet binary under test,
// where the managed runtime looks first.
func linkContainerd(e *env, bin string) error {
	e.containerdBin = os.Getenv(containerdEnv)
	if e.containerdBin == "" {
		e.containerdBin = filepath.Join(e.repoRoot, "bin", "containerd")
	}
	if _, err := os.Stat(e.containerdBin); err != nil {
		return fmt.Errorf("no containerd to test with (run make build, or set %s): %w", containerdEnv, err)
	}
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		target := filepath.Join(filepath.Dir(e.containerdBin), name)
		if _, err := os.Stat(target); err != nil && name == "runc" {
			continue // a distribution's containerd: runc is found in PATH
		}
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			return err
		}
	}
	e.containerdBin = filepath.Join(bin, "containerd")
	return nil
}

// tearDown removes every pod the tests left, then stops the runtime.
func tearDown(e *env) {
	if e.rt != nil {
		removeAllPods(e.rt)
		e.rt.Close()
	}
	if e.stopRuntime != nil {
		e.stopRuntime()
	}
	if e.containerd != nil {
		<-e.containerd.Done()
	}
	if e.registry != nil {
		e.registry.Close()
	}
	if e.containerd != nil {
		exec.Command("ip", "link", "del", e.containerd.Config().BridgeName).Run()
	}
}

func removeAllPods(rt *cri.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sandboxes, _ := rt.ListPodSandbox(ctx, nil)
	for _, s := range sandboxes {
		rt.StopPodSandbox(ctx, s.Id)
		rt.RemovePodSandbox(ctx, s.Id)
	}
}

func goBuild(dir, out, pkg string, static bool) error {
	args := []string{"build", "-o", out}
	if static {
		args = append(args, "-trimpath", "-ldflags=-s -w")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if static {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

// eventually polls cond every 100 ms until it returns nil or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runningContainer finds the running container of a pod by CRI labels.
func runningContainer(ctx context.Context, rt *cri.Client, podName, container string) (*runtimeapi.Container, error) {
	cs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			podspec.LabelPodName:       podName,
			podspec.LabelContainerName: container,
		},
	})
	if err != nil {
		return nil, err
	}
	if len(cs) != 1 {
		return nil, fmt.Errorf("%d running containers %s/%s", len(cs), podName, container)
	}
	return cs[0], nil
}

// nodeletProc is a nodelet started by a test.
type nodeletProc struct {
	cmd    *exec.Cmd
	args   []string
	stderr *testutil.SyncBuffer
	done   chan struct{}
	err    error
}

// startNodelet runs the binary with args; its output goes to the test log
// when the test fails (for diagnosis only: tests judge what the API and the
// runtime show, never the log).
func startNodelet(t testing.TB, args ...string) *nodeletProc {
	t.Helper()
	// The test machine's disk is not the tests' business: unless a test
	// sets them, no disk threshold evicts or refuses pods (the kubelet's
	// imagefs.available<15% is met on a well-used build machine) and no
	// image is collected for disk usage.
	if !slices.Contains(args, "--eviction-hard") {
		args = append(args, "--eviction-hard", "memory.available<100Mi")
	}
	if !slices.Contains(args, "--image-gc-high-threshold") {
		args = append(args, "--image-gc-high-threshold", "100")
	}
	if !slices.Contains(args, "--cgroup-root") {
		args = append(args, "--cgroup-root", shared.cgroupRoot)
	}
	p := &nodeletProc{cmd: exec.Command(shared.nodelet, args...), args: args, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("nodelet output:\n%s", p.stderr.String())
		}
	})
	return p
}

// stop sends SIGINT and waits for nodelet to exit.
func (p *nodeletProc) stop(t testing.TB) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	default:
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("nodelet did not exit within 60s of SIGINT")
	}
	return p.err
}

func writeManifest(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// registryImage reads an image from the shared runtime's image store.
func (e *env) registryImage(ref string) (v1.Image, error) { return e.store.Image(ref) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// waitContainerRunning waits until the pod's named container runs.
func waitContainerRunning(t testing.TB, timeout time.Duration, pod, container string) {
	t.Helper()
	eventually(t, timeout, pod+"/"+container+" running", func() error {
		_, err := runningContainer(context.Background(), shared.rt, pod, container)
		return err
	})
}

// laneEnv is the lane of a run that hack/e2e-lanes.sh starts beside others
// on this host: 0 (also when unset) to maxLane. Runs side by side keep
// apart what each names on the host itself: the bridges and pod CIDRs of
// their runtimes (laneNetwork) and their control planes' cluster CIDR
// (clusterCIDR). Their work directories, cgroup roots (from the work
// directory's name) and ports (free ones) are apart anyway.
const laneEnv = "NODELET_E2E_LANE"

const maxLane = 3

// lane is this run's lane (laneEnv).
var lane int

func parseLane() error {
	v := os.Getenv(laneEnv)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxLane {
		return fmt.Errorf("%s=%q: want a number from 0 to %d", laneEnv, v, maxLane)
	}
	lane = n
	return nil
}

// laneNetwork is the bridge and pod CIDR a test's runtime uses in this
// run's lane, from those it uses in lane 0: the bridge's name gets the
// lane's suffix, and the CIDR moves 16 × lane up in its third octet (every
// CIDR the tests give is 10.x.y.0 with y below 16, a /22 to a /24).
func laneNetwork(bridge, cidr string) (string, string) {
	if lane == 0 {
		return bridge, cidr
	}
	p := netip.MustParsePrefix(cidr)
	a := p.Addr().As4()
	if a[2] >= 16 || p.Bits() < 20 {
		panic(fmt.Sprintf("laneNetwork: %s is not 10.x.y.0/20 or longer with y below 16", cidr))
	}
	a[2] += byte(16 * lane)
	return laneBridge(bridge), netip.PrefixFrom(netip.AddrFrom4(a), p.Bits()).String()
}

// laneBridge is the name of a test's bridge in this run's lane.
func laneBridge(bridge string) string {
	if lane == 0 {
		return bridge
	}
	return fmt.Sprintf("%sl%d", bridge, lane)
}

// clusterCIDR is the --cluster-cidr of this run's control planes, which
// give each Node a /24 of it: apart per lane, so that two runs' nodes never
// put bridges on one subnet.
func clusterCIDR() string {
	return [...]string{"10.246.0.0/16", "10.249.0.0/16", "10.250.0.0/16", "10.251.0.0/16"}[lane]
}
