// Package status is beside the pipeline: it computes a pod's API status
// (phase, conditions, container statuses, IPs, QoS class) from facts: the pod
// spec, what the runtime reports (observed), why containers are held back
// (plan.Waiting), probe results and the previous status. It follows the
// kubelet's generateAPIPodStatus and status manager. It is pure: no I/O, no
// clock (the time comes in Facts.Now), no logging.
package status

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// Reasons nodelet reports, as the kubelet spells them.
const (
	// ReasonContainerCreating is the waiting reason of a container that has
	// no instance yet in a pod without init containers.
	ReasonContainerCreating = "ContainerCreating"
	// ReasonPodInitializing is the waiting reason of a container that has no
	// instance yet in a pod with init containers.
	ReasonPodInitializing = "PodInitializing"
	// ReasonCompleted and ReasonError are the terminated reasons used when
	// the runtime gives none.
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	// ReasonContainerStatusUnknown marks a container that used to run and
	// that the runtime no longer reports.
	ReasonContainerStatusUnknown = "ContainerStatusUnknown"

	// Condition reasons.
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
)

// DefaultRuntimeName prefixes container IDs when Facts.RuntimeName is empty.
const DefaultRuntimeName = "containerd"

// Rejection is a reason (one CamelCase word) and a human-readable message.
type Rejection struct {
	Reason  string
	Message string
	// NoDisruptionTarget: as Facts.ByNode, the pod gets no DisruptionTarget
	// condition (the kubelet's evictions for local storage limits, which
	// pass none).
	NoDisruptionTarget bool
}

// Facts are what status is computed from.
type Facts struct {
	Pod *v1.Pod
	// Observed may be nil (nothing in the runtime yet).
	Observed *observed.PodStatus
	// Waiting maps a container name to why it is held back (from the
	// planner: CrashLoopBackOff, PodInitializing, ...) or why its start
	// failed (from the executor: ErrImagePull, ImagePullBackOff,
	// CreateContainerError, CreateContainerConfigError, ...). An entry is
	// shown as the container's Waiting state unless the container is
	// running or will not be restarted.
	Waiting map[string]plan.Waiting
	// Ready maps a runtime container ID (without the runtime prefix) to its
	// readiness probe result. A running, started container without a
	// readiness probe is ready; with a probe and no entry it is not.
	Ready map[string]bool
	// Started maps a runtime container ID to whether its startup probe has
	// passed. A running container without a startup probe is started.
	Started map[string]bool
	// HostIP is the node's primary IP.
	HostIP string
	// RuntimeName prefixes container IDs ("<name>://<id>");
	// DefaultRuntimeName if empty.
	RuntimeName string
	Now         time.Time
	// Previous is the last status generated (condition LastTransitionTime
	// continuity, StartTime, terminal phase, container statuses the runtime
	// no longer reports); may be nil.
	Previous *v1.PodStatus
	// Rejected is an admission rejection: the status is only phase Failed
	// with this reason and message (and QOSClass, StartTime).
	Rejected *Rejection
	// Failed says the pod can never run again (an init container failed
	// under restartPolicy Never, active deadline exceeded, ...): phase
	// Failed with this reason and message; the rest is computed as usual.
	Failed *Rejection
	// ByNode says the node itself stops the pod for good (eviction, node
	// shutdown): unless its phase is already terminal, the pod is Failed
	// with this reason and message and gets a DisruptionTarget condition
	// (TerminationByKubelet) unless NoDisruptionTarget, as the kubelet's
	// kill with a status function.
	ByNode *Rejection
	// Terminal says the pod was stopped for good (deleted, evicted, its
	// manifest removed): stopped containers are not restarted, so once
	// none runs the phase is Succeeded if all exited 0, else Failed (the
	// kubelet's podIsTerminal).
	Terminal bool
	// RecursiveReadOnlyMounts says the pod's runtime handler supports
	// recursive read-only mounts: the containers' volumeMounts statuses
	// are resolved with it (podspec.VolumeMountStatuses).
	RecursiveReadOnlyMounts bool
	// Resources are what the node allocated to the pod and actuated
	// (in-place resize). When set, every container with a runtime
	// instance reports resources and allocatedResources, which is what
	// the API server checks before it accepts a resize; nil reports
	// neither, and the API server refuses to resize the pod.
	Resources *Resources
	// ResizeConditions are PodResizePending and PodResizeInProgress as
	// they stand (resize.Conditions.List), appended as they are.
	ResizeConditions []v1.PodCondition
}

