// Package statussync is beside the pipeline, in cluster mode: it sends the
// pod statuses that statusmanager caches to the API server, as the
// kubelet's status manager does (syncPod/syncBatch). It takes the
// statuses that changed from statusmanager and patches them at once, and
// compares every pod with the API every SyncPeriod.
//
// The rules are the kubelet's: a strategic-merge patch of status with the
// pod's UID as precondition, sent only when it changes something;
// conditions nodelet does not own are kept; a terminal phase is never
// reported while a container may still run, and never left; a static
// pod's status goes to its own mirror pod (of its version,
// mirror.IsMirrorOf). A pod the API marked for deletion is deleted for
// good (grace 0, UID precondition) once its worker has finished: its
// containers stopped and its resources released.
package statussync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/cluster/mirror"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// SyncPeriod is how often every pod's status is compared with the API's
// (the kubelet's syncPeriod), besides the patch sent at each change.
const SyncPeriod = 10 * time.Second

// APIPods is the API server's view of this node's pods (the node's pod
// informer store).
type APIPods interface {
	GetByKey(key string) (any, bool, error)
}

// Workers tells what the pod workers know of a pod.
type Workers interface {
	// CouldHaveRunningContainers: a terminal phase must not be reported.
	CouldHaveRunningContainers(uid types.UID) bool
	// IsPodFinished: the pod's containers stopped and its resources were
	// released; a pod being deleted may go.
	IsPodFinished(uid types.UID) bool
}

// Statuses are the statuses set on this node (statusmanager).
type Statuses interface {
	Changed() <-chan struct{}
	TakeChanged() []statusmanager.Entry
	Get(uid types.UID) (v1.PodStatus, bool)
}

// Deps are what the Syncer uses.
type Deps struct {
	// NodeName is the node whose pods are re-read after the API server
	// was unreachable (see Stale).
	NodeName string
	Client   kubernetes.Interface
	Statuses Statuses
	APIPods  APIPods
	Workers  Workers
	// APIPodsVersion, when set, is the informer's last synced resource
	// version (SharedIndexInformer.LastSyncResourceVersion): it tells when
	// the informer caught up after Stale.
	APIPodsVersion func() string
	// KickMirrors, when set, asks for a static pod's mirror pod at once
	// (mirror.Manager.Kick) when it has none yet.
	KickMirrors func()
	// Finished, when set, are the pods whose worker finished
	// (podworker.Deps.OnFinished adds them): as PodFinished says.
	Finished *notify.UIDs
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// entry is the newest status of a pod, and the pod it is for.
type entry struct {
	pod    *v1.Pod
	status v1.PodStatus
	dirty  bool
}

// Syncer sends pod statuses to the API server.
type Syncer struct {
	deps Deps
	// fresh is the last read of the node's pods, by namespace/name, while
	// stale; it is read again at each full pass. It and freshNow belong
	// to the Run goroutine.
	fresh map[string]*v1.Pod
	// freshNow: fresh was read in this pass (a pod it lacks is gone).
	freshNow bool

	// wake starts a pass when a mirror pod was created or a pod finished.
	wake chan struct{}

	mu   sync.Mutex
	pods map[types.UID]*entry
	// stale is set when the pod informer may be behind (Stale): passes
	// compare with the node's pods read from the API server instead of
	// the informer's copies, which miss what others wrote meanwhile (the
	// node lifecycle controller marks pods NotReady while the node is
	// unreachable). The informer reconnects with back-off, up to a minute
	// after the API server is back; it is trusted again once its resource
	// version is not staleVersion any more (it listed, or its watch
	// delivered events).
	stale        bool
	staleVersion string
	// created are the mirror pods created on this node (MirrorCreated)
	// that the informer does not show yet, by namespace/name, as the API
	// server last returned them.
	created map[string]*v1.Pod
}

// New returns a Syncer; Run starts it.
func New(deps Deps) *Syncer {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	return &Syncer{deps: deps, pods: map[types.UID]*entry{}, created: map[string]*v1.Pod{}, wake: make(chan struct{}, 1)}
}

// PodFinished is told a pod's worker finished (as Deps.Finished tells):
// its terminal phase may be reported now, and a pod deleted in the API
// deleted for good, without waiting for the next full pass.
func (s *Syncer) PodFinished(uid types.UID) {
	if s.markFinished(uid) {
		s.wakeUp()
	}
}

// markFinished marks the pods whose worker finished dirty, and says
// whether it knew any of them.
func (s *Syncer) markFinished(uids ...types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	known := false
	for _, uid := range uids {
		if e := s.pods[uid]; e != nil {
			e.dirty, known = true, true
		}
	}
	return known
}

func (s *Syncer) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// MirrorCreated is given the mirror pod created for a static pod (a
// mirror.Deps.Created): the static pod's status goes to it at once,
// before the informer shows it.
func (s *Syncer) MirrorCreated(p *v1.Pod) {
	key := p.Namespace + "/" + p.Name
	s.mu.Lock()
	s.created[key] = p
	for _, e := range s.pods {
		if podspec.IsStatic(e.pod) && e.pod.Namespace+"/"+e.pod.Name == key {
			e.dirty = true
		}
	}
	s.mu.Unlock()
	s.wakeUp()
}

// Stale says the pod informer may miss what others wrote: it lost its
// watch (a cache.WatchErrorHandler), or the API server did not answer (a
// failed lease renewal: the reflector resumes a watch the API server
// closed without telling its error handler). Passes compare with the API
// server's own pods until the informer's resource version moves.
func (s *Syncer) Stale() {
	v := ""
	if s.deps.APIPodsVersion != nil {
		v = s.deps.APIPodsVersion()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stale {
		s.deps.Log.Info("status: the pod informer may be behind; comparing with the API server's pods until it catches up",
			"resourceVersion", v)
	}
	s.stale, s.staleVersion = true, v
}

// readAPI says whether this pass reads the node's pods from the API
// server (see stale), and sets s.fresh to them; it clears stale once the
// informer caught up. It returns false when it cannot read them:
// the pass is skipped.
func (s *Syncer) readAPI(ctx context.Context, all bool) (read, ok bool) {
	s.mu.Lock()
	stale, v := s.stale, s.staleVersion
	if stale && s.deps.APIPodsVersion != nil && s.deps.APIPodsVersion() != v {
		s.stale, stale = false, false
		s.deps.Log.Info("status: the pod informer caught up; using its pods", "resourceVersion", s.deps.APIPodsVersion())
	}
	s.mu.Unlock()
	if !stale {
		s.fresh = nil
		return false, true
	}
	if s.fresh != nil && !all {
		return false, true // a dirty pass: the last read will do
	}
	list, err := s.deps.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + s.deps.NodeName, ResourceVersion: "0"})
	if err != nil {
		s.deps.Log.Debug("status: cannot read the node's pods; the pass waits", "err", err)
		return false, false // still away: the next pass tries again
	}
	if s.deps.APIPodsVersion == nil {
		// Nothing tells when the informer is back: one read only.
		s.mu.Lock()
		if s.staleVersion == v {
			s.stale = false
		}
		s.mu.Unlock()
	}
	s.fresh = make(map[string]*v1.Pod, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		s.fresh[p.Namespace+"/"+p.Name] = p
	}
	return true, true
}

