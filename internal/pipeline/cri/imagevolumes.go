package cri

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// How long ImageVolumes trusts the runtime's version (a runtime can be
// upgraded under a running nodelet), and how soon it asks again after a
// failed answer.
const (
	imageVolumesTTL   = time.Minute
	imageVolumesRetry = 5 * time.Second
)

// VersionReader is the Version call ImageVolumes needs (*Client).
type VersionReader interface {
	Version(ctx context.Context) (*runtimeapi.VersionResponse, error)
}

// The first releases whose CRI mounts image volumes (runtimeapi.Mount.Image)
// and a subPath inside one (Mount.ImageSubPath). A runtime of an older
// release ignores the fields it does not know and gets a mount without a
// host path: containerd 1.x fails the container with `failed to mkdir ""`.
var imageVolumeReleases = map[string]struct{ volumes, subPath [2]int }{
	"containerd": {volumes: [2]int{2, 1}, subPath: [2]int{2, 2}},
	"cri-o":      {volumes: [2]int{1, 31}, subPath: [2]int{1, 33}},
}

// ImageVolumeSupport is whether the runtime named name, of release
// version (its CRI Version answer), mounts image volumes (with subPath: a
// subPath inside one): nil if it does, else why not. A runtime nodelet
// does not know, or a version it cannot read, is trusted to (its own error
// says otherwise).
func ImageVolumeSupport(name, version string, subPath bool) error {
	rel, ok := imageVolumeReleases[name]
	if !ok {
		return nil
	}
	got, ok := majorMinor(version)
	if !ok {
		return nil
	}
	need, what := rel.volumes, "image volumes"
	if subPath {
		need, what = rel.subPath, "a subPath of an image volume"
	}
	if got[0] < need[0] || got[0] == need[0] && got[1] < need[1] {
		return fmt.Errorf("the container runtime %s %s cannot mount %s (%s %d.%d and newer can)", name, version, what, name, need[0], need[1])
	}
	return nil
}

// majorMinor reads "v2.2.1", "1.6.20~ds1", "2.1.0-k3s1" as {2, 2}, {1, 6},
// {2, 1}.
func majorMinor(version string) ([2]int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{major, minor}, true
}

// ImageVolumes tells whether the runtime mounts image volumes, from its
// CRI Version, asked at most once a minute (every 5 s while it does not
// answer): the CRI has no feature flag for them.
type ImageVolumes struct {
	rt    VersionReader
	clock clock.Clock
	log   *slog.Logger

	mu            sync.Mutex
	next          time.Time
	name, version string
}

// NewImageVolumes returns an ImageVolumes asking rt; clk and log may be
// nil.
func NewImageVolumes(rt VersionReader, clk clock.Clock, log *slog.Logger) *ImageVolumes {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ImageVolumes{rt: rt, clock: clk, log: log}
}

// ImageVolumes is nil if the runtime mounts image volumes (with subPath:
// a subPath inside one), else why not; nil while its version is unknown.
func (v *ImageVolumes) ImageVolumes(ctx context.Context, subPath bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if now := v.clock.Now(); !now.Before(v.next) {
		v.next = now.Add(imageVolumesTTL)
		resp, err := v.rt.Version(ctx)
		if err != nil {
			// Keep what was known: a restarting runtime comes back as it
			// was, most likely.
			v.log.Warn("Reading the runtime's version", "err", err)
			v.next = now.Add(imageVolumesRetry)
		} else {
			v.name, v.version = resp.GetRuntimeName(), resp.GetRuntimeVersion()
		}
	}
	return ImageVolumeSupport(v.name, v.version, subPath)
}