// Resources are a pod's allocation and what its containers were given.
type Resources struct {
	Allocation resize.Allocation
	Actuated   map[string]resize.Resources
}

// Generate computes the pod's API status from f.
func Generate(f Facts) v1.PodStatus {
	pod := f.Pod
	var prev v1.PodStatus
	if f.Previous != nil {
		prev = *f.Previous.DeepCopy()
	}
	now := normTime(f.Now)

	if f.Rejected != nil {
		// The kubelet's rejectPod, then the status manager's StartTime.
		return v1.PodStatus{
			Phase:     v1.PodFailed,
			Reason:    f.Rejected.Reason,
			Message:   "Pod was rejected: " + f.Rejected.Message,
			QOSClass:  podspec.QOSClass(pod),
			StartTime: startTime(prev, now),
		}
	}

	g := newGenerator(f)
	s := v1.PodStatus{
		ObservedGeneration: pod.Generation,
		QOSClass:           podspec.QOSClass(pod),
	}
	s.InitContainerStatuses = g.containerStatuses(pod.Spec.InitContainers, prev.InitContainerStatuses, true)
	s.ContainerStatuses = g.containerStatuses(pod.Spec.Containers, prev.ContainerStatuses, false)
	// The kubelet lists app containers by name, init containers in spec order.
	slices.SortStableFunc(s.ContainerStatuses, func(a, b v1.ContainerStatus) int {
		return strings.Compare(a.Name, b.Name)
	})
	s.EphemeralContainerStatuses = g.ephemeralStatuses(prev.EphemeralContainerStatuses)

	all := append(append([]v1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
	s.Phase = phase(pod, all, g.anyActiveRegularContainer(), f.Terminal)
	// A terminal phase is final: the kubelet's status manager refuses any
	// transition out of it, to the other terminal phase too (a pod failed
	// for its deadline whose containers then exit 0 stays Failed).
	switch {
	case terminal(prev.Phase):
		s.Phase = prev.Phase
	case terminal(pod.Status.Phase):
		s.Phase = pod.Status.Phase
	}
	if s.Phase == prev.Phase {
		s.Reason, s.Message = prev.Reason, prev.Message
		if s.Reason == "" {
			s.Reason = pod.Status.Reason
		}
		if s.Message == "" {
			s.Message = pod.Status.Message
		}
	}
	if f.Failed != nil {
		s.Phase = v1.PodFailed
		s.Reason, s.Message = f.Failed.Reason, f.Failed.Message
	}
	if terminal(pod.Status.Phase) && s.Phase != pod.Status.Phase {
		s.Phase = pod.Status.Phase
	}
	disruption := disruptionCondition(prev)
	if f.ByNode != nil && !terminal(prev.Phase) && !terminal(pod.Status.Phase) {
		s.Phase = v1.PodFailed
		s.Reason, s.Message = f.ByNode.Reason, f.ByNode.Message
		if !f.ByNode.NoDisruptionTarget {
			disruption = &v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
				Reason: v1.PodReasonTerminationByKubelet, Message: f.ByNode.Message}
		}
	}
	// The kubelet's TerminatePod: once a pod stopped for good has nothing
	// running, a container that is not terminated (it never ran, or
	// waited for a restart) is reported terminated with an unknown status,
	// and a phase still Pending or Running becomes Failed, but a static
	// pod's (as upstream, #116484).
	if f.Terminal && (f.Observed == nil || len(f.Observed.Running()) == 0) {
		unknown := func(list []v1.ContainerStatus) {
			for i := range list {
				if list[i].State.Terminated == nil {
					list[i].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
						Reason: ReasonContainerStatusUnknown, ExitCode: 137,
						Message: "The container could not be located when the pod was terminated",
					}}
					list[i].Ready = false
				}
			}
		}
		// App containers only once the pod has initialized; init
		// containers up to the last one that left waiting.
		if hasInitialized(pod, s.InitContainerStatuses, s.ContainerStatuses) {
			unknown(s.ContainerStatuses)
		}
		unknown(initializedContainers(s.InitContainerStatuses))
		if !terminal(s.Phase) && !podspec.IsStatic(pod) {
			s.Phase = v1.PodFailed
		}
		// The conditions stay those of the containers as they were (all):
		// TerminatePod does not compute them again, and a container that
		// never ran has not initialized the pod.
	}

	s.Conditions = []v1.PodCondition{
		readyToStartContainersCondition(pod, f.Observed),
		initializedCondition(pod, all, s.Phase),
		readyCondition(pod, all, s.Phase),
		containersReadyCondition(pod, all, s.Phase),
		{Type: v1.PodScheduled, Status: v1.ConditionTrue},
	}
	if disruption != nil {
		s.Conditions = append(s.Conditions, *disruption)
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		c.ObservedGeneration = pod.Generation
		c.LastTransitionTime = metav1.NewTime(now)
		for _, old := range prev.Conditions {
			if old.Type == c.Type && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
	}

	for _, c := range f.ResizeConditions {
		s.Conditions = append(s.Conditions, *c.DeepCopy())
	}

	if f.HostIP != "" {
		s.HostIP = f.HostIP
		s.HostIPs = []v1.HostIP{{IP: f.HostIP}}
	}
	if f.Observed != nil {
		for _, ip := range sortPodIPs(f.Observed.IPs, f.HostIP) {
			s.PodIPs = append(s.PodIPs, v1.PodIP{IP: ip})
		}
	}
	if pod.Spec.HostNetwork && len(s.PodIPs) == 0 && f.HostIP != "" {
		s.PodIPs = []v1.PodIP{{IP: f.HostIP}}
	}
	// A stopped sandbox reports no IP: a pod that has finished keeps the
	// IPs it had (the kubelet's preserveDataFromBeforeStopping), so that no
	// status of a pod that ran shows it without its IP.
	if len(s.PodIPs) == 0 && (terminal(s.Phase) || f.Terminal) && len(prev.PodIPs) > 0 {
		s.PodIPs = append([]v1.PodIP(nil), prev.PodIPs...)
	}
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}
	s.StartTime = startTime(prev, now)
	return s
}

