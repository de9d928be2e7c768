package csi

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// statsPeriod is how often the volumes' stats are asked of their drivers
// (the kubelet's volumeStatsAggPeriod); a new volume is asked at once.
const statsPeriod = time.Minute

// volumeUse is a volume SetUp published for a pod, for its stats. It
// lives in memory: SetUp runs on every sync, so a restarted nodelet knows
// its volumes again after its first sync of each pod.
type volumeUse struct {
	PodUID    string
	PodVolume string // the pod's name of the volume
	Claim     string // the persistentVolumeClaim, "" for none
	Namespace string
	Driver    string
	Handle    string
	Target    string
	Staging   string // "" when the volume is not staged
	// Attached: the volume was published after its VolumeAttachment
	// said attached (vol_data.json has its name).
	Attached bool
	Stats    *statsapi.VolumeStats
}

// useTable holds the published volumes by their directory.
type useTable struct {
	mu   sync.Mutex
	m    map[string]*volumeUse
	kick chan struct{} // size 1: a new volume, asked at the next chance
}

func newUseTable() *useTable {
	return &useTable{m: map[string]*volumeUse{}, kick: make(chan struct{}, 1)}
}

// add records a published volume, keeping stats already gathered.
func (u *useTable) add(dir string, use volumeUse) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if old, ok := u.m[dir]; ok && old.Handle == use.Handle {
		use.Stats = old.Stats
		*old = use
		return
	}
	u.m[dir] = &use
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

func (u *useTable) remove(dir string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, dir)
}

func (u *useTable) list() map[string]volumeUse {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]volumeUse, len(u.m))
	for d, v := range u.m {
		out[d] = *v
	}
	return out
}

func (u *useTable) setStats(dir, handle string, st *statsapi.VolumeStats) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if v, ok := u.m[dir]; ok && v.Handle == handle {
		v.Stats = st
	}
}

// PodVolumeStats returns the last stats of the pod's CSI volumes whose
// drivers give them (GET_VOLUME_STATS), sorted by name, for
// /stats/summary: the pod's name of each volume, and its claim.
func (m *Mounter) PodVolumeStats(podUID string) []statsapi.VolumeStats {
	m.uses.mu.Lock()
	defer m.uses.mu.Unlock()
	var out []statsapi.VolumeStats
	for _, v := range m.uses.m {
		if v.PodUID == podUID && v.Stats != nil {
			out = append(out, *v.Stats)
		}
	}
	slices.SortFunc(out, func(a, b statsapi.VolumeStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// RunStats asks the drivers for the stats of the published volumes every
// statsPeriod, and soon after a volume is published, until ctx ends.
func (m *Mounter) RunStats(ctx context.Context, clk clock.WithTicker) {
	tick := clk.NewTicker(statsPeriod)
	defer tick.Stop()
	for {
		m.refreshStats(ctx, clk)
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		case <-m.uses.kick:
		}
	}
}

// refreshStats asks each volume's driver, one volume at a time: a driver
// that does not answer costs its timeout, never a blocked reader.
func (m *Mounter) refreshStats(ctx context.Context, clk clock.PassiveClock) {
	for dir, v := range m.uses.list() {
		if ctx.Err() != nil {
			return
		}
		st, err := m.volumeStats(ctx, v, clk.Now())
		if err != nil {
			m.log.Debug("CSI volume stats", "volume", filepath.Base(dir), "podUID", v.PodUID, "err", err)
			continue
		}
		m.uses.setStats(dir, v.Handle, st)
	}
}

// volumeStats is NodeGetVolumeStats of one volume; nil without the
// capability.
func (m *Mounter) volumeStats(ctx context.Context, v volumeUse, now time.Time) (*statsapi.VolumeStats, error) {
	drv, err := m.registry.Driver(v.Driver)
	if err != nil {
		return nil, err
	}
	nc, err := newNodeClient(drv.Endpoint)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	caps, err := nc.capabilities(ctx)
	if err != nil || !caps.volumeStats {
		return nil, err
	}
	resp, err := nc.volumeStats(ctx, v.Handle, v.Target, v.Staging)
	if err != nil {
		return nil, err
	}
	return statsOf(v, resp, now), nil
}

// statsOf translates NodeGetVolumeStats into the summary's volume stats,
// as the kubelet's csi metrics provider: bytes and inodes, negative
// numbers dropped.
func statsOf(v volumeUse, resp *csipb.NodeGetVolumeStatsResponse, now time.Time) *statsapi.VolumeStats {
	st := &statsapi.VolumeStats{Name: v.PodVolume, FsStats: statsapi.FsStats{Time: metav1.NewTime(now)}}
	if v.Claim != "" {
		st.PVCRef = &statsapi.PVCReference{Name: v.Claim, Namespace: v.Namespace}
	}
	u := func(n int64) *uint64 {
		if n < 0 {
			return nil
		}
		x := uint64(n)
		return &x
	}
	for _, usage := range resp.GetUsage() {
		switch usage.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			st.CapacityBytes, st.AvailableBytes, st.UsedBytes = u(usage.GetTotal()), u(usage.GetAvailable()), u(usage.GetUsed())
		case csipb.VolumeUsage_INODES:
			st.Inodes, st.InodesFree, st.InodesUsed = u(usage.GetTotal()), u(usage.GetAvailable()), u(usage.GetUsed())
		}
	}
	return st
}

// ClaimVolumeStats returns the last stats of every published volume of a
// persistentVolumeClaim, one per claim, for the kubelet_volume_stats_*
// metrics.
func (m *Mounter) ClaimVolumeStats() []statsapi.VolumeStats {
	m.uses.mu.Lock()
	defer m.uses.mu.Unlock()
	seen := map[statsapi.PVCReference]bool{}
	var out []statsapi.VolumeStats
	for _, v := range m.uses.m {
		if v.Stats == nil || v.Stats.PVCRef == nil || seen[*v.Stats.PVCRef] {
			continue
		}
		seen[*v.Stats.PVCRef] = true
		out = append(out, *v.Stats)
	}
	return out
}

// VolumesInUse lists the attached volumes published on the node, sorted,
// as the Node's status.volumesInUse names them
// (kubernetes.io/csi/<driver>^<volumeHandle>): the attach/detach
// controller does not detach those. Never nil.
func (m *Mounter) VolumesInUse() []v1.UniqueVolumeName {
	m.uses.mu.Lock()
	defer m.uses.mu.Unlock()
	out := []v1.UniqueVolumeName{}
	for _, v := range m.uses.m {
		if n := UniqueName(v.Driver, v.Handle); v.Attached && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
