package podruntime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/observed"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Observe asks the runtime everything about one pod: its sandboxes (with
// the newest ready one's IPs) and every container instance with exit
// details. Missing objects (removed between the list and the status call)
// are skipped.
func (m *Manager) Observe(ctx context.Context, uid types.UID, name, namespace string) (*observed.PodStatus, error) {
	began := m.clock.Now()
	selector := map[string]string{podspec.LabelPodUID: string(uid), podspec.LabelManagedBy: podspec.ManagedByValue}
	// The two lists go out together: each waits on the runtime, not on
	// the other.
	var containers []*runtimeapi.Container
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		containers, cerr = m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: maps.Clone(selector)})
	}()
	sandboxes, err := m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	<-done
	if err != nil {
		return nil, fmt.Errorf("list sandboxes of pod %s/%s: %w", namespace, name, err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("list containers of pod %s/%s: %w", namespace, name, cerr)
	}
	st := &observed.PodStatus{UID: uid, Name: name, Namespace: namespace}
	for _, s := range sandboxes {
		st.Sandboxes = append(st.Sandboxes, toSandbox(s))
	}
	sortSandboxes(st.Sandboxes)
	known := m.observed.get(uid)
	seen := podFacts{containers: map[string]observed.Container{}, sandboxes: sandboxStates(st.Sandboxes), complete: true}
	if len(st.Sandboxes) > 0 && st.Sandboxes[0].State == observed.SandboxReady {
		id := st.Sandboxes[0].ID
		if known.knowsSandbox(id) {
			st.IPs = slices.Clone(known.ips)
			seen.keepSandbox(id, known.ips, known.hostNetwork)
		} else {
			sb, ips, err := m.sandboxStatus(ctx, id)
			if err != nil {
				return nil, err
			}
			st.IPs = ips
			seen.keepSandbox(id, ips, onHostNetwork(sb))
		}
	}
	for _, c := range containers {
		if oc, ok := known.containers[c.Id]; ok && oc.State == toState(c.State) {
			st.Containers = append(st.Containers, oc)
			seen.containers[c.Id] = oc
			continue
		}
		oc, err := m.containerDetails(ctx, c)
		if cri.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		st.Containers = append(st.Containers, oc)
		if settled(oc.State) {
			seen.containers[c.Id] = oc
		} else {
			seen.complete = false
		}
	}
	m.observed.set(uid, seen, began)
	sortContainers(st.Containers)
	return st, nil
}

// lookFromView is what a look at pod uid would observe, read from the
// PLEG's latest relist and what the manager kept of the pod, with no CRI
// call, and when that relist began; false when it cannot tell, and the
// caller looks at the runtime (Observe). As the kubelet's resyncs read its
// PLEG's cache, with a guard of its own: the relist began after the
// manager last changed the pod in the runtime, and shows exactly the
// sandboxes and containers, in the same states, that the manager's last
// look found, each container's details kept (running or exited), the
// newest sandbox's IPs too when it is ready. A relist older than that look
// then tells the same as the look did; a newer one that differs (a
// container died, a collector removed one) sends the caller to the
// runtime.
func (m *Manager) lookFromView(uid types.UID, name, namespace string) (*observed.PodStatus, time.Time, bool) {
	if m.view == nil {
		return nil, time.Time{}, false
	}
	pods, at, ok := m.view.CurrentAt()
	if !ok {
		return nil, time.Time{}, false
	}
	known, ok := m.observed.lookup(uid)
	if !ok || !known.complete || !at.After(known.changedAt) {
		return nil, time.Time{}, false
	}
	listed := pods[uid]
	if listed == nil || len(listed.Sandboxes) != len(known.sandboxes) || len(listed.Containers) != len(known.containers) {
		return nil, time.Time{}, false
	}
	for _, sb := range listed.Sandboxes {
		if st, ok := known.sandboxes[sb.ID]; !ok || st != sb.State {
			return nil, time.Time{}, false
		}
	}
	st := &observed.PodStatus{UID: uid, Name: name, Namespace: namespace, Sandboxes: slices.Clone(listed.Sandboxes)}
	if len(st.Sandboxes) > 0 && st.Sandboxes[0].State == observed.SandboxReady {
		if !known.knowsSandbox(st.Sandboxes[0].ID) {
			return nil, time.Time{}, false
		}
		st.IPs = slices.Clone(known.ips)
	}
	for _, c := range listed.Containers {
		kept, ok := known.containers[c.ID]
		if !ok || kept.State != c.State {
			return nil, time.Time{}, false
		}
		st.Containers = append(st.Containers, kept)
	}
	sortContainers(st.Containers)
	return st, at, true
}