// disruptionCondition is the DisruptionTarget condition of a previous
// status, which stays: nothing in the pod's facts computes it again.
func disruptionCondition(prev v1.PodStatus) *v1.PodCondition {
	for _, c := range prev.Conditions {
		if c.Type == v1.DisruptionTarget {
			return c.DeepCopy()
		}
	}
	return nil
}

// generator holds what converting container statuses needs.
type generator struct {
	f       Facts
	runtime string
	// instances per container name, newest first.
	instances map[string][]*observed.Container
}

func newGenerator(f Facts) *generator {
	g := &generator{f: f, runtime: f.RuntimeName, instances: map[string][]*observed.Container{}}
	if g.runtime == "" {
		g.runtime = DefaultRuntimeName
	}
	if f.Observed != nil {
		cs := make([]*observed.Container, 0, len(f.Observed.Containers))
		for i := range f.Observed.Containers {
			cs = append(cs, &f.Observed.Containers[i])
		}
		slices.SortStableFunc(cs, func(a, b *observed.Container) int {
			return b.CreatedAt.Compare(a.CreatedAt)
		})
		for _, c := range cs {
			g.instances[c.Name] = append(g.instances[c.Name], c)
		}
	}
	return g
}

func (g *generator) newest(name string) *observed.Container {
	if is := g.instances[name]; len(is) > 0 {
		return is[0]
	}
	return nil
}

