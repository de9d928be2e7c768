package podresources

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// ErrCgroupV2 is returned by every Manager method on a host whose cgroup
// root is a cgroup v2 (unified) hierarchy.
var ErrCgroupV2 = errors.New("cgroup v2 (unified hierarchy) is not supported yet: nodelet manages pod cgroups on cgroup v1 with the cgroupfs driver only")

// ErrPodCgroupBusy is returned (wrapped) by RemovePod while a process is
// left in the pod's cgroups; nothing was removed and the caller retries once
// the pod's containers are gone.
var ErrPodCgroupBusy = errors.New("pod cgroup still has processes")

// Interface files.
const (
	fileTasks       = "tasks"              // v1: the threads in the cgroup
	fileProcs       = "cgroup.procs"       // v2 (hybrid unified): its processes
	fileControllers = "cgroup.controllers" // only in v2
	fileCPUShares   = "cpu.shares"
	fileCFSPeriod   = "cpu.cfs_period_us"
	fileCFSQuota    = "cpu.cfs_quota_us"
	fileMemoryLimit = "memory.limit_in_bytes"
	fileCpusetCPUs  = "cpuset.cpus"
	fileCpusetMems  = "cpuset.mems"
	filePidsMaxV1   = "pids.max"
)

// hierarchy is one mounted cgroup hierarchy under the root: a v1 hierarchy
// of one or more controllers (cpu, cpuacct, memory, pids, cpuset, hugetlb,
// blkio, devices, freezer, name=systemd...) or, on a hybrid host, the v2
// unified one, where runc places containers too.
type hierarchy struct {
	path string
	v2   bool
}

// controllers are the hierarchy's controllers, as its mount directory
// and the directory it links to are named ("cpu,cpuacct", "systemd" for
// name=systemd).
func (h hierarchy) controllers() []string {
	names := []string{filepath.Base(h.path)}
	if real, err := filepath.EvalSymlinks(h.path); err == nil {
		names = append(names, filepath.Base(real))
	}
	var out []string
	for _, n := range names {
		for c := range strings.SplitSeq(n, ",") {
			out = append(out, strings.TrimPrefix(c, "name="))
		}
	}
	return out
}

// has tells whether the hierarchy's root has interface file name.
func (h hierarchy) has(name string) bool {
	_, err := os.Stat(filepath.Join(h.path, name))
	return err == nil
}

// Manager creates and removes the QoS and pod cgroups on cgroup v1 with the
// cgroupfs driver, as the kubelet's QoS and pod container managers: the
// tiers kubepods, kubepods/burstable and kubepods/besteffort, and under them
// pod<uid>, in every hierarchy mounted under the root. It is safe for
// concurrent use.
type Manager struct {
	root string
	log  *slog.Logger
	// cgroupRoot is the cgroup the QoS hierarchy is in, relative to each
	// hierarchy's root ("" for the root cgroup).
	cgroupRoot string
	// top is the QoS hierarchy's root cgroup ("kubepods",
	// "nodelet-a/kubepods"); tests use their own.
	top string
	// kubepods are top's limits (Options.Kubepods).
	kubepods KubepodsLimits
	// err is why the host cannot be managed (cgroup v2).
	err error

	mu          sync.Mutex
	hierarchies []hierarchy
	ready       bool
	// burstable is the CPU request, in milliCPU, of every Burstable pod
	// ensured and not removed: the burstable tier's cpu.shares is their sum.
	burstable map[types.UID]int64
}

// burstableKnown tells whether the burstable tier's shares already count
// the pod's CPU requests as they are (always for a pod of another tier).
func (m *Manager) burstableKnown(pod *v1.Pod, qos v1.PodQOSClass) bool {
	if qos != v1.PodQOSBurstable {
		return true
	}
	reqs, _, _, _ := podTotals(pod)
	cpu, ok := m.burstable[pod.UID]
	return ok && cpu == reqs.cpu
}

