// Package mirror is beside the pipeline, in cluster mode: it keeps a
// mirror pod in the API server for each static pod (from the manifest
// path or URL), as the kubelet's mirror client and HandlePodCleanups do.
// A mirror pod is the static pod as the API shows it: the annotation
// kubernetes.io/config.mirror holds the static pod's hash, an owner
// reference names this Node (so the garbage collector removes mirror pods
// of a Node that is deleted), and its status is the static pod's (package
// statussync). A mirror pod that is deleted, or whose static pod changed,
// is created again; one whose static pod is gone is deleted. While the
// static pod that ran under a name is terminating (its containers given
// their grace period), the mirror pod of that name is left as it is, as
// the kubelet's: it shows the pod still running, and is deleted or
// replaced once the containers stopped.
package mirror

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Period is how often mirror pods are reconciled, as the kubelet's
// housekeeping does (HandlePodCleanups). A pass with nothing to do sends
// no request.
const Period = 2 * time.Second

// RetryAfter is how long a static pod whose mirror pod could not be
// created, replaced or deleted waits for the next try.
const RetryAfter = 10 * time.Second

// StaticPods are the static pods the sources want.
type StaticPods interface {
	StaticPods() []*v1.Pod
}

// APIPods lists this node's pods as the API server has them (the node's
// pod informer store).
type APIPods interface {
	List() []any
}

// Deps are what the Manager uses.
type Deps struct {
	Client   kubernetes.Interface
	NodeName string
	Sources  StaticPods
	APIPods  APIPods
	// Created, when set, is given each mirror pod created, as the API
	// server returned it: the informer shows it only later, and after the
	// API server was away only once its watch is back (statussync).
	Created func(*v1.Pod)
	// Terminating, when set, says whether the static pod that ran with a
	// full name (namespace/name) is terminating
	// (podworker.Workers.IsStaticPodTerminating): the mirror pod of that
	// name is then neither deleted, replaced nor created.
	Terminating func(fullName string) bool
	// Kicks, when set, is kicked by others for a pass now (statussync
	// asks, as the kubelet creates mirror pods in syncPod), as Kick is.
	Kicks *notify.Kick
	Clock clock.WithTicker
	Log   *slog.Logger
}

// Manager keeps mirror pods in step with static pods.
type Manager struct {
	deps Deps
	// refused are the static pods (by namespace/name) whose mirror pod the
	// API server refused, and the hash refused: not asked again until the
	// static pod changes.
	refused map[string]string
	// tried are the last attempts, by namespace/name: the same one is not
	// made again before RetryAfter.
	tried map[string]attempt
	kick  *notify.Kick
}

// attempt is what a pass did for a static pod: create the mirror pod for
// hash, replacing or deleting the API pod with uid, until which time it
// is held back.
type attempt struct {
	hash  string
	uid   types.UID
	until time.Time
}

// New returns a Manager; Run starts it.
func New(deps Deps) *Manager {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Kicks == nil {
		deps.Kicks = notify.NewKick()
	}
	return &Manager{deps: deps, refused: map[string]string{}, tried: map[string]attempt{}, kick: deps.Kicks}
}

// Kick asks for a pass now, without waiting for the Period: a static pod
// has no mirror pod yet (statussync asks, as the kubelet creates mirror
// pods in syncPod).
func (m *Manager) Kick() { m.kick.Kick() }

// Handler is for the node's pod informer: a mirror pod deleted or marked
// for deletion (by a user, or the garbage collector) starts a pass, so it
// is created again at once, as the kubelet does on the pod update.
func (m *Manager) Handler() cache.ResourceEventHandler {
	isMirror := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*v1.Pod)
		return ok && p.Annotations[podspec.AnnotationConfigMirror] != ""
	}
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if isMirror(obj) && obj.(*v1.Pod).DeletionTimestamp != nil {
				m.Kick()
			}
		},
		DeleteFunc: func(obj any) {
			if isMirror(obj) {
				m.Kick()
			}
		},
	}
}

// Run reconciles mirror pods every Period, and when kicked, until ctx
// ends.
func (m *Manager) Run(ctx context.Context) {
	t := m.deps.Clock.NewTicker(Period)
	defer t.Stop()
	for {
		m.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-m.kick.C():
		}
	}
}

// Reconcile makes one pass: creates missing mirror pods, replaces
// outdated ones, deletes orphaned ones.
func (m *Manager) Reconcile(ctx context.Context) {
	mirrors := map[string]*v1.Pod{}
	others := map[string]bool{}
	for _, o := range m.deps.APIPods.List() {
		p, ok := o.(*v1.Pod)
		if !ok {
			continue
		}
		key := p.Namespace + "/" + p.Name
		if _, isMirror := p.Annotations[podspec.AnnotationConfigMirror]; isMirror {
			mirrors[key] = p
		} else {
			others[key] = true
		}
	}
	wanted := map[string]bool{}
	now := m.deps.Clock.Now()
	for _, static := range m.deps.Sources.StaticPods() {
		if !podspec.IsStatic(static) {
			continue
		}
		key := static.Namespace + "/" + static.Name
		wanted[key] = true
		existing := mirrors[key]
		if existing != nil && existing.DeletionTimestamp == nil && IsMirrorOf(existing, static) {
			delete(m.tried, key)
			continue
		}
		if m.terminating(key) {
			continue // the static pod before this one is stopping
		}
		if m.refused[key] == Hash(static) {
			continue
		}
		// The same attempt is made again after RetryAfter, if it failed
		// or the informer does not show its result by then (after the
		// API server was away, it lags): not a request every pass.
		a := attempt{hash: Hash(static), until: now.Add(RetryAfter)}
		if existing != nil {
			a.uid = existing.UID
		}
		if last, ok := m.tried[key]; ok && last.hash == a.hash && last.uid == a.uid && now.Before(last.until) {
			continue
		}
		m.tried[key] = a
		m.ensure(ctx, key, static, existing, others[key])
	}
	for key := range m.refused {
		if !wanted[key] {
			delete(m.refused, key)
		}
	}
	for key, p := range mirrors {
		if wanted[key] || m.terminating(key) {
			continue
		}
		a := attempt{uid: p.UID, until: now.Add(RetryAfter)}
		if last, ok := m.tried[key]; ok && last.hash == "" && last.uid == a.uid && now.Before(last.until) {
			continue
		}
		m.tried[key] = a
		m.deps.Log.Info("mirror pod without a static pod; deleting it", "pod", key)
		m.delete(ctx, p)
	}
	for key, a := range m.tried {
		if !wanted[key] && mirrors[key] == nil || !now.Before(a.until) {
			delete(m.tried, key)
		}
	}
}

