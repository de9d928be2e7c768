package podruntime

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/plan"
)

// Image pull back-off, as the kubelet's: 10 s doubling to 300 s.
const (
	pullBackoffInitial = 10 * time.Second
	pullBackoffMax     = 300 * time.Second
)

// imagePuller pulls images with a bound on concurrent pulls and a per-image
// back-off after failures.
type imagePuller struct {
	rt    Runtime
	sem   chan struct{} // counting semaphore: capacity is the pull limit
	clock clock.Clock

	mu      sync.Mutex
	backoff map[string]pullBackoff
}

type pullBackoff struct {
	until time.Time
	delay time.Duration
	err   string
}

func newImagePuller(rt Runtime, limit int, clk clock.Clock) *imagePuller {
	return &imagePuller{rt: rt, sem: make(chan struct{}, limit), clock: clk, backoff: map[string]pullBackoff{}}
}

// pullError is a failed or held-back pull, with the kubelet's reason
// (ErrImagePull, ImagePullBackOff, ErrImageNeverPull).
type pullError struct{ waiting plan.Waiting }

func (e *pullError) Error() string { return e.waiting.Reason + ": " + e.waiting.Message }

// image is an image ready for a container: its ID, whether it was pulled
// now, and the runtime's description of it when a lookup already had it
// (nil after a pull).
type image struct {
	ref    string
	pulled bool
	status *runtimeapi.Image
}

// ensure returns the image for c, pulling it when the pull policy asks.
func (p *imagePuller) ensure(ctx context.Context, c *v1.Container, sandboxCfg *runtimeapi.PodSandboxConfig) (image, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	if c.ImagePullPolicy != v1.PullAlways {
		st, err := p.rt.ImageStatus(ctx, spec)
		if err != nil {
			return image{}, fmt.Errorf("look up image %q: %w", c.Image, err)
		}
		if st.GetImage() != nil {
			return image{ref: st.GetImage().GetId(), status: st.GetImage()}, nil
		}
		if c.ImagePullPolicy == v1.PullNever {
			return image{}, &pullError{plan.Waiting{Reason: "ErrImageNeverPull",
				Message: fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)}}
		}
	}
	if b, held := p.heldBack(c.Image); held {
		return image{}, &pullError{plan.Waiting{Reason: "ImagePullBackOff",
			Message: fmt.Sprintf("Back-off pulling image %q: %s", c.Image, b.err), Until: b.until}}
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return image{}, ctx.Err()
	}
	ref, err := p.rt.PullImage(ctx, spec, nil, sandboxCfg)
	<-p.sem
	if err != nil {
		if ctx.Err() != nil {
			return image{}, err
		}
		msg := fmt.Sprintf("Failed to pull image %q: %v", c.Image, err)
		p.failed(c.Image, msg)
		return image{}, &pullError{plan.Waiting{Reason: "ErrImagePull", Message: msg}}
	}
	p.succeeded(c.Image)
	return image{ref: ref, pulled: true}, nil
}

func (p *imagePuller) heldBack(image string) (pullBackoff, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.backoff[image]
	return b, ok && p.clock.Now().Before(b.until)
}

func (p *imagePuller) failed(image, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.backoff[image]
	b.delay = min(max(2*b.delay, pullBackoffInitial), pullBackoffMax)
	b.until, b.err = p.clock.Now().Add(b.delay), msg
	p.backoff[image] = b
}

func (p *imagePuller) succeeded(image string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.backoff, image)
}