// newFromView is what a look at a new pod (its first sync) would observe
// when the PLEG's latest relist shows nothing of it: no sandbox and no
// container, with no CRI call, as the kubelet's first sync of a pod reads
// its PLEG's cache. It cannot tell, and the caller looks (Observe), when
// the relist shows something of the pod, or began before the manager last
// changed the pod in the runtime: a pod created again with the same UID
// (a static pod's manifest written back) may have objects of its first
// life that an older relist missed. Only the manager's syncs make a pod's
// objects, and each change is recorded when it is done (touch, kept past
// the pod's worker by drop, and past a look or relist that began before
// it by set and keepOnly), so a relist that began after it shows them.
func (m *Manager) newFromView(uid types.UID, name, namespace string) (*observed.PodStatus, time.Time, bool) {
	if m.view == nil {
		return nil, time.Time{}, false
	}
	pods, at, ok := m.view.CurrentAt()
	if !ok || pods[uid] != nil {
		return nil, time.Time{}, false
	}
	if known, ok := m.observed.lookup(uid); ok && !at.After(known.changedAt) {
		return nil, time.Time{}, false
	}
	return &observed.PodStatus{UID: uid, Name: name, Namespace: namespace}, at, true
}

func sandboxStates(sbs []observed.Sandbox) map[string]observed.SandboxState {
	out := make(map[string]observed.SandboxState, len(sbs))
	for _, sb := range sbs {
		out[sb.ID] = sb.State
	}
	return out
}

// podFacts is what Observe keeps of a pod between two looks: what the
// runtime's status calls told that cannot change while the lists show the
// same objects in the same state. A ready sandbox's IPs are set before it
// is ready and kept until it is removed; a running container's start time,
// image and empty exit details stay until it stops, which the list shows
// (its resources too, until a resize changes them: observedFacts.forget);
// an exited container's exit code, times, reason and termination message
// never change again. Resyncs of idle pods then cost the two list calls,
// not also a status call per sandbox and container (with 100 pods, 200 of
// nodelet's CRI calls a minute), nor, for a pod with finished init
// containers, a status call and a termination-message read for each.
type podFacts struct {
	// sandboxID is the ready sandbox whose IPs are kept: ips, or none on
	// the host's network (hostNetwork), where the runtime reports none.
	sandboxID   string
	ips         []string
	hostNetwork bool
	containers  map[string]observed.Container // running and exited ones, by ID
	// sandboxes are every sandbox the last look listed, with its state;
	// complete: every container it listed is in containers.
	sandboxes map[string]observed.SandboxState
	complete  bool
	// changedAt is when the manager last finished changing the pod in the
	// runtime (touch): a relist that began before it may not show the
	// change.
	changedAt time.Time
}

// knowsSandbox reports whether f keeps what sandbox id's status tells
// (its IPs, or that it has none on the host's network).
func (f podFacts) knowsSandbox(id string) bool {
	return id != "" && f.sandboxID == id && (len(f.ips) > 0 || f.hostNetwork)
}

// keepSandbox keeps ready sandbox id's IPs, when it has them or is on the
// host's network; a sandbox on the pod network with no IP yet is asked
// again.
func (f *podFacts) keepSandbox(id string, ips []string, hostNetwork bool) {
	if len(ips) > 0 || hostNetwork {
		f.sandboxID, f.ips, f.hostNetwork = id, slices.Clone(ips), hostNetwork
	}
}

// onHostNetwork reports whether the runtime says sandbox s shares the
// host's network namespace (the kubelet's podSandboxChanged reads the same).
func onHostNetwork(s *runtimeapi.PodSandboxStatus) bool {
	return s.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
}

// settled reports whether a container in state s is kept in podFacts: its
// status details hold for as long as the list shows it in that state.
func settled(s observed.ContainerState) bool {
	return s == observed.ContainerRunning || s == observed.ContainerExited
}

// observedFacts is podFacts by pod UID, for the pods seen with a ready
// sandbox or a running or exited container at their last look: a pod
// whose last look found neither has no entry, and a pod's entry goes when
// its worker is done with it (SyncTerminatedPod), it was killed as an
// orphan (KillPod) or a relist finds nothing of it (ListPods), so entries
// end with their pods. Until a look or relist that began after the pod's
// last change finds nothing, the entry stays with that change's time
// alone (set, drop, keepOnly).
type observedFacts struct {
	mu   sync.Mutex
	pods map[types.UID]podFacts
}

func (o *observedFacts) get(uid types.UID) podFacts {
	f, _ := o.lookup(uid)
	return f
}

// lookup is get, and whether the pod has an entry.
func (o *observedFacts) lookup(uid types.UID) (podFacts, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.pods[uid]
	return f, ok
}