// anyActiveRegularContainer reports whether any app container has an
// instance in the newest sandbox while that sandbox is ready (the kubelet's
// HasAnyActiveRegularContainerStarted): the pod has been initialized.
func (g *generator) anyActiveRegularContainer() bool {
	o := g.f.Observed
	if o == nil || len(o.Sandboxes) == 0 || o.Sandboxes[0].State != observed.SandboxReady {
		return false
	}
	active := o.Sandboxes[0].ID
	for _, c := range g.f.Pod.Spec.Containers {
		for _, inst := range g.instances[c.Name] {
			if inst.SandboxID == active {
				return true
			}
		}
	}
	return false
}

// anyRegularContainerCreated reports whether the newest instance of any app
// container was created, which means init containers have all run.
func (g *generator) anyRegularContainerCreated() bool {
	for _, c := range g.f.Pod.Spec.Containers {
		if n := g.newest(c.Name); n != nil && n.State != observed.ContainerUnknown {
			return true
		}
	}
	return false
}

// containerStatuses builds one status per spec container, in spec order
// (the kubelet's convertToAPIContainerStatuses plus the prober's Started and
// Ready).
func (g *generator) containerStatuses(specs []v1.Container, previous []v1.ContainerStatus, isInit bool) []v1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	pod := g.f.Pod
	old := make(map[string]*v1.ContainerStatus, len(previous))
	for i := range previous {
		old[previous[i].Name] = &previous[i]
	}
	defaultReason := ReasonContainerCreating
	if len(pod.Spec.InitContainers) > 0 {
		defaultReason = ReasonPodInitializing
	}

	maxMessage := messageBound(pod)
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		spec := &specs[i]
		prev := old[spec.Name]
		instances := g.instances[spec.Name]

		st := v1.ContainerStatus{
			Name:  spec.Name,
			Image: spec.Image,
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: defaultReason}},
			// The CRI does not know volume names: the kubelet reports the
			// spec's mounts as it resolves them.
			VolumeMounts: podspec.VolumeMountStatuses(spec, g.f.RecursiveReadOnlyMounts),
		}
		if prev != nil {
			if prev.State.Terminated != nil {
				st = *prev
			} else {
				st.RestartCount = prev.RestartCount
				st.LastTerminationState = prev.LastTerminationState
			}
		}

		switch {
		case len(instances) == 0:
			// A container that was running and that the runtime no longer
			// reports has terminated, though we don't know how.
			if prev != nil && prev.State.Running != nil && st.State.Waiting != nil &&
				st.State.Waiting.Reason == defaultReason && st.LastTerminationState.Terminated == nil {
				st.LastTerminationState.Terminated = &v1.ContainerStateTerminated{
					Reason:   ReasonContainerStatusUnknown,
					Message:  "The container could not be located when the pod was deleted.  The container used to be Running",
					ExitCode: 137,
				}
				if pod.DeletionTimestamp == nil {
					st.RestartCount++
				}
			}
		default:
			mounts := st.VolumeMounts // a terminated container's stay as they were
			st = g.convert(spec, instances[0], prev)
			st.VolumeMounts = mounts
			g.resources(spec, &st, instances[0], prev)
			if len(instances) > 1 {
				st.LastTerminationState = g.convert(spec, instances[1], prev).State
			}
		}

		newest := g.newest(spec.Name)
		held := true
		if isInit {
			switch {
			case newest != nil && newest.State == observed.ContainerExited && newest.ExitCode == 0:
				// A succeeded init container is not run again.
				held = false
			case newest == nil && !podspec.IsSidecar(spec) && st.State.Waiting != nil && g.anyRegularContainerCreated():
				// The runtime lost the instance, but app containers exist,
				// so it completed.
				st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
					Reason:   ReasonCompleted,
					Message:  "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally",
					ExitCode: 0,
				}}
				held = false
			}
		}
		if w, ok := g.f.Waiting[spec.Name]; ok && held && shouldRestart(spec, pod, newest) {
			if st.State.Terminated != nil {
				st.LastTerminationState = st.State
			}
			st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}}
		}

		g.probe(spec, &st, newest, isInit)
		normContainerState(&st.State, maxMessage)
		normContainerState(&st.LastTerminationState, maxMessage)
		out = append(out, st)
	}
	return out
}

