package stats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Runtime is the part of the CRI client the provider uses: list calls
// only, never per-container ones.
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
	ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// Machine gives the facts of the node itself. HostMachine is the real one.
type Machine interface {
	// BootTime is when the node booted: the node's start time.
	BootTime() (time.Time, error)
	// NodeCPUUsage is the CPU time used by the whole node since boot.
	NodeCPUUsage() (usageCoreNanoSeconds uint64, err error)
	// NodeMemory is the memory use of the whole node, in bytes (page
	// faults are counts).
	NodeMemory() (workingSet, usage, available, rss, pageFaults, majorPageFaults uint64, err error)
	// FsStats is statfs of the filesystem holding path, in bytes and
	// inodes.
	FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error)
	// IsTmpfs reports whether path is a tmpfs mounted there (not merely
	// a directory of a tmpfs above it).
	IsTmpfs(path string) (bool, error)
	// DiskUsage walks the tree at path (du -x): the bytes of its blocks
	// and its inodes, hard links counted once.
	DiskUsage(path string) (usedBytes, inodesUsed uint64, err error)
}

// Defaults.
const (
	// DefaultCacheTTL is how long a summary is served from the cache.
	DefaultCacheTTL = time.Second
	// DefaultDiskUsageTTL is how long a directory's measured usage is
	// served before it is measured again (the kubelet's
	// --volume-stats-agg-period).
	DefaultDiskUsageTTL = time.Minute
	// DefaultPodLogsDir is where the runtime writes container logs.
	DefaultPodLogsDir = "/var/log/pods"
)

const (
	// refreshTimeout bounds one refresh, which runs detached from the
	// callers' contexts.
	refreshTimeout = 30 * time.Second
	// sandboxStatsRetry is how long an Unimplemented ListPodSandboxStats
	// is believed.
	sandboxStatsRetry = 10 * time.Minute
	// forgetAfter drops CPU samples and disk usage of objects not seen
	// for that long.
	forgetAfter = 10 * time.Minute
)

// Option tunes a Provider.
type Option func(*Provider)

// WithPodLogsDir sets where container logs are (DefaultPodLogsDir).
func WithPodLogsDir(dir string) Option { return func(p *Provider) { p.podLogsDir = dir } }

// WithCacheTTL sets how long a summary is cached (DefaultCacheTTL).
func WithCacheTTL(d time.Duration) Option { return func(p *Provider) { p.cacheTTL = d } }

// WithServeStale makes Summary answer at once with the last snapshot, if
// it is younger than maxStale, while a refresh runs in the background.
func WithServeStale(maxStale time.Duration) Option {
	return func(p *Provider) { p.maxStale = maxStale }
}

// WithDiskUsageTTL sets how long a directory's usage is cached
// (DefaultDiskUsageTTL).
func WithDiskUsageTTL(d time.Duration) Option { return func(p *Provider) { p.du.ttl = d } }

// Provider builds stats summaries. It is safe for concurrent use.
type Provider struct {
	rt         Runtime
	machine    Machine
	nodeName   string
	rootDir    string
	podLogsDir string
	clk        clock.PassiveClock
	log        *slog.Logger
	cacheTTL   time.Duration
	volumes    Volumes // nil: only emptyDir volumes
	// maxStale is the oldest snapshot served while a refresh runs; zero
	// (the default) makes callers wait for the refresh.
	maxStale time.Duration

	cpu *cpuTracker
	du  *duCache

	mu sync.Mutex
	// cache and flights are indexed by kind.
	cache   [kinds]*snapshot
	flights [kinds]*flight
	// sandboxStatsUnimplemented is when ListPodSandboxStats last answered
	// Unimplemented (zero: never).
	sandboxStatsUnimplemented time.Time
}

// kind is a cache slot.
type kind int

const (
	kindFull   kind = iota
	kindCPUMem      // onlyCPUAndMemory
	kindNode        // NodeSummary: the node alone
	kinds
)

// snapshot is one refresh's summary, shared by every caller of its cache
// period, with its JSON encoding made once, by the first caller who asks.
type snapshot struct {
	// at is when the refresh started, freshUntil when the snapshot stops
	// being served without a refresh (see fly).
	at, freshUntil time.Time
	summary        *v1alpha1.Summary

	encodeOnce sync.Once
	json       []byte
	etag       string
	encodeErr  error
}

