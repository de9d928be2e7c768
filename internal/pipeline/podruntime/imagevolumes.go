package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// ImageVolumeSupport tells whether the runtime mounts image volumes
// (cri.ImageVolumes, from the runtime's name and version): nil if it
// does, else why not. subPath asks for a subPath inside the image too.
type ImageVolumeSupport interface {
	ImageVolumes(ctx context.Context, subPath bool) error
}

// ReasonCreateContainerError is the kubelet's waiting reason for a
// container the runtime could not create (kuberuntime.ErrCreateContainer).
const ReasonCreateContainerError = "CreateContainerError"

// imageVolumePull is the outcome of ensuring one image volume's image in
// a sync: the image to mount, or why there is none (a pull's waiting
// reason, or err when the pull did not get that far).
type imageVolumePull struct {
	spec    *runtimeapi.ImageSpec
	waiting *plan.Waiting
	err     error
}

// imageVolumePulls are the pulls of a pod's image volumes, by volume name.
type imageVolumePulls map[string]imageVolumePull

// pullImageVolumes ensures the images of the pod's image volumes, once a
// sync and before any of its containers starts, as the kubelet's SyncPod
// (getImageVolumes): through the containers' image puller, so with the
// pod's pull credentials (creds), its pull policy decisions, its bound on
// concurrent pulls and its back-off per image, shared with containers of
// the same image. A volume no
// container mounts is pulled too. Each pull's events are the pod's, as a
// container image's; a failed pull fails only the containers that mount
// the volume (containerImageVolumes).
func (m *Manager) pullImageVolumes(ctx context.Context, pod *v1.Pod, sandboxCfg *runtimeapi.PodSandboxConfig, creds pullcreds.Lookup, log *slog.Logger) imageVolumePulls {
	var out imageVolumePulls
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if vol.Image == nil {
			continue
		}
		if out == nil {
			out = imageVolumePulls{}
		}
		out[vol.Name] = m.pullImageVolume(ctx, pod, vol, sandboxCfg, creds, log)
	}
	return out
}

func (m *Manager) pullImageVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume, sandboxCfg *runtimeapi.PodSandboxConfig, creds pullcreds.Lookup,
	log *slog.Logger) imageVolumePull {
	ref := vol.Image.Reference
	// What the puller decides from: an image and its pull policy.
	as := &v1.Container{Image: ref, ImagePullPolicy: vol.Image.PullPolicy}
	img, err := m.pulls.ensure(ctx, as, sandboxCfg, creds, func() { m.pullingEvent(pod, ref) }, nil)
	var pe *pullError
	if errors.As(err, &pe) {
		m.pullFailedEvent(pod, ref, pe)
		log.Warn("image volume not available", "volume", vol.Name, "image", ref, "reason", pe.waiting.Reason, "message", pe.waiting.Message)
		return imageVolumePull{waiting: &pe.waiting, err: err}
	}
	if err != nil {
		log.Warn("image volume not available", "volume", vol.Name, "image", ref, "err", err)
		return imageVolumePull{err: fmt.Errorf("image volume %q: %w", vol.Name, err)}
	}
	m.pulledEvent(pod, ref, img)
	// The pod's runtime handler, as the kubelet gives it; a RuntimeClass
	// gone since its sandbox was made is the default handler's.
	handler, _ := m.runtimeHandler(pod)
	return imageVolumePull{spec: &runtimeapi.ImageSpec{
		Image:              img.ref,
		UserSpecifiedImage: ref,
		RuntimeHandler:     handler,
		Annotations:        pod.Annotations,
	}}
}

// containerImageVolumes are the images of the image volumes container c
// mounts, by volume name, for its mounts (podsetup.Container.ImageVolumes).
// A volume whose pull failed fails the container with the pull's waiting
// reason (ErrImagePull, ImagePullBackOff, ErrImageNeverPull) and a Failed
// event per such mount, as the kubelet's toKubeContainerImageVolumes; a
// runtime that cannot mount image volumes (or a subPath in one) fails it
// with CreateContainerError, saying so, before anything is created: the
// kubelet leaves that to the runtime, whose words (containerd 1.x: failed
// to mkdir "") do not say it.
func (m *Manager) containerImageVolumes(ctx context.Context, pod *v1.Pod, c *v1.Container, pulls imageVolumePulls) (map[string]*runtimeapi.ImageSpec, *plan.Waiting, error) {
	if len(pulls) == 0 {
		return nil, nil, nil
	}
	var specs map[string]*runtimeapi.ImageSpec
	var waiting *plan.Waiting
	var lastErr error
	for _, vm := range c.VolumeMounts {
		p, ok := pulls[vm.Name]
		if !ok {
			continue
		}
		if p.spec == nil {
			event := "Error: " + p.err.Error()
			if p.waiting != nil {
				event = "Error: " + p.waiting.Reason
			}
			m.recorder.Event(pod, v1.EventTypeWarning, "Failed", event)
			waiting, lastErr = p.waiting, p.err
			continue
		}
		if m.imageVolumes != nil {
			if err := m.imageVolumes.ImageVolumes(ctx, vm.SubPath != "" || vm.SubPathExpr != ""); err != nil {
				msg := fmt.Sprintf("image volume %q: %v", vm.Name, err)
				m.recorder.Event(pod, v1.EventTypeWarning, "Failed", "Error: "+msg)
				waiting, lastErr = &plan.Waiting{Reason: ReasonCreateContainerError, Message: msg}, errors.New(msg)
				continue
			}
		}
		if specs == nil {
			specs = map[string]*runtimeapi.ImageSpec{}
		}
		specs[vm.Name] = p.spec
	}
	if lastErr != nil {
		return nil, waiting, lastErr
	}
	return specs, nil, nil
}

// pullingEvent is the kubelet's Pulling event, recorded before a pull.
func (m *Manager) pullingEvent(pod *v1.Pod, ref string) {
	m.recorder.Event(pod, v1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", ref))
}

// pulledEvent is the Normal Pulled event of an image ready for the pod.
func (m *Manager) pulledEvent(pod *v1.Pod, ref string, img image) {
	if img.pulled {
		m.recorder.Event(pod, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes.",
			ref, img.took.Truncate(time.Millisecond), img.waited.Truncate(time.Millisecond), img.size))
		return
	}
	if img.verified {
		m.recorder.Event(pod, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", ref))
		return
	}
	m.recorder.Event(pod, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", ref))
}

// pullFailedEvent is the event of an image not available to the pod, as
// the kubelet's image manager records it: Normal BackOff inside the
// back-off, Warning ErrImageNeverPull for an image missing under pull
// policy Never, else Warning Failed with the pull's error.
func (m *Manager) pullFailedEvent(pod *v1.Pod, ref string, pe *pullError) {
	switch pe.waiting.Reason {
	case plan.ReasonImagePullBackOff:
		m.recorder.Event(pod, v1.EventTypeNormal, "BackOff", fmt.Sprintf("Back-off pulling image %q", ref))
	case plan.ReasonErrImageNeverPull:
		m.recorder.Event(pod, v1.EventTypeWarning, plan.ReasonErrImageNeverPull, pe.waiting.Message)
	default:
		msg := pe.event
		if msg == "" {
			msg = pe.waiting.Message
		}
		m.recorder.Event(pod, v1.EventTypeWarning, "Failed", msg)
	}
}
