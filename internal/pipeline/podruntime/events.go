package podruntime

import (
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// EventSandbox reads a runtime container event for the PLEG: the sandbox
// it carries (PodSandboxStatus) and every container of that sandbox
// (ContainersStatuses), as ListPods would list them. ours is false for an
// event about a sandbox nodelet does not manage; view is nil, ours true,
// when the event carries no sandbox status (a sandbox removed, or a
// runtime that does not send it), which the PLEG learns by a relist.
func EventSandbox(ev *runtimeapi.ContainerEventResponse) (view *observed.SandboxView, ours bool) {
	s := ev.GetPodSandboxStatus()
	if s == nil {
		return nil, true
	}
	if !podspec.IsManaged(s.GetLabels()) {
		return nil, false
	}
	v := &observed.SandboxView{
		UID:       types.UID(s.GetLabels()[podspec.LabelPodUID]),
		Name:      s.GetLabels()[podspec.LabelPodName],
		Namespace: s.GetLabels()[podspec.LabelPodNamespace],
		Sandbox:   sandboxFromStatus(s),
		Subject:   ev.GetContainerId(),
		Deleted:   ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
	}
	for _, c := range ev.GetContainersStatuses() {
		if !podspec.IsManaged(c.GetLabels()) {
			continue // ListPods lists only nodelet's
		}
		v.Containers = append(v.Containers, listedContainer(s.GetId(), c))
	}
	return v, true
}

// listedContainer is container s of sandbox sandboxID as ListContainers
// lists it: the image reference of a listing is the image's ID.
func listedContainer(sandboxID string, s *runtimeapi.ContainerStatus) observed.Container {
	ref := s.GetImageId()
	if ref == "" {
		ref = s.GetImageRef()
	}
	return toContainer(&runtimeapi.Container{
		Id: s.GetId(), PodSandboxId: sandboxID, Metadata: s.GetMetadata(), Image: s.GetImage(), ImageRef: ref,
		State: s.GetState(), CreatedAt: s.GetCreatedAt(), Labels: s.GetLabels(), Annotations: s.GetAnnotations(),
	})
}