// take records the statuses that changed, marked dirty.
func (s *Syncer) take() {
	changed := s.deps.Statuses.TakeChanged()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range changed {
		s.pods[c.Pod.UID] = &entry{pod: c.Pod, status: c.Status, dirty: true}
	}
}

// Run patches dirty pods as they come and every pod each SyncPeriod
// until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	t := s.deps.Clock.NewTicker(SyncPeriod)
	defer t.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-s.deps.Statuses.Changed():
		case <-s.wake:
		case <-s.deps.Finished.C():
			if !s.markFinished(s.deps.Finished.Take()...) {
				continue
			}
		case <-t.C():
			all = true
		}
		s.SyncBatch(ctx, all)
	}
}

// SyncBatch sends the status of the dirty pods, or of every pod when all
// is set, and deletes the deleted pods that may go.
func (s *Syncer) SyncBatch(ctx context.Context, all bool) {
	s.take()
	read, ok := s.readAPI(ctx, all)
	if !ok {
		return
	}
	s.freshNow = read
	all = all || read
	s.mu.Lock()
	var work []types.UID
	for uid, e := range s.pods {
		if all || e.dirty {
			work = append(work, uid)
		}
	}
	s.mu.Unlock()
	slices.Sort(work)
	for _, uid := range work {
		if ctx.Err() != nil {
			return
		}
		s.syncPod(ctx, uid)
	}
}

