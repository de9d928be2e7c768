// Package mirror is beside the pipeline, in cluster mode: it keeps a
// mirror pod in the API server for each static pod (from the manifest
// path or URL), as the kubelet's mirror client and HandlePodCleanups do.
// A mirror pod is the static pod as the API shows it: the annotation
// kubernetes.io/config.mirror holds the static pod's hash, an owner
// reference names this Node (so the garbage collector removes mirror pods
// of a Node that is deleted), and its status is the static pod's (package
// statussync). A mirror pod that is deleted, or whose static pod changed,
// is created again; one whose static pod is gone is deleted.
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
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podspec"
)

// Period is how often mirror pods are reconciled (the kubelet does it at
// each pod sync, once a minute at least).
const Period = 10 * time.Second

// StaticPods are the static pods the sources want.
type StaticPods interface {
	Pods() []*v1.Pod
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
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// Manager keeps mirror pods in step with static pods.
type Manager struct {
	deps Deps
	// refused are the static pods (by namespace/name) whose mirror pod the
	// API server refused, and the hash refused: not asked again until the
	// static pod changes.
	refused map[string]string
}

// New returns a Manager; Run starts it.
func New(deps Deps) *Manager {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	return &Manager{deps: deps, refused: map[string]string{}}
}

// Run reconciles mirror pods every Period until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := m.deps.Clock.NewTicker(Period)
	defer t.Stop()
	for {
		m.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
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
	for _, static := range m.deps.Sources.Pods() {
		if !podspec.IsStatic(static) {
			continue
		}
		key := static.Namespace + "/" + static.Name
		wanted[key] = true
		log := m.deps.Log.With("pod", key)
		if others[key] {
			log.Warn("mirror pod: an API pod of the same name exists; no mirror pod for this static pod")
			continue
		}
		existing := mirrors[key]
		if existing != nil && existing.DeletionTimestamp == nil && existing.Annotations[podspec.AnnotationConfigMirror] == Hash(static) {
			continue
		}
		if existing != nil {
			// Outdated, or being deleted (a user deleted it: the API
			// server waits for the node): gone at once, as the kubelet
			// deletes mirror pods, then created anew.
			log.Info("mirror pod outdated or deleted; replacing it")
			m.delete(ctx, existing)
			continue // created once the informer shows it gone
		}
		if m.refused[key] == Hash(static) {
			continue
		}
		if err := m.create(ctx, static); err != nil {
			log.Warn("mirror pod: create failed, retried", "err", err)
		}
	}
	for key := range m.refused {
		if !wanted[key] {
			delete(m.refused, key)
		}
	}
	for key, p := range mirrors {
		if !wanted[key] {
			m.deps.Log.Info("mirror pod without a static pod; deleting it", "pod", key)
			m.delete(ctx, p)
		}
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
	_, err = m.deps.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
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
	return nil
}

// delete deletes a mirror pod at once (grace 0: nothing runs of it; its
// static pod's containers are the node's business), if it still has uid.
func (m *Manager) delete(ctx context.Context, p *v1.Pod) {
	uid, zero := p.UID, int64(0)
	err := m.deps.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		m.deps.Log.Warn("mirror pod: delete failed, retried", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
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
