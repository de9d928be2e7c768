package gc

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// plan chooses, from one listing of the runtime, the containers and then
// the sandboxes to remove, both sorted by ID. Objects not labelled as
// nodelet's are ignored. podActive reports whether a pod is still wanted;
// the policy's zero fields take their defaults.
//
// Containers: RUNNING and UNKNOWN ones are never chosen, nor those created
// less than MinAge before now. Of a pod that is not active, every EXITED
// and CREATED container goes. Of an active pod, only EXITED ones go, and
// the newest MaxPerPodContainer per container name are kept.
//
// Sandboxes: READY ones are never chosen, nor those that keep a container
// not chosen above. Of a pod that is not active, every other sandbox goes;
// of an active pod, the newest sandbox is kept whatever its state (it holds
// the pod's latest network and attempt) and the older ones go.
func plan(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container, podActive func(types.UID) bool, policy Policy, now time.Time) (removeContainers, removeSandboxes []string) {
	policy = policy.withDefaults()
	active := memoize(podActive)
	youngest := now.Add(-policy.MinAge) // created after this: too young

	type key struct {
		uid  types.UID
		name string
	}
	exited := map[key][]*runtimeapi.Container{}
	removed := map[string]bool{}
	for _, ctr := range containers {
		uid := containerPodUID(ctr)
		if !podspec.IsManaged(ctr.GetLabels()) || uid == "" || time.Unix(0, ctr.GetCreatedAt()).After(youngest) {
			continue
		}
		switch ctr.GetState() {
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			if active(uid) {
				k := key{uid, containerName(ctr)}
				exited[k] = append(exited[k], ctr)
			} else {
				removed[ctr.GetId()] = true
			}
		case runtimeapi.ContainerState_CONTAINER_CREATED:
			if !active(uid) {
				removed[ctr.GetId()] = true
			}
		}
	}
	if keep := policy.MaxPerPodContainer; keep >= 0 {
		for _, group := range exited {
			if len(group) <= keep {
				continue
			}
			slices.SortFunc(group, func(a, b *runtimeapi.Container) int {
				return newestFirst(a.GetCreatedAt(), b.GetCreatedAt(), a.GetId(), b.GetId())
			})
			for _, ctr := range group[keep:] {
				removed[ctr.GetId()] = true
			}
		}
	}

	// A sandbox is held by any container that stays, nodelet's or not.
	held := map[string]bool{}
	for _, ctr := range containers {
		if !removed[ctr.GetId()] {
			held[ctr.GetPodSandboxId()] = true
		}
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, sb := range sandboxes {
		uid := sandboxPodUID(sb)
		if !podspec.IsManaged(sb.GetLabels()) || uid == "" {
			continue
		}
		byPod[uid] = append(byPod[uid], sb)
	}
	for uid, group := range byPod {
		slices.SortFunc(group, func(a, b *runtimeapi.PodSandbox) int {
			return newestFirst(a.GetCreatedAt(), b.GetCreatedAt(), a.GetId(), b.GetId())
		})
		if active(uid) {
			group = group[1:] // keep the newest
		}
		for _, sb := range group {
			if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY && !held[sb.GetId()] {
				removeSandboxes = append(removeSandboxes, sb.GetId())
			}
		}
	}

	for id := range removed {
		removeContainers = append(removeContainers, id)
	}
	slices.Sort(removeContainers)
	slices.Sort(removeSandboxes)
	return removeContainers, removeSandboxes
}

// newestFirst orders by creation time, newest first, then by ID.
func newestFirst(createdA, createdB int64, idA, idB string) int {
	if c := cmp.Compare(createdB, createdA); c != 0 {
		return c
	}
	return cmp.Compare(idA, idB)
}

// memoize asks f once per UID, so that one collection sees one answer.
func memoize(f func(types.UID) bool) func(types.UID) bool {
	seen := map[types.UID]bool{}
	return func(uid types.UID) bool {
		v, ok := seen[uid]
		if !ok {
			v = f(uid)
			seen[uid] = v
		}
		return v
	}
}

func containerPodUID(ctr *runtimeapi.Container) types.UID {
	return types.UID(ctr.GetLabels()[podspec.LabelPodUID])
}

func containerName(ctr *runtimeapi.Container) string {
	if n := ctr.GetLabels()[podspec.LabelContainerName]; n != "" {
		return n
	}
	return ctr.GetMetadata().GetName()
}

func sandboxPodUID(sb *runtimeapi.PodSandbox) types.UID {
	if uid := sb.GetLabels()[podspec.LabelPodUID]; uid != "" {
		return types.UID(uid)
	}
	return types.UID(sb.GetMetadata().GetUid())
}
