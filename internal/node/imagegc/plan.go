package imagegc

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Policy is when images are collected, by the kubelet's settings.
type Policy struct {
	// HighThresholdPercent is the disk usage at which images are removed
	// (imageGCHighThresholdPercent, --image-gc-high-threshold; 85); 100
	// never.
	HighThresholdPercent int
	// LowThresholdPercent is the usage removals bring the disk down to
	// (imageGCLowThresholdPercent, --image-gc-low-threshold; 80).
	LowThresholdPercent int
	// MinAge is how long an image must have been known before disk usage
	// may remove it (imageMinimumGCAge, --minimum-image-gc-age; 2m): a
	// freshly pulled image is about to be used.
	MinAge time.Duration
	// MaxAge removes images unused for longer, whatever the disk
	// (imageMaximumGCAge; 0, the default, never).
	MaxAge time.Duration
}

// Defaults are the kubelet's.
const (
	DefaultHighThresholdPercent = 85
	DefaultLowThresholdPercent  = 80
	DefaultMinAge               = 2 * time.Minute
	// Period is how often the kubelet collects images (ImageGCPeriod).
	Period = 5 * time.Minute
)

// DefaultPolicy is the kubelet's default policy.
func DefaultPolicy() Policy {
	return Policy{HighThresholdPercent: DefaultHighThresholdPercent, LowThresholdPercent: DefaultLowThresholdPercent,
		MinAge: DefaultMinAge}
}

// Validate checks the policy as the kubelet checks its configuration:
// both thresholds in 0..100, the low one below the high one, no negative
// age, and a maximum age, when set, above the minimum.
func (p Policy) Validate() error {
	var errs []error
	if p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("imageGCHighThresholdPercent (--image-gc-high-threshold) %d must be between 0 and 100, inclusive", p.HighThresholdPercent))
	}
	if p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("imageGCLowThresholdPercent (--image-gc-low-threshold) %d must be between 0 and 100, inclusive", p.LowThresholdPercent))
	}
	if p.LowThresholdPercent >= p.HighThresholdPercent {
		errs = append(errs, fmt.Errorf("imageGCLowThresholdPercent (--image-gc-low-threshold) %d must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) %d", p.LowThresholdPercent, p.HighThresholdPercent))
	}
	if p.MinAge < 0 {
		errs = append(errs, fmt.Errorf("imageMinimumGCAge (--minimum-image-gc-age) %v must not be negative", p.MinAge))
	}
	if p.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("imageMaximumGCAge %v must not be negative", p.MaxAge))
	}
	if p.MaxAge > 0 && p.MaxAge <= p.MinAge {
		errs = append(errs, fmt.Errorf("imageMaximumGCAge %v must be greater than imageMinimumGCAge %v", p.MaxAge, p.MinAge))
	}
	return errors.Join(errs...)
}

// Periodic says whether collecting every Period can remove anything: the
// kubelet does not run it with a high threshold of 100 and no maximum age.
func (p Policy) Periodic() bool { return p.HighThresholdPercent < 100 || p.MaxAge > 0 }

// Image is what the plan knows of one image.
type Image struct {
	// ID is the runtime's image ID; Tags its repo tags, for the log.
	ID   string
	Tags []string
	// Size is the image's size in bytes, as the runtime reports it.
	Size int64
	// FirstDetected is when nodelet first saw the image; LastUsed when it
	// last saw a container of it (zero: never).
	FirstDetected, LastUsed time.Time
	// InUse: a container (in any state) is of this image.
	InUse bool
	// Pinned: the runtime says it must not be removed.
	Pinned bool
	// Sandbox: it is the configured sandbox (pause) image.
	Sandbox bool
}

// Disk is the image filesystem, in bytes.
type Disk struct {
	Capacity, Available int64
}

// Input is what a plan is computed from.
type Input struct {
	Images []Image
	Disk   Disk
	Policy Policy
	// Now is when the plan is made; Started when collection began (the
	// maximum age only applies once nodelet has run that long, so that
	// images are not judged by a use it could not see).
	Now, Started time.Time
	// All plans DeleteUnusedImages: every image that may go goes, whatever
	// the disk (the minimum age still holds), and none by maximum age.
	All bool
}

// Why an image goes (the metric's reason label) or stays.
const (
	// ReasonAge and ReasonSpace are kubelet_image_garbage_collected_total's
	// reasons: unused longer than the maximum age, or to free disk.
	ReasonAge   = "age"
	ReasonSpace = "space"

	KeepInUse    = "in use"
	KeepPinned   = "pinned"
	KeepSandbox  = "sandbox image"
	KeepTooYoung = "younger than imageMinimumGCAge"
	// KeepNotNeeded could go for space, but the disk does not need it;
	// the Manager removes such images, in order, when one it meant to
	// remove cannot be.
	KeepNotNeeded = "not needed"
)

