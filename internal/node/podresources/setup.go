package podresources

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// setupTimeout bounds asking the runtime for its cgroup driver,
// connecting to systemd and creating the QoS cgroups at start.
const setupTimeout = 30 * time.Second

// RuntimeConfigGetter is what choosing the cgroup driver needs of the
// runtime (cri.Client).
type RuntimeConfigGetter interface {
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
}

// NodeEvents records events about the node (events.Recorder).
type NodeEvents interface {
	NodeEvent(node, eventType, reason, message string)
}

// SetupConfig is what Setup needs: the settings (cgroupsPerQOS,
// cgroupDriver, podPidsLimit, MemoryQoS) and the parts it talks to.
type SetupConfig struct {
	// CgroupsPerQOS false: pods run without QoS and pod cgroups.
	CgroupsPerQOS bool
	// MountDir is where cgroups are mounted; "" is as CgroupsPerQOS
	// false.
	MountDir string
	// CgroupRoot is the cgroup the QoS hierarchy is made in (cgroupRoot,
	// --cgroup-root, see ParseCgroupRoot); "" is DefaultCgroupRoot. It
	// must exist.
	CgroupRoot string
	// Driver is the configured cgroup driver (the runtime's wins).
	Driver string
	// Kubepods are the QoS hierarchy top cgroup's limits: the node's
	// allocatable resources for pods.
	Kubepods KubepodsLimits
	// PodPidsLimit > 0 is each pod's pids.max.
	PodPidsLimit int64
	// MemoryQoS is the feature gate; MemoryThrottlingFactor and
	// NodeAllocatableMemory its settings.
	MemoryQoS              bool
	MemoryThrottlingFactor float64
	NodeAllocatableMemory  int64
	NodeName               string
	Runtime                RuntimeConfigGetter
	Events                 NodeEvents
	Log                    *slog.Logger
	// Open is Open unless a test replaces it.
	Open func(context.Context, Options) (Cgroups, error)
}

// Setup is the pod cgroup manager nodelet runs with, its QoS cgroups
// ensured in the cgroupRoot, or nil when CgroupsPerQOS is false (or
// MountDir ""), which the log says. The driver is the runtime's when its
// RuntimeConfig tells it, as the kubelet takes it
// (KubeletCgroupDriverFromCRI), else the configured one. Where the cgroups
// cannot be managed (a controller missing, systemd unreachable, the
// systemd driver on cgroup v1, a cgroupRoot that does not exist or is no
// name for the driver...) it logs an error, records a Warning event on the
// node and fails: nodelet does not start, as the kubelet does not, rather
// than run pods without their limits.
func Setup(c SetupConfig) (Cgroups, error) {
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !c.CgroupsPerQOS || c.MountDir == "" {
		log.Warn("pods run without QoS and pod cgroups, as configured", "cgroupsPerQOS", c.CgroupsPerQOS, "cgroupMountDir", c.MountDir)
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	driver := runtimeCgroupDriver(ctx, c.Runtime, c.Driver, log)
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	// Checked again with the driver in use: the runtime's may not be the
	// configured one the settings were checked with.
	root, err := ParseCgroupRoot(c.CgroupRoot, Driver(driver))
	opts := Options{MountDir: c.MountDir, CgroupRoot: root, Driver: Driver(driver), Kubepods: c.Kubepods, PodPidsLimit: c.PodPidsLimit, Log: log}
	if c.MemoryQoS {
		opts.MemoryQoS = &MemoryQoS{ThrottlingFactor: c.MemoryThrottlingFactor, NodeAllocatableMemory: c.NodeAllocatableMemory}
	}
	open := c.Open
	if open == nil {
		open = Open
	}
	var cg Cgroups
	if err == nil {
		cg, err = open(ctx, opts)
	}
	if err == nil {
		err = cg.EnsureQoS()
	}
	if err != nil {
		log.Error("cannot manage pod cgroups; not starting", "mountDir", c.MountDir, "cgroupRoot", c.CgroupRoot, "driver", driver, "err", err)
		if c.Events != nil {
			c.Events.NodeEvent(c.NodeName, v1.EventTypeWarning, "FailedToCreatePodCgroups", err.Error())
		}
		return nil, fmt.Errorf("pod cgroups (cgroupsPerQOS, cgroup driver %s): %w; with cgroupsPerQOS: false (--cgroups-per-qos=false) pods run without them", driver, err)
	}
	return cg, nil
}

// runtimeCgroupDriver is the runtime's cgroup driver when its
// RuntimeConfig tells it, else configured: containerd 1.6 answers
// Unimplemented, and a runtime may leave the Linux part out.
func runtimeCgroupDriver(ctx context.Context, rt RuntimeConfigGetter, configured string, log *slog.Logger) string {
	if rt == nil {
		return configured
	}
	resp, err := rt.RuntimeConfig(ctx)
	switch {
	case cri.IsUnimplemented(err):
		log.Info("the runtime does not tell its cgroup driver; using the configured one", "cgroupDriver", configured)
		return configured
	case err != nil:
		log.Warn("could not ask the runtime for its cgroup driver; using the configured one", "cgroupDriver", configured, "err", err)
		return configured
	case resp.GetLinux() == nil:
		return configured
	}
	driver := string(DriverSystemd)
	if resp.GetLinux().GetCgroupDriver() == runtimeapi.CgroupDriver_CGROUPFS {
		driver = string(DriverCgroupfs)
	}
	if driver != configured {
		log.Info("using the runtime's cgroup driver over the configured one", "runtime", driver, "cgroupDriver", configured)
	}
	return driver
}
