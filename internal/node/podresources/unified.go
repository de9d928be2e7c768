package podresources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Driver is the cgroup driver: who creates the cgroups, and how they and
// the sandbox's cgroup parent are named (the kubelet's cgroupDriver).
type Driver string

const (
	// DriverCgroupfs: nodelet creates the cgroups in the filesystem;
	// "/kubepods/burstable/pod<uid>".
	DriverCgroupfs Driver = "cgroupfs"
	// DriverSystemd: systemd creates them as slices, over D-Bus;
	// "kubepods-burstable-pod<uid>.slice".
	DriverSystemd Driver = "systemd"
)

// ErrControllerMissing is returned (wrapped, naming the controller) when
// a controller pod cgroups need is not available in the parent cgroup.
var ErrControllerMissing = errors.New("cgroup controller not available")

// RequiredControllers are the cgroup v2 controllers the QoS and pod
// cgroups must have: without them the pods' CPU, memory and process
// limits would silently not hold.
var RequiredControllers = []string{"cpu", "memory", "pids"}

// optionalControllers are enabled too where the kernel has them.
var optionalControllers = []string{"cpuset", "io", "hugetlb"}

// controllerOrder is the kernel's order of the controllers.
var controllerOrder = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}

// systemdTimeout bounds one call to systemd.
const systemdTimeout = 30 * time.Second

// UnifiedOptions configure a UnifiedManager.
type UnifiedOptions struct {
	// Driver is cgroupfs ("" too) or systemd.
	Driver Driver
	// Systemd creates and removes the slices; required with DriverSystemd.
	Systemd Systemd
	// PodPidsLimit > 0 is every pod cgroup's pids.max (podPidsLimit).
	PodPidsLimit int64
	// MemoryQoS, when set, is the kubelet's MemoryQoS feature; a zero
	// PageSize is the machine's.
	MemoryQoS *MemoryQoS
	// Required are the controllers the cgroups must have; nil is
	// RequiredControllers. Tests on a host without them name fewer.
	Required []string
	// Kubepods are the QoS hierarchy top cgroup's limits.
	Kubepods KubepodsLimits
	// CgroupRoot is the cgroup the QoS hierarchy is made in (cgroupRoot,
	// see ParseCgroupRoot); it must exist. Empty is the root cgroup.
	CgroupRoot CgroupRoot
	// Log, nil discards.
	Log *slog.Logger
}

// cgroupLayout names the QoS and pod cgroups of a driver.
type cgroupLayout interface {
	rootDir() string
	qosDir(qos v1.PodQOSClass) string
	podDir(qos v1.PodQOSClass, uid types.UID) string
	parent(qos v1.PodQOSClass, uid types.UID) string
	podUID(qos v1.PodQOSClass, dir string) (types.UID, bool)
}

// cgroupfsLayout is the cgroupfs driver's: top/burstable/pod<uid>, top
// being kubepods in the cgroupRoot.
type cgroupfsLayout struct{ root, top string }

func (l cgroupfsLayout) rootDir() string { return l.root }

func (l cgroupfsLayout) qosDir(qos v1.PodQOSClass) string { return qosDir(l.top, qos) }
func (l cgroupfsLayout) podDir(qos v1.PodQOSClass, uid types.UID) string {
	return podDir(l.top, qos, uid)
}
func (l cgroupfsLayout) parent(qos v1.PodQOSClass, uid types.UID) string {
	return cgroupfsName(l.top, qos, uid)
}
func (cgroupfsLayout) podUID(_ v1.PodQOSClass, dir string) (types.UID, bool) {
	uid, ok := strings.CutPrefix(dir, podCgroupNamePrefix)
	return types.UID(uid), ok && uid != ""
}

var allTiers = []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort}

// UnifiedManager creates and removes the QoS and pod cgroups on cgroup v2
// (the unified hierarchy), with the cgroupfs or the systemd driver, as the
// kubelet's QoS and pod container managers: controllers enabled top-down
// through cgroup.subtree_control (a required one missing is an error
// naming it), cpu.weight, cpu.max, memory.max, memory.high (MemoryQoS),
// pids.max and hugetlb limits. It is safe for concurrent use.
type UnifiedManager struct {
	fs      FS
	log     *slog.Logger
	opts    UnifiedOptions
	layout  cgroupLayout
	systemd Systemd

	mu sync.Mutex
	// controllers are those enabled for the QoS and pod cgroups, known
	// once EnsureQoS ran.
	controllers []string
	ready       bool
	// burstable is the CPU request, in milliCPU, of every Burstable pod
	// ensured and not removed: the tier's cpu.weight is of their sum.
	burstable map[types.UID]int64
}