// syncPod sends one pod's status, then deletes it if it may go.
func (s *Syncer) syncPod(ctx context.Context, uid types.UID) {
	s.mu.Lock()
	e := s.pods[uid]
	if e == nil {
		s.mu.Unlock()
		return
	}
	pod, st := e.pod, e.status
	e.dirty = false
	s.mu.Unlock()
	// The newest status, not only the one last taken: a pod's worker may
	// finish (and the pod be deleted below) between the runtime manager
	// setting its final status and this syncer taking it, and that status
	// would then never reach the API.
	if latest, ok := s.deps.Statuses.Get(uid); ok {
		st = latest
	}

	if _, kept := s.deps.Statuses.Get(uid); !kept && podspec.IsStatic(pod) {
		// A static pod no source wants any more, whose status
		// housekeeping dropped: its mirror pod goes with it (mirror).
		s.forget(uid, e)
		s.mu.Lock()
		delete(s.created, pod.Namespace+"/"+pod.Name)
		s.mu.Unlock()
		if s.deps.KickMirrors != nil {
			s.deps.KickMirrors()
		}
		return
	}
	api, gone := s.apiPod(pod)
	if gone {
		// The API object is gone (deleted, or the pod replaced by one
		// with another UID): nothing more to report.
		s.forget(uid, e)
		return
	}
	if api == nil {
		return // a static pod whose mirror pod is not there yet
	}
	log := s.deps.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", uid)
	// Whether the worker finished is read once, before the status is
	// merged: a worker that finishes while the patch goes out must not
	// have its pod deleted on this pass, whose patch held the terminal
	// phase back (the pod would leave the API last reported Running).
	// Its finish marks the pod dirty: the next pass sends the terminal
	// phase, then deletes.
	finished := s.deps.Workers.IsPodFinished(uid)
	merged := Merge(api.Status, st, !finished && s.deps.Workers.CouldHaveRunningContainers(uid))
	patch, changed, err := StatusPatch(api.UID, api.Status, merged)
	if err != nil {
		log.Error("status: cannot make the patch", "err", err)
		return
	}
	if changed {
		got, err := s.deps.Client.CoreV1().Pods(api.Namespace).Patch(ctx, api.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{}, "status")
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			log.Debug("status: pod gone or replaced in the API", "err", err)
			s.patched(api, true)
			return
		case err != nil:
			log.Warn("status: patch failed, retried", "err", err)
			s.markDirty(uid, e)
			return
		}
		s.patched(got, false)
		log.Debug("status: patched", "phase", merged.Phase)
	}
	if api.DeletionTimestamp != nil && !podspec.IsStatic(pod) && finished {
		if !terminal(merged.Phase) {
			// As the kubelet's status manager (canBeDeleted): the pod
			// leaves the API only after a terminal phase reached it.
			log.Info("status: pod deletion waits for a terminal phase", "phase", merged.Phase)
			return
		}
		zero := int64(0)
		err := s.deps.Client.CoreV1().Pods(api.Namespace).Delete(ctx, api.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &api.UID}})
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			log.Info("pod deleted from the API: its containers stopped and its resources were released")
			s.forget(uid, e)
		default:
			log.Warn("delete the terminated pod from the API failed, retried", "err", err)
			s.markDirty(uid, e)
		}
	}
}

// apiPod returns the API object pod's status goes to: the pod itself, or
// a static pod's mirror pod (nil, false when there is none yet). gone
// is set when the pod has no API object and will not have one.
func (s *Syncer) apiPod(pod *v1.Pod) (api *v1.Pod, gone bool) {
	var p *v1.Pod
	if s.fresh != nil {
		p = s.fresh[pod.Namespace+"/"+pod.Name]
	} else if obj, ok, err := s.deps.APIPods.GetByKey(pod.Namespace + "/" + pod.Name); err == nil && ok {
		p, _ = obj.(*v1.Pod)
	}
	if podspec.IsStatic(pod) {
		return s.mirrorOf(pod, p), false
	}
	if (p == nil || p.UID != pod.UID) && s.fresh != nil && !s.freshNow {
		return nil, false // the pod may be newer than the last read: the next full pass reads again
	}
	if p == nil || p.UID != pod.UID {
		return nil, true
	}
	return p, false
}

// mirrorOf is static's mirror pod: p, the API's pod of its name as the
// informer (or the one re-read) shows it, or the one created here that
// the informer does not show yet. With neither, the mirror manager is
// asked for one and nil returned.
func (s *Syncer) mirrorOf(static, p *v1.Pod) *v1.Pod {
	key := static.Namespace + "/" + static.Name
	if p != nil && (p.Annotations[podspec.AnnotationConfigMirror] == "" || p.DeletionTimestamp != nil) {
		p = nil
	}
	s.mu.Lock()
	c := s.created[key]
	if c != nil && p != nil && p.UID == c.UID {
		delete(s.created, key) // the informer caught up
		c = nil
	}
	s.mu.Unlock()
	// The mirror pod of another version of the static pod (the one
	// before, kept while it terminates; the next one) is not this one's:
	// the next version's mirror pod must never show the old version's
	// final phase, which it could not leave.
	if c != nil && !mirror.IsMirrorOf(c, static) {
		c = nil
	}
	if p != nil && !mirror.IsMirrorOf(p, static) {
		p = nil
	}
	switch {
	case c != nil:
		return c
	case p != nil:
		return p
	}
	if s.deps.KickMirrors != nil {
		s.deps.KickMirrors()
	}
	return nil
}

