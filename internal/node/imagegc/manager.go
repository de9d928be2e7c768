package imagegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/metrics"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kubelet's event reasons.
const (
	EventImageGCFailed       = "ImageGCFailed"
	EventFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	EventInvalidDiskCapacity = "InvalidDiskCapacity"
)

// Runtime is what the manager needs of the container runtime;
// *cri.Client satisfies it.
type Runtime interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

var _ Runtime = (*cri.Client)(nil)

// Filesystems measures a filesystem by a path on it (statfs);
// *stats.HostMachine satisfies it.
type Filesystems interface {
	FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error)
}

// NodeEvents records events about the node (events.Recorder).
type NodeEvents interface {
	NodeEvent(node, eventType, reason, message string)
}

// Deps are the manager's collaborators.
type Deps struct {
	Runtime Runtime
	Fs      Filesystems
	// Events and NodeName: the node events (nil Events: none).
	Events   NodeEvents
	NodeName string
	// Registerer gets kubelet_image_garbage_collected_total (nil: none).
	Registerer prometheus.Registerer
	// Records, when set, drop the pull records of images gone after each
	// collection (the kubelet's post-GC hook PruneUnknownRecords).
	Records Records
	Clock   clock.Clock
	Log     *slog.Logger
}

// Records are the image pull records (pulledimages.Manager).
type Records interface {
	// PruneUnknown drops the records of images not in present (image
	// IDs) last updated before listed.
	PruneUnknown(present []string, listed time.Time)
}

// Manager is the kubelet's image garbage collector.
type Manager struct {
	policy  Policy
	sandbox []string // the sandbox images, normalized
	deps    Deps
	started time.Time
	removed *prometheus.CounterVec

	// mu serializes collections (Run's, the eviction manager's) and
	// guards records.
	mu      sync.Mutex
	records map[string]*record
}

// record is what the manager remembers of one image between collections.
type record struct {
	firstDetected, lastUsed time.Time
}

// New returns a manager with the policy, which never removes the
// sandboxImages (the configured pause image; the runtime usually pins it
// too). The maximum age counts from now.
func New(policy Policy, sandboxImages []string, deps Deps) (*Manager, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{policy: policy, deps: deps, started: deps.Clock.Now(), records: map[string]*record{}}
	for _, s := range sandboxImages {
		m.sandbox = append(m.sandbox, normalize(s))
	}
	m.removed = metrics.Register(deps.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubelet_image_garbage_collected_total",
		Help: "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
	}, []string{"reason"}))
	return m, nil
}

// Run collects images every Period, the first time now, until ctx ends;
// with a policy that cannot remove anything (Policy.Periodic) it returns
// at once. A collection that fails twice in a row is an ImageGCFailed
// node event, as the kubelet's.
func (m *Manager) Run(ctx context.Context) {
	if !m.policy.Periodic() {
		m.deps.Log.Info("image garbage collection is off: imageGCHighThresholdPercent is 100 and imageMaximumGCAge 0")
		return
	}
	failedBefore := false
	for {
		err := m.GarbageCollect(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && failedBefore:
			m.deps.Log.Error("image garbage collection failed again", "err", err)
			m.event(v1.EventTypeWarning, EventImageGCFailed, err.Error())
		case err != nil:
			m.deps.Log.Warn("image garbage collection failed", "err", err)
		case failedBefore:
			m.deps.Log.Info("image garbage collection succeeded")
		}
		failedBefore = err != nil
		select {
		case <-ctx.Done():
			return
		case <-m.deps.Clock.After(Period):
		}
	}
}

// GarbageCollect collects images once: by maximum age, then, when the
// image filesystem is at least the high threshold full, down to the low
// threshold. Not freeing enough is an error and a FreeDiskSpaceFailed node
// event.
func (m *Manager) GarbageCollect(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.deps.Clock.Now()
	images, err := m.detect(ctx, now)
	if err != nil {
		return err
	}
	disk, err := m.imageDisk(ctx)
	if err != nil {
		return err
	}
	plan, planErr := Compute(Input{Images: images, Disk: disk, Policy: m.policy, Now: now, Started: m.started})
	if errors.Is(planErr, ErrInvalidCapacity) {
		m.event(v1.EventTypeWarning, EventInvalidDiskCapacity, planErr.Error())
	}
	if plan.BytesToFree > 0 {
		m.deps.Log.Info("disk usage on the image filesystem is over the high threshold, freeing down to the low threshold",
			"usage", plan.UsagePercent, "highThreshold", m.policy.HighThresholdPercent, "lowThreshold", m.policy.LowThresholdPercent,
			"bytesToFree", plan.BytesToFree)
	}
	freed, execErr := m.execute(ctx, plan)
	m.pruneRecords(now)
	if err := errors.Join(planErr, execErr); err != nil {
		return err
	}
	if freed < plan.BytesToFree {
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			plan.UsagePercent, FormatSize(disk.Capacity), freed)
		m.event(v1.EventTypeWarning, EventFreeDiskSpaceFailed, msg)
		return errors.New(msg)
	}
	return nil
}