// NewUnified manages the QoS and pod cgroups in the cgroup v2 hierarchy
// fsys. It touches nothing before EnsureQoS.
func NewUnified(fsys FS, opts UnifiedOptions) (*UnifiedManager, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Required == nil {
		opts.Required = RequiredControllers
	}
	if q := opts.MemoryQoS; q != nil && q.PageSize == 0 {
		withPage := *q
		withPage.PageSize = int64(os.Getpagesize())
		opts.MemoryQoS = &withPage
	}
	m := &UnifiedManager{fs: fsys, log: opts.Log, opts: opts, burstable: map[types.UID]int64{}}
	switch opts.Driver {
	case "", DriverCgroupfs:
		m.layout = cgroupfsLayout{root: opts.CgroupRoot.rel(), top: opts.CgroupRoot.top()}
	case DriverSystemd:
		if opts.Systemd == nil {
			return nil, errors.New("cgroup driver systemd: no connection to systemd")
		}
		m.layout, m.systemd = systemdLayout{root: opts.CgroupRoot}, opts.Systemd
	default:
		return nil, fmt.Errorf("cgroup driver %q: want cgroupfs or systemd", opts.Driver)
	}
	return m, nil
}

// EnsureQoS checks that the root cgroup has the required controllers and
// creates the QoS tiers with them enabled: the top (kubepods) and in it
// burstable and besteffort. besteffort gets cpu.weight 1, burstable the
// weight of its pods' CPU requests; both unbounded huge pages; the
// kubelet's MemoryQoS reset of memory.min and memory.low (no memory
// reservation). It is idempotent and runs at start, before the first pod.
func (m *UnifiedManager) EnsureQoS() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ensureQoSLocked()
}

func (m *UnifiedManager) ensureQoSLocked() error {
	avail, err := m.readFields("", fileControllers)
	if err != nil {
		return fmt.Errorf("cgroup v2 root: %w", err)
	}
	var ctrls []string
	for _, c := range m.opts.Required {
		if !slices.Contains(avail, c) {
			return fmt.Errorf("cgroup v2: controller %q is not available at the root (cgroup.controllers: %q); pod cgroups need %s: %w",
				c, strings.Join(avail, " "), strings.Join(m.opts.Required, ", "), ErrControllerMissing)
		}
		ctrls = append(ctrls, c)
	}
	for _, c := range optionalControllers {
		if slices.Contains(avail, c) && !slices.Contains(ctrls, c) {
			ctrls = append(ctrls, c)
		}
	}
	slices.SortFunc(ctrls, func(a, b string) int {
		return slices.Index(controllerOrder, a) - slices.Index(controllerOrder, b)
	})
	m.controllers = ctrls
	if err := m.checkRoot(); err != nil {
		return err
	}
	top := m.layout.qosDir(v1.PodQOSGuaranteed)
	var kcfg *UnifiedPodConfig // the top slice's properties: none without limits
	if m.opts.Kubepods != (KubepodsLimits{}) {
		c := m.opts.Kubepods.kubepodsConfig()
		kcfg = &c
	}
	if _, err := m.ensure(top, kcfg); err != nil {
		return err
	}
	if err := m.enforceKubepodsLocked(top, kcfg); err != nil {
		return err
	}
	for _, qos := range allTiers[1:] {
		if _, err := m.ensure(m.layout.qosDir(qos), nil); err != nil {
			return err
		}
	}
	for _, f := range [][3]string{
		{top, fileMemoryMin, "0"}, {top, fileMemoryLow, "0"},
		{m.layout.qosDir(v1.PodQOSBurstable), fileMemoryLow, "0"},
		{m.layout.qosDir(v1.PodQOSBestEffort), fileCPUWeight, strconv.FormatInt(SharesToWeight(MinShares), 10)},
	} {
		if err := m.set(f[0], f[1], f[2]); err != nil {
			return err
		}
	}
	for _, qos := range []v1.PodQOSClass{v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		if err := m.setHugetlb(m.layout.qosDir(qos), nil); err != nil {
			return err
		}
	}
	if err := m.updateBurstableLocked(); err != nil {
		return err
	}
	if !m.ready {
		m.log.Info("QoS cgroups ready", "hierarchy", "cgroup v2", "driver", m.driver(), "top", top, "controllers", strings.Join(ctrls, " "))
	}
	m.ready = true
	return nil
}