// ephemeralStatuses are the ephemeral containers' statuses, converted as
// the app containers' (the kubelet's convertToAPIContainerStatuses), by
// name. They take no part in the pod's phase or conditions: an ephemeral
// container has no probes, is Started while it runs and is never Ready.
func (g *generator) ephemeralStatuses(previous []v1.ContainerStatus) []v1.ContainerStatus {
	out := g.containerStatuses(podspec.EphemeralContainers(g.f.Pod), previous, false)
	for i := range out {
		out[i].Ready = false
	}
	slices.SortStableFunc(out, func(a, b v1.ContainerStatus) int {
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// resources sets a container status's resources and allocatedResources,
// as the kubelet's convertToAPIContainerStatuses, when the pod's
// allocation is known.
func (g *generator) resources(spec *v1.Container, st *v1.ContainerStatus, c *observed.Container, prev *v1.ContainerStatus) {
	r := g.f.Resources
	if r == nil {
		return
	}
	alloc, ok := r.Allocation.Containers[spec.Name]
	if !ok {
		alloc = spec.Resources
	}
	var actuated *resize.Resources
	if a, ok := r.Actuated[spec.Name]; ok {
		actuated = &a
	}
	st.Resources = resize.StatusResources(alloc, c, actuated, prev, st.ContainerID)
	st.AllocatedResources = alloc.DeepCopy().Requests
}

// convert turns one runtime instance into a container status.
func (g *generator) convert(spec *v1.Container, c *observed.Container, prev *v1.ContainerStatus) v1.ContainerStatus {
	id := g.runtime + "://" + c.ID
	image := c.Image
	if image == "" {
		image = spec.Image
	}
	st := v1.ContainerStatus{
		Name:         spec.Name,
		Image:        image,
		ImageID:      c.ImageRef,
		ContainerID:  id,
		RestartCount: int32(c.RestartCount),
	}
	switch c.State {
	case observed.ContainerRunning:
		st.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
	case observed.ContainerExited:
		reason := c.Reason
		if reason == "" {
			reason = ReasonError
			if c.ExitCode == 0 {
				reason = ReasonCompleted
			}
		}
		st.State.Terminated = &v1.ContainerStateTerminated{
			ExitCode:    c.ExitCode,
			Reason:      reason,
			Message:     c.Message,
			StartedAt:   metav1.NewTime(c.StartedAt),
			FinishedAt:  metav1.NewTime(c.FinishedAt),
			ContainerID: id,
		}
	case observed.ContainerUnknown:
		if prev != nil && prev.State.Running != nil {
			st.State.Terminated = &v1.ContainerStateTerminated{
				Reason:   ReasonContainerStatusUnknown,
				Message:  "The container could not be located when the pod was terminated",
				ExitCode: 137,
			}
			st.RestartCount = prev.RestartCount + 1
			break
		}
		st.State.Waiting = &v1.ContainerStateWaiting{}
	default:
		// Created, not yet running: waiting to run.
		st.State.Waiting = &v1.ContainerStateWaiting{}
	}
	return st
}

// probe sets Started and Ready as the kubelet's prober manager does.
func (g *generator) probe(spec *v1.Container, st *v1.ContainerStatus, newest *observed.Container, isInit bool) {
	started := false
	if st.State.Running != nil && newest != nil {
		started = spec.StartupProbe == nil || g.f.Started[newest.ID]
	}
	st.Started = &started
	if isInit && !podspec.IsSidecar(spec) {
		st.Ready = st.State.Terminated != nil && st.State.Terminated.ExitCode == 0
		return
	}
	st.Ready = started && (spec.ReadinessProbe == nil || g.f.Ready[newest.ID])
}

// shouldRestart is the kubelet's ShouldContainerBeRestarted for the newest
// instance of a container, with container-level restart policies.
func shouldRestart(spec *v1.Container, pod *v1.Pod, newest *observed.Container) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	if newest == nil {
		return true
	}
	switch newest.State {
	case observed.ContainerRunning:
		return false
	case observed.ContainerExited:
		return podspec.ShouldRestart(pod, spec, newest.ExitCode)
	}
	return true
}

func terminal(p v1.PodPhase) bool {
	return p == v1.PodSucceeded || p == v1.PodFailed
}

func findStatus(statuses []v1.ContainerStatus, name string) (*v1.ContainerStatus, bool) {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i], true
		}
	}
	return nil, false
}

