package podresources

import (
	"context"
	"fmt"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// Cgroups is a pod cgroup manager: Manager on cgroup v1, UnifiedManager
// on cgroup v2.
type Cgroups interface {
	EnsureQoS() error
	EnsurePod(pod *v1.Pod) (cgroupParent string, err error)
	CgroupParent(pod *v1.Pod) string
	RemovePod(podUID types.UID, qos v1.PodQOSClass) error
	Pods() ([]types.UID, error)
	// ContainerUnified is the CRI Unified map of a container (cgroup v2
	// only, nil on v1).
	ContainerUnified(pod *v1.Pod, c *v1.Container) map[string]string
	// PodCgroupNow and SetPodCgroup read and write the values of a pod's
	// cgroup an in-place resize changes.
	PodCgroupNow(pod *v1.Pod) (resize.PodCgroup, error)
	SetPodCgroup(pod *v1.Pod, s resize.Step) error
	// PodMemoryUsage is the pod cgroup's memory usage in bytes, what a
	// resize's memory limit decrease is checked against.
	PodMemoryUsage(pod *v1.Pod) (uint64, error)
}

// Options choose and configure the pod cgroup manager.
type Options struct {
	// MountDir is where cgroups are mounted ("/sys/fs/cgroup").
	MountDir string
	// CgroupRoot is the cgroup the QoS hierarchy is made in (see
	// ParseCgroupRoot); it must exist. Nil is the root cgroup.
	CgroupRoot CgroupRoot
	// Driver is cgroupfs or systemd.
	Driver Driver
	// Kubepods are the QoS hierarchy top cgroup's limits.
	Kubepods KubepodsLimits
	// PodPidsLimit > 0 is every pod's pids.max (cgroup v2 only).
	PodPidsLimit int64
	// MemoryQoS, when set, is the kubelet's MemoryQoS (cgroup v2 only).
	MemoryQoS *MemoryQoS
	// ConnectSystemd connects to systemd for the systemd driver; nil is
	// the D-Bus connection (ConnectSystemd).
	ConnectSystemd func(context.Context) (Systemd, error)
	Log            *slog.Logger
}

// Open detects the cgroup version of opts.MountDir as runc does (statfs: a
// cgroup2 mount is v2, anything else v1 or hybrid) and returns the
// manager for it and the driver. It fails, saying why, where nodelet
// cannot manage pod cgroups: the systemd driver on cgroup v1, or systemd
// not reachable. It creates nothing (see EnsureQoS).
func Open(ctx context.Context, opts Options) (Cgroups, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Driver == "" {
		opts.Driver = DriverCgroupfs
	}
	if opts.Driver != DriverCgroupfs && opts.Driver != DriverSystemd {
		return nil, fmt.Errorf("cgroup driver %q: want cgroupfs or systemd", opts.Driver)
	}
	version, err := cgroupmount.Version(opts.MountDir)
	if err != nil {
		return nil, err
	}
	if version == 1 {
		if opts.Driver == DriverSystemd {
			return nil, fmt.Errorf("cgroup driver systemd on cgroup v1 (%s) is not implemented by nodelet: use cgroupDriver cgroupfs (and the runtime's SystemdCgroup = false), or cgroupsPerQOS false to run without pod cgroups", opts.MountDir)
		}
		if opts.MemoryQoS != nil {
			opts.Log.Warn("MemoryQoS needs cgroup v2; not enforced on this cgroup v1 host", "root", opts.MountDir)
		}
		if opts.PodPidsLimit > 0 {
			opts.Log.Warn("podPidsLimit is enforced on cgroup v2 only; not on this cgroup v1 host", "root", opts.MountDir, "podPidsLimit", opts.PodPidsLimit)
		}
		m := NewManager(opts.MountDir, opts.CgroupRoot, opts.Log)
		m.kubepods = opts.Kubepods
		return m, nil
	}
	uopts := UnifiedOptions{Driver: opts.Driver, CgroupRoot: opts.CgroupRoot, Kubepods: opts.Kubepods, PodPidsLimit: opts.PodPidsLimit, MemoryQoS: opts.MemoryQoS, Log: opts.Log}
	if opts.Driver == DriverSystemd {
		connect := opts.ConnectSystemd
		if connect == nil {
			connect = func(ctx context.Context) (Systemd, error) { return ConnectSystemd(ctx) }
		}
		if uopts.Systemd, err = connect(ctx); err != nil {
			return nil, err
		}
	}
	return NewUnified(OSFS(opts.MountDir), uopts)
}