// patched records the API's copy of a pod after a status patch, in the
// last read of the API (fresh) and when it is a mirror pod the informer
// does not show yet; gone drops it.
func (s *Syncer) patched(p *v1.Pod, gone bool) {
	key := p.Namespace + "/" + p.Name
	if f := s.fresh[key]; f != nil && f.UID == p.UID {
		if gone {
			delete(s.fresh, key)
		} else {
			s.fresh[key] = p
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.created[key]
	if c == nil || c.UID != p.UID {
		return
	}
	if gone {
		delete(s.created, key)
	} else {
		s.created[key] = p
	}
}

func (s *Syncer) markDirty(uid types.UID, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[uid] == e {
		e.dirty = true
	}
}

// forget drops e unless a newer status replaced it meanwhile.
func (s *Syncer) forget(uid types.UID, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[uid] == e {
		delete(s.pods, uid)
	}
}

// ownedConditions are the pod conditions the node sets (the kubelet's
// PodConditionsByKubelet); the others (set by controllers, the scheduler,
// readiness gates) are kept as the API has them. The resize conditions
// are among them: one the node no longer reports goes from the API.
var ownedConditions = []v1.PodConditionType{
	v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady, v1.PodReadyToStartContainers,
	v1.PodResizePending, v1.PodResizeInProgress,
}

// Merge is the status to send: st, the node's, over old, the API's, with
// the kubelet's rules. Conditions the node does not own are kept from old,
// but for the DisruptionTarget the node shares: st's (the node evicted or
// shut the pod down) replaces old's or is added once the pod reaches a
// terminal phase with nothing left running, and not before, as the
// kubelet sends it (mergePodStatus). A terminal phase in old is never
// left; st's terminal phase is held back (old's phase kept) while a
// container may still run; old's start time is kept. The claims' statuses
// are old's, whatever st has.
func Merge(old, st v1.PodStatus, couldHaveRunningContainers bool) v1.PodStatus {
	out := *st.DeepCopy()
	var conds []v1.PodCondition
	for _, c := range old.Conditions {
		if !slices.Contains(ownedConditions, c.Type) {
			conds = append(conds, c)
		}
	}
	toTerminal := !terminal(old.Phase) && terminal(out.Phase) && !couldHaveRunningContainers
	for _, c := range out.Conditions {
		switch {
		case slices.Contains(ownedConditions, c.Type):
			conds = append(conds, c)
		case c.Type == v1.DisruptionTarget && toTerminal:
			conds = replaceCondition(conds, c)
		}
	}
	// Keep the API's transition times of conditions that did not change.
	for i, c := range conds {
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
				conds[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	out.Conditions = conds
	if old.StartTime != nil {
		out.StartTime = old.StartTime
	}
	switch {
	case terminal(old.Phase):
		out.Phase, out.Reason, out.Message = old.Phase, old.Reason, old.Message
	case terminal(out.Phase) && couldHaveRunningContainers:
		out.Phase, out.Reason, out.Message = old.Phase, old.Reason, old.Message
		if out.Phase == "" {
			out.Phase = v1.PodPending
		}
	}
	if len(out.HostIPs) == 0 && len(old.HostIPs) > 0 {
		out.HostIP, out.HostIPs = old.HostIP, old.HostIPs
	}
	// The claims' statuses belong to the resource claim controller and
	// the scheduler: the node sends the API's back unchanged (the
	// NodeRestriction admission refuses a node's status that changes them).
	out.ResourceClaimStatuses = old.ResourceClaimStatuses
	out.ExtendedResourceClaimStatus = old.ExtendedResourceClaimStatus
	out.NodeAllocatableResourceClaimStatuses = old.NodeAllocatableResourceClaimStatuses
	return out
}

func terminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }

// replaceCondition replaces the condition of c's type in conds with c, or
// appends c when there is none.
func replaceCondition(conds []v1.PodCondition, c v1.PodCondition) []v1.PodCondition {
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

// StatusPatch is the strategic-merge patch from old to st for the pod
// with uid, which it carries as a precondition. changed is false when the
// patch would change nothing.
func StatusPatch(uid types.UID, old, st v1.PodStatus) (patch []byte, changed bool, err error) {
	if apiequality.Semantic.DeepEqual(old, st) {
		return nil, false, nil
	}
	oldJSON, err := json.Marshal(v1.Pod{Status: old})
	if err != nil {
		return nil, false, err
	}
	newPod := v1.Pod{Status: st}
	newPod.UID = uid // only in the new object: the patch carries it as a precondition
	newJSON, err := json.Marshal(newPod)
	if err != nil {
		return nil, false, err
	}
	patch, err = strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Pod{})
	if err != nil {
		return nil, false, fmt.Errorf("status patch: %w", err)
	}
	onlyUID := fmt.Sprintf(`{"metadata":{"uid":%q}}`, uid)
	return patch, string(patch) != onlyUID, nil
}