// set records a look at pod uid that began at began; the time of the
// last change (touch) stays. A look that found nothing removes the entry,
// unless the pod changed after the look began: its lists may have missed
// what the change made, and newFromView must not take the pod for one the
// runtime holds nothing of.
func (o *observedFacts) set(uid types.UID, f podFacts, began time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f.changedAt = o.pods[uid].changedAt
	if f.sandboxID == "" && len(f.containers) == 0 && len(f.sandboxes) == 0 && f.changedAt.Before(began) {
		delete(o.pods, uid)
		return
	}
	if o.pods == nil {
		o.pods = map[types.UID]podFacts{}
	}
	o.pods[uid] = f
}

// touch records that the manager has just finished changing pod uid in
// the runtime (started, stopped or resized something), at t. The entry
// it makes for a pod that had none holds nothing a view could match; the
// look that follows the change fills it in.
func (o *observedFacts) touch(uid types.UID, t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pods == nil {
		o.pods = map[types.UID]podFacts{}
	}
	f := o.pods[uid]
	f.changedAt = t
	o.pods[uid] = f
}

// keepOnly forgets every pod not in pods (the runtime has no object of it
// left), all but the time of its last change when that is not before the
// lists began (at): they may have missed the change. The PLEG's relists
// bound what is kept to what the runtime holds, whatever looked at a pod
// last. A look racing with it only loses what it kept, and asks again
// next time.
func (o *observedFacts) keepOnly(pods map[types.UID]*observed.PodStatus, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for uid, f := range o.pods {
		switch {
		case pods[uid] != nil:
		case f.changedAt.Before(at):
			delete(o.pods, uid)
		default:
			o.pods[uid] = podFacts{changedAt: f.changedAt}
		}
	}
}

// drop forgets what is kept of pod uid. The time of its last change stays
// (an entry with nothing else) until a look or relist that began after it
// finds nothing of the pod (set, keepOnly): the pod's objects may outlive
// its worker, and a pod created again with the same UID must not be taken
// for one the runtime holds nothing of (newFromView).
func (o *observedFacts) drop(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f, ok := o.pods[uid]; ok && !f.changedAt.IsZero() {
		o.pods[uid] = podFacts{changedAt: f.changedAt}
		return
	}
	delete(o.pods, uid)
}

// forget drops what is kept of one running container of pod uid: its
// resources changed in place (UpdateContainerResources), and the next
// look asks the runtime what it now runs with.
func (o *observedFacts) forget(uid types.UID, containerID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f, ok := o.pods[uid]; ok {
		// A new map: a copy handed out by get stays as it was.
		f.containers = maps.Clone(f.containers)
		delete(f.containers, containerID)
		o.pods[uid] = f
	}
}

// ListPods is the PLEG's relist: every pod nodelet owns, from two list
// calls (no per-container status calls), with container states only.
func (m *Manager) ListPods(ctx context.Context) (map[types.UID]*observed.PodStatus, error) {
	began := m.clock.Now()
	selector := podspec.ManagedSelector()
	sandboxes, err := m.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	containers, err := m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	pods := map[types.UID]*observed.PodStatus{}
	pod := func(labels map[string]string) *observed.PodStatus {
		uid := types.UID(labels[podspec.LabelPodUID])
		if pods[uid] == nil {
			pods[uid] = &observed.PodStatus{UID: uid, Name: labels[podspec.LabelPodName], Namespace: labels[podspec.LabelPodNamespace]}
		}
		return pods[uid]
	}
	for _, s := range sandboxes {
		p := pod(s.Labels)
		p.Sandboxes = append(p.Sandboxes, toSandbox(s))
	}
	for _, c := range containers {
		p := pod(c.Labels)
		p.Containers = append(p.Containers, toContainer(c))
	}
	for _, p := range pods {
		sortSandboxes(p.Sandboxes)
		sortContainers(p.Containers)
	}
	m.observed.keepOnly(pods, began)
	return pods, nil
}

// sandboxStatus is the runtime's status of sandbox id and its IPs; both
// nil for a sandbox that is gone.
func (m *Manager) sandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, []string, error) {
	resp, err := m.rt.PodSandboxStatus(ctx, id)
	if cri.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read sandbox %s status: %w", id, err)
	}
	net := resp.GetStatus().GetNetwork()
	if net.GetIp() == "" {
		return resp.GetStatus(), nil, nil
	}
	ips := []string{net.GetIp()}
	for _, extra := range net.GetAdditionalIps() {
		ips = append(ips, extra.GetIp())
	}
	return resp.GetStatus(), ips, nil
}

