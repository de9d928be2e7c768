package eviction

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kubelet's eviction_signal labels of kubelet_evictions for the local
// storage limits. They are not signals of thresholds: a pod over one of
// its limits is evicted whatever the node has left.
const (
	SignalEmptyDirFsLimit           = "emptydirfs.limit"
	SignalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	SignalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// LocalStorageEviction is a pod found over one of its local storage
// limits: the signal it is counted under and the kubelet's message.
type LocalStorageEviction struct {
	Pod     *v1.Pod
	Signal  string
	Message string
}

// LocalStorage finds the pods over their local storage limits, as the
// kubelet's localStorageEviction, in the order of pods; each pod is
// checked in the kubelet's order and found once, for its first limit
// exceeded:
//
//  1. an emptyDir volume using more than its sizeLimit (its usage as the
//     stats give it; a memory-backed one cannot pass its size, which is
//     the tmpfs's);
//  2. the pod's ephemeral storage (writable layers, logs, disk-backed
//     emptyDirs) over its limit, the containers' limits aggregated as the
//     kubelet's PodLimits;
//  3. a container or sidecar whose logs and writable layer use more than
//     its ephemeral-storage limit (logs alone when the images, and so
//     the writable layers, are on a filesystem of their own).
//
// Pods without stats are skipped. Critical pods are found too: the
// caller does not evict them.
func LocalStorage(pods []*v1.Pod, stats PodStats, dedicatedImageFs bool) []LocalStorageEviction {
	var out []LocalStorageEviction
	for _, pod := range pods {
		ps, ok := stats(pod)
		if !ok {
			continue
		}
		for _, check := range []func(*v1.Pod, *statsapi.PodStats, bool) (string, string, bool){
			emptyDirOverLimit, podOverLimit, containerOverLimit,
		} {
			if sig, msg, over := check(pod, ps, dedicatedImageFs); over {
				out = append(out, LocalStorageEviction{Pod: pod, Signal: sig, Message: msg})
				break
			}
		}
	}
	return out
}

// HasLocalStorageLimits reports whether LocalStorage may find pod over a
// limit: it has an emptyDir volume with a sizeLimit, or an
// ephemeral-storage limit of its own or of any of its containers (which
// makes one of the pod's, admission.PodLimit).
func HasLocalStorageLimits(pod *v1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if _, ok := emptyDirLimit(&pod.Spec.Volumes[i]); ok {
			return true
		}
	}
	_, ok := admission.PodLimit(pod, v1.ResourceEphemeralStorage)
	return ok
}

// emptyDirLimit is the sizeLimit of vol if it is an emptyDir with one
// above zero.
func emptyDirLimit(vol *v1.Volume) (*resource.Quantity, bool) {
	ed := vol.EmptyDir
	if ed == nil || ed.SizeLimit == nil || ed.SizeLimit.Sign() <= 0 {
		return nil, false
	}
	return ed.SizeLimit, true
}

func emptyDirOverLimit(pod *v1.Pod, ps *statsapi.PodStats, _ bool) (string, string, bool) {
	used := map[string]uint64{}
	for _, vs := range ps.VolumeStats {
		if vs.UsedBytes != nil {
			used[vs.Name] = *vs.UsedBytes
		}
	}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		limit, ok := emptyDirLimit(vol)
		if !ok {
			continue
		}
		u, ok := used[vol.Name]
		if ok && resource.NewQuantity(clampInt64(u), resource.BinarySI).Cmp(*limit) > 0 {
			return SignalEmptyDirFsLimit, fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", vol.Name, limit.String()), true
		}
	}
	return "", "", false
}

func podOverLimit(pod *v1.Pod, ps *statsapi.PodStats, _ bool) (string, string, bool) {
	limit, ok := admission.PodLimit(pod, v1.ResourceEphemeralStorage)
	if !ok {
		return "", "", false
	}
	var used int64
	if e := ps.EphemeralStorage; e != nil && e.UsedBytes != nil {
		used = clampInt64(*e.UsedBytes)
	}
	if resource.NewQuantity(used, resource.BinarySI).Cmp(limit) > 0 {
		return SignalEphemeralPodFsLimit, fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), true
	}
	return "", "", false
}

func containerOverLimit(pod *v1.Pod, ps *statsapi.PodStats, dedicatedImageFs bool) (string, string, bool) {
	limits := map[string]resource.Quantity{}
	add := func(c *v1.Container) {
		if q, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && q.Value() != 0 {
			limits[c.Name] = q
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		if podspec.IsSidecar(&pod.Spec.InitContainers[i]) {
			add(&pod.Spec.InitContainers[i])
		}
	}
	for _, cs := range ps.Containers {
		limit, ok := limits[cs.Name]
		if !ok {
			continue
		}
		used := fsUsed(cs.Logs)
		if !dedicatedImageFs {
			used += fsUsed(cs.Rootfs)
		}
		if resource.NewQuantity(used, resource.BinarySI).Cmp(limit) > 0 {
			return SignalEphemeralContainerFsLimit, fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", cs.Name, limit.String()), true
		}
	}
	return "", "", false
}

// fsUsed is the bytes fs uses, 0 when unknown.
func fsUsed(fs *statsapi.FsStats) int64 {
	if fs == nil || fs.UsedBytes == nil {
		return 0
	}
	return clampInt64(*fs.UsedBytes)
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
