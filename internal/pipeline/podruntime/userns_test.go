package podruntime

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/node/podhooks"
	"github.com/nodelet/nodelet/internal/node/userns"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// usernsRuntime is the cri-api fake with what it lacks for user
// namespaces: the runtime handlers of its status (none, as containerd 1.6,
// until set) and a record of the container configs it was given.
type usernsRuntime struct {
	*critest.FakeRuntimeService
	mu         sync.Mutex
	handlers   []*runtimeapi.RuntimeHandler
	info       map[string]string // the verbose status's info
	containers []*runtimeapi.ContainerConfig
}

func (r *usernsRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	resp, err := r.FakeRuntimeService.Status(ctx, verbose)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	resp.RuntimeHandlers = r.handlers
	if verbose && r.info != nil {
		resp.Info = r.info
	}
	return resp, nil
}

func (r *usernsRuntime) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.containers = append(r.containers, cfg)
	r.mu.Unlock()
	return r.FakeRuntimeService.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
}

func (r *usernsRuntime) supports(yes bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: yes}}}
}

// oneVolume mounts one volume into every container.
type oneVolume struct{}

func (oneVolume) ContributeContainer(podsetup.Container) (podsetup.Additions, error) {
	return podsetup.Additions{Mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/nodelet/pods/uid-1/volumes/data"}}}, nil
}

type usernsFixture struct {
	m      *Manager
	rs     *usernsRuntime
	userns *userns.Manager
	events *events.Recorder
	wired  bool
}

// sync syncs pod with what its hooks set up, as the pod workers do: its
// user namespace (when wired) and one volume.
func (f *usernsFixture) sync(pod *v1.Pod) (v1.PodStatus, error) {
	ctx := context.Background()
	setup := podsetup.Setup{Containers: []podsetup.Contributor{oneVolume{}}}
	if f.wired {
		us, err := podhooks.UserNamespaces{Manager: f.userns, Recorder: f.events}.Prepare(ctx, pod)
		if err != nil {
			return v1.PodStatus{}, err
		}
		setup = podsetup.Merge(us, setup)
	}
	return f.m.syncPod(ctx, podworker.SyncRequest{Pod: pod, Setup: setup})
}

// newUsernsFixture wires a Manager, as the agent does, to the cri-api
// fakes and a user namespace manager over them; wired false leaves the
// user namespaces out of the runtime manager.
func newUsernsFixture(t *testing.T, wired bool) *usernsFixture {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	log := slog.New(slog.DiscardHandler)
	rs := &usernsRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), log)
	f := &usernsFixture{rs: rs, events: events.New(100, clk, log), wired: wired}
	f.userns = userns.New(userns.Options{PodsDir: t.TempDir(), MaxPods: 110}, userns.Deps{Runtime: c, Log: log})
	f.m = New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil), Recorder: f.events})
	return f
}

func usernsPod() *v1.Pod {
	pod := testPod()
	pod.Spec.HostUsers = ptr.To(false)
	return pod
}

// wantMapping checks ids map container 0 to host 65536, 65536 long: the
// first block of the default range.
func wantMapping(t *testing.T, what string, ids []*runtimeapi.IDMapping) {
	t.Helper()
	if len(ids) != 1 || ids[0].HostId != 65536 || ids[0].ContainerId != 0 || ids[0].Length != 65536 {
		t.Errorf("%s: mappings %v, want container 0 → host 65536, 65536 IDs", what, ids)
	}
}

func podEvents(rec *events.Recorder, pod *v1.Pod) string {
	var out []string
	for _, e := range rec.ForPod(pod.UID) {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, "\n")
}

