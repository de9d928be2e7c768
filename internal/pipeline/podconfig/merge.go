// Package podconfig is the second stage of the pipeline: it merges the
// snapshots that the pod sources of stage 1 (internal/pipeline/podsource) send into
// one set of desired pods, and turns each snapshot into the incremental
// operations the kubelet's sync loop consumes (ADD, UPDATE, REMOVE,
// RECONCILE, DELETE), as the kubelet's pod config does.
//
// Merge is the pure core; Config runs it over a channel of source updates
// and tells when every source has been heard from.
package podconfig

import (
	"maps"
	"reflect"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
)

// PodUpdate is one operation on pods of one source. The receiver owns Pods.
type PodUpdate struct {
	Op     podupdate.Reason
	Pods   []*v1.Pod
	Source string
}

// State is the pods of each source that has sent an Update: source -> UID
// -> pod. A source present with no pods has reported an empty snapshot.
// The pods of a State are never modified; Merge makes new ones.
type State map[string]map[types.UID]*v1.Pod

// localAnnotations are the annotations set by nodelet, not by the
// manifest author.
func localAnnotations() []string {
	return []string{podspec.AnnotationConfigSource, podspec.AnnotationConfigSeen, podspec.AnnotationConfigMirror}
}

// Merge applies u, a full snapshot of its source, to state. It returns the
// new state (state and u are not modified) and the operations that lead
// from one to the other, in the kubelet's order: REMOVE, ADD, UPDATE,
// DELETE, RECONCILE, each with its pods sorted by namespace, name and UID,
// each only if it has pods. The first Update of a source that adds,
// updates and deletes nothing yields an ADD with no pods, so that the
// consumer learns that the source is ready.
//
// A pod new to the source gets the kubernetes.io/config.seen annotation
// (now, RFC 3339 with nanoseconds), which it then keeps. Two pods of u with
// the same namespace and name, or UID: the first is kept.
func Merge(state State, u podsource.Update, now time.Time) (State, []PodUpdate) {
	old, seenBefore := state[u.Source]
	next := make(map[types.UID]*v1.Pod, len(u.Pods))
	var adds, updates, deletes, removes, reconciles []*v1.Pod

	names := make(map[string]bool, len(u.Pods))
	for _, in := range u.Pods {
		name := in.Namespace + "/" + in.Name
		if names[name] || next[in.UID] != nil {
			continue
		}
		names[name] = true
		ref := in.DeepCopy()
		if ref.Annotations == nil {
			ref.Annotations = map[string]string{}
		}
		ref.Annotations[podspec.AnnotationConfigSource] = u.Source

		existing, found := old[ref.UID]
		if !found {
			ref.Annotations[podspec.AnnotationConfigSeen] = now.Format(time.RFC3339Nano)
			if ref.CreationTimestamp.IsZero() {
				// A static pod is created when the node first sees it, as
				// its mirror pod would be (AGE in get pods).
				ref.CreationTimestamp = metav1.NewTime(now)
			}
			next[ref.UID] = ref
			adds = append(adds, ref)
			continue
		}
		if !differ(existing, ref) {
			if reflect.DeepEqual(existing.Status, ref.Status) {
				next[ref.UID] = existing
				continue
			}
			p := existing.DeepCopy()
			p.Status = ref.Status
			next[ref.UID] = p
			reconciles = append(reconciles, p)
			continue
		}
		for _, k := range localAnnotations() {
			delete(ref.Annotations, k)
			if v, ok := existing.Annotations[k]; ok {
				ref.Annotations[k] = v
			}
		}
		if ref.CreationTimestamp.IsZero() {
			ref.CreationTimestamp = existing.CreationTimestamp
		}
		next[ref.UID] = ref
		if ref.DeletionTimestamp != nil {
			deletes = append(deletes, ref)
		} else {
			updates = append(updates, ref)
		}
	}
	for uid, p := range old {
		if _, ok := next[uid]; !ok {
			removes = append(removes, p)
		}
	}

	newState := make(State, len(state)+1)
	maps.Copy(newState, state)
	newState[u.Source] = next

	var ops []PodUpdate
	add := func(op podupdate.Reason, pods []*v1.Pod) {
		if len(pods) > 0 {
			ops = append(ops, PodUpdate{Op: op, Pods: copySorted(pods), Source: u.Source})
		}
	}
	add(podupdate.Remove, removes)
	add(podupdate.Add, adds)
	add(podupdate.Update, updates)
	add(podupdate.Delete, deletes)
	if !seenBefore && len(adds)+len(updates)+len(deletes) == 0 {
		ops = append(ops, PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{}, Source: u.Source})
	}
	add(podupdate.Reconcile, reconciles)
	return newState, ops
}

// differ tells whether ref changes existing in what the pod runs: spec,
// labels, deletion, or annotations other than the local ones.
func differ(existing, ref *v1.Pod) bool {
	return !reflect.DeepEqual(existing.Spec, ref.Spec) ||
		!reflect.DeepEqual(existing.Labels, ref.Labels) ||
		!reflect.DeepEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) ||
		!reflect.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) ||
		!reflect.DeepEqual(userAnnotations(existing), userAnnotations(ref))
}

// userAnnotations are the annotations of p but the local ones; never nil.
func userAnnotations(p *v1.Pod) map[string]string {
	out := make(map[string]string, len(p.Annotations))
	maps.Copy(out, p.Annotations)
	for _, k := range localAnnotations() {
		delete(out, k)
	}
	return out
}

// copySorted deep-copies pods, sorted by namespace, name and UID.
func copySorted(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	sortPods(out)
	return out
}

func sortPods(pods []*v1.Pod) {
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.UID < b.UID
	})
}
