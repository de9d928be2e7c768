package podruntime

import (
	"context"
	"fmt"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// PullRecords are the kubelet's image pull manager for
// ensure-secret-pulled-images (pulledimages.Manager): whether a pod may
// use an image present as it is, and the record of every pull.
type PullRecords interface {
	// Enabled is the KubeletEnsureSecretPulledImages feature gate.
	Enabled() bool
	// MustPull says whether the pod must pull image (present as
	// imageRef) with its credentials before using it; creds gives them,
	// called only when needed. reason is for the log.
	MustPull(ctx context.Context, image, imageRef string, creds func(context.Context) ([]pullcreds.Credential, error)) (must bool, reason string, err error)
	// PullStarting comes before a pull, PullSucceeded or PullFailed after.
	PullStarting(ctx context.Context, image string) error
	PullSucceeded(ctx context.Context, image, imageRef string, used *pullcreds.Credential)
	PullFailed(ctx context.Context, image string)
}

// withRecords has the puller consult and keep records (nil: none).
func (p *imagePuller) withRecords(records PullRecords, log *slog.Logger) *imagePuller {
	p.records, p.log = records, log
	return p
}

// mayUse says whether the pod may use local, the image of c present on
// the node, as it is, and whether the records were asked (verified). A
// pod that must pull it pulls it with its own credentials, so one without
// the credentials that pulled a private image gets the registry's answer.
// A failed lookup of its credentials means a pull, which looks them up
// again and reports the error as ErrImagePull.
func (p *imagePuller) mayUse(ctx context.Context, c *v1.Container, local *runtimeapi.Image, creds pullcreds.Lookup) (verified, ok bool) {
	if p.records == nil || !p.records.Enabled() {
		return false, true
	}
	lookup := func(ctx context.Context) ([]pullcreds.Credential, error) {
		if creds == nil {
			return nil, nil
		}
		return creds.Credentials(ctx, c.Image)
	}
	must, reason, err := p.records.MustPull(ctx, c.Image, local.GetId(), lookup)
	switch {
	case err != nil:
		p.log.Warn("cannot verify the pod's access to an image present; pulling it", "container", c.Name, "image", c.Image, "err", err)
		return true, false
	case must:
		p.log.Info("image present, but the pod must pull it with its own credentials", "container", c.Name, "image", c.Image, "reason", reason)
	}
	return true, !must
}

// recorded runs pull between an intent record and the record of its
// outcome. An intent that cannot be written stops the pull: without it a
// crash would leave the image looking preloaded.
func (p *imagePuller) recorded(ctx context.Context, image string, pull func() (string, *pullcreds.Credential, error)) (string, *pullcreds.Credential, error) {
	if p.records == nil {
		return pull()
	}
	if err := p.records.PullStarting(ctx, image); err != nil {
		return "", nil, fmt.Errorf("failed to record image pull intent for container image %q: %w", image, err)
	}
	ref, cred, err := pull()
	if err != nil {
		p.records.PullFailed(ctx, image)
		return ref, cred, err
	}
	p.records.PullSucceeded(ctx, image, ref, cred)
	return ref, cred, nil
}