// containerDetails adds what only ContainerStatus tells (start, finish,
// exit code, reason) to a listed container; an exited container's message
// ends with its termination message.
func (m *Manager) containerDetails(ctx context.Context, c *runtimeapi.Container) (observed.Container, error) {
	oc := toContainer(c)
	resp, err := m.rt.ContainerStatus(ctx, c.Id)
	if err != nil {
		return oc, fmt.Errorf("read container %s status: %w", c.Id, err)
	}
	return m.withStatus(ctx, oc, resp.GetStatus(), c.Labels, c.Annotations), nil
}

// withStatus is oc with what the runtime's ContainerStatus s tells; labels
// and annotations are the container's (an exited one's termination
// message is found through them).
func (m *Manager) withStatus(ctx context.Context, oc observed.Container, s *runtimeapi.ContainerStatus, labels, annotations map[string]string) observed.Container {
	oc.State = toState(s.GetState())
	oc.StartedAt = nanos(s.GetStartedAt())
	oc.FinishedAt = nanos(s.GetFinishedAt())
	oc.ExitCode = s.GetExitCode()
	oc.Reason, oc.Message = s.GetReason(), s.GetMessage()
	if l := s.GetResources().GetLinux(); l != nil {
		oc.Resources = &observed.Resources{CPUShares: l.CpuShares, CPUQuota: l.CpuQuota, CPUPeriod: l.CpuPeriod, MemoryLimit: l.MemoryLimitInBytes}
	}
	if oc.State == observed.ContainerExited {
		uid := types.UID(labels[podspec.LabelPodUID])
		oc.Message = withTerminationMessage(oc.Message, m.terminationMessage(ctx, uid, oc.Name, annotations, s))
	}
	if s.GetImageRef() != "" {
		oc.ImageRef = s.GetImageRef()
	}
	return oc
}

// startedContainer is a container this sync created and started in
// sandbox sandboxID, as a look at the runtime would observe it, from its
// ContainerStatus s alone: the list's fields are all in the status too.
func (m *Manager) startedContainer(ctx context.Context, sandboxID string, s *runtimeapi.ContainerStatus) observed.Container {
	return m.withStatus(ctx, toContainer(&runtimeapi.Container{
		Id: s.GetId(), PodSandboxId: sandboxID, Metadata: s.GetMetadata(), Image: s.GetImage(), ImageRef: s.GetImageRef(),
		State: s.GetState(), CreatedAt: s.GetCreatedAt(), Labels: s.GetLabels(), Annotations: s.GetAnnotations(),
	}), s, s.GetLabels(), s.GetAnnotations())
}

func toSandbox(s *runtimeapi.PodSandbox) observed.Sandbox {
	state := observed.SandboxNotReady
	if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
		state = observed.SandboxReady
	}
	return observed.Sandbox{
		ID:          s.Id,
		State:       state,
		Attempt:     s.GetMetadata().GetAttempt(),
		CreatedAt:   nanos(s.CreatedAt),
		NetworkNode: s.Annotations[podspec.AnnotationHostNetwork] == "true",
		Hash:        s.Annotations[podspec.AnnotationSandboxHash],
	}
}

// sandboxFromStatus is sandbox s as the list shows it (toSandbox).
func sandboxFromStatus(s *runtimeapi.PodSandboxStatus) observed.Sandbox {
	return toSandbox(&runtimeapi.PodSandbox{Id: s.GetId(), Metadata: s.GetMetadata(), State: s.GetState(),
		CreatedAt: s.GetCreatedAt(), Labels: s.GetLabels(), Annotations: s.GetAnnotations()})
}

func toContainer(c *runtimeapi.Container) observed.Container {
	return observed.Container{
		ID:           c.Id,
		Name:         c.Labels[podspec.LabelContainerName],
		SandboxID:    c.PodSandboxId,
		State:        toState(c.State),
		CreatedAt:    nanos(c.CreatedAt),
		Image:        c.GetImage().GetUserSpecifiedImage(),
		ImageRef:     c.ImageRef,
		RestartCount: atoi(c.Annotations[podspec.AnnotationRestartCount]),
		Hash:         c.Annotations[podspec.AnnotationContainerHash],
		BackoffStep:  atoi(c.Annotations[podspec.AnnotationBackoffStep]),
		GracePeriod:  time.Duration(atoi(c.Annotations[podspec.AnnotationGracePeriod])) * time.Second,
	}
}

func toState(s runtimeapi.ContainerState) observed.ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return observed.ContainerCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return observed.ContainerRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return observed.ContainerExited
	}
	return observed.ContainerUnknown
}

func nanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func sortSandboxes(s []observed.Sandbox) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].CreatedAt.After(s[j].CreatedAt) })
}

func sortContainers(c []observed.Container) {
	sort.SliceStable(c, func(i, j int) bool { return c[i].CreatedAt.After(c[j].CreatedAt) })
}
