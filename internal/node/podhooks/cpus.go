package podhooks

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// CPUManager is what the CPUs hook needs of cpumanager.Manager.
type CPUManager interface {
	// Allocate gives the pod's containers their CPUs (those they have
	// are kept).
	Allocate(pod *v1.Pod) error
	// ContainerCPUs is the cpuset of a container; "" for the runtime's
	// default.
	ContainerCPUs(uid types.UID, container string) string
	RemovePod(uid types.UID) error
	Pods() []types.UID
}

// CPUs are the pod's CPUs under the CPU manager (cpuManagerPolicy): each
// container's cpuset (CpusetCpus: its own CPUs, or the shared pool), given
// back once the pod's containers have stopped. Admission allocated them;
// Prepare allocates again, which keeps them, so that a pod admitted before
// a restart finds its CPUs in the checkpoint.
type CPUs struct {
	Manager CPUManager
}

func (CPUs) Name() string { return "cpus" }

func (h CPUs) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if err := h.Manager.Allocate(pod); err != nil {
		return podsetup.Setup{}, fmt.Errorf("allocate CPUs: %w", err)
	}
	cpus := podsetup.ContributorFunc(func(c podsetup.Container) (podsetup.Additions, error) {
		return podsetup.Additions{CpusetCpus: h.Manager.ContainerCPUs(c.Pod.UID, c.Container.Name)}, nil
	})
	return podsetup.Setup{Containers: []podsetup.Contributor{cpus}}, nil
}

func (h CPUs) Cleanup(_ context.Context, pod *v1.Pod) error { return h.Manager.RemovePod(pod.UID) }

func (h CPUs) Holding() ([]types.UID, error) { return h.Manager.Pods(), nil }