// enforceKubepodsLocked sets the top cgroup's limits (KubepodsLimits):
// cpu.weight, memory.max, pids.max, and with systemd its slice's
// properties too. A memory limit the kernel refuses (the pods already
// use more) is logged, not fatal, as the kubelet starts anyway.
func (m *UnifiedManager) enforceKubepodsLocked(top string, cfg *UnifiedPodConfig) error {
	if cfg == nil {
		return nil
	}
	if m.systemd != nil {
		unit, parent := unitOf(top)
		ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
		err := m.systemd.StartSlice(ctx, unit, sliceProperties(parent, cfg))
		cancel()
		if err != nil {
			return fmt.Errorf("kubepods slice: systemd: %w", err)
		}
	}
	if cfg.CPUWeight > 0 {
		if err := m.set(top, fileCPUWeight, strconv.FormatInt(cfg.CPUWeight, 10)); err != nil {
			return err
		}
	}
	if cfg.MemoryMax > 0 {
		if err := m.set(top, fileMemoryMax, orMax(cfg.MemoryMax)); err != nil {
			m.log.Warn("could not limit the pods' memory to the node's allocatable", "cgroup", name(top), "memory", cfg.MemoryMax, "err", err)
		}
	}
	if cfg.PidsMax > 0 {
		return m.set(top, filePidsMax, orMax(cfg.PidsMax))
	}
	return nil
}

// checkRoot fails unless the cgroupRoot exists: nodelet makes the QoS
// hierarchy in it, never the cgroupRoot itself, as the kubelet checks that
// it exists and refuses to start otherwise.
func (m *UnifiedManager) checkRoot() error {
	rel := m.layout.rootDir()
	if rel == "" {
		return nil
	}
	if _, err := m.fs.ReadFile(join(rel, fileControllers)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = ErrCgroupRootMissing
		}
		return fmt.Errorf("cgroupRoot %s: %w", name(rel), err)
	}
	return nil
}

func (m *UnifiedManager) driver() Driver {
	if m.systemd != nil {
		return DriverSystemd
	}
	return DriverCgroupfs
}

// EnsurePod creates the pod's cgroup under its QoS tier and sets it (see
// UnifiedConfig). It returns the sandbox's cgroup parent:
// "/kubepods/burstable/pod<uid>" (cgroupfs) or
// "kubepods-burstable-pod<uid>.slice" (systemd). It is idempotent; it runs
// EnsureQoS first if needed.
func (m *UnifiedManager) EnsurePod(pod *v1.Pod) (cgroupParent string, err error) {
	if err := checkUID(pod.UID); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ready {
		if err := m.ensureQoSLocked(); err != nil {
			return "", err
		}
	}
	qos := podspec.QOSClass(pod)
	rel := m.layout.podDir(qos, pod.UID)
	cfg := UnifiedConfig(pod, m.opts.PodPidsLimit, m.opts.MemoryQoS)
	created, err := m.ensure(rel, &cfg)
	if err != nil {
		return "", err
	}
	files := [][2]string{{filePidsMax, orMax(cfg.PidsMax)}}
	if created {
		// An existing pod cgroup keeps its CPU and memory values, as the
		// kubelet's EnsureExists keeps them: they change only by an
		// in-place resize (SetPodCgroup), in the order it plans.
		files = append([][2]string{
			{fileCPUWeight, strconv.FormatInt(cfg.CPUWeight, 10)},
			{fileCPUMax, cfg.CPUMax},
			{fileMemoryMax, orMax(cfg.MemoryMax)},
			{fileMemoryHigh, orMax(cfg.MemoryHigh)},
		}, files...)
	}
	for _, f := range files {
		if err := m.set(rel, f[0], f[1]); err != nil {
			return "", err
		}
	}
	if err := m.setHugetlb(rel, cfg.Hugetlb); err != nil {
		return "", err
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
	parent := m.layout.parent(qos, pod.UID)
	if created {
		m.log.Info("created pod cgroup", "pod", podRef(pod), "cgroup", parent, "cpuWeight", cfg.CPUWeight,
			"cpuMax", cfg.CPUMax, "memoryMax", orMax(cfg.MemoryMax), "memoryHigh", orMax(cfg.MemoryHigh), "pidsMax", orMax(cfg.PidsMax))
	}
	return parent, nil
}

// CgroupParent is the cgroup parent of the pod's sandbox, as EnsurePod
// returns it.
func (m *UnifiedManager) CgroupParent(pod *v1.Pod) string {
	return m.layout.parent(podspec.QOSClass(pod), pod.UID)
}

// ContainerUnified is the CRI Unified map of container c of pod (see the
// function ContainerUnified); nil where the memory controller is not
// enabled.
func (m *UnifiedManager) ContainerUnified(pod *v1.Pod, c *v1.Container) map[string]string {
	m.mu.Lock()
	ok := m.ready && slices.Contains(m.controllers, "memory")
	m.mu.Unlock()
	if !ok {
		return nil
	}
	return ContainerUnified(pod, c, m.opts.MemoryQoS)
}

// RemovePod removes the pod's cgroup with whatever the runtime left under
// it, deepest first (with systemd: stops its slice first), once no process
// is left in it. While one is, it removes nothing, kills what is left
// through cgroup.kill (the kubelet kills a pod cgroup's leftovers too) and
// returns an error wrapping ErrPodCgroupBusy: the caller retries. qos ""
// looks in every tier. Removing a missing cgroup is no error.
func (m *UnifiedManager) RemovePod(podUID types.UID, qos v1.PodQOSClass) error {
	if err := checkUID(podUID); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	tiers := []v1.PodQOSClass{qos}
	if qos == "" {
		tiers = allTiers
	}
	var pods, dirs []string
	for _, t := range tiers {
		rel := m.layout.podDir(t, podUID)
		found, procs, err := m.tree(rel)
		if err != nil {
			return err
		}
		if procs > 0 {
			m.kill(rel)
			return fmt.Errorf("%w: %d in %s", ErrPodCgroupBusy, procs, rel)
		}
		if len(found) > 0 {
			pods = append(pods, rel)
		}
		dirs = append(dirs, found...)
	}
	if m.systemd != nil {
		for _, rel := range pods {
			unit, _ := unitOf(rel)
			ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
			err := m.systemd.StopUnit(ctx, unit)
			cancel()
			if err != nil {
				return fmt.Errorf("remove pod cgroup: stop %s: %w", unit, err)
			}
		}
	}
	slices.SortStableFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range dirs {
		if err := m.fs.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove pod cgroup %s: %w", d, err)
		}
	}
	if _, ok := m.burstable[podUID]; ok {
		delete(m.burstable, podUID)
		if m.ready {
			if err := m.updateBurstableLocked(); err != nil {
				return err
			}
		}
	}
	if len(dirs) > 0 {
		m.log.Info("removed pod cgroup", "podUID", podUID, "cgroups", len(dirs))
	}
	return nil
}

