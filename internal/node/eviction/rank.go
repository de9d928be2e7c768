package eviction

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/pure/admission"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// PodStats finds a pod's stats in the summary the decision was made from.
type PodStats func(pod *v1.Pod) (*statsapi.PodStats, bool)

// StatsFrom indexes a summary's pods by UID.
func StatsFrom(s *statsapi.Summary) PodStats {
	byUID := map[string]*statsapi.PodStats{}
	if s != nil {
		for i := range s.Pods {
			byUID[s.Pods[i].PodRef.UID] = &s.Pods[i]
		}
	}
	return func(pod *v1.Pod) (*statsapi.PodStats, bool) {
		ps, ok := byUID[string(pod.UID)]
		return ps, ok
	}
}

// usage is what a pod uses of a resource, in bytes (or inodes, or
// processes).
type usage func(ps *statsapi.PodStats) int64

func memoryUsage(ps *statsapi.PodStats) int64 {
	if ps.Memory == nil || ps.Memory.WorkingSetBytes == nil {
		return 0
	}
	return int64(*ps.Memory.WorkingSetBytes)
}

// diskUsage is what a pod holds on the filesystem a signal watches: with
// the images on a filesystem of their own, the containers' writable
// layers are on the image filesystem, the logs and volumes on the node's;
// otherwise all of it (the kubelet's fsStatsType choices).
func diskUsage(sig Signal, dedicatedImageFs bool) usage {
	inodes := sig == SignalNodeFsInodesFree || sig == SignalImageFsInodesFree
	pick := func(fs *statsapi.FsStats) int64 {
		if fs == nil {
			return 0
		}
		if inodes {
			if fs.InodesUsed == nil {
				return 0
			}
			return int64(*fs.InodesUsed)
		}
		if fs.UsedBytes == nil {
			return 0
		}
		return int64(*fs.UsedBytes)
	}
	return func(ps *statsapi.PodStats) int64 {
		var rootfs int64
		for _, c := range ps.Containers {
			rootfs += pick(c.Rootfs)
		}
		all := pick(ps.EphemeralStorage)
		switch {
		case !dedicatedImageFs:
			return all
		case sig == SignalImageFsAvailable || sig == SignalImageFsInodesFree:
			return rootfs
		default:
			return max(all-rootfs, 0)
		}
	}
}

// Rank orders pods for eviction for a signal, first to go first, as the
// kubelet's rank functions: for memory and disk, pods using more than they
// request, then lower priority, then more usage above the request; for
// processes, lower priority, then more processes. Pods without stats go
// first.
func Rank(sig Signal, dedicatedImageFs bool, pods []*v1.Pod, stats PodStats) {
	var use usage
	var requested v1.ResourceName // "": no request (inodes: 0)
	byRequest := true
	switch signalInfo[sig].resource {
	case v1.ResourceMemory:
		use, requested = memoryUsage, v1.ResourceMemory
	case resourcePIDs:
		use = func(*statsapi.PodStats) int64 { return 0 } // no per-pod process counts
		byRequest = false
	default:
		use = diskUsage(sig, dedicatedImageFs)
		if signalInfo[sig].resource == v1.ResourceEphemeralStorage {
			requested = v1.ResourceEphemeralStorage
		}
	}
	request := func(pod *v1.Pod) int64 {
		if requested == "" {
			return 0
		}
		q := admission.PodRequest(pod, requested)
		return q.Value()
	}
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		as, aok := stats(a)
		bs, bok := stats(b)
		if !aok || !bok {
			return cmpBool(!aok, !bok)
		}
		au, bu := use(as)-request(a), use(bs)-request(b)
		if byRequest {
			if c := cmpBool(au > 0, bu > 0); c != 0 {
				return c
			}
		}
		if pa, pb := podspec.Priority(a), podspec.Priority(b); pa != pb {
			if pa < pb {
				return -1
			}
			return 1
		}
		switch {
		case au > bu:
			return -1
		case au < bu:
			return 1
		}
		return 0
	})
}

// cmpBool puts true first.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// Message is the kubelet's eviction message: the resource, the threshold
// and what was available, and each container using more than it requests.
func Message(res v1.ResourceName, pod *v1.Pod, stats PodStats, met []Threshold, obs Observations) string {
	msg := fmt.Sprintf("The node was low on resource: %v. ", res)
	for _, t := range met {
		if signalInfo[t.Signal].resource != res {
			continue
		}
		if o, ok := obs[t.Signal]; ok {
			msg += fmt.Sprintf("Threshold quantity: %v, available: %v. ",
				quantity(t.Value.Of(o.Capacity), res), quantity(o.Available, res))
		}
		break
	}
	ps, ok := stats(pod)
	if !ok {
		return msg
	}
	if res != v1.ResourceMemory && res != v1.ResourceEphemeralStorage {
		return msg
	}
	containers := append(slices.Clone(pod.Spec.Containers), pod.Spec.InitContainers...)
	for _, cs := range ps.Containers {
		for _, c := range containers {
			if c.Name != cs.Name {
				continue
			}
			req := c.Resources.Requests[res]
			var used *resource.Quantity
			switch res {
			case v1.ResourceMemory:
				if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
					used = resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI)
				}
			case v1.ResourceEphemeralStorage:
				if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
					used = resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI)
				}
			}
			if used != nil && used.Cmp(req) > 0 {
				msg += fmt.Sprintf("Container %s was using %s, request is %s, has larger consumption of %v. ", c.Name, used, req.String(), res)
			}
			break
		}
	}
	return msg
}

// quantity formats an amount as the kubelet does: bytes in binary SI,
// counts in decimal.
func quantity(v int64, res v1.ResourceName) *resource.Quantity {
	if res == v1.ResourceMemory || res == v1.ResourceEphemeralStorage {
		return resource.NewQuantity(v, resource.BinarySI)
	}
	return resource.NewQuantity(v, resource.DecimalSI)
}
