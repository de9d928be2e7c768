package stats

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// fsMemo memoises statfs by path for one refresh. It is used by one
// goroutine.
type fsMemo struct {
	machine Machine
	byPath  map[string]*fsInfo
	// fresh: directories' disk usage is measured now, not served from
	// the cache (FreshSummary).
	fresh bool
}

type fsInfo struct {
	capacity, available, used, inodes, inodesFree uint64
	err                                           error
}

func (m *fsMemo) get(path string) *fsInfo {
	if fi, ok := m.byPath[path]; ok {
		return fi
	}
	fi := &fsInfo{}
	fi.capacity, fi.available, fi.used, fi.inodes, fi.inodesFree, fi.err = m.machine.FsStats(path)
	m.byPath[path] = fi
	return fi
}

// withFs fills the size of the filesystem holding path into s.
func (m *fsMemo) withFs(s *v1alpha1.FsStats, path string) {
	if fi := m.get(path); fi.err == nil {
		s.AvailableBytes = &fi.available
		s.CapacityBytes = &fi.capacity
		s.Inodes = &fi.inodes
		s.InodesFree = &fi.inodesFree
	}
}

// logStats is the usage of a container's log directory, on the filesystem
// of the pod logs directory.
func (p *Provider) logStats(pod v1alpha1.PodReference, container string, now time.Time, fsm *fsMemo) *v1alpha1.FsStats {
	out := &v1alpha1.FsStats{Time: metav1.NewTime(now)}
	fsm.withFs(out, p.podLogsDir)
	dir := filepath.Join(p.podLogsDir, pod.Namespace+"_"+pod.Name+"_"+pod.UID, container)
	if used, inodes, ok := p.du.get(dir, fsm.fresh); ok {
		out.UsedBytes, out.InodesUsed = &used, &inodes
	}
	return out
}

// The volume plugins' directories under a pod's volumes directory whose
// volumes are local ephemeral storage, as the kubelet's
// IsLocalEphemeralVolume counts them (emptyDir, configMap; gitRepo
// volumes nodelet does not mount), and the pod's /etc/hosts file in its
// directory.
const (
	emptyDirPlugin  = "kubernetes.io~empty-dir"
	configMapPlugin = "kubernetes.io~configmap"
	etcHostsFile    = "etc-hosts"
)

// addStorageStats fills the ephemeral volumes' stats of a pod and its
// ephemeral storage: its containers' writable layers and logs, its
// disk-backed emptyDir and configMap volumes and its /etc/hosts file, on
// the root filesystem (the kubelet's calcEphemeralStorage). A
// memory-backed volume has its stats, but is memory, not ephemeral
// storage.
func (p *Provider) addStorageStats(ps *v1alpha1.PodStats, now time.Time, fsm *fsMemo) {
	var used, inodesUsed uint64
	for i := range ps.Containers {
		c := &ps.Containers[i]
		for _, s := range []*v1alpha1.FsStats{c.Rootfs, c.Logs} {
			if s != nil {
				used += deref(s.UsedBytes)
				inodesUsed += deref(s.InodesUsed)
			}
		}
	}

	uid := ps.PodRef.UID
	if uid == "" || uid != filepath.Base(uid) || uid == "." || uid == ".." {
		// Not a UID nodelet made: no directory of ours to look into.
		uid = ""
	}
	if uid != "" {
		podDir := filepath.Join(p.rootDir, "pods", uid)
		for _, plugin := range []string{emptyDirPlugin, configMapPlugin} {
			for _, vs := range p.volumeStats(ps, filepath.Join(podDir, "volumes", plugin), now, fsm) {
				if !vs.memory {
					used += deref(vs.UsedBytes)
					inodesUsed += deref(vs.InodesUsed)
				}
				ps.VolumeStats = append(ps.VolumeStats, vs.VolumeStats)
			}
		}
		if u, n, ok := p.du.get(filepath.Join(podDir, etcHostsFile), fsm.fresh); ok {
			used += u
			inodesUsed += n
		}
		if p.volumes != nil {
			// Not ephemeral storage: the driver's.
			ps.VolumeStats = append(ps.VolumeStats, p.volumes.PodVolumeStats(uid)...)
		}
	}

	eph := &v1alpha1.FsStats{Time: metav1.NewTime(now), UsedBytes: &used, InodesUsed: &inodesUsed}
	fsm.withFs(eph, p.rootDir)
	ps.EphemeralStorage = eph
}