// terminating says whether the static pod that ran as key is terminating.
func (m *Manager) terminating(key string) bool {
	return m.deps.Terminating != nil && m.deps.Terminating(key)
}

// ensure creates static's mirror pod, replacing existing (outdated or
// being deleted).
func (m *Manager) ensure(ctx context.Context, key string, static, existing *v1.Pod, nameTaken bool) {
	log := m.deps.Log.With("pod", key)
	if nameTaken {
		log.Warn("mirror pod: an API pod of the same name exists; no mirror pod for this static pod")
		return
	}
	if existing != nil {
		// Outdated, or being deleted (a user deleted it: the API server
		// waits for the node): gone at once, as the kubelet deletes
		// mirror pods, then created anew.
		log.Info("mirror pod outdated or deleted; replacing it")
		if !m.delete(ctx, existing) {
			return
		}
		// Gone at once unless someone holds it with a finalizer; then
		// the create below is refused as already there and tried again
		// at the next pass.
	}
	if err := m.create(ctx, static); err != nil {
		log.Warn("mirror pod: create failed, retried", "err", err, "retryAfter", RetryAfter)
	}
}

// Hash is what a static pod's mirror pod carries in its config.mirror
// annotation: the static pod's config hash (its UID, which changes with
// its content).
func Hash(static *v1.Pod) string {
	if h := static.Annotations[podspec.AnnotationConfigHash]; h != "" {
		return h
	}
	return string(static.UID)
}

// IsMirrorOf says whether mirror is the mirror pod of static: of the same
// name, with static's hash (an older version's mirror pod is not).
func IsMirrorOf(mirror, static *v1.Pod) bool {
	return mirror.Namespace == static.Namespace && mirror.Name == static.Name &&
		mirror.Annotations[podspec.AnnotationConfigMirror] == Hash(static)
}

// Pod is the mirror pod of static for the Node nodeName with nodeUID.
func Pod(static *v1.Pod, nodeName string, nodeUID types.UID) *v1.Pod {
	p := &v1.Pod{ObjectMeta: *static.ObjectMeta.DeepCopy(), Spec: *static.Spec.DeepCopy()}
	p.UID, p.ResourceVersion, p.CreationTimestamp, p.Generation = "", "", metav1.Time{}, 0
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ManagedFields = nil, nil, nil
	p.Annotations[podspec.AnnotationConfigMirror] = Hash(static)
	delete(p.Annotations, podspec.AnnotationConfigFile) // a path on this node: nothing for the API
	// NodeRestriction admits a node's pod only as the mirror pod of a
	// static pod, with the Node as its controller.
	controller := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: nodeUID, Controller: &controller}}
	p.Spec.NodeName = nodeName
	return p
}

func (m *Manager) create(ctx context.Context, static *v1.Pod) error {
	uid, err := m.nodeUIDOf(ctx)
	if err != nil {
		return err
	}
	p := Pod(static, m.deps.NodeName, uid)
	created, err := m.deps.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // the informer has not shown it yet
	}
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			// NodeRestriction refuses mirror pods that use API objects
			// (secrets, service accounts, ...); nothing to retry for.
			m.deps.Log.Warn("mirror pod refused by the API server; the static pod runs without one", "pod", p.Namespace+"/"+p.Name, "err", err)
			m.refused[p.Namespace+"/"+p.Name] = Hash(static)
			return nil
		}
		return err
	}
	m.deps.Log.Info("mirror pod created", "pod", p.Namespace+"/"+p.Name)
	if m.deps.Created != nil {
		m.deps.Created(created)
	}
	return nil
}

// delete deletes a mirror pod at once (grace 0: nothing runs of it; its
// static pod's containers are the node's business), if it still has uid.
// It says whether the pod is gone.
func (m *Manager) delete(ctx context.Context, p *v1.Pod) bool {
	uid, zero := p.UID, int64(0)
	err := m.deps.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		m.deps.Log.Warn("mirror pod: delete failed, retried", "pod", p.Namespace+"/"+p.Name, "err", err)
		return false
	}
	return true
}

// nodeUIDOf looks up the Node's UID at each create: after the Node was
// registered anew, the owner reference must name the new one.
func (m *Manager) nodeUIDOf(ctx context.Context) (types.UID, error) {
	node, err := m.deps.Client.CoreV1().Nodes().Get(ctx, m.deps.NodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("mirror pod: look up node %s: %w", m.deps.NodeName, err)
	}
	return node.UID, nil
}
