// Package shutdown is beside the pipeline: the kubelet's node shutdown
// manager. When the machine shuts down (systemd-logind's
// PrepareForShutdown, or SIGPWR where systemd does not run) it stops the
// pods in groups by priority, regular pods first and critical pods last,
// each group within its share of shutdownGracePeriod, and reports them
// Failed (reason Terminated) with a DisruptionTarget condition. While the
// node shuts down, admission refuses new pods (NodeShutdown) and the
// Node's Ready condition is false. It holds a delay inhibitor lock of
// logind where logind runs, so that the machine waits for it.
package shutdown

import (
	"cmp"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kubelet's priorities of the two groups shutdownGracePeriod and
// shutdownGracePeriodCriticalPods make (scheduling's
// DefaultPriorityWhenNoDefaultClassExists and SystemCriticalPriority).
const (
	DefaultPriority        int32 = 0
	SystemCriticalPriority       = podspec.SystemCriticalPriority
)

// PriorityPeriod is one entry of shutdownGracePeriodByPodPriority: pods of
// at least Priority (and below the next entry's) get GracePeriod.
type PriorityPeriod struct {
	Priority    int32
	GracePeriod time.Duration
}

// Periods are the groups' priorities and grace periods, sorted by
// priority: byPriority when given, else the kubelet's two groups out of
// shutdownGracePeriod (total) and shutdownGracePeriodCriticalPods
// (critical): regular pods get total-critical, critical pods critical.
// None (shutdown handling off) when total is 0 or less than critical.
func Periods(total, critical time.Duration, byPriority []PriorityPeriod) []PriorityPeriod {
	if len(byPriority) > 0 {
		out := slices.Clone(byPriority)
		slices.SortStableFunc(out, func(a, b PriorityPeriod) int { return cmp.Compare(a.Priority, b.Priority) })
		return out
	}
	if total <= 0 || critical > total {
		return nil
	}
	return []PriorityPeriod{
		{Priority: DefaultPriority, GracePeriod: total - critical},
		{Priority: SystemCriticalPriority, GracePeriod: critical},
	}
}

// Total is the whole time the periods take: what logind's
// InhibitDelayMaxSec must allow.
func Total(periods []PriorityPeriod) time.Duration {
	var sum time.Duration
	for _, p := range periods {
		sum += p.GracePeriod
	}
	return sum
}

// Group is the pods stopped together, within GracePeriod.
type Group struct {
	PriorityPeriod
	Pods []*v1.Pod
}

// Priority is the pod's priority as the shutdown groups see it
// (podspec.Priority): its spec's priority when set, else that of its
// system priority class, else 0. The kubelet groups by spec.priority
// alone; nodelet's static pods never went through the API server's
// Priority admission, so their system class is resolved here, and being
// static does not make a pod critical (podspec.IsCritical).
func Priority(pod *v1.Pod) int32 { return podspec.Priority(pod) }

// Plan puts every pod in the group of the highest priority not above its
// own (below the lowest: the lowest group), as the kubelet's
// groupByPriority. The groups are in the order they are stopped: lowest
// priority first. A group may be empty (the manager skips it, as the
// kubelet). Pure.
func Plan(periods []PriorityPeriod, pods []*v1.Pod) []Group {
	groups := make([]Group, len(periods))
	for i, p := range periods {
		groups[i].PriorityPeriod = p
	}
	if len(groups) == 0 {
		return nil
	}
	for _, pod := range pods {
		prio := Priority(pod)
		i := 0
		for j := range groups {
			if groups[j].Priority <= prio {
				i = j
			}
		}
		groups[i].Pods = append(groups[i].Pods, pod)
	}
	return groups
}

// GraceSeconds is the grace period a pod of the group is stopped with:
// the group's, or the pod's own terminationGracePeriodSeconds when that
// is shorter, as the kubelet's.
func GraceSeconds(g Group, pod *v1.Pod) int64 {
	return min(int64(g.GracePeriod/time.Second), podspec.GracePeriodSeconds(pod))
}