// volumeStat is a volume's stats, and whether it is memory-backed.
type volumeStat struct {
	v1alpha1.VolumeStats
	memory bool
}

// volumeStats are the stats of the volumes in one plugin's directory: the
// size of the filesystem each is on, and what it uses: statfs of a tmpfs
// mounted there (exact and cheap), the cached disk usage otherwise.
func (p *Provider) volumeStats(ps *v1alpha1.PodStats, dir string, now time.Time, fsm *fsMemo) []volumeStat {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Debug("stats: cannot list volumes", "pod", ps.PodRef.Namespace+"/"+ps.PodRef.Name, "dir", dir, "err", err)
	}
	var out []volumeStat
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		vs := volumeStat{VolumeStats: v1alpha1.VolumeStats{Name: e.Name(), FsStats: v1alpha1.FsStats{Time: metav1.NewTime(now)}}}
		capacity, available, fsUsed, inodes, inodesFree, err := p.machine.FsStats(path)
		if err != nil {
			p.log.Debug("stats: cannot statfs volume", "path", path, "err", err)
			continue
		}
		vs.CapacityBytes, vs.AvailableBytes, vs.Inodes, vs.InodesFree = &capacity, &available, &inodes, &inodesFree
		if vs.memory, err = p.machine.IsTmpfs(path); err != nil {
			p.log.Debug("stats: cannot statfs volume", "path", path, "err", err)
			continue
		}
		if vs.memory {
			tmpInodesUsed := inodes - min(inodes, inodesFree)
			vs.UsedBytes, vs.InodesUsed = &fsUsed, &tmpInodesUsed
		} else if u, n, ok := p.du.get(path, fsm.fresh); ok {
			vs.UsedBytes, vs.InodesUsed = &u, &n
		}
		out = append(out, vs)
	}
	return out
}

// duCache caches the disk usage of directories. A missing entry is
// measured inline, an expired one in the background while the stale value
// is served.
type duCache struct {
	ttl     time.Duration
	clk     clock.PassiveClock
	machine Machine
	log     *slog.Logger

	mu      sync.Mutex
	entries map[string]*duEntry
}

type duEntry struct {
	used, inodes uint64
	ok           bool // the last measurement succeeded
	measured     time.Time
	lastAsked    time.Time
	refreshing   bool
}

// get returns the usage of path; ok is false when it could not be
// measured (a missing directory, for example). With now, it is measured
// before get returns, whatever the cache holds.
func (c *duCache) get(path string, now bool) (used, inodes uint64, ok bool) {
	at := c.clk.Now()
	c.mu.Lock()
	e := c.entries[path]
	if now && e != nil {
		e.lastAsked = at
		c.mu.Unlock()
		c.measure(path, e)
		c.mu.Lock()
		defer c.mu.Unlock()
		return e.used, e.inodes, e.ok
	}
	if e == nil {
		e = &duEntry{refreshing: true, lastAsked: at}
		c.entries[path] = e
		c.mu.Unlock()
		c.measure(path, e)
		c.mu.Lock()
		defer c.mu.Unlock()
		return e.used, e.inodes, e.ok
	}
	defer c.mu.Unlock()
	e.lastAsked = at
	if !e.refreshing && at.Sub(e.measured) >= c.ttl {
		e.refreshing = true
		go c.measure(path, e)
	}
	return e.used, e.inodes, e.ok
}

func (c *duCache) measure(path string, e *duEntry) {
	used, inodes, err := c.machine.DiskUsage(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Debug("stats: cannot measure disk usage", "path", path, "err", err)
	}
	now := c.clk.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e.used, e.inodes, e.ok = used, inodes, err == nil
	e.measured = now
	e.refreshing = false
}

// forget drops the entries not asked for for forgetAfter.
func (c *duCache) forget(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for path, e := range c.entries {
		if !e.refreshing && now.Sub(e.lastAsked) > forgetAfter {
			delete(c.entries, path)
		}
	}
}
