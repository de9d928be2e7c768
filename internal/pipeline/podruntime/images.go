package podruntime

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// imagePuller pulls images with a bound on concurrent pulls and a per-image
// back-off after failures.
type imagePuller struct {
	rt    Runtime
	sem   chan struct{} // counting semaphore: capacity is the pull limit
	clock clock.Clock

	// backoff is the pull history since the last success of each image
	// of each pod (backOffKey), as the kubelet keys its image back-off: the
	// facts plan.ImageDecision decides from. One pod's failing pulls do
	// not hold back another pod's pull of the same image (with other
	// credentials, say).
	mu      sync.Mutex
	backoff map[string]plan.PullBackOff

	// records are the ensure-secret-pulled-images records (pullrecords.go);
	// nil: every pod may use every image present.
	records PullRecords
	log     *slog.Logger
}

func newImagePuller(rt Runtime, limit int, clk clock.Clock) *imagePuller {
	return &imagePuller{rt: rt, sem: make(chan struct{}, limit), clock: clk, backoff: map[string]plan.PullBackOff{}}
}

// pullError is a failed or held-back pull, with the kubelet's reason
// (ErrImagePull, ImagePullBackOff, ErrImageNeverPull, RegistryUnavailable,
// SignatureValidationFailed) and message for the container's waiting
// state, and for a pull that failed now the text of its Failed event.
type pullError struct {
	waiting plan.Waiting
	event   string
}

func (e *pullError) Error() string { return e.waiting.Reason + ": " + e.waiting.Message }

// image is an image ready for a container: its ID, whether it was pulled
// now, and with which credential (nil: anonymously), and the runtime's
// description of it (nil when the runtime would not give it after a pull).
type image struct {
	ref    string
	pulled bool
	cred   *pullcreds.Credential
	status *runtimeapi.Image
	// took is how long the pull took, waited the same with its wait for
	// a free pull slot, size the pulled image's size (0 if the runtime
	// would not say): what the kubelet's Pulled event tells.
	took, waited time.Duration
	size         uint64
	// verified: present, and the pull records let the pod use it.
	verified bool
}

// lookedUp is what the runtime said of an image (ImageStatus) before a
// container's start needed it: while its pod's sandbox was made.
type lookedUp struct {
	image string
	local *runtimeapi.Image // nil: not present
}

// lookUp asks the runtime about c's image ahead of ensure (c nil: none),
// when ensure's first step would ask (plan.ImageDecision: LookUp); nil
// when it would not, or the call failed, and ensure asks itself.
func (p *imagePuller) lookUp(ctx context.Context, c *v1.Container, sandboxCfg *runtimeapi.PodSandboxConfig) *lookedUp {
	if c == nil {
		return nil
	}
	if step, _ := plan.ImageDecision(c, nil, p.history(backOffKey(sandboxCfg, c.Image)), p.clock.Now()); step != plan.LookUp {
		return nil
	}
	st, err := p.rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: c.Image})
	if err != nil {
		return nil
	}
	return &lookedUp{image: c.Image, local: st.GetImage()}
}

// ensure returns the image for c, pulling it with the pod's credentials
// (creds; nil: anonymously) when plan.ImageDecision says; pulling, if
// set, is told first (the kubelet's Pulling event). ahead, if it is of c's
// image, is taken for ensure's own look-up.
func (p *imagePuller) ensure(ctx context.Context, c *v1.Container, sandboxCfg *runtimeapi.PodSandboxConfig, creds pullcreds.Lookup, pulling func(), ahead *lookedUp) (image, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	var present *bool
	var local *runtimeapi.Image
	for {
		step, w := plan.ImageDecision(c, present, p.history(backOffKey(sandboxCfg, c.Image)), p.clock.Now())
		switch step {
		case plan.UseLocal:
			verified, mayUse := p.mayUse(ctx, c, local, creds)
			if !mayUse {
				// For this pod the image is not there: pull it with
				// its credentials (pull policy Never: ErrImageNeverPull).
				present = new(bool)
				continue
			}
			return image{ref: local.GetId(), status: local, verified: verified}, nil
		case plan.Wait:
			return image{}, &pullError{waiting: w}
		case plan.Pull:
			if pulling != nil {
				pulling()
			}
			return p.pull(ctx, c, spec, sandboxCfg, creds)
		}
		if ahead != nil && ahead.image == c.Image {
			local, ahead = ahead.local, nil
		} else {
			st, err := p.rt.ImageStatus(ctx, spec)
			if err != nil {
				return image{}, fmt.Errorf("look up image %q: %w", c.Image, err)
			}
			local = st.GetImage()
		}
		found := local != nil
		present = &found
	}
}

