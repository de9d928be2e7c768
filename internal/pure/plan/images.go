package plan

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Image pull back-off, as the kubelet's: 10 s doubling to 300 s.
const (
	PullBackOffInitial = 10 * time.Second
	PullBackOffMax     = 300 * time.Second
)

// Waiting.Reason values of images (the kubelet's).
const (
	ReasonErrImagePull      = "ErrImagePull"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	ReasonErrImageNeverPull = "ErrImageNeverPull"
)

// PullBackOff is the pull history of one image: after a failed pull, no
// pull before Until. The zero value is an image never failed.
type PullBackOff struct {
	Until     time.Time
	Delay     time.Duration
	LastError string
}

// Failed is the back-off after a pull failed at now with msg: 10 s, then
// twice the previous delay, at most 300 s.
func (b PullBackOff) Failed(now time.Time, msg string) PullBackOff {
	d := min(max(2*b.Delay, PullBackOffInitial), PullBackOffMax)
	return PullBackOff{Until: now.Add(d), Delay: d, LastError: msg}
}

// ImageStep is what to do about a container's image before creating it.
type ImageStep int

const (
	// LookUp: ask the runtime whether the image is present, then decide
	// again with the answer.
	LookUp ImageStep = iota + 1
	// UseLocal: the image is present; create the container from it.
	UseLocal
	// Pull the image now.
	Pull
	// Wait: do not create the container; Waiting says why.
	Wait
)

// ImageDecision is the kubelet's EnsureImageExists as a pure function: from
// the container's pull policy, whether the image is present (nil: not
// known yet), and its pull back-off at now, the next step, with the
// waiting reason when the step is Wait.
func ImageDecision(c *v1.Container, present *bool, b PullBackOff, now time.Time) (ImageStep, Waiting) {
	if c.ImagePullPolicy != v1.PullAlways {
		switch {
		case present == nil:
			return LookUp, Waiting{}
		case *present:
			return UseLocal, Waiting{}
		case c.ImagePullPolicy == v1.PullNever:
			return Wait, Waiting{Reason: ReasonErrImageNeverPull,
				Message: fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)}
		}
	}
	if now.Before(b.Until) {
		return Wait, Waiting{Reason: ReasonImagePullBackOff,
			Message: fmt.Sprintf("Back-off pulling image %q: %s", c.Image, b.LastError), Until: b.Until}
	}
	return Pull, Waiting{}
}