// NewManager manages the QoS and pod cgroups in cgroupRoot (nil: the
// root cgroup) of the v1 hierarchies mounted under mountDir
// ("/sys/fs/cgroup": mountDir/cpu, mountDir/memory...). On a cgroup v2
// host every method returns ErrCgroupV2. A nil log discards.
func NewManager(mountDir string, cgroupRoot CgroupRoot, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{root: mountDir, log: log, cgroupRoot: cgroupRoot.rel(), top: cgroupRoot.top(), burstable: map[types.UID]int64{}}
	if _, err := os.Stat(filepath.Join(mountDir, fileControllers)); err == nil || cgroupmount.IsCgroup2(mountDir) {
		m.err = fmt.Errorf("%w (found at %s)", ErrCgroupV2, mountDir)
		log.Error("pod cgroups unavailable", "root", mountDir, "err", m.err)
	}
	return m
}

// EnsureQoS creates the QoS tiers in every hierarchy: kubepods, and in it
// burstable and besteffort; besteffort gets MinShares cpu.shares and
// burstable the shares of its pods' CPU requests (MinShares without any).
// In cpuset, a new cgroup gets its parent's cpuset.cpus and cpuset.mems.
// It is idempotent and runs at start, before the first pod.
func (m *Manager) EnsureQoS() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ensureQoSLocked()
}

func (m *Manager) ensureQoSLocked() error {
	if m.err != nil {
		return m.err
	}
	hs, err := discover(m.root)
	if err != nil {
		return err
	}
	m.hierarchies = hs
	if err := m.checkRoot(); err != nil {
		return err
	}
	for _, dir := range []string{m.top, qosDir(m.top, v1.PodQOSBurstable), qosDir(m.top, v1.PodQOSBestEffort)} {
		for _, h := range hs {
			if err := mkdirs(h, dir); err != nil {
				return err
			}
		}
	}
	if err := m.enforceKubepodsLocked(); err != nil {
		return err
	}
	if err := m.writeCPU(qosDir(m.top, v1.PodQOSBestEffort), fileCPUShares, MinShares); err != nil {
		return err
	}
	if err := m.updateBurstableLocked(); err != nil {
		return err
	}
	if !m.ready {
		m.log.Info("QoS cgroups ready", "root", m.root, "top", m.top, "hierarchies", len(hs))
	}
	m.ready = true
	return nil
}

