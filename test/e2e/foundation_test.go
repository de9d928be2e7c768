//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// A runtime endpoint where nothing listens gives one clear line and exit 1.
func TestNoRuntimeAtEndpoint(t *testing.T) {
	cmd := exec.Command(shared.nodelet, "--container-runtime-endpoint", "unix:///nonexistent.sock",
		"--root-dir", filepath.Join(shared.work, "none"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	exitErr, ok := err.(*exec.ExitError)
	if !ok || exitErr.ExitCode() != 1 {
		t.Fatalf("exit: %v, want exit code 1", err)
	}
	want := "nodelet: no CRI runtime at unix:///nonexistent.sock: is containerd running?\n"
	if stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("stderr = %q, stdout = %q; want exactly %q", stderr.String(), stdout.String(), want)
	}
}

// The CRI contract suite of internal/pipeline/cri, run against the real containerd.
func TestCRIContractOnContainerd(t *testing.T) {
	cmd := exec.Command("go", "test", "-count=1", "-run", "Contract", "./internal/pipeline/cri",
		"-cri-endpoint="+shared.endpoint)
	cmd.Dir = shared.repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("contract suite against %s failed: %v\n%s", shared.endpoint, err, out)
	}
}

const sleeperPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "echo started; trap 'exit 0' TERM; while true; do sleep 1; done"]
`

// One manifest becomes one running container, pulled through the local
// registry; a second nodelet adopts it without a restart; removing the
// manifest removes the pod.
func TestManifestToRunningContainer(t *testing.T) {
	manifests := filepath.Join(shared.work, "manifests-basic")
	writeManifest(t, manifests, "sleeper.yaml", fmt.Sprintf(sleeperPod, "sleeper"))
	writeManifest(t, manifests, "broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec: {containers: [{name: x}]}\n")
	logs := filepath.Join(shared.work, "pod-logs-basic")
	args := []string{"--container-runtime-endpoint", shared.endpoint, "--root-dir", filepath.Join(shared.work, "basic"),
		"--pod-manifest-path", manifests, "--hostname-override", "e2e", "--pod-logs-dir", logs,
		"--file-check-frequency", "500ms", "--port", freePort(t), "--address", "127.0.0.1"}
	n := startNodelet(t, args...)

	ctx := context.Background()
	var first *runtimeapi.Container
	eventually(t, 60*time.Second, "sleeper running", func() (err error) {
		first, err = runningContainer(ctx, shared.rt, "sleeper-e2e", "main")
		return err
	})
	eventually(t, 10*time.Second, "container log written", func() error {
		matches, _ := filepath.Glob(filepath.Join(logs, "default_sleeper-e2e_*", "main", "0.log"))
		if len(matches) != 1 {
			return fmt.Errorf("log files: %v", matches)
		}
		data, err := os.ReadFile(matches[0])
		if err != nil || !strings.Contains(string(data), "stdout F started") {
			return fmt.Errorf("log %s: %q %v", matches[0], data, err)
		}
		return nil
	})
	waitEvent(t, n.api(t), 30*time.Second, "broken.yaml refused",
		manifestEvent(filepath.Join(manifests, "broken.yaml"), `spec\.containers\[0\]\.image: Required value`))

	// Restart nodelet: the running container is adopted, not recreated.
	if err := n.stop(t); err != nil {
		t.Fatalf("nodelet exit after SIGINT: %v", err)
	}
	api := startNodelet(t, args...).api(t)
	// The new nodelet has synced the pod and reports the container it
	// found; then it relists and syncs some more.
	waitPod(t, api, "sleeper-e2e", 60*time.Second, "adopted", runsContainer("main", first.Id))
	waitRuntimeLists(t, api, adoptLists)
	again, err := runningContainer(ctx, shared.rt, "sleeper-e2e", "main")
	if err != nil || again.Id != first.Id {
		t.Fatalf("after restart: container %v (err %v), want the same %s", again, err, first.Id)
	}
	if got := len(instances(t, "sleeper-e2e", "main")); got != 1 {
		t.Errorf("after restart: %d instances of main, want 1", got)
	}

	// Remove the manifest: the pod is stopped, then garbage-collected.
	os.Remove(filepath.Join(manifests, "sleeper.yaml"))
	os.Remove(filepath.Join(manifests, "broken.yaml"))
	eventually(t, 30*time.Second, "sleeper removed", func() error {
		sbs, err := shared.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: map[string]string{podspec.LabelPodName: "sleeper-e2e"}})
		if err != nil || len(sbs) != 0 {
			return fmt.Errorf("%d ready sandboxes left (%v)", len(sbs), err)
		}
		return nil
	})
}

// `nodelet images import` puts an archive's image into the store and the
// running registry; a pod then pulls it by name.
func TestImagesImport(t *testing.T) {
	base, err := shared.registryImage("docker.io/library/busybox:1.35")
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Config(base, withCmd(base, []string{"sh", "-c", "echo imported; sleep 3600"}))
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("example.com/e2e/imported:v1")
	archive := filepath.Join(shared.work, "imported.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(shared.nodelet, "images", "import", archive, "--root-dir", shared.rootDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "imported example.com/e2e/imported:v1") {
		t.Fatalf("import: %v\n%s", err, out)
	}
	ctx := context.Background()
	ref, err := shared.rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: "example.com/e2e/imported:v1"}, nil, nil)
	if err != nil {
		t.Fatalf("pull imported image through containerd: %v", err)
	}
	stored, err := shared.registryImage("example.com/e2e/imported:v1")
	if err != nil {
		t.Fatalf("imported image not in the store: %v", err)
	}
	digest, _ := stored.Digest()
	st, err := shared.rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref})
	if err != nil || !containsDigest(st.GetImage().GetRepoDigests(), digest.String()) {
		t.Errorf("image status %v (%v), want repo digest %s", st.GetImage(), err, digest)
	}
}

// Managed mode, as `make run` uses it: nodelet starts the registry and
// containerd itself, survives containerd being SIGKILLed, and leaves nothing
// behind but the pods when it stops.
func TestManagedRuntime(t *testing.T) {
	m := startManaged(t, "managed", "nle2e1", "10.44.0.0/24", "--port", freePort(t), "--address", "127.0.0.1")
	n, root, manifests, cfg, rt := m.n, m.root, m.manifests, m.cfg, m.rt
	writeManifest(t, manifests, "sleeper.yaml", fmt.Sprintf(sleeperPod, "managed"))
	ctx := context.Background()
	var before *runtimeapi.Container
	eventually(t, 90*time.Second, "pod running in managed runtime", func() (err error) {
		before, err = runningContainer(ctx, rt, "managed-e2e", "main")
		return err
	})
	pid := readPID(t, cfg.PIDFile())
	workload := containerPID(t, before.Id)

	// The registry is read-only to a local user; `nodelet images import`
	// makes a new image runnable without a restart.
	regAddr := managedRegistryAddr(t, cfg)
	checkRegistryReadOnly(t, regAddr, root)
	checkImportWhileRunning(t, root, manifests, rt)

	// SIGKILL containerd: nodelet starts a new one, the pod is untouched.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "containerd restarted", func() error {
		if got := readPIDMaybe(cfg.PIDFile()); got == 0 || got == pid || !alive(got) {
			return fmt.Errorf("pid file says %d", got)
		}
		_, err := rt.Version(ctx)
		return err
	})
	waitRuntimeLists(t, n.api(t), adoptLists) // nodelet looks at the new containerd's pods
	after, err := runningContainer(ctx, rt, "managed-e2e", "main")
	if err != nil || after.Id != before.Id {
		t.Fatalf("after containerd restart: %v (err %v), want container %s still running", after, err, before.Id)
	}

	// Ctrl-C: nodelet exits 0, its containerd and registry are gone, the
	// workload process is still alive.
	newPID := readPIDMaybe(cfg.PIDFile())
	if err := n.stop(t); err != nil {
		t.Fatalf("nodelet exit after SIGINT: %v\n%s", err, n.stderr.String())
	}
	if alive(newPID) {
		t.Errorf("managed containerd (pid %d) still running after nodelet exited", newPID)
	}
	if conn, err := net.DialTimeout("tcp", regAddr, time.Second); err == nil {
		conn.Close()
		t.Errorf("registry at %s still answers after nodelet exited", regAddr)
	}
	if !alive(workload) {
		t.Errorf("workload process %d died with nodelet; pods must keep running", workload)
	}
}

// managedNode is a nodelet in managed mode that a test started, with a CRI
// client to its containerd.
type managedNode struct {
	n         *nodeletProc
	args      []string // to start it again
	root      string
	manifests string
	cfg       containerd.Config
	rt        *cri.Client
}

// startManaged starts nodelet in managed mode under shared.work/name, with
// its own bridge and pod CIDR and the extra flags, and waits until its
// containerd answers. When the test ends the pods and the bridge are
// removed.
func startManaged(t *testing.T, name, bridge, cidr string, extra ...string) *managedNode {
	t.Helper()
	bridge, cidr = laneNetwork(bridge, cidr)
	m := &managedNode{root: filepath.Join(shared.work, name), manifests: filepath.Join(shared.work, "manifests-"+name)}
	if err := os.MkdirAll(m.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	m.args = append([]string{"--root-dir", m.root, "--pod-manifest-path", m.manifests, "--hostname-override", "e2e",
		"--cni-bridge-name", bridge, "--pod-cidr", cidr, "--pause-binary", shared.pause,
		"--pod-logs-dir", filepath.Join(shared.work, "pod-logs-"+name)}, extra...)
	// Registered before the nodelet starts, so it runs after the nodelet
	// has stopped: a nodelet still running would restart its containerd
	// beside the cleaning one and recreate the pods it removes.
	t.Cleanup(func() { cleanUpManagedAt(t, m.root, bridge, cidr) })
	m.n = startNodelet(t, m.args...)
	m.cfg = containerd.DefaultConfig(m.root)
	eventually(t, 60*time.Second, "managed containerd answers", func() (err error) {
		m.rt, err = cri.Dial(context.Background(), m.cfg.Endpoint(), cri.DefaultTimeouts(), nil)
		return err
	})
	t.Cleanup(func() { m.rt.Close() })
	return m
}

// cleanUpManagedAt starts the managed containerd of root (with its bridge
// and pod CIDR) once more through the same code, removes the test's pods
// and stops it.
func cleanUpManagedAt(t *testing.T, root, bridge, cidr string) {
	cfg := containerd.DefaultConfig(root)
	cfg.BridgeName, cfg.PodCIDR = bridge, cidr
	cleanUpManaged(t, cfg)
}

// cleanUpManaged starts the managed containerd of cfg once more, removes
// the pods and stops it, then deletes its bridge.
func cleanUpManaged(t *testing.T, cfg containerd.Config) {
	cfg.Env, cfg.Binary = os.Environ(), shared.containerdBin
	ctx, cancel := context.WithCancel(context.Background())
	m := containerd.New(cfg, containerd.Deps{})
	if err := m.Start(ctx); err != nil {
		t.Logf("clean up managed runtime: %v", err)
		cancel()
		return
	}
	if rt, err := cri.Dial(ctx, cfg.Endpoint(), cri.DefaultTimeouts(), nil); err == nil {
		removeAllPods(rt)
		rt.Close()
	}
	cancel()
	<-m.Done()
	exec.Command("ip", "link", "del", cfg.BridgeName).Run()
}

func containerPID(t *testing.T, id string) int {
	t.Helper()
	// The container's cgroup path names its ID.
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if bytes.Contains(cg, []byte(id)) {
			return pid
		}
	}
	t.Fatalf("no process of container %s", id)
	return 0
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	pid := readPIDMaybe(path)
	if pid == 0 {
		t.Fatalf("no pid in %s", path)
	}
	return pid
}

func readPIDMaybe(path string) int {
	data, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func containsDigest(repoDigests []string, digest string) bool {
	for _, d := range repoDigests {
		if strings.HasSuffix(d, "@"+digest) {
			return true
		}
	}
	return false
}

// withCmd returns img's config with the command replaced.
func withCmd(img v1.Image, cmd []string) v1.Config {
	cf, _ := img.ConfigFile()
	cfg := cf.Config
	cfg.Entrypoint, cfg.Cmd = nil, cmd
	return cfg
}

// debianContainerd is the distribution's containerd (1.6 on Debian 12).
const debianContainerd = "/usr/bin/containerd"

// A node that ran its pods on Debian's containerd 1.6 moves to the managed
// containerd 2.x: the new containerd adopts the running pod, whose process
// never stops, and the older containerd is then refused on the state the
// newer one wrote, with an error that says why.
func TestManagedRuntimeUpgrade(t *testing.T) {
	if _, err := os.Stat(debianContainerd); err != nil {
		t.Skipf("no distribution containerd to upgrade from: %v", err)
	}
	if shared.containerd.Config().Major < 2 {
		t.Skipf("the tests run containerd %d.x; the upgrade goes to the managed 2.x", shared.containerd.Config().Major)
	}
	m := startManaged(t, "upgrade", "nle2e5", "10.48.0.0/24", "--port", freePort(t), "--address", "127.0.0.1",
		"--containerd-binary", debianContainerd)
	writeManifest(t, m.manifests, "sleeper.yaml", fmt.Sprintf(sleeperPod, "upgrade"))
	ctx := context.Background()
	var before *runtimeapi.Container
	eventually(t, 90*time.Second, "pod running on containerd 1.6", func() (err error) {
		before, err = runningContainer(ctx, m.rt, "upgrade-e2e", "main")
		return err
	})
	if v, err := m.rt.Version(ctx); err != nil || !strings.HasPrefix(strings.TrimPrefix(v.RuntimeVersion, "v"), "1.") {
		t.Fatalf("runtime version %v (%v), want containerd 1.x", v, err)
	}
	workload := containerPID(t, before.Id)
	if err := m.n.stop(t); err != nil {
		t.Fatalf("stop nodelet on containerd 1.6: %v", err)
	}

	// The same node on the managed containerd (next to the nodelet binary).
	args := slices.DeleteFunc(slices.Clone(m.args), func(a string) bool { return a == "--containerd-binary" || a == debianContainerd })
	n := startNodelet(t, args...)
	eventually(t, 60*time.Second, "containerd 2.x answers", func() error {
		v, err := m.rt.Version(ctx)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(strings.TrimPrefix(v.RuntimeVersion, "v"), "2.") {
			return fmt.Errorf("runtime version %s", v.RuntimeVersion)
		}
		return nil
	})
	waitRuntimeLists(t, n.api(t), adoptLists) // nodelet looks at the pods it found
	after, err := runningContainer(ctx, m.rt, "upgrade-e2e", "main")
	if err != nil || after.Id != before.Id {
		t.Fatalf("after the upgrade: %v (err %v), want container %s still running", after, err, before.Id)
	}
	if !alive(workload) {
		t.Fatalf("workload process %d died in the upgrade", workload)
	}
	if err := n.stop(t); err != nil {
		t.Fatalf("stop nodelet on containerd 2.x: %v", err)
	}

	// Back to 1.6 on the state 2.x wrote: refused, and the pod lives on.
	old := startNodelet(t, m.args...)
	select {
	case <-old.done:
	case <-time.After(60 * time.Second):
		t.Fatal("nodelet with containerd 1.6 on 2.x state did not exit")
	}
	if old.err == nil || !strings.Contains(old.stderr.String(), "last used by containerd 2.x") {
		t.Errorf("nodelet with containerd 1.6 on 2.x state: exit %v, output:\n%s", old.err, old.stderr.String())
	}
	if !alive(workload) {
		t.Errorf("workload process %d died when the older containerd was refused", workload)
	}
}
