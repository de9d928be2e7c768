package podruntime

import (
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
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// rroVolumes records what it was told of the runtime's RRO support and
// refuses Enabled without it, as volume.Manager does.
type rroVolumes struct {
	mu   sync.Mutex
	told []bool
}

func (r *rroVolumes) Mounts(_ *v1.Pod, c *v1.Container, _ map[string]string, supportsRRO bool) ([]*runtimeapi.Mount, error) {
	r.mu.Lock()
	r.told = append(r.told, supportsRRO)
	r.mu.Unlock()
	for _, vm := range c.VolumeMounts {
		if !supportsRRO && vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly == v1.RecursiveReadOnlyEnabled {
			return nil, &configError{errString("failed to resolve recursive read-only mode: not supported by the runtime")}
		}
	}
	return nil, nil
}

// setup is what a volumes hook over r hands: its mounts.
func (r *rroVolumes) setup() podsetup.Setup {
	return podsetup.Setup{Containers: []podsetup.Contributor{podsetup.ContributorFunc(func(c podsetup.Container) (podsetup.Additions, error) {
		mounts, err := r.Mounts(c.Pod, c.Container, c.Env, c.RecursiveReadOnlyMounts)
		return podsetup.Additions{Mounts: mounts}, err
	})}}
}

type errString string

func (e errString) Error() string { return string(e) }

func rroPod() *v1.Pod {
	pod := testPod()
	pod.Spec.Volumes = []v1.Volume{{Name: "mnt", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "mnt", MountPath: "/mnt-rro", ReadOnly: true, RecursiveReadOnly: ptr.To(v1.RecursiveReadOnlyEnabled)},
		{Name: "mnt", MountPath: "/mnt-ro", ReadOnly: true},
		{Name: "mnt", MountPath: "/mnt-rw"},
	}
	return pod
}

// The runtime handler's RRO support, read from RuntimeStatus once for
// the pod, reaches the mounts and the containers' volumeMounts status;
// without it, an Enabled mount keeps the container from being created.
func TestRecursiveReadOnlyFromRuntimeStatus(t *testing.T) {
	for _, supported := range []bool{true, false} {
		clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
		log := slog.New(slog.DiscardHandler)
		rs := &usernsRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
		rs.handlers = []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: supported}}}
		is := critest.NewFakeImageService()
		is.SetFakeImageSize(1)
		c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), log)
		vols := &rroVolumes{}
		m := New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil),
			Recorder: events.New(100, clk, log), RuntimeFeatures: cri.NewHandlerFeatures(c, clk, log)})

		pod := rroPod()
		st, _ := m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: vols.setup()})
		if len(vols.told) == 0 || vols.told[0] != supported {
			t.Errorf("supported %v: volumes told %v", supported, vols.told)
		}
		var statusCalls int
		for _, call := range rs.GetCalls() {
			if call == "Status" {
				statusCalls++
			}
		}
		if statusCalls != 1 {
			t.Errorf("supported %v: %d RuntimeStatus calls in one sync, want 1", supported, statusCalls)
		}
		if len(st.ContainerStatuses) != 1 {
			t.Fatalf("supported %v: container statuses %v", supported, st.ContainerStatuses)
		}
		cs := st.ContainerStatuses[0]
		var got []string
		for _, vm := range cs.VolumeMounts {
			got = append(got, vm.MountPath+"="+string(ptr.Deref(vm.RecursiveReadOnly, "<nil>")))
		}
		want := "/mnt-rro=Enabled /mnt-ro=Disabled /mnt-rw=<nil>"
		if !supported {
			want = "/mnt-rro=Disabled /mnt-ro=Disabled /mnt-rw=<nil>"
			if w := cs.State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" ||
				!strings.Contains(w.Message, "failed to resolve recursive read-only mode") {
				t.Errorf("unsupported: state %+v, want CreateContainerConfigError", cs.State)
			}
		} else if cs.State.Running == nil {
			t.Errorf("supported: state %+v, want running", cs.State)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("supported %v: volumeMounts %s, want %s", supported, strings.Join(got, " "), want)
		}
	}
}

// A container given CDI devices (a DRA claim's) on a runtime that would
// drop them without a word (containerd 1.6: its verbose config has no
// enableCDI) is not created: CreateContainerConfigError says why. On a
// runtime that injects them the devices reach the container's config.
func TestCDIDevicesNeedARuntimeThatInjectsThem(t *testing.T) {
	for name, tc := range map[string]struct {
		config string
		want   string // the waiting message's part; "" for created
	}{
		"containerd 1.6": {`{"containerdRootDir":"/var/lib/containerd","sandboxImage":"registry.k8s.io/pause:3.6"}`,
			"CDI devices vendor.com/gpu=claim-0: the container runtime does not inject CDI devices: containerd's CRI config has no enable_cdi"},
		"containerd 2.x": {`{"containerdRootDir":"/var/lib/containerd","enableCDI":true}`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			log := slog.New(slog.DiscardHandler)
			rs := &usernsRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), info: map[string]string{"config": tc.config}}
			is := critest.NewFakeImageService()
			is.SetFakeImageSize(1)
			c := cri.New(rs, is, "fake", cri.DefaultTimeouts(), log)
			m := New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: clk, Log: log, Status: statusmanager.New(nil),
				Recorder: events.New(100, clk, log), RuntimeFeatures: cri.NewHandlerFeatures(c, clk, log)})
			pod := testPod()
			pod.Spec.Containers = pod.Spec.Containers[:1]
			setup := podsetup.Setup{Containers: []podsetup.Contributor{podsetup.ContributorFunc(func(podsetup.Container) (podsetup.Additions, error) {
				return podsetup.Additions{CDIDevices: []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=claim-0"}}}, nil
			})}}
			st, _ := m.syncPod(t.Context(), podworker.SyncRequest{Pod: pod, Setup: setup})
			if len(st.ContainerStatuses) != 1 {
				t.Fatalf("container statuses %v", st.ContainerStatuses)
			}
			cs := st.ContainerStatuses[0]
			rs.mu.Lock()
			created := rs.containers
			rs.mu.Unlock()
			if tc.want != "" {
				if w := cs.State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, tc.want) {
					t.Errorf("state %+v, want CreateContainerConfigError saying %q", cs.State, tc.want)
				}
				if len(created) != 0 {
					t.Errorf("created %d containers without their devices", len(created))
				}
				return
			}
			if cs.State.Running == nil || len(created) != 1 || len(created[0].GetCDIDevices()) != 1 || created[0].GetCDIDevices()[0].GetName() != "vendor.com/gpu=claim-0" {
				t.Errorf("state %+v, created %v: want running with its CDI device", cs.State, created)
			}
		})
	}
}
