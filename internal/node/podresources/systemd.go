package podresources

import (
	"context"
	"math"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Systemd is what the systemd cgroup driver needs of systemd (over
// D-Bus, see ConnectSystemd): slices are systemd's units, created and
// removed by it, as runc's libcontainer systemd manager does.
type Systemd interface {
	// StartSlice creates transient slice unit name with props, or sets
	// props on it when it exists, and returns once systemd has done so.
	StartSlice(ctx context.Context, name string, props []UnitProperty) error
	// StopUnit stops unit name (systemd removes its cgroup) and returns
	// once it is stopped; a unit systemd does not know is no error.
	StopUnit(ctx context.Context, name string) error
}

// UnitProperty is one property of a transient unit: a systemd D-Bus
// property name and its value (bool, uint64, string or []string).
type UnitProperty struct {
	Name  string
	Value any
}

// systemdLayout names the QoS and pod cgroups as the kubelet's systemd
// driver expands them: kubepods.slice, kubepods.slice/kubepods-burstable.slice
// and, for a pod, kubepods-burstable-pod<uid>.slice under its tier, the
// UID's dashes turned into underscores (a dash in a slice name is a
// level). Under a cgroupRoot, its elements come first: with /nodelet-a,
// nodelet_a.slice/nodelet_a-kubepods.slice/...
type systemdLayout struct{ root CgroupRoot }

const (
	sliceSuffix = ".slice"
	// rootSlice is the slice "kubepods.slice" is under.
	rootSlice = "-.slice"
)

// unit is the slice unit name of the cgroup made of parts
// ("kubepods", "burstable", "pod<uid>").
func (systemdLayout) unit(parts ...string) string {
	escaped := make([]string, len(parts))
	for i, p := range parts {
		escaped[i] = escapeSlicePart(p)
	}
	return strings.Join(escaped, "-") + sliceSuffix
}

// parts is the cgroup's name elements: the root's, kubepods, the tier
// unless Guaranteed, and pod<uid> when uid is set.
func (l systemdLayout) parts(qos v1.PodQOSClass, uid types.UID) []string {
	parts := append(append([]string(nil), l.root...), defaultTopCgroupName)
	switch qos {
	case v1.PodQOSBurstable:
		parts = append(parts, burstableCgroupName)
	case v1.PodQOSBestEffort:
		parts = append(parts, bestEffortCgroupName)
	}
	if uid != "" {
		parts = append(parts, podCgroupNamePrefix+string(uid))
	}
	return parts
}

// path is the cgroup's path under the hierarchy's root: one slice per
// level, each named after all the levels above it.
func (l systemdLayout) path(parts []string) string {
	var dirs []string
	for i := range parts {
		dirs = append(dirs, l.unit(parts[:i+1]...))
	}
	return strings.Join(dirs, "/")
}

func (l systemdLayout) qosDir(qos v1.PodQOSClass) string { return l.path(l.parts(qos, "")) }

func (l systemdLayout) podDir(qos v1.PodQOSClass, uid types.UID) string {
	return l.path(l.parts(qos, uid))
}

// rootDir is the cgroupRoot's slice path ("" for the root cgroup).
func (l systemdLayout) rootDir() string {
	if len(l.root) == 0 {
		return ""
	}
	return l.path(l.root)
}

// parent is the CRI cgroup_parent containerd expects with SystemdCgroup:
// the pod's slice unit name ("kubepods-burstable-pod<uid>.slice").
func (l systemdLayout) parent(qos v1.PodQOSClass, uid types.UID) string {
	return l.unit(l.parts(qos, uid)...)
}

// podUID is the UID of the pod slice named dir in tier qos.
func (l systemdLayout) podUID(qos v1.PodQOSClass, dir string) (types.UID, bool) {
	prefix := strings.TrimSuffix(l.unit(l.parts(qos, "")...), sliceSuffix) + "-" + podCgroupNamePrefix
	rest, ok := strings.CutPrefix(dir, prefix)
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, sliceSuffix)
	if !ok || rest == "" || strings.Contains(rest, "-") {
		return "", false
	}
	return types.UID(strings.ReplaceAll(rest, "_", "-")), true
}

// unitOf is the slice unit of a cgroup path the layout made, and the
// slice it is in.
func unitOf(rel string) (unit, parent string) {
	dirs := strings.Split(rel, "/")
	unit = dirs[len(dirs)-1]
	parent = rootSlice
	if len(dirs) > 1 {
		parent = dirs[len(dirs)-2]
	}
	return unit, parent
}

// sliceProperties are a slice's transient unit properties, as runc's
// systemd manager sets them: in its parent slice, no default
// dependencies, CPU, memory, tasks and IO accounting (so that systemd
// enables those controllers for it), and the resource settings systemd
// knows, so that a daemon-reload keeps them.
func sliceProperties(parent string, cfg *UnifiedPodConfig) []UnitProperty {
	props := []UnitProperty{
		{"Description", "nodelet pod cgroup slice"},
		{"Wants", []string{parent}},
		{"DefaultDependencies", false},
		{"CPUAccounting", true},
		{"MemoryAccounting", true},
		{"TasksAccounting", true},
		{"IOAccounting", true},
	}
	if cfg == nil {
		return props
	}
	if cfg.CPUWeight > 0 {
		props = append(props, UnitProperty{"CPUWeight", uint64(cfg.CPUWeight)})
	}
	if quota, period, ok := parseCPUMax(cfg.CPUMax); ok {
		props = append(props, UnitProperty{"CPUQuotaPeriodUSec", uint64(period)})
		perSec := uint64(math.MaxUint64) // infinity
		if quota > 0 {
			// systemd keeps the quota as a percentage: round up to 10ms
			// per second as runc does.
			perSec = uint64(quota) * 1000000 / uint64(period)
			if perSec%10000 != 0 {
				perSec = (perSec/10000 + 1) * 10000
			}
		}
		props = append(props, UnitProperty{"CPUQuotaPerSecUSec", perSec})
	}
	props = append(props, UnitProperty{"MemoryMax", unlimited(cfg.MemoryMax)},
		UnitProperty{"TasksMax", unlimited(cfg.PidsMax)})
	return props
}

// unlimited is v, or systemd's infinity for 0.
func unlimited(v int64) uint64 {
	if v <= 0 {
		return math.MaxUint64
	}
	return uint64(v)
}