// DeleteUnusedImages removes every image no container uses that is not
// pinned, not the sandbox image and not younger than the minimum age (as
// the kubelet's, which the eviction manager calls to reclaim disk), and
// returns the bytes freed by the runtime's image sizes. It removes what
// it can: an image that cannot be removed is in the error, the others
// still go.
func (m *Manager) DeleteUnusedImages(ctx context.Context) (freedBytes int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deps.Log.Info("deleting unused images")
	now := m.deps.Clock.Now()
	images, err := m.detect(ctx, now)
	if err != nil {
		return 0, err
	}
	plan, _ := Compute(Input{Images: images, Policy: m.policy, Now: now, Started: m.started, All: true})
	freed, err := m.execute(ctx, plan)
	m.pruneRecords(now)
	return freed, err
}

// pruneRecords drops the pull records of the images not present any more:
// those of the last list (taken at or after listed) but the ones removed
// since. The record of an image pulled after the list is newer than
// listed and stays.
func (m *Manager) pruneRecords(listed time.Time) {
	if m.deps.Records == nil {
		return
	}
	present := make([]string, 0, len(m.records))
	for id := range m.records {
		present = append(present, id)
	}
	m.deps.Records.PruneUnknown(present, listed)
}

// execute removes what the plan removes. A removal for space that fails
// is made up for by the next image the plan kept as not needed, as the
// kubelet goes on down its list until enough is freed. It returns the
// bytes the removals for space freed.
func (m *Manager) execute(ctx context.Context, plan Plan) (freed int64, err error) {
	var errs []error
	for _, d := range plan.Decisions {
		switch {
		case d.Remove && d.Reason == ReasonAge:
		case (d.Remove && d.Reason == ReasonSpace || d.Reason == KeepNotNeeded) && freed < plan.BytesToFree:
			d.Reason = ReasonSpace
		default:
			continue
		}
		if err := m.remove(ctx, d); err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Reason == ReasonSpace {
			freed += d.Size
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("freed %d of %d bytes, with errors removing images: %w", freed, plan.BytesToFree, errors.Join(errs...))
	}
	return freed, nil
}

// remove removes one image and forgets it.
func (m *Manager) remove(ctx context.Context, d Decision) error {
	m.deps.Log.Info("removing image", "image", d.ID, "tags", d.Tags, "size", d.Size, "reason", d.Reason,
		"lastUsed", d.LastUsed, "firstDetected", d.FirstDetected)
	if err := m.deps.Runtime.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: d.ID}); err != nil {
		return fmt.Errorf("remove image %s: %w", d.ID, err)
	}
	delete(m.records, d.ID)
	m.removed.WithLabelValues(d.Reason).Inc()
	return nil
}

// detect lists the images and the containers, records images first seen
// and the use of those a container is of (in any state), forgets images
// gone, and returns every image as the plan sees it.
func (m *Manager) detect(ctx context.Context, now time.Time) ([]Image, error) {
	listed, err := m.deps.Runtime.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	containers, err := m.deps.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range containers {
		used[c.GetImageRef()] = true
		used[c.GetImage().GetImage()] = true
		// The images it mounts as image volumes, as the kubelet's
		// handleImageVolumes counts them.
		if images := c.GetAnnotations()[podspec.AnnotationImageVolumes]; images != "" {
			for _, img := range strings.Split(images, ",") {
				used[img] = true
			}
		}
	}
	delete(used, "")
	seen := make(map[string]bool, len(listed))
	images := make([]Image, 0, len(listed))
	for _, li := range listed {
		id := li.GetId()
		seen[id] = true
		r := m.records[id]
		if r == nil {
			r = &record{firstDetected: now}
			m.records[id] = r
		}
		img := Image{ID: id, Tags: li.GetRepoTags(), Size: int64(li.GetSize()), Pinned: li.GetPinned(),
			InUse:   used[id] || slices.ContainsFunc(li.GetRepoTags(), mapHas(used)) || slices.ContainsFunc(li.GetRepoDigests(), mapHas(used)),
			Sandbox: slices.ContainsFunc(li.GetRepoTags(), m.isSandbox) || slices.Contains(m.sandbox, id)}
		if img.InUse {
			r.lastUsed = now
		}
		img.FirstDetected, img.LastUsed = r.firstDetected, r.lastUsed
		images = append(images, img)
	}
	for id := range m.records {
		if !seen[id] {
			delete(m.records, id)
		}
	}
	return images, nil
}

// imageDisk measures the runtime's (first) image filesystem, as the kubelet.
func (m *Manager) imageDisk(ctx context.Context) (Disk, error) {
	resp, err := m.deps.Runtime.ImageFsInfo(ctx)
	if err != nil {
		return Disk{}, fmt.Errorf("image filesystem: %w", err)
	}
	fss := resp.GetImageFilesystems()
	if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
		return Disk{}, errors.New("image filesystem: the runtime names none")
	}
	mp := fss[0].GetFsId().GetMountpoint()
	capacity, available, _, _, _, err := m.deps.Fs.FsStats(mp)
	if err != nil {
		return Disk{}, fmt.Errorf("image filesystem: %w", err)
	}
	return Disk{Capacity: int64(capacity), Available: int64(available)}, nil
}

func (m *Manager) isSandbox(tag string) bool { return slices.Contains(m.sandbox, normalize(tag)) }

func (m *Manager) event(eventType, reason, message string) {
	if m.deps.Events != nil {
		m.deps.Events.NodeEvent(m.deps.NodeName, eventType, reason, message)
	}
}

func mapHas(set map[string]bool) func(string) bool { return func(s string) bool { return set[s] } }

// normalize is an image reference in full ("pause:3.10" is
// "docker.io/library/pause:3.10"); one that does not parse stays as it is.
func normalize(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}