// Decision is one image and what happens to it.
type Decision struct {
	Image
	Remove bool
	// Reason is ReasonAge or ReasonSpace for an image removed, one of the
	// Keep reasons for one kept.
	Reason string
}

// Plan is what to remove, in order, and what the disk needs.
type Plan struct {
	// Decisions are every image: first those removed by age, then the
	// others in eviction order (least recently used first, then first
	// detected first, then by ID).
	Decisions []Decision
	// UsagePercent is the disk's usage as the kubelet computes it (after
	// the removals by age, as the kubelet looks at the disk after them).
	UsagePercent int
	// BytesToFree is how much the disk needs freed to reach the low
	// threshold; 0 below the high threshold, math.MaxInt64 for All.
	BytesToFree int64
	// Freed is what the planned removals for space free, by image size.
	Freed int64
}

// Remove are the images the plan removes, in order.
func (p Plan) Remove() []Decision {
	var out []Decision
	for _, d := range p.Decisions {
		if d.Remove {
			out = append(out, d)
		}
	}
	return out
}

// ErrInvalidCapacity is Compute's error for a disk of capacity 0: nothing
// is removed for space, the removals by age are still planned.
var ErrInvalidCapacity = errors.New("invalid capacity 0 on image filesystem")

// Compute decides, as the kubelet's image GC manager, which images go and
// why. In.Images are every image the runtime holds; Compute does not keep
// them.
func Compute(in Input) (Plan, error) {
	images := slices.Clone(in.Images)
	slices.SortFunc(images, evictionOrder)
	var plan Plan
	var candidates []Image // may go for space, in order
	ageFreed := int64(0)
	byAge := !in.All && in.Policy.MaxAge > 0 && in.Now.Sub(in.Started) > in.Policy.MaxAge
	var kept []Decision
	for _, img := range images {
		switch {
		case img.InUse || !img.LastUsed.Before(in.Now):
			kept = append(kept, Decision{Image: img, Reason: KeepInUse})
		case img.Pinned:
			kept = append(kept, Decision{Image: img, Reason: KeepPinned})
		case img.Sandbox:
			kept = append(kept, Decision{Image: img, Reason: KeepSandbox})
		case byAge && in.Now.Sub(unusedSince(img)) > in.Policy.MaxAge:
			plan.Decisions = append(plan.Decisions, Decision{Image: img, Remove: true, Reason: ReasonAge})
			ageFreed += img.Size
		default:
			candidates = append(candidates, img)
		}
	}

	capacity, available := in.Disk.Capacity, min(in.Disk.Available+ageFreed, in.Disk.Capacity)
	var err error
	switch {
	case in.All:
		plan.BytesToFree = math.MaxInt64
	case capacity <= 0:
		err = ErrInvalidCapacity
	default:
		plan.UsagePercent = 100 - int(available*100/capacity)
		if plan.UsagePercent >= in.Policy.HighThresholdPercent {
			plan.BytesToFree = capacity*int64(100-in.Policy.LowThresholdPercent)/100 - available
		}
	}
	for _, img := range candidates {
		switch {
		case in.Now.Sub(img.FirstDetected) < in.Policy.MinAge:
			kept = append(kept, Decision{Image: img, Reason: KeepTooYoung})
		case plan.Freed < plan.BytesToFree:
			plan.Decisions = append(plan.Decisions, Decision{Image: img, Remove: true, Reason: ReasonSpace})
			plan.Freed += img.Size
		default:
			kept = append(kept, Decision{Image: img, Reason: KeepNotNeeded})
		}
	}
	slices.SortStableFunc(kept, func(a, b Decision) int { return evictionOrder(a.Image, b.Image) })
	plan.Decisions = append(plan.Decisions, kept...)
	return plan, err
}

// unusedSince is when an image was last used or, never used, first
// detected. The kubelet ages a never-used image from the zero time, which
// removes an image pulled a moment ago as soon as it has run MaxAge;
// nodelet does not.
func unusedSince(img Image) time.Time {
	if img.LastUsed.After(img.FirstDetected) {
		return img.LastUsed
	}
	return img.FirstDetected
}

// evictionOrder is the kubelet's: least recently used first, then first
// detected first; the ID last, so that the order does not depend on the
// runtime's.
func evictionOrder(a, b Image) int {
	if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
		return c
	}
	if c := a.FirstDetected.Compare(b.FirstDetected); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// FormatSize is a size in bytes as the kubelet's events write it.
func FormatSize(n int64) string {
	const (
		kib = 1 << 10
		mib = 1 << 20
		gib = 1 << 30
		tib = 1 << 40
	)
	f := float64(n)
	switch {
	case n < kib:
		return fmt.Sprintf("%d B", n)
	case n < mib:
		return fmt.Sprintf("%.1f KiB", f/kib)
	case n < gib:
		return fmt.Sprintf("%.1f MiB", f/mib)
	case n < tib:
		return fmt.Sprintf("%.1f GiB", f/gib)
	}
	return fmt.Sprintf("%.1f TiB", f/tib)
}
