package podresources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

type fakeRuntimeConfig struct {
	resp *runtimeapi.RuntimeConfigResponse
	err  error
}

func (f fakeRuntimeConfig) RuntimeConfig(context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return f.resp, f.err
}

type recordedEvents []string

func (r *recordedEvents) NodeEvent(node, eventType, reason, message string) {
	*r = append(*r, node+" "+eventType+" "+reason+": "+message)
}

type fakeManager struct{ ensureErr error }

func (f fakeManager) EnsureQoS() error                                        { return f.ensureErr }
func (fakeManager) EnsurePod(*v1.Pod) (string, error)                         { return "", nil }
func (fakeManager) CgroupParent(*v1.Pod) string                               { return "" }
func (fakeManager) RemovePod(types.UID, v1.PodQOSClass) error                 { return nil }
func (fakeManager) Pods() ([]types.UID, error)                                { return nil, nil }
func (fakeManager) ContainerUnified(*v1.Pod, *v1.Container) map[string]string { return nil }
func (fakeManager) PodCgroupNow(*v1.Pod) (resize.PodCgroup, error)            { return resize.PodCgroup{}, nil }
func (fakeManager) SetPodCgroup(*v1.Pod, resize.Step) error                   { return nil }
func (fakeManager) PodMemoryUsage(*v1.Pod) (uint64, error)                    { return 0, nil }

func linuxDriver(d runtimeapi.CgroupDriver) *runtimeapi.RuntimeConfigResponse {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}
}

// The driver is the runtime's when it tells it, else the configured one.
func TestSetupDriver(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rt         fakeRuntimeConfig
		configured string
		want       Driver
	}{
		{"containerd 1.6: Unimplemented", fakeRuntimeConfig{err: fmt.Errorf("get runtime config: %w", cri.ErrUnimplemented)}, "systemd", "systemd"},
		{"runtime says systemd", fakeRuntimeConfig{resp: linuxDriver(runtimeapi.CgroupDriver_SYSTEMD)}, "cgroupfs", "systemd"},
		{"runtime says cgroupfs", fakeRuntimeConfig{resp: linuxDriver(runtimeapi.CgroupDriver_CGROUPFS)}, "systemd", "cgroupfs"},
		{"no Linux part", fakeRuntimeConfig{resp: &runtimeapi.RuntimeConfigResponse{}}, "cgroupfs", "cgroupfs"},
		{"other error", fakeRuntimeConfig{err: errors.New("boom")}, "cgroupfs", "cgroupfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Options
			var events recordedEvents
			cg, err := Setup(SetupConfig{CgroupsPerQOS: true, MountDir: "/sys/fs/cgroup", Driver: tc.configured,
				MemoryQoS: true, MemoryThrottlingFactor: 0.9, NodeAllocatableMemory: 1 << 30, Runtime: tc.rt, Events: &events,
				Open: func(_ context.Context, o Options) (Cgroups, error) {
					got = o
					return fakeManager{}, nil
				}})
			if err != nil || cg == nil {
				t.Fatalf("%v %v", cg, err)
			}
			if got.Driver != tc.want || got.MountDir != "/sys/fs/cgroup" || got.MemoryQoS == nil || *got.MemoryQoS != (MemoryQoS{0.9, 1 << 30, 0}) {
				t.Errorf("options %+v, want driver %s", got, tc.want)
			}
			if len(events) != 0 {
				t.Errorf("events %v", events)
			}
		})
	}
}