// enforceKubepodsLocked sets the top cgroup's limits (KubepodsLimits):
// cpu.shares, memory.limit_in_bytes and pids.max. A memory limit the
// kernel refuses (the pods already use more) is logged, not fatal, as
// the kubelet starts anyway and evictions bring usage down.
func (m *Manager) enforceKubepodsLocked() error {
	l := m.kubepods
	if l.MilliCPU > 0 {
		if err := m.writeCPU(m.top, fileCPUShares, MilliCPUToShares(l.MilliCPU)); err != nil {
			return err
		}
	}
	if l.Memory > 0 {
		for _, h := range m.with(fileMemoryLimit) {
			if err := writeValue(filepath.Join(h.path, m.top, fileMemoryLimit), l.Memory); err != nil {
				m.log.Warn("could not limit the pods' memory to the node's allocatable", "cgroup", m.top, "memory", l.Memory, "err", err)
			}
		}
	}
	if l.Pids > 0 {
		for _, h := range m.hierarchies {
			if !h.v2 && slices.Contains(h.controllers(), "pids") {
				if err := writeValue(filepath.Join(h.path, m.top, filePidsMaxV1), l.Pids); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// rootControllers are the v1 controllers whose hierarchies must have the
// cgroupRoot, as the kubelet checks them (its Validate); in the others
// the pod cgroups' ancestors are created as needed.
var rootControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb"}

// checkRoot fails, naming what is missing, unless the cgroupRoot exists
// in every hierarchy of rootControllers: nodelet makes kubepods in it,
// never the cgroupRoot itself, as the kubelet.
func (m *Manager) checkRoot() error {
	if m.cgroupRoot == "" {
		return nil
	}
	var missing []string
	for _, h := range m.hierarchies {
		if h.v2 || !slices.ContainsFunc(h.controllers(), func(c string) bool { return slices.Contains(rootControllers, c) }) {
			continue
		}
		p := filepath.Join(h.path, m.cgroupRoot)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, p)
		} else if err != nil {
			return fmt.Errorf("cgroupRoot: %w", err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cgroupRoot /%s (missing %s): %w", m.cgroupRoot, strings.Join(missing, ", "), ErrCgroupRootMissing)
	}
	return nil
}

// EnsurePod creates the pod's cgroup, pod<uid> under its QoS tier, in every
// hierarchy and sets it as the kubelet does (see PodConfig): cpu.shares,
// cpu.cfs_period_us and cpu.cfs_quota_us, memory.limit_in_bytes. It returns
// the cgroup parent for the pod's sandbox ("/kubepods/burstable/pod<uid>").
// It is idempotent; it runs EnsureQoS first if needed.
//
// A pod cgroup that exists in every hierarchy is left as it is, as the
// kubelet's EnsureExists leaves it: its values change only by an in-place
// resize (SetPodCgroup, in the order the resize plans), never back to
// what pod says (a resize not yet actuated, or one whose memory decrease
// was refused, must not be written here out of order or unchecked).
func (m *Manager) EnsurePod(pod *v1.Pod) (cgroupParent string, err error) {
	if err := checkUID(pod.UID); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return "", m.err
	}
	if !m.ready {
		if err := m.ensureQoSLocked(); err != nil {
			return "", err
		}
	}
	qos := podspec.QOSClass(pod)
	rel := podDir(m.top, qos, pod.UID)
	created := false
	for _, h := range m.hierarchies {
		if _, err := os.Stat(filepath.Join(h.path, rel)); errors.Is(err, fs.ErrNotExist) {
			created = true
		}
	}
	cfg := PodConfig(pod)
	parent := cgroupfsName(m.top, qos, pod.UID)
	if !created && m.burstableKnown(pod, qos) {
		// Every sync of every pod comes here (with 100 idle pods, 100 a
		// minute).
		return parent, nil
	}
	if created {
		if err := m.createLocked(rel, cfg); err != nil {
			return "", err
		}
	}
	if qos == v1.PodQOSBurstable {
		reqs, _, _, _ := podTotals(pod)
		if old, ok := m.burstable[pod.UID]; !ok || old != reqs.cpu {
			m.burstable[pod.UID] = reqs.cpu
			if err := m.updateBurstableLocked(); err != nil {
				return "", err
			}
		}
	}
	if created {
		m.log.Info("created pod cgroup", "pod", podRef(pod), "cgroup", parent,
			"cpuShares", cfg.CPUShares, "cpuQuota", cfg.CPUQuota, "memoryLimit", cfg.MemoryLimit)
	}
	return parent, nil
}

// createLocked makes pod cgroup rel in every hierarchy missing it and
// writes cfg to it.
func (m *Manager) createLocked(rel string, cfg PodCgroupConfig) error {
	for _, h := range m.hierarchies {
		if err := mkdirs(h, rel); err != nil {
			return err
		}
	}
	if err := m.writeCPU(rel, fileCPUShares, cfg.CPUShares); err != nil {
		return err
	}
	if cfg.CPUQuota > 0 {
		if err := m.writeCPU(rel, fileCFSPeriod, cfg.CPUPeriod); err != nil {
			return err
		}
		if err := m.writeCPU(rel, fileCFSQuota, cfg.CPUQuota); err != nil {
			return err
		}
	}
	if cfg.MemoryLimit > 0 {
		for _, h := range m.with(fileMemoryLimit) {
			if err := writeValue(filepath.Join(h.path, rel, fileMemoryLimit), cfg.MemoryLimit); err != nil {
				return err
			}
		}
	}
	return nil
}

// CgroupParent is the cgroup parent of the pod's sandbox, as EnsurePod
// creates it ("/kubepods/burstable/pod<uid>").
func (m *Manager) CgroupParent(pod *v1.Pod) string {
	return cgroupfsName(m.top, podspec.QOSClass(pod), pod.UID)
}

// ContainerUnified is nil: the CRI Unified map is for cgroup v2 only.
func (m *Manager) ContainerUnified(*v1.Pod, *v1.Container) map[string]string { return nil }

// RemovePod removes the pod's cgroup, with whatever the runtime left under
// it, deepest first, from every hierarchy, once no process is left in any
// of them; else it removes nothing and returns an error wrapping
// ErrPodCgroupBusy. qos is the pod's QoS class; "" (an orphan whose class is
// unknown) looks in every tier. Removing a missing cgroup is no error.
func (m *Manager) RemovePod(podUID types.UID, qos v1.PodQOSClass) error {
	if err := checkUID(podUID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(); err != nil {
		return err
	}
	tiers := []v1.PodQOSClass{qos}
	if qos == "" {
		tiers = []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort}
	}
	var dirs []string
	for _, h := range m.hierarchies {
		for _, t := range tiers {
			found, err := cgroupTree(h, filepath.Join(h.path, podDir(m.top, t, podUID)))
			if err != nil {
				return err
			}
			dirs = append(dirs, found...)
		}
	}
	// Deepest first: a cgroup goes only once its children are gone.
	slices.SortStableFunc(dirs, func(a, b string) int {
		return strings.Count(b, string(filepath.Separator)) - strings.Count(a, string(filepath.Separator))
	})
	for _, d := range dirs {
		if err := removeCgroup(d); err != nil {
			return fmt.Errorf("remove pod cgroup %s: %w", d, err)
		}
	}
	if _, ok := m.burstable[podUID]; ok {
		delete(m.burstable, podUID)
		if err := m.updateBurstableLocked(); err != nil {
			return err
		}
	}
	if len(dirs) > 0 {
		m.log.Info("removed pod cgroup", "podUID", podUID, "cgroups", len(dirs))
	}
	return nil
}

// Pods is the UIDs of the pod cgroups present in any hierarchy and any QoS
// tier, sorted, for orphan cleanup.
func (m *Manager) Pods() ([]types.UID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(); err != nil {
		return nil, err
	}
	seen := map[types.UID]bool{}
	for _, h := range m.hierarchies {
		for _, t := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
			entries, err := os.ReadDir(filepath.Join(h.path, qosDir(m.top, t)))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				name, ok := strings.CutPrefix(e.Name(), podCgroupNamePrefix)
				if ok && name != "" && e.IsDir() {
					seen[types.UID(name)] = true
				}
			}
		}
	}
	uids := make([]types.UID, 0, len(seen))
	for uid := range seen {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	return uids, nil
}

// loadLocked makes sure the hierarchies are known, without creating
// anything.
func (m *Manager) loadLocked() error {
	if m.err != nil {
		return m.err
	}
	if m.hierarchies != nil {
		return nil
	}
	hs, err := discover(m.root)
	if err != nil {
		return err
	}
	m.hierarchies = hs
	return nil
}

// updateBurstableLocked sets the burstable tier's cpu.shares to the shares
// of its pods' summed CPU requests.
func (m *Manager) updateBurstableLocked() error {
	var milli int64
	for _, v := range m.burstable {
		milli += v
	}
	return m.writeCPU(qosDir(m.top, v1.PodQOSBurstable), fileCPUShares, MilliCPUToShares(milli))
}

// writeCPU writes value to file of cgroup rel in the hierarchies with the
// cpu controller.
func (m *Manager) writeCPU(rel, file string, value int64) error {
	for _, h := range m.with(file) {
		if err := writeValue(filepath.Join(h.path, rel, file), value); err != nil {
			return err
		}
	}
	return nil
}

// with is the v1 hierarchies whose root has interface file name, that is
// those of the controller it belongs to.
func (m *Manager) with(name string) []hierarchy {
	var out []hierarchy
	for _, h := range m.hierarchies {
		if !h.v2 && h.has(name) {
			out = append(out, h)
		}
	}
	return out
}

// discover lists the hierarchies mounted under root: every directory (or
// symlink to one, counted once) with a v1 "tasks" file, and a v2 unified
// one mounted beside them (hybrid mode).
func discover(root string) ([]hierarchy, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("cgroup root: %w", err)
	}
	var hs []hierarchy
	seen := map[string]bool{}
	v1Found := false
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		h := hierarchy{path: p}
		switch {
		case h.has(fileTasks):
			v1Found = true
		case h.has(fileControllers):
			h.v2 = true
		default:
			continue
		}
		seen[real] = true
		hs = append(hs, h)
	}
	if !v1Found {
		return nil, fmt.Errorf("no cgroup v1 hierarchy under %s", root)
	}
	return hs, nil
}

