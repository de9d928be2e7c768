package podruntime

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/plan"
)

// imagePuller pulls images with a bound on concurrent pulls and a per-image
// back-off after failures.
type imagePuller struct {
	rt    Runtime
	sem   chan struct{} // counting semaphore: capacity is the pull limit
	clock clock.Clock

	// backoff is each image's pull history since its last success: the
	// facts plan.ImageDecision decides from.
	mu      sync.Mutex
	backoff map[string]plan.PullBackOff
}

func newImagePuller(rt Runtime, limit int, clk clock.Clock) *imagePuller {
	return &imagePuller{rt: rt, sem: make(chan struct{}, limit), clock: clk, backoff: map[string]plan.PullBackOff{}}
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

// ensure returns the image for c, pulling it when plan.ImageDecision says.
func (p *imagePuller) ensure(ctx context.Context, c *v1.Container, sandboxCfg *runtimeapi.PodSandboxConfig) (image, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	var present *bool
	var local *runtimeapi.Image
	for {
		step, w := plan.ImageDecision(c, present, p.history(c.Image), p.clock.Now())
		switch step {
		case plan.UseLocal:
			return image{ref: local.GetId(), status: local}, nil
		case plan.Wait:
			return image{}, &pullError{w}
		case plan.Pull:
			return p.pull(ctx, c, spec, sandboxCfg)
		}
		st, err := p.rt.ImageStatus(ctx, spec)
		if err != nil {
			return image{}, fmt.Errorf("look up image %q: %w", c.Image, err)
		}
		local = st.GetImage()
		found := local != nil
		present = &found
	}
}

// pull pulls the image within the bound on concurrent pulls and records
// the outcome in the image's pull history.
func (p *imagePuller) pull(ctx context.Context, c *v1.Container, spec *runtimeapi.ImageSpec, sandboxCfg *runtimeapi.PodSandboxConfig) (image, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return image{}, ctx.Err()
	}
	ref, err := p.rt.PullImage(ctx, spec, nil, sandboxCfg)
	<-p.sem
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return image{}, err
		}
		msg := fmt.Sprintf("Failed to pull image %q: %v", c.Image, err)
		p.backoff[c.Image] = p.backoff[c.Image].Failed(p.clock.Now(), msg)
		return image{}, &pullError{plan.Waiting{Reason: plan.ReasonErrImagePull, Message: msg}}
	}
	delete(p.backoff, c.Image)
	return image{ref: ref, pulled: true}, nil
}

func (p *imagePuller) history(image string) plan.PullBackOff {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backoff[image]
}