// pull pulls the image within the bound on concurrent pulls and records
// the outcome in the image's pull history.
func (p *imagePuller) pull(ctx context.Context, c *v1.Container, spec *runtimeapi.ImageSpec, sandboxCfg *runtimeapi.PodSandboxConfig, creds pullcreds.Lookup) (image, error) {
	queued := p.clock.Now()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return image{}, ctx.Err()
	}
	started := p.clock.Now()
	ref, cred, err := p.recorded(ctx, c.Image, func() (string, *pullcreds.Credential, error) {
		return p.pullWith(ctx, spec, sandboxCfg, creds)
	})
	<-p.sem
	done := p.clock.Now()
	var pulled *runtimeapi.Image
	if err == nil {
		// As the kubelet's puller, which asks for the size after the
		// pull (by the pulled image's ID here, which a concurrent pull
		// of the same name cannot move); a runtime that cannot say makes
		// it 0, not a failure.
		if st, serr := p.rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}); serr == nil {
			pulled = st.GetImage()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return image{}, err
		}
		w := pullFailure(c.Image, err)
		key, now := backOffKey(sandboxCfg, c.Image), p.clock.Now()
		p.backoff[key] = p.backoff[key].Failed(now, w.Message)
		p.forgetOldBackOffs(now)
		return image{}, &pullError{waiting: w, event: fmt.Sprintf("Failed to pull image %q: %v", c.Image, err)}
	}
	delete(p.backoff, backOffKey(sandboxCfg, c.Image))
	return image{ref: ref, pulled: true, cred: cred, status: pulled, took: done.Sub(started), waited: done.Sub(queued), size: pulled.GetSize()}, nil
}

// pullWith pulls the image as the kubelet's PullImage: with no credential
// for the image, anonymously; else with each in turn until one works (never
// anonymously then), failing with all their errors. It returns the
// credential that pulled it (nil: none).
func (p *imagePuller) pullWith(ctx context.Context, spec *runtimeapi.ImageSpec, sandboxCfg *runtimeapi.PodSandboxConfig, creds pullcreds.Lookup) (string, *pullcreds.Credential, error) {
	var try []pullcreds.Credential
	if creds != nil {
		var err error
		if try, err = creds.Credentials(ctx, spec.Image); err != nil {
			return "", nil, err
		}
	}
	if len(try) == 0 {
		ref, err := p.rt.PullImage(ctx, spec, nil, sandboxCfg)
		return ref, nil, err
	}
	var errs []error
	for i := range try {
		ref, err := p.rt.PullImage(ctx, spec, try[i].Auth, sandboxCfg)
		if err == nil {
			return ref, &try[i], nil
		}
		if ctx.Err() != nil {
			return "", nil, err
		}
		errs = append(errs, err)
	}
	return "", nil, aggregate(errs)
}

// aggregate is errs as the kubelet's utilerrors.Aggregate words them: one
// error as itself, more as "[first, second]".
func aggregate(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return &aggregateError{msg: "[" + strings.Join(msgs, ", ") + "]", errs: errs}
}

type aggregateError struct {
	msg  string
	errs []error
}

func (e *aggregateError) Error() string   { return e.msg }
func (e *aggregateError) Unwrap() []error { return e.errs }

func (p *imagePuller) history(key string) plan.PullBackOff {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backoff[key]
}

// backOffKey is the key of an image's pull history for the pod of
// sandboxCfg: its UID and the image, as the kubelet's "<uid>_<image>".
func backOffKey(sandboxCfg *runtimeapi.PodSandboxConfig, image string) string {
	return sandboxCfg.GetMetadata().GetUid() + "_" + image
}

// forgetOldBackOffs drops the histories whose back-off ended more than
// twice the longest back-off ago (the kubelet's back-off GC): pods that
// are gone leave nothing behind for long. Called with p.mu held.
func (p *imagePuller) forgetOldBackOffs(now time.Time) {
	for key, b := range p.backoff {
		if now.Sub(b.Until) > 2*plan.PullBackOffMax {
			delete(p.backoff, key)
		}
	}
}

// The CRI's error names (k8s.io/cri-api/pkg/errors) a runtime may start a
// pull's error with, which the kubelet reports as the waiting reason.
const (
	reasonRegistryUnavailable       = "RegistryUnavailable"
	reasonSignatureValidationFailed = "SignatureValidationFailed"
)

// pullFailure is the waiting state of a container whose image failed to
// pull with err, as the kubelet's evalCRIPullErr words it: the runtime's
// error as it is (reason ErrImagePull), or for an unavailable registry or
// a failed signature validation a sentence saying so, with that reason.
func pullFailure(image string, err error) plan.Waiting {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, reasonRegistryUnavailable):
		return plan.Waiting{Reason: reasonRegistryUnavailable, Message: fmt.Sprintf("image pull failed for %s because the registry is unavailable%s",
			image, strings.TrimPrefix(msg, reasonRegistryUnavailable))}
	case strings.HasPrefix(msg, reasonSignatureValidationFailed):
		return plan.Waiting{Reason: reasonSignatureValidationFailed, Message: fmt.Sprintf("image pull failed for %s because the signature validation failed%s",
			image, strings.TrimPrefix(msg, reasonSignatureValidationFailed))}
	}
	return plan.Waiting{Reason: plan.ReasonErrImagePull, Message: msg}
}