// mkdirs creates cgroup rel, and its missing ancestors, in h. In a cpuset
// hierarchy each level gets its parent's cpus and mems, without which no
// task may join it.
func mkdirs(h hierarchy, rel string) error {
	cpuset := !h.v2 && h.has(fileCpusetCPUs)
	dir := h.path
	for part := range strings.SplitSeq(filepath.ToSlash(rel), "/") {
		if part == "" {
			continue
		}
		parent := dir
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup: %w", err)
		}
		if cpuset {
			if err := inheritCpuset(dir, parent); err != nil {
				return err
			}
		}
	}
	return nil
}

// inheritCpuset copies the parent's cpuset.cpus and cpuset.mems into an
// empty cpuset cgroup.
func inheritCpuset(dir, parent string) error {
	for _, name := range []string{fileCpusetCPUs, fileCpusetMems} {
		if cur, err := os.ReadFile(filepath.Join(dir, name)); err == nil && strings.TrimSpace(string(cur)) != "" {
			continue
		}
		val, err := os.ReadFile(filepath.Join(parent, name))
		if err != nil {
			return fmt.Errorf("cpuset of %s: %w", parent, err)
		}
		v := strings.TrimSpace(string(val))
		if v == "" {
			return fmt.Errorf("cpuset of %s: %s is empty", parent, name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			return fmt.Errorf("cpuset of %s: %w", dir, err)
		}
	}
	return nil
}

// writeValue writes an integer interface file unless it already holds it.
func writeValue(path string, value int64) error {
	v := strconv.FormatInt(value, 10)
	if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == v {
		return nil
	}
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("set cgroup: %w", err)
	}
	return nil
}