// phase is the kubelet's getPhase (ContainerRestartRules enabled);
// podIsTerminal: the pod was stopped for good.
func phase(pod *v1.Pod, statuses []v1.ContainerStatus, initialized, podIsTerminal bool) v1.PodPhase {
	pendingInit, pendingSidecars, failedInitNotRestartable := 0, 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podspec.IsSidecar(c) {
			continue
		}
		st, ok := findStatus(statuses, c.Name)
		if !ok {
			pendingInit++
			continue
		}
		switch {
		case st.State.Running != nil:
			pendingInit++
		case st.State.Terminated != nil:
			if code := st.State.Terminated.ExitCode; code != 0 && !podspec.ShouldRestart(pod, c, code) {
				failedInitNotRestartable++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				if t.ExitCode != 0 && !podspec.ShouldRestart(pod, c, t.ExitCode) {
					failedInitNotRestartable++
				}
			} else {
				pendingInit++
			}
		default:
			pendingInit++
		}
	}

	unknown, running, waiting, stopped, stoppedNotRestartable, succeeded := 0, 0, 0, 0, 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if !podspec.IsSidecar(c) {
			continue
		}
		st, ok := findStatus(statuses, c.Name)
		if !ok {
			unknown++
			continue
		}
		switch {
		case st.State.Running != nil:
			if st.Started == nil || !*st.Started {
				pendingSidecars++
			}
			running++
		case st.State.Terminated != nil:
			// A stopped sidecar does not count towards the phase.
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated == nil {
				pendingSidecars++
				waiting++
			}
		default:
			pendingSidecars++
			unknown++
		}
	}

	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st, ok := findStatus(statuses, c.Name)
		if !ok {
			unknown++
			continue
		}
		switch {
		case st.State.Running != nil:
			running++
		case st.State.Terminated != nil:
			stopped++
			code := st.State.Terminated.ExitCode
			if !podspec.ShouldRestart(pod, c, code) {
				stoppedNotRestartable++
			}
			if code == 0 {
				succeeded++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t != nil {
				stopped++
				if !podspec.ShouldRestart(pod, c, t.ExitCode) {
					stoppedNotRestartable++
				}
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}

	if failedInitNotRestartable > 0 {
		return v1.PodFailed
	}
	switch {
	case pendingInit > 0 || (pendingSidecars > 0 && !initialized) || waiting > 0:
		return v1.PodPending
	case running > 0 && unknown == 0:
		return v1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		// A static pod stopped for good gets no terminal phase from its
		// containers, as upstream (#116484): its UID comes back when its
		// manifest does, and a terminal phase is final.
		if stopped != stoppedNotRestartable && (!podIsTerminal || podspec.IsStatic(pod)) {
			// At least one is going to be restarted.
			return v1.PodRunning
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	return v1.PodPending
}

// readyToStartContainersCondition is true when a sandbox with networking
// exists that need not be replaced (the kubelet's PodSandboxChanged).
func readyToStartContainersCondition(pod *v1.Pod, o *observed.PodStatus) v1.PodCondition {
	c := v1.PodCondition{Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse}
	if o == nil || len(o.Sandboxes) == 0 {
		return c
	}
	ready := 0
	for _, sb := range o.Sandboxes {
		if sb.State == observed.SandboxReady {
			ready++
		}
	}
	newest := o.Sandboxes[0]
	switch {
	case ready > 1, newest.State != observed.SandboxReady:
	case newest.NetworkNode != pod.Spec.HostNetwork:
	case !pod.Spec.HostNetwork && len(o.IPs) == 0:
	default:
		c.Status = v1.ConditionTrue
	}
	return c
}

// unreadyMessage joins the kubelet's "containers with ... status: [a b]".
func unreadyMessage(unknown []string, kind string, names []string) string {
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(names) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with %s status: %s", kind, names))
	}
	return strings.Join(msgs, ", ")
}

func initializedCondition(pod *v1.Pod, statuses []v1.ContainerStatus, ph v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		st, ok := findStatus(statuses, ic.Name)
		if !ok {
			unknown = append(unknown, ic.Name)
			continue
		}
		done := st.Ready
		if podspec.IsSidecar(ic) {
			done = st.Started != nil && *st.Started
		}
		if !done {
			incomplete = append(incomplete, ic.Name)
		}
	}
	if ph == v1.PodSucceeded && len(unknown) == 0 {
		c.Reason = ReasonPodCompleted
		return c
	}
	if anyRegularContainerStarted(pod, statuses) {
		return c
	}
	if msg := unreadyMessage(unknown, "incomplete", incomplete); msg != "" {
		c.Status = v1.ConditionFalse
		c.Reason = ReasonContainersNotInitialized
		c.Message = msg
	}
	return c
}

// anyRegularContainerStarted: an app container is running or has run.
func anyRegularContainerStarted(pod *v1.Pod, statuses []v1.ContainerStatus) bool {
	for i := range pod.Spec.Containers {
		if st, ok := findStatus(statuses, pod.Spec.Containers[i].Name); ok &&
			(st.State.Running != nil || st.State.Terminated != nil) {
			return true
		}
	}
	return false
}

func containersReadyCondition(pod *v1.Pod, statuses []v1.ContainerStatus, ph v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionFalse}
	var unknown, unready []string
	check := func(name string) {
		st, ok := findStatus(statuses, name)
		switch {
		case !ok:
			unknown = append(unknown, name)
		case !st.Ready:
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if podspec.IsSidecar(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name)
	}
	if (ph == v1.PodSucceeded && len(unknown) == 0) || ph == v1.PodFailed {
		c.Reason = ReasonPodCompleted
		if ph == v1.PodFailed {
			c.Reason = ReasonPodFailed
		}
		return c
	}
	if msg := unreadyMessage(unknown, "unready", unready); msg != "" {
		c.Reason = ReasonContainersNotReady
		c.Message = msg
		return c
	}
	c.Status = v1.ConditionTrue
	return c
}

// readyCondition is ContainersReady, and then the pod's readiness gates: a
// gate holds when the pod's condition of its type, set through the API by
// whoever owns it, is True (the kubelet's GeneratePodReadyCondition).
func readyCondition(pod *v1.Pod, statuses []v1.ContainerStatus, ph v1.PodPhase) v1.PodCondition {
	c := containersReadyCondition(pod, statuses, ph)
	c.Type = v1.PodReady
	if c.Status != v1.ConditionTrue {
		return c
	}
	var unready []string
	for _, gate := range pod.Spec.ReadinessGates {
		cond := findCondition(pod.Status.Conditions, gate.ConditionType)
		switch {
		case cond == nil:
			unready = append(unready, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", gate.ConditionType))
		case cond.Status != v1.ConditionTrue:
			unready = append(unready, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", gate.ConditionType, cond.Status))
		}
	}
	if len(unready) > 0 {
		return v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: ReasonReadinessGatesNotReady,
			Message: strings.Join(unready, ", ")}
	}
	return c
}

func findCondition(conds []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// sortPodIPs keeps the first IP of the node's family, then the first of the
// other family (the kubelet's sortPodIPs). The node's family is hostIP's,
// IPv4 if unknown.
func sortPodIPs(ips []string, hostIP string) []string {
	v6First := false
	if h, err := netip.ParseAddr(hostIP); err == nil {
		v6First = h.Unmap().Is6()
	}
	var out []string
	for _, want6 := range []bool{v6First, !v6First} {
		for _, s := range ips {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			a = a.Unmap()
			if a.Is6() == want6 {
				out = append(out, a.String())
				break
			}
		}
	}
	return out
}

func startTime(prev v1.PodStatus, now time.Time) *metav1.Time {
	if prev.StartTime != nil && !prev.StartTime.IsZero() {
		t := *prev.StartTime
		return &t
	}
	t := metav1.NewTime(now)
	return &t
}

// normTime drops what the API does not keep (sub-second precision,
// monotonic clock, location), as the kubelet's status manager does.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Second)
}

// maxPodMessages bounds the terminated messages of all of a pod's
// containers together (the kubelet's MaxPodTerminationMessageLogLength).
const maxPodMessages = 12 << 10

// messageBound is how long one container's terminated message may be:
// the pod's bound shared by all its containers, as the kubelet's status
// manager cuts them.
func messageBound(pod *v1.Pod) int {
	n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers)
	if n == 0 {
		return maxPodMessages
	}
	return maxPodMessages / n
}

// normContainerState drops what the API does not keep of the times and
// cuts a terminated message to maxMessage bytes (not within a UTF-8
// sequence).
func normContainerState(s *v1.ContainerState, maxMessage int) {
	if s.Running != nil {
		s.Running.StartedAt = metav1.NewTime(normTime(s.Running.StartedAt.Time))
	}
	if s.Terminated != nil {
		s.Terminated.StartedAt = metav1.NewTime(normTime(s.Terminated.StartedAt.Time))
		s.Terminated.FinishedAt = metav1.NewTime(normTime(s.Terminated.FinishedAt.Time))
		s.Terminated.Message = cutMessage(s.Terminated.Message, maxMessage)
	}
}

// cutMessage returns the first limit bytes of msg, less an incomplete UTF-8
// sequence at the cut.
func cutMessage(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	cut := limit
	// A cut before a continuation byte splits a sequence: back up to its
	// start (at most 3 bytes), and drop it.
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(msg[cut]); i++ {
		cut--
	}
	return msg[:cut]
}

// hasInitialized tells whether the pod has ever been initialized, as the
// kubelet's status manager asks it before reporting app containers
// terminated: no init containers, an app container that left waiting, or
// the last init container done (a sidecar running and started).
func hasInitialized(pod *v1.Pod, inits, apps []v1.ContainerStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, st := range apps {
		if st.LastTerminationState.Terminated != nil || st.State.Waiting == nil {
			return true
		}
	}
	last := &pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1]
	st, ok := findStatus(inits, last.Name)
	if !ok {
		return false
	}
	if podspec.IsSidecar(last) {
		return st.State.Running != nil && st.Started != nil && *st.Started
	}
	for _, t := range []*v1.ContainerStateTerminated{st.LastTerminationState.Terminated, st.State.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// initializedContainers is the init container statuses up to the last one
// that left waiting (at least the first), as the kubelet's status manager
// picks the ones to report terminated.
func initializedContainers(statuses []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].State.Waiting == nil || statuses[i].LastTerminationState.Terminated != nil {
			return statuses[:i+1]
		}
	}
	if len(statuses) > 0 {
		return statuses[:1]
	}
	return nil
}