// kill writes cgroup.kill of a busy pod cgroup (Linux 5.14 and later);
// where it is missing, the processes stay for the runtime to stop.
func (m *UnifiedManager) kill(rel string) {
	if err := m.fs.WriteFile(join(rel, fileKill), []byte("1")); err != nil {
		m.log.Warn("pod cgroup busy; could not kill what is left in it", "cgroup", rel, "err", err)
		return
	}
	m.log.Warn("pod cgroup busy; killed what is left in it", "cgroup", rel)
}

// Pods is the UIDs of the pod cgroups present in any QoS tier, sorted,
// for orphan cleanup.
func (m *UnifiedManager) Pods() ([]types.UID, error) {
	seen := map[types.UID]bool{}
	for _, t := range allTiers {
		names, err := m.fs.Children(m.layout.qosDir(t))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if uid, ok := m.layout.podUID(t, n); ok {
				seen[uid] = true
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

// ensure creates cgroup rel and its missing ancestors, each with the
// controllers enabled in its parent's cgroup.subtree_control first, and
// enables them in rel's own too (for the cgroups under it). With the
// systemd driver, systemd creates the slices (cfg sets the new one's
// properties). It tells whether rel was created.
func (m *UnifiedManager) ensure(rel string, cfg *UnifiedPodConfig) (created bool, err error) {
	cur := ""
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		if err := m.enable(cur); err != nil {
			return false, err
		}
		next := join(cur, p)
		if _, err := m.fs.ReadFile(join(next, fileControllers)); err == nil {
			cur = next
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("cgroup %s: %w", next, err)
		}
		if m.systemd != nil {
			unit, parent := unitOf(next)
			var c *UnifiedPodConfig
			if i == len(parts)-1 {
				c = cfg
			}
			ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
			err = m.systemd.StartSlice(ctx, unit, sliceProperties(parent, c))
			cancel()
			if err != nil {
				return false, fmt.Errorf("create cgroup %s: systemd: %w", next, err)
			}
		} else if err := m.fs.Mkdir(next); err != nil && !errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("create cgroup %s: %w", next, err)
		}
		created = i == len(parts)-1
		cur = next
	}
	return created, m.enable(cur)
}

// enable makes sure cgroup rel's children get the controllers: each
// missing from its cgroup.subtree_control is written there, once checked
// to be in its cgroup.controllers (else an error naming it).
func (m *UnifiedManager) enable(rel string) error {
	avail, err := m.readFields(rel, fileControllers)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", name(rel), err)
	}
	on, err := m.readFields(rel, fileSubtreeControl)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", name(rel), err)
	}
	for _, c := range m.controllers {
		if slices.Contains(on, c) {
			continue
		}
		if !slices.Contains(avail, c) {
			return fmt.Errorf("cgroup %s: controller %q is not available (cgroup.controllers: %q): %w",
				name(rel), c, strings.Join(avail, " "), ErrControllerMissing)
		}
		if err := m.fs.WriteFile(join(rel, fileSubtreeControl), []byte("+"+c)); err != nil {
			return fmt.Errorf("cgroup %s: enable controller %s: %w", name(rel), c, err)
		}
	}
	return nil
}

