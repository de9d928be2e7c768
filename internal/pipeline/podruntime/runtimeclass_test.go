package podruntime

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podnet"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// classes is a RuntimeClass lister: name → handler; a name it lacks is
// the API's NotFound, as the kubelet's lister gives.
type classes map[string]string

func (c classes) LookupRuntimeHandler(name string) (string, error) {
	if h, ok := c[name]; ok {
		return h, nil
	}
	return "", apierrors.NewNotFound(schema.GroupResource{Group: "node.k8s.io", Resource: "runtimeclass"}, name)
}

func TestRuntimeHandlerOfPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		class   *string
		classes RuntimeClasses
		want    string
		wantErr string
	}{
		{name: "no class, standalone", want: ""},
		{name: "empty class, standalone", class: ptr.To(""), want: ""},
		{name: "no class, cluster", classes: classes{"gvisor": "runsc"}, want: ""},
		{name: "class, cluster", class: ptr.To("gvisor"), classes: classes{"gvisor": "runsc"}, want: "runsc"},
		{name: "class naming the default handler", class: ptr.To("default"), classes: classes{"default": ""}, want: ""},
		{name: "class, standalone", class: ptr.To("gvisor"), wantErr: `RuntimeClass "gvisor": RuntimeClasses are read from the API server, and nodelet runs without one (standalone)`},
		{name: "class not found", class: ptr.To("kata"), classes: classes{"gvisor": "runsc"}, wantErr: `runtimeclass.node.k8s.io "kata" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(nil, Options{}, Deps{RuntimeClasses: tc.classes})
			pod := testPod()
			pod.Spec.RuntimeClassName = tc.class
			got, err := m.runtimeHandler(pod)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("handler %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// classFixture is a manager over the cri-api fakes with an event
// recorder, and the RuntimeClasses given.
func classFixture(t *testing.T, rc RuntimeClasses) (*Manager, *usernsRuntime, *events.Recorder) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	log := slog.New(slog.DiscardHandler)
	rs := &usernsRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
	is := critest.NewFakeImageService()
	is.SetFakeImageSize(1)
	c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), log)
	rec := events.New(100, clk, log)
	m := New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil),
		Recorder: rec, RuntimeFeatures: cri.NewHandlerFeatures(c, clk, log), RuntimeClasses: rc})
	return m, rs, rec
}

func TestSandboxRunsWithTheRuntimeClassHandler(t *testing.T) {
	m, rs, _ := classFixture(t, classes{"second": "runc-e2e"})
	pod := testPod()
	pod.Spec.RuntimeClassName = ptr.To("second")
	st, err := m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	rs.Lock()
	var handlers []string
	for _, sb := range rs.Sandboxes {
		handlers = append(handlers, sb.RuntimeHandler)
	}
	rs.Unlock()
	if strings.Join(handlers, ",") != "runc-e2e" {
		t.Errorf("sandbox handlers %v, want [runc-e2e]", handlers)
	}
	if st.Phase != v1.PodRunning {
		t.Errorf("phase %s", st.Phase)
	}
}

// A pod whose RuntimeClass cannot be resolved, or whose handler the
// runtime lacks, gets no sandbox on the default handler: the kubelet's
// FailedCreatePodSandBox event, a pending status whose containers say why,
// and nothing created.
func TestUnresolvableRuntimeClassRunsNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		classes  RuntimeClasses
		inject   error
		wantCall string
		want     string
	}{
		{name: "standalone", want: `Failed to create pod sandbox: RuntimeClass "gvisor": RuntimeClasses are read from the API server`},
		{name: "not found", classes: classes{}, want: `Failed to create pod sandbox: runtimeclass.node.k8s.io "gvisor" not found`},
		{name: "handler the runtime lacks", classes: classes{"gvisor": "runsc"}, wantCall: "RunPodSandbox",
			inject: errors.New(`failed to get sandbox runtime: no runtime for "runsc" is configured`),
			want:   `no runtime for "runsc" is configured`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, rs, rec := classFixture(t, tc.classes)
			if tc.inject != nil {
				rs.InjectError("RunPodSandbox", tc.inject)
			}
			pod := testPod()
			pod.Spec.RuntimeClassName = ptr.To("gvisor")
			st, err := m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod})
			if err == nil {
				t.Fatal("sync succeeded")
			}
			var calls []string
			for _, c := range rs.GetCalls() {
				if c == "RunPodSandbox" || c == "CreateContainer" || c == "StartContainer" {
					calls = append(calls, c)
				}
			}
			if strings.Join(calls, ",") != tc.wantCall {
				t.Errorf("runtime calls %v, want %q", calls, tc.wantCall)
			}
			rs.Lock()
			n := len(rs.Sandboxes)
			rs.Unlock()
			if n != 0 {
				t.Errorf("%d sandboxes exist", n)
			}
			var evs []events.Event
			for _, e := range rec.ForPod(pod.UID) {
				if e.Type == v1.EventTypeWarning && e.Reason != podnet.ReasonDNSConfigForming && e.Reason != podnet.ReasonMissingClusterDNS {
					evs = append(evs, e)
				}
			}
			if len(evs) != 1 || evs[0].Reason != "FailedCreatePodSandBox" || evs[0].Type != v1.EventTypeWarning ||
				!strings.Contains(evs[0].Message, tc.want) {
				t.Errorf("events %+v, want one FailedCreatePodSandBox with %q", evs, tc.want)
			}
			if st.Phase != v1.PodPending || len(st.ContainerStatuses) != 2 {
				t.Fatalf("status %+v", st)
			}
			for _, cs := range st.ContainerStatuses {
				if w := cs.State.Waiting; w == nil || w.Reason != "ContainerCreating" || !strings.Contains(w.Message, tc.want) {
					t.Errorf("container %s state %+v", cs.Name, cs.State)
				}
			}
		})
	}
}

// Recursive read-only mounts are asked of the pod's own handler, as the
// kubelet's runtimeClassSupportsRecursiveReadOnlyMounts.
func TestRecursiveReadOnlyAsksThePodsHandler(t *testing.T) {
	m, rs, _ := classFixture(t, classes{"rro": "rro-handler"})
	rs.handlers = []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: false}},
		{Name: "rro-handler", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
	}
	for _, tc := range []struct {
		class *string
		want  bool
	}{{nil, false}, {ptr.To("rro"), true}, {ptr.To("missing"), false}} {
		pod := testPod()
		pod.Spec.RuntimeClassName = tc.class
		if got := m.supportsRRO(t.Context(), pod); got != tc.want {
			t.Errorf("class %v: supportsRRO %v, want %v", ptr.Deref(tc.class, "<nil>"), got, tc.want)
		}
	}
}

// The hooks' checks before a sandbox are asked about the handler it will
// run with (the user namespace check asks the runtime about that handler,
// as the kubelet asks about the pod's own).
func TestSandboxChecksGetTheHandler(t *testing.T) {
	m, _, _ := classFixture(t, classes{"kata": "kata-handler"})
	for _, tc := range []struct {
		class *string
		want  string
	}{{nil, ""}, {ptr.To("kata"), "kata-handler"}} {
		var got []string
		check := func(_ context.Context, handler string) error { got = append(got, handler); return nil }
		pod := testPod()
		pod.UID = types.UID("uid-" + ptr.Deref(tc.class, "none"))
		pod.Spec.RuntimeClassName = tc.class
		if _, err := m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: podsetup.Setup{SandboxChecks: []podsetup.Check{check}}}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("class %v: checks asked about %q, want [%q]", ptr.Deref(tc.class, "<nil>"), got, tc.want)
		}
	}
}