// Pod cgroups that cannot be managed stop nodelet with the reason, an
// error in the log and a Warning event on the node; cgroupsPerQOS false
// runs without them, said in the log.
func TestSetupNeverSilentlyDropsPodCgroups(t *testing.T) {
	unimplemented := fakeRuntimeConfig{err: cri.ErrUnimplemented}
	missing := fmt.Errorf("cgroup v2: controller %q is not available at the root: %w", "memory", ErrControllerMissing)
	for _, tc := range []struct {
		name string
		open func(context.Context, Options) (Cgroups, error)
	}{
		{"open fails", func(context.Context, Options) (Cgroups, error) {
			return nil, errors.New("cgroup driver systemd: systemd is not running on this host")
		}},
		{"EnsureQoS fails", func(context.Context, Options) (Cgroups, error) { return fakeManager{ensureErr: missing}, nil }},
		{"systemd on this cgroup v1 host", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			var events recordedEvents
			cg, err := Setup(SetupConfig{CgroupsPerQOS: true, MountDir: t.TempDir(), Driver: "systemd", NodeName: "node-a",
				Runtime: unimplemented, Events: &events, Log: slog.New(slog.NewTextHandler(&logged, nil)), Open: tc.open})
			if err == nil || cg != nil {
				t.Fatalf("started anyway: %v %v", cg, err)
			}
			if !strings.Contains(err.Error(), "--cgroups-per-qos=false") {
				t.Errorf("error does not name the way out: %v", err)
			}
			if !strings.Contains(logged.String(), "level=ERROR") {
				t.Errorf("no error logged: %s", logged.String())
			}
			if len(events) != 1 || !strings.HasPrefix(events[0], "node-a Warning FailedToCreatePodCgroups") {
				t.Errorf("events %v", events)
			}
		})
	}
	for _, c := range []SetupConfig{{CgroupsPerQOS: false, MountDir: "/sys/fs/cgroup"}, {CgroupsPerQOS: true, MountDir: ""}} {
		var logged bytes.Buffer
		c.Log = slog.New(slog.NewTextHandler(&logged, nil))
		c.Open = func(context.Context, Options) (Cgroups, error) {
			t.Error("opened with pod cgroups off")
			return nil, nil
		}
		cg, err := Setup(c)
		if cg != nil || err != nil || !strings.Contains(logged.String(), "without QoS and pod cgroups") {
			t.Errorf("%+v: %v %v %s", c, cg, err, logged.String())
		}
	}
}

// The cgroupRoot is checked again with the driver in use, which the
// runtime may choose: a name fit for cgroupfs only stops nodelet with the
// reason and an event, before anything is opened; it reaches Open parsed.
func TestSetupChecksCgroupRootForTheDriver(t *testing.T) {
	systemd := fakeRuntimeConfig{resp: linuxDriver(runtimeapi.CgroupDriver_SYSTEMD)}
	var events recordedEvents
	cg, err := Setup(SetupConfig{CgroupsPerQOS: true, MountDir: "/sys/fs/cgroup", CgroupRoot: "/system.slice", Driver: "cgroupfs",
		NodeName: "node-a", Runtime: systemd, Events: &events,
		Open: func(context.Context, Options) (Cgroups, error) {
			t.Error("opened with a cgroupRoot the driver cannot name")
			return fakeManager{}, nil
		}})
	if err == nil || cg != nil || !strings.Contains(err.Error(), "system.slice.slice") {
		t.Errorf("Setup: %v %v, want the slice name it would make", cg, err)
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "node-a Warning FailedToCreatePodCgroups") {
		t.Errorf("events %v", events)
	}
	var got Options
	if _, err := Setup(SetupConfig{CgroupsPerQOS: true, MountDir: "/sys/fs/cgroup", CgroupRoot: "/nodelet-a", Runtime: systemd,
		Open: func(_ context.Context, o Options) (Cgroups, error) { got = o; return fakeManager{}, nil }}); err != nil {
		t.Fatal(err)
	}
	if got.Driver != DriverSystemd || got.CgroupRoot.String() != "/nodelet-a" {
		t.Errorf("options %+v", got)
	}
	if _, err := Setup(SetupConfig{CgroupsPerQOS: true, MountDir: "/sys/fs/cgroup",
		Open: func(_ context.Context, o Options) (Cgroups, error) { got = o; return fakeManager{}, nil }}); err != nil || len(got.CgroupRoot) != 0 {
		t.Errorf("no cgroupRoot: %v, %v; want the root cgroup", got.CgroupRoot, err)
	}
}