// set writes value into interface file of cgroup rel unless it holds it
// already; a file of a controller not enabled is left alone.
func (m *UnifiedManager) set(rel, file, value string) error {
	ctrl, _, _ := strings.Cut(file, ".")
	if ctrl != "cgroup" && !slices.Contains(m.controllers, ctrl) {
		return nil
	}
	p := join(rel, file)
	if cur, err := m.fs.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == value {
		return nil
	}
	if err := m.fs.WriteFile(p, []byte(value)); err != nil {
		return fmt.Errorf("set cgroup %s %s to %s: %w", name(rel), file, value, err)
	}
	return nil
}

// setHugetlb sets hugetlb.<size>.max of every page size the cgroup has:
// limits[size] (0 for a size not in limits), or max for nil limits.
func (m *UnifiedManager) setHugetlb(rel string, limits map[int64]int64) error {
	if !slices.Contains(m.controllers, "hugetlb") {
		return nil
	}
	files, err := m.fs.Files(rel)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", name(rel), err)
	}
	for _, f := range files {
		size, ok := hugetlbFileSize(f)
		if !ok {
			continue
		}
		v := valueMax
		if limits != nil {
			v = strconv.FormatInt(limits[size], 10)
		}
		if err := m.set(rel, f, v); err != nil {
			return err
		}
	}
	return nil
}

// hugetlbFileSize is the page size of a hugetlb.<size>.max file, named as
// the kernel names sizes ("2MB", "1GB", "64KB").
func hugetlbFileSize(file string) (int64, bool) {
	s, ok := strings.CutPrefix(file, "hugetlb.")
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, ".max"); !ok || strings.Contains(s, ".") {
		return 0, false
	}
	for unit, shift := range map[string]uint{"KB": 10, "MB": 20, "GB": 30} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v <= 0 {
				return 0, false
			}
			return v << shift, true
		}
	}
	return 0, false
}

// updateBurstableLocked sets the burstable tier's cpu.weight from its
// pods' summed CPU requests (and, with systemd, its slice's CPUWeight).
func (m *UnifiedManager) updateBurstableLocked() error {
	var milli int64
	for _, v := range m.burstable {
		milli += v
	}
	weight := SharesToWeight(MilliCPUToShares(milli))
	rel := m.layout.qosDir(v1.PodQOSBurstable)
	if m.systemd != nil && slices.Contains(m.controllers, "cpu") {
		unit, _ := unitOf(rel)
		ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
		err := m.systemd.StartSlice(ctx, unit, []UnitProperty{{"CPUWeight", uint64(weight)}})
		cancel()
		if err != nil {
			return fmt.Errorf("burstable slice: systemd: %w", err)
		}
	}
	return m.set(rel, fileCPUWeight, strconv.FormatInt(weight, 10))
}

// tree is cgroup rel and every cgroup under it (none when rel is
// missing), parents first, and how many processes they hold.
func (m *UnifiedManager) tree(rel string) (dirs []string, procs int, err error) {
	pids, err := m.readFields(rel, fileProcs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("cgroup %s: %w", rel, err)
	}
	dirs, procs = []string{rel}, len(pids)
	children, err := m.fs.Children(rel)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("cgroup %s: %w", rel, err)
	}
	for _, c := range children {
		d, p, err := m.tree(join(rel, c))
		if err != nil {
			return nil, 0, err
		}
		dirs, procs = append(dirs, d...), procs+p
	}
	return dirs, procs, nil
}

// readFields is an interface file's whitespace-separated fields.
func (m *UnifiedManager) readFields(rel, file string) ([]string, error) {
	b, err := m.fs.ReadFile(join(rel, file))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// orMax is v, or "max" for 0.
func orMax(v int64) string {
	if v <= 0 {
		return valueMax
	}
	return strconv.FormatInt(v, 10)
}

// name is a cgroup path for messages, "/" for the root.
func name(rel string) string { return "/" + rel }