// A pod with hostUsers: false gets its block in the sandbox's and every
// container's namespace options, and every mount carries the mappings (an
// idmapped mount), as the kubelet sends them.
func TestUserNamespaceInSandboxAndContainers(t *testing.T) {
	f := newUsernsFixture(t, true)
	f.rs.supports(true)
	pod := usernsPod()
	if _, err := f.userns.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	st, err := f.sync(pod)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != v1.PodRunning {
		t.Errorf("phase %s", st.Phase)
	}
	f.rs.Lock()
	var sandboxNS *runtimeapi.UserNamespace
	for _, sb := range f.rs.Sandboxes {
		sandboxNS = sb.GetLinux().GetNamespaces().GetOptions().GetUsernsOptions()
	}
	f.rs.Unlock()
	if sandboxNS.GetMode() != runtimeapi.NamespaceMode_POD {
		t.Fatalf("sandbox user namespace %v, want mode POD", sandboxNS)
	}
	wantMapping(t, "sandbox uids", sandboxNS.GetUids())
	wantMapping(t, "sandbox gids", sandboxNS.GetGids())
	if len(f.rs.containers) != 2 {
		t.Fatalf("%d containers created", len(f.rs.containers))
	}
	for _, cfg := range f.rs.containers {
		name := cfg.GetMetadata().GetName()
		ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
		if ns.GetMode() != runtimeapi.NamespaceMode_POD {
			t.Errorf("%s: user namespace %v", name, ns)
		}
		wantMapping(t, name+" uids", ns.GetUids())
		wantMapping(t, name+" gids", ns.GetGids())
		if len(cfg.Mounts) != 1 {
			t.Fatalf("%s: mounts %v", name, cfg.Mounts)
		}
		wantMapping(t, name+" mount uids", cfg.Mounts[0].UidMappings)
		wantMapping(t, name+" mount gids", cfg.Mounts[0].GidMappings)
	}
}

// A pod on the host's user namespace gets no user namespace option and no
// mount mappings, whatever the runtime supports.
func TestHostUsersPodHasNoUserNamespace(t *testing.T) {
	f := newUsernsFixture(t, true)
	f.rs.supports(true)
	if _, err := f.sync(testPod()); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range f.rs.containers {
		if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); ns != nil {
			t.Errorf("user namespace %v", ns)
		}
		if cfg.Mounts[0].UidMappings != nil || cfg.Mounts[0].GidMappings != nil {
			t.Errorf("mount mappings %v", cfg.Mounts[0])
		}
	}
}

// The runtime is asked again before the sandbox is made: one that no
// longer supports user namespaces (replaced by containerd 1.6, which lists
// no handlers and would run the pod on the host's) gets no sandbox, and
// the pod stays pending with the kubelet's event saying why.
func TestUserNamespaceRefusedWhenTheRuntimeCannot(t *testing.T) {
	f := newUsernsFixture(t, true)
	f.rs.supports(true)
	pod := usernsPod()
	if _, err := f.userns.Allocate(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	f.rs.Lock()
	f.rs.handlers = nil
	f.rs.Called = nil
	f.rs.Unlock()
	st, err := f.sync(pod)
	const want = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	f.rs.Lock()
	called := strings.Join(f.rs.Called, ",")
	f.rs.Unlock()
	if strings.Contains(called, "RunPodSandbox") {
		t.Errorf("sandbox created: %s", called)
	}
	if st.Phase != v1.PodPending || st.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("status %+v", st)
	}
	got := podEvents(f.events, pod)
	if !strings.Contains(got, "FailedCreatePodSandBox: Failed to create pod sandbox: "+want) {
		t.Errorf("events:\n%s", got)
	}
}

// Without a user namespace manager a pod with hostUsers: false is refused
// as before, with an event.
func TestUserNamespaceNotConfigured(t *testing.T) {
	f := newUsernsFixture(t, false)
	pod := usernsPod()
	_, err := f.sync(pod)
	if err == nil || !strings.Contains(err.Error(), "user namespaces are not configured on this node") {
		t.Fatalf("err = %v", err)
	}
	if got := podEvents(f.events, pod); !strings.Contains(got, "FailedCreatePodSandBox: Failed to create pod sandbox: can't set `spec.hostUsers: false`") {
		t.Errorf("events:\n%s", got)
	}
}

// A hostname that cannot be made (an FQDN over 64 bytes) fails the sandbox
// with the kubelet's event, before any runtime call.
func TestSandboxConfigErrorEvent(t *testing.T) {
	f := newUsernsFixture(t, false)
	pod := testPod()
	pod.Spec.Hostname = strings.Repeat("h", 40)
	pod.Spec.Subdomain = "sub"
	pod.Spec.SetHostnameAsFQDN = ptr.To(true)
	if _, err := f.sync(pod); err == nil {
		t.Fatal("sync succeeded")
	}
	const want = "FailedCreatePodSandBox: Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN "
	if got := podEvents(f.events, pod); !strings.Contains(got, want) {
		t.Errorf("events:\n%s\nwant %q", got, want)
	}
	f.rs.Lock()
	defer f.rs.Unlock()
	if called := strings.Join(f.rs.Called, ","); strings.Contains(called, "RunPodSandbox") {
		t.Errorf("sandbox created: %s", called)
	}
}
