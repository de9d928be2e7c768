package podresources

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// unlimitedV1 is the smallest memory.limit_in_bytes cgroup v1 shows for
// "no limit" (the largest page-aligned int64 on 4 KiB pages is
// 9223372036854771712; any value this large is no limit).
const unlimitedV1 = int64(1) << 62

// The memory usage files: cgroup v1's and cgroup v2's.
const (
	fileMemoryUsage   = "memory.usage_in_bytes"
	fileMemoryCurrent = "memory.current"
)

// ErrNoPodCgroup is what reading or resizing a pod whose cgroup does not
// exist fails with (errors.Is).
var ErrNoPodCgroup = errors.New("pod cgroup does not exist")

// PodCgroupNow reads the pod cgroup's values an in-place resize changes
// (the kubelet's GetPodCgroupConfig): cpu.shares, the CFS quota (-1: none)
// and the memory limit (0: none).
func (m *Manager) PodCgroupNow(pod *v1.Pod) (resize.PodCgroup, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel := podDir(m.top, podspec.QOSClass(pod), pod.UID)
	var out resize.PodCgroup
	var err error
	if out.CPUShares, err = m.readV1(rel, fileCPUShares); err != nil {
		return out, err
	}
	if out.CPUQuota, err = m.readV1(rel, fileCFSQuota); err != nil {
		return out, err
	}
	if out.MemoryLimit, err = m.readV1(rel, fileMemoryLimit); err != nil {
		return out, err
	}
	if out.MemoryLimit >= unlimitedV1 {
		out.MemoryLimit = 0
	}
	return out, nil
}

// PodMemoryUsage is the pod cgroup's memory.usage_in_bytes.
func (m *Manager) PodMemoryUsage(pod *v1.Pod) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.readV1(podDir(m.top, podspec.QOSClass(pod), pod.UID), fileMemoryUsage)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fmt.Errorf("read %s of pod %s: negative", fileMemoryUsage, pod.UID)
	}
	return uint64(v), nil
}

// readV1 reads an integer interface file of cgroup rel from the first
// hierarchy that has it.
func (m *Manager) readV1(rel, file string) (int64, error) {
	if err := m.loadLocked(); err != nil {
		return 0, err
	}
	hs := m.with(file)
	if len(hs) == 0 {
		return 0, fmt.Errorf("read pod cgroup %s: no hierarchy has %s", rel, file)
	}
	b, err := os.ReadFile(filepath.Join(hs[0].path, rel, file))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read %s of %s: %w", file, rel, ErrNoPodCgroup)
	}
	if err != nil {
		return 0, fmt.Errorf("read pod cgroup: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s of %s: %w", file, rel, err)
	}
	return v, nil
}

// SetPodCgroup writes one pod cgroup step of a resize plan (a
// resize.SetPod* kind) to an existing pod cgroup; a quota also sets the
// period (QuotaPeriod).
func (m *Manager) SetPodCgroup(pod *v1.Pod, s resize.Step) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel := podDir(m.top, podspec.QOSClass(pod), pod.UID)
	if _, err := m.readV1(rel, fileCPUShares); err != nil {
		return err
	}
	switch s.Kind {
	case resize.SetPodCPUShares:
		return m.writeCPU(rel, fileCPUShares, s.Value)
	case resize.SetPodCPUQuota:
		if s.Value > 0 {
			if err := m.writeCPU(rel, fileCFSPeriod, QuotaPeriod); err != nil {
				return err
			}
		}
		return m.writeCPU(rel, fileCFSQuota, s.Value)
	case resize.SetPodMemoryLimit:
		for _, h := range m.with(fileMemoryLimit) {
			if err := writeValue(filepath.Join(h.path, rel, fileMemoryLimit), s.Value); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("set pod cgroup: step kind %d is not a pod cgroup write", s.Kind)
}

// WeightToShares is cpu.shares for cpu.weight, the inverse of
// SharesToWeight as the kubelet computes it (CpuWeightToCpuShares).
func WeightToShares(weight int64) int64 {
	if weight <= 0 {
		return 0
	}
	return ((weight-1)*(MaxShares-MinShares))/9999 + MinShares
}

// PodCgroupNow reads the pod cgroup's values an in-place resize changes,
// in cgroup v1 terms: cpu.weight as shares, cpu.max's quota (-1 for
// "max"), memory.max (0 for "max").
func (m *UnifiedManager) PodCgroupNow(pod *v1.Pod) (resize.PodCgroup, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel := m.layout.podDir(podspec.QOSClass(pod), pod.UID)
	var out resize.PodCgroup
	w, err := m.read(rel, fileCPUWeight)
	if err != nil {
		return out, err
	}
	if out.CPUShares, err = parseInt(w, fileCPUWeight); err != nil {
		return out, err
	}
	out.CPUShares = WeightToShares(out.CPUShares)
	cpuMax, err := m.read(rel, fileCPUMax)
	if err != nil {
		return out, err
	}
	quota, _, ok := parseCPUMax(cpuMax)
	if !ok {
		return out, fmt.Errorf("read %s of %s: %q", fileCPUMax, name(rel), cpuMax)
	}
	out.CPUQuota = quota
	if quota == 0 {
		out.CPUQuota = -1
	}
	mem, err := m.read(rel, fileMemoryMax)
	if err != nil {
		return out, err
	}
	if mem != valueMax {
		if out.MemoryLimit, err = parseInt(mem, fileMemoryMax); err != nil {
			return out, err
		}
	}
	return out, nil
}

// PodMemoryUsage is the pod cgroup's memory.current.
func (m *UnifiedManager) PodMemoryUsage(pod *v1.Pod) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.read(m.layout.podDir(podspec.QOSClass(pod), pod.UID), fileMemoryCurrent)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", fileMemoryCurrent, err)
	}
	return v, nil
}

func (m *UnifiedManager) read(rel, file string) (string, error) {
	b, err := m.fs.ReadFile(join(rel, file))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s of %s: %w", file, name(rel), ErrNoPodCgroup)
	}
	if err != nil {
		return "", fmt.Errorf("read pod cgroup: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func parseInt(s, file string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", file, err)
	}
	return v, nil
}

// SetPodCgroup writes one pod cgroup step of a resize plan to an existing
// pod cgroup, in cgroup v2 terms (cpu.weight, cpu.max with QuotaPeriod,
// memory.max).
func (m *UnifiedManager) SetPodCgroup(pod *v1.Pod, s resize.Step) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rel := m.layout.podDir(podspec.QOSClass(pod), pod.UID)
	if _, err := m.read(rel, fileCPUWeight); err != nil {
		return err
	}
	switch s.Kind {
	case resize.SetPodCPUShares:
		return m.set(rel, fileCPUWeight, strconv.FormatInt(SharesToWeight(s.Value), 10))
	case resize.SetPodCPUQuota:
		q := valueMax
		if s.Value > 0 {
			q = strconv.FormatInt(s.Value, 10)
		}
		return m.set(rel, fileCPUMax, q+" "+strconv.FormatInt(QuotaPeriod, 10))
	case resize.SetPodMemoryLimit:
		return m.set(rel, fileMemoryMax, orMax(s.Value))
	}
	return fmt.Errorf("set pod cgroup: step kind %d is not a pod cgroup write", s.Kind)
}