// cgroupTree is dir and every cgroup under it, or nothing when dir is
// missing. It fails with ErrPodCgroupBusy when any of them has a process.
func cgroupTree(h hierarchy, dir string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		n, err := processes(h, p)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %d in %s", ErrPodCgroupBusy, n, p)
		}
		dirs = append(dirs, p)
		return nil
	})
	return dirs, err
}

// processes counts the tasks (v1) or processes (v2) in cgroup dir; a
// missing file counts none.
func processes(h hierarchy, dir string) (int, error) {
	name := fileTasks
	if h.v2 {
		name = fileProcs
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return len(strings.Fields(string(b))), nil
}

// removeCgroup removes an empty cgroup. Outside a cgroup filesystem (a test
// tree) the interface files are plain files and go first.
func removeCgroup(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if (!errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST)) || cgroupmount.IsCgroup(dir) {
		return err
	}
	entries, rerr := os.ReadDir(dir)
	if rerr != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if rerr := os.Remove(filepath.Join(dir, e.Name())); rerr != nil {
				return rerr
			}
		}
	}
	return os.Remove(dir)
}

// podDir is the pod's cgroup relative to a hierarchy's root.
func podDir(top string, qos v1.PodQOSClass, uid types.UID) string {
	return qosDir(top, qos) + cgroupfsPathSeparator + podCgroupNamePrefix + string(uid)
}

// checkUID refuses a UID that is no safe path element.
func checkUID(uid types.UID) error {
	if err := podspec.CheckUIDPathElement(uid); err != nil {
		return fmt.Errorf("pod cgroup: %w", err)
	}
	return nil
}

// podRef is "namespace/name" for logs.
func podRef(pod *v1.Pod) string {
	return pod.Namespace + "/" + pod.Name
}
