package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// gatherTimeout bounds the runtime calls of one computation, so that a
// hung runtime delays a status by seconds, not by the CRI client's
// minutes (the runtime is then reported down).
const gatherTimeout = 5 * time.Second

// runtimeState is what the runtime last said: the kubelet's runtimeState,
// updated at each computation instead of every 5 s. Only the status
// goroutine uses it.
type runtimeState struct {
	// lastReady is when the runtime last reported RuntimeReady.
	lastReady  time.Time
	runtimeErr error
	networkErr error
	name       string
	handlers   []v1.NodeRuntimeHandler
	features   *v1.NodeFeatures
	// images is the last image list, kept when listing fails.
	images []Image
	// warned is the last error logged per reading.
	warned map[string]string
}

// warn logs err as msg when it differs from the last error of the same
// reading, and that the reading works again: a reading failing every
// 10 s is logged once.
func (s *runtimeState) warn(key, msg string, err error, log *slog.Logger) {
	text := ""
	if err != nil {
		text = err.Error()
	}
	if s.warned[key] == text {
		return
	}
	if s.warned == nil {
		s.warned = map[string]string{}
	}
	s.warned[key] = text
	if err != nil {
		log.Warn(msg, "err", err)
	} else {
		log.Info("node status: reading works again", "reading", key)
	}
}

// gather reads the facts of one computation. Nothing it reads failing is
// an error: each failure is a fact (a missing capacity, a runtime
// reported down, a signal not observed), as in the kubelet.
func (m *Manager) gather(ctx context.Context) *Facts {
	ctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	f := &Facts{Now: m.clk.Now()}

	// The machine's size and the root filesystem.
	var errs []error
	var err error
	if f.CPUs, err = m.machine.NumCPU(); err != nil {
		errs = append(errs, err)
	}
	if f.MemoryBytes, err = m.machine.MemoryCapacity(); err != nil {
		errs = append(errs, err)
	}
	if f.HugePages, err = m.machine.HugePages(); err != nil {
		errs = append(errs, err)
	}
	f.MachineErr = errors.Join(errs...)
	m.rt.warn("machine", "node status: cannot read the machine's size; reporting 0 CPU and memory", f.MachineErr, m.log)
	capacity, _, _, _, _, err := m.machine.FsStats(m.cfg.rootDir)
	m.rt.warn("rootfs", "node status: cannot read the root filesystem; no ephemeral-storage capacity", err, m.log)
	if err == nil {
		f.RootFsBytes = capacity
	}

	// The runtime.
	m.readRuntimeStatus(ctx, f.Now)
	f.RuntimeVersion = m.runtimeVersion(ctx)
	f.Images = m.listImages(ctx)
	f.RuntimeHandlers, f.RuntimeFeatures = m.rt.handlers, m.rt.features
	f.RuntimeErr, f.NetworkErr = m.readiness(f.Now)
	if m.shutdown != nil {
		f.ShutdownErr = m.shutdown()
	}

	// Pressure, as the eviction manager sees it.
	if m.pressureOf != nil {
		f.MemoryPressure, f.DiskPressure, f.PIDPressure = m.pressureOf()
	}
	if m.volumesInUse != nil {
		f.VolumesInUse = m.volumesInUse()
	}
	if m.devices != nil {
		f.DeviceCapacity, f.DeviceAllocatable = m.devices()
	}
	return f
}

// readRuntimeStatus asks the runtime for its conditions (the kubelet's
// updateRuntimeUp). A runtime that does not answer keeps its last state;
// readiness turns it down after runtimeSyncThreshold.
func (m *Manager) readRuntimeStatus(ctx context.Context, now time.Time) {
	resp, err := m.runtime.Status(ctx, false)
	m.rt.warn("status", "node status: container runtime status check failed", err, m.log)
	if err != nil {
		return
	}
	st := resp.GetStatus()
	if st == nil {
		return
	}
	m.rt.networkErr = cri.NetworkError(st)
	if ready := cri.Condition(st, runtimeapi.RuntimeReady); ready == nil || !ready.Status {
		m.rt.runtimeErr = fmt.Errorf("container runtime not ready: %s", cri.ConditionString(ready))
		return
	}
	m.rt.runtimeErr = nil
	m.rt.handlers = runtimeHandlers(resp.GetRuntimeHandlers())
	m.rt.features = nil
	if fs := resp.GetFeatures(); fs != nil {
		sgp := fs.GetSupplementalGroupsPolicy()
		m.rt.features = &v1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
	}
	m.rt.lastReady = now
}

// runtimeHandlers are the runtime's handlers sorted by name, as the
// kubelet publishes them.
func runtimeHandlers(hs []*runtimeapi.RuntimeHandler) []v1.NodeRuntimeHandler {
	if len(hs) == 0 {
		return nil
	}
	out := make([]v1.NodeRuntimeHandler, 0, len(hs))
	for _, h := range hs {
		rro, userns := h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()
		out = append(out, v1.NodeRuntimeHandler{
			Name:     h.GetName(),
			Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &rro, UserNamespaces: &userns},
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// runtimeVersion is "<runtime>://<version>", the version as the kubelet
// parses it (semantic, else generic: containerd's v1.6.20 is 1.6.20), or
// Unknown.
func (m *Manager) runtimeVersion(ctx context.Context) string {
	version := "Unknown"
	resp, err := m.runtime.Version(ctx)
	if err != nil {
		m.log.Debug("node status: no runtime version", "err", err)
	} else {
		if resp.GetRuntimeName() != "" {
			m.rt.name = resp.GetRuntimeName()
		}
		v, err := utilversion.ParseSemantic(resp.GetRuntimeVersion())
		if err != nil {
			v, err = utilversion.ParseGeneric(resp.GetRuntimeVersion())
		}
		if err == nil {
			version = v.String()
		}
	}
	name := m.rt.name
	if name == "" {
		name = "unknown"
	}
	return name + "://" + version
}

// listImages is the runtime's images, largest first (ties: ID
// descending), as the kubelet's image cache; the last list when listing
// fails.
func (m *Manager) listImages(ctx context.Context) []Image {
	list, err := m.runtime.ListImages(ctx, nil)
	m.rt.warn("images", "node status: cannot list images; reporting the last list", err, m.log)
	if err != nil {
		return m.rt.images
	}
	images := make([]Image, 0, len(list))
	for _, img := range list {
		images = append(images, Image{ID: img.GetId(), RepoTags: img.GetRepoTags(), RepoDigests: img.GetRepoDigests(), Size: img.GetSize()})
	}
	sort.Slice(images, func(i, j int) bool {
		if images[i].Size != images[j].Size {
			return images[i].Size > images[j].Size
		}
		return images[i].ID > images[j].ID
	})
	m.rt.images = images
	return images
}

// readiness are the runtime's and the network's errors as the kubelet
// words them (runtimeErrors, networkErrors), PLEG health included.
func (m *Manager) readiness(now time.Time) (runtimeErr, networkErr error) {
	var errs []error
	switch {
	case m.rt.lastReady.IsZero():
		errs = append(errs, errors.New("container runtime status check may not have completed yet"))
	case !m.rt.lastReady.Add(runtimeSyncThreshold).After(now):
		errs = append(errs, errors.New("container runtime is down"))
	}
	if m.plegHealthy != nil {
		if ok, err := m.plegHealthy(); !ok {
			errs = append(errs, fmt.Errorf("PLEG is not healthy: %v", err))
		}
	}
	errs = append(errs, m.rt.runtimeErr)
	return utilerrors.NewAggregate(errs), utilerrors.NewAggregate([]error{m.rt.networkErr})
}