// encode returns the snapshot's JSON encoding and its entity tag,
// encoding it on first use.
func (s *snapshot) encode() ([]byte, string, error) {
	s.encodeOnce.Do(func() {
		data, err := json.Marshal(s.summary)
		if err != nil {
			s.encodeErr = fmt.Errorf("encode stats summary: %w", err)
			return
		}
		sum := sha256.Sum256(data)
		s.json, s.etag = data, `"`+hex.EncodeToString(sum[:16])+`"`
	})
	return s.json, s.etag, s.encodeErr
}

// flight is one refresh in progress; done is closed once snap (and
// cpuMem) or err is set.
type flight struct {
	done chan struct{}
	snap *snapshot
	// cpuMem is the CPU-and-memory view of a full refresh, for the
	// callers of that slot who joined it.
	cpuMem *snapshot
	err    error
	// encode is, per slot, whether a caller waiting for the refresh
	// wants JSON: the refresh then encodes before it publishes, so that
	// the callers served the previous snapshot meanwhile (WithServeStale)
	// never wait for an encoding either. Guarded by Provider.mu.
	encode [kinds]bool
}

// New returns a provider for the node nodeName whose kubelet root
// directory (pods, volumes) is rootDir.
func New(rt Runtime, machine Machine, nodeName string, rootDir string, clk clock.PassiveClock, log *slog.Logger, opts ...Option) *Provider {
	p := &Provider{
		rt:         rt,
		machine:    machine,
		nodeName:   nodeName,
		rootDir:    rootDir,
		podLogsDir: DefaultPodLogsDir,
		clk:        clk,
		log:        log,
		cacheTTL:   DefaultCacheTTL,
		cpu:        &cpuTracker{samples: map[string]*cpuSample{}},
		du:         &duCache{entries: map[string]*duEntry{}, ttl: DefaultDiskUsageTTL, clk: clk, machine: machine, log: log},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Summary returns the stats summary of the node and of nodelet's pods.
// With onlyCPUAndMemory, filesystem, volume and network stats are left out
// (the kubelet's GetCPUAndMemoryStats). The result may come from the cache
// (see the package documentation) and must not be modified.
func (p *Provider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*v1alpha1.Summary, error) {
	s, err := p.snapshot(ctx, onlyCPUAndMemory, false)
	if err != nil {
		return nil, err
	}
	return s.summary, nil
}

// NodeSummary is a summary whose Node is full (CPU, memory, processes,
// the root filesystem and the runtime's image and container filesystems)
// and whose Pods may be empty: what the eviction manager's node-level
// signals are read from. A fresh full summary in the cache (or one being
// read) serves; otherwise it is read without the pods, with one
// ImageFsInfo call and the host's files, and cached in a slot of its own.
// It must not be modified.
func (p *Provider) NodeSummary(ctx context.Context) (*v1alpha1.Summary, error) {
	s, err := p.snapshotOf(ctx, kindNode, false)
	if err != nil {
		return nil, err
	}
	return s.summary, nil
}

// FreshSummary is a full summary read now, past the cache and without
// storing it, the volumes' disk usage measured now too: what the eviction
// manager decides from, when a summary even a second old would still show
// the space a reclaim freed, or a volume's usage a minute old would hide
// the pod that just filled it.
func (p *Provider) FreshSummary(ctx context.Context) (*v1alpha1.Summary, error) {
	return p.refreshWith(ctx, true, true)
}

// SummaryJSON is Summary encoded as JSON, as /stats/summary serves it,
// and a strong entity tag of that encoding (quoted, a digest of it). The
// encoding is made once per cached summary and shared by its callers:
// they must not modify it.
func (p *Provider) SummaryJSON(ctx context.Context, onlyCPUAndMemory bool) (body []byte, etag string, err error) {
	s, err := p.snapshot(ctx, onlyCPUAndMemory, true)
	if err != nil {
		return nil, "", err
	}
	return s.encode()
}

// snapshot returns the cached summary of the slot, refreshing it when it
// is too old; wantJSON tells a refresh to encode it.
func (p *Provider) snapshot(ctx context.Context, onlyCPUAndMemory, wantJSON bool) (*snapshot, error) {
	k := kindFull
	if onlyCPUAndMemory {
		k = kindCPUMem
	}
	return p.snapshotOf(ctx, k, wantJSON)
}

// snapshotOf is snapshot for the slot k.
func (p *Provider) snapshotOf(ctx context.Context, k kind, wantJSON bool) (*snapshot, error) {
	p.mu.Lock()
	now := p.clk.Now()
	if s := p.cache[k]; s != nil && now.Before(s.freshUntil) {
		p.mu.Unlock()
		return s, nil
	}
	if s := p.cache[kindFull]; k == kindNode && s != nil && now.Before(s.freshUntil) {
		// A full summary holds the node's.
		p.mu.Unlock()
		return s, nil
	}
	f := p.flights[k]
	if f == nil && k != kindFull && p.flights[kindFull] != nil {
		f = p.flights[kindFull]
	}
	if f == nil {
		f = &flight{done: make(chan struct{})}
		p.flights[k] = f
		go p.fly(context.WithoutCancel(ctx), k, f)
	}
	f.encode[k] = f.encode[k] || wantJSON
	// Stale while revalidating (WithServeStale): containerd 1.6 takes
	// about 13 ms per container to list stats (1.3 s at 100 pods), so
	// callers get the last snapshot while the refresh runs, unless it is
	// older than maxStale.
	if s := p.cache[k]; s != nil && now.Sub(s.at) < p.maxStale {
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()

	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("stats summary: %w", ctx.Err())
	}
	if f.err != nil {
		return nil, f.err
	}
	if k == kindCPUMem && f.cpuMem != nil {
		// Joined a full refresh.
		return f.cpuMem, nil
	}
	return f.snap, nil
}

// fly runs one refresh of slot k and publishes it.
func (p *Provider) fly(ctx context.Context, k kind, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	at := p.clk.Now()
	var summary *v1alpha1.Summary
	var err error
	if k == kindNode {
		summary = p.refreshNode(ctx)
	} else {
		summary, err = p.refresh(ctx, k == kindFull)
	}
	f.err = err
	if err == nil {
		// Fresh for the cache period, and at least as long after the
		// refresh as it took: callers that never stop keep the runtime
		// busy with stats at most half of the time (containerd 1.6 lists
		// 100 pods' stats in over a second, longer than the period).
		end := p.clk.Now()
		fresh := at.Add(p.cacheTTL)
		if rest := end.Add(end.Sub(at)); rest.After(fresh) {
			fresh = rest
		}
		f.snap = &snapshot{at: at, freshUntil: fresh, summary: summary}
		if k == kindFull {
			f.cpuMem = &snapshot{at: at, freshUntil: fresh, summary: cpuAndMemoryOnly(summary)}
		}
		p.mu.Lock()
		encode := f.encode
		p.mu.Unlock()
		// Errors stay with the snapshot, for its callers.
		if encode[k] {
			_, _, _ = f.snap.encode()
		}
		if encode[kindCPUMem] && f.cpuMem != nil {
			_, _, _ = f.cpuMem.encode()
		}
	}

	p.mu.Lock()
	if f.err == nil {
		p.cache[k] = f.snap
		if f.cpuMem != nil {
			p.cache[kindCPUMem] = f.cpuMem
		}
	}
	p.flights[k] = nil
	p.mu.Unlock()
	close(f.done)
}

// cpuAndMemoryOnly is the CPU-and-memory view of a full summary.
func cpuAndMemoryOnly(s *v1alpha1.Summary) *v1alpha1.Summary {
	out := &v1alpha1.Summary{
		Node: v1alpha1.NodeStats{
			NodeName:  s.Node.NodeName,
			StartTime: s.Node.StartTime,
			CPU:       s.Node.CPU,
			Memory:    s.Node.Memory,
		},
		Pods: make([]v1alpha1.PodStats, len(s.Pods)),
	}
	for i := range s.Pods {
		pod := &s.Pods[i]
		cs := make([]v1alpha1.ContainerStats, len(pod.Containers))
		for j := range pod.Containers {
			c := &pod.Containers[j]
			cs[j] = v1alpha1.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory}
		}
		out.Pods[i] = v1alpha1.PodStats{PodRef: pod.PodRef, StartTime: pod.StartTime, Containers: cs, CPU: pod.CPU, Memory: pod.Memory}
	}
	return out
}
