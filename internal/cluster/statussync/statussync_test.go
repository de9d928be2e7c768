package statussync

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

type workers struct {
	running  map[types.UID]bool
	finished map[types.UID]bool
	// onRunning, when set, runs after CouldHaveRunningContainers answered.
	onRunning func(uid types.UID)
}

func (w *workers) CouldHaveRunningContainers(uid types.UID) bool {
	r := w.running[uid]
	if w.onRunning != nil {
		w.onRunning(uid)
	}
	return r
}

func (w *workers) IsPodFinished(uid types.UID) bool { return w.finished[uid] }

type harness struct {
	t        *testing.T
	client   *fake.Clientset
	store    cache.Store
	workers  *workers
	statuses *statusmanager.Manager
	s        *Syncer
}

func newHarness(t *testing.T, pods ...*v1.Pod) *harness {
	objs := make([]runtime.Object, len(pods))
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for i, p := range pods {
		objs[i] = p
		if err := store.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, client: fake.NewClientset(objs...), store: store,
		workers: &workers{running: map[types.UID]bool{}, finished: map[types.UID]bool{}}}
	h.statuses = statusmanager.New(nil)
	h.s = New(Deps{Client: h.client, Statuses: h.statuses, APIPods: store, Workers: h.workers, Clock: testingclock.NewFakeClock(t0)})
	return h
}

// writes are the patches and deletes sent since the last call, one a line.
func (h *harness) writes() []string {
	var out []string
	for _, a := range h.client.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			out = append(out, fmt.Sprintf("patch %s/%s %s %s", a.GetNamespace(), a.GetName(), a.GetSubresource(), a.GetPatch()))
		case k8stesting.DeleteAction:
			o := a.GetDeleteOptions()
			out = append(out, fmt.Sprintf("delete %s/%s grace=%d uid=%s", a.GetNamespace(), a.GetName(), *o.GracePeriodSeconds, *o.Preconditions.UID))
		}
	}
	h.client.ClearActions()
	return out
}

// refresh copies the fake API's pods into the store, as the informer.
func (h *harness) refresh() {
	list, err := h.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	_ = h.store.Replace(func() []any {
		out := make([]any, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
		return out
	}(), "")
	h.client.ClearActions()
}

// markNotReady sets the API pod's Ready condition False, as the node
// lifecycle controller does for the pods of an unreachable node; the
// store (the informer) does not see it.
func (h *harness) markNotReady(name string) {
	h.t.Helper()
	ctx := context.Background()
	api, err := h.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for i, c := range api.Status.Conditions {
		if c.Type == v1.PodReady {
			api.Status.Conditions[i].Status = v1.ConditionFalse
		}
	}
	if _, err := h.client.CoreV1().Pods("default").UpdateStatus(ctx, api, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.client.ClearActions()
}

func apiPod(name string, uid types.UID) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid,
		Annotations: map[string]string{podspec.AnnotationConfigSource: podspec.ConfigSourceAPI}}}
	p.Status = v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))},
		{Type: "example.com/gate", Status: v1.ConditionFalse, Reason: "SetByController"},
	}}
	return p
}

// deletedPod is apiPod marked for deletion at t0 with a 30 s grace period.
func deletedPod(name string, uid types.UID) *v1.Pod {
	p := apiPod(name, uid)
	now := metav1.NewTime(t0)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64(30))
	return p
}

func running(ready bool) v1.PodStatus {
	r := v1.ConditionFalse
	if ready {
		r = v1.ConditionTrue
	}
	start := metav1.NewTime(t0)
	return v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.5", PodIPs: []v1.PodIP{{IP: "10.88.0.5"}}, StartTime: &start,
		Conditions: []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: start},
			{Type: v1.PodReady, Status: r, LastTransitionTime: start},
			{Type: v1.ContainersReady, Status: r, LastTransitionTime: start},
		},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: ready, Image: "busybox", ContainerID: "containerd://abc",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: start}}}},
	}
}

func golden(t *testing.T, name string, got []string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != text {
		t.Errorf("%s: got\n%s\nwant\n%s", path, text, want)
	}
}

// The life of an API pod's status: one patch per change, none for a
// status that changes nothing, the controller's condition kept, the
// scheduler's transition time kept, the UID always a precondition.
func TestPatchesOnlyChanges(t *testing.T) {
	pod := apiPod("web", "uid-1")
	h := newHarness(t, pod)
	ctx := context.Background()
	var got []string

	h.statuses.SetPodStatus(pod, running(false))
	h.s.SyncBatch(ctx, false)
	got = append(got, h.writes()...)
	h.refresh()

	h.statuses.SetPodStatus(pod, running(false)) // the same again: no request
	h.s.SyncBatch(ctx, false)
	h.s.SyncBatch(ctx, true)
	if w := h.writes(); len(w) != 0 {
		t.Errorf("unchanged status sent: %q", w)
	}

	h.statuses.SetPodStatus(pod, running(true))
	h.s.SyncBatch(ctx, false)
	got = append(got, h.writes()...)
	h.refresh()
	golden(t, "patches", got)

	obj, _, _ := h.store.GetByKey("default/web")
	st := obj.(*v1.Pod).Status
	if len(st.Conditions) != 4 || st.Conditions[0].Type != "example.com/gate" {
		t.Errorf("conditions = %+v, want the controller's gate kept", st.Conditions)
	}
}

// A failed patch is sent again at the next pass; a pod gone from the API
// is forgotten.
func TestRetriesAndForgets(t *testing.T) {
	pod := apiPod("web", "uid-1")
	h := newHarness(t, pod)
	ctx := context.Background()
	fail := true
	h.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	h.statuses.SetPodStatus(pod, running(true))
	h.s.SyncBatch(ctx, false)
	if w := h.writes(); len(w) != 1 {
		t.Fatalf("writes = %q, want one failed patch", w)
	}
	fail = false
	h.s.SyncBatch(ctx, false) // still dirty
	if w := h.writes(); len(w) != 1 {
		t.Fatalf("writes = %q, want the patch again", w)
	}
	h.refresh()
	if err := h.store.Delete(pod); err != nil {
		t.Fatal(err)
	}
	h.s.SyncBatch(ctx, true)
	if len(h.s.pods) != 0 || len(h.writes()) != 0 {
		t.Error("a pod gone from the API is still tracked, or written to")
	}
}

// A pod replaced by another of the same name (another UID) is not written
// to.
func TestOtherUIDUntouched(t *testing.T) {
	h := newHarness(t, apiPod("web", "uid-2"))
	h.statuses.SetPodStatus(apiPod("web", "uid-1"), running(true))
	h.s.SyncBatch(context.Background(), false)
	if w := h.writes(); len(w) != 0 {
		t.Errorf("wrote to another pod: %q", w)
	}
}

func TestTerminalPhaseRules(t *testing.T) {
	failed := running(false)
	failed.Phase, failed.Reason = v1.PodFailed, "DeadlineExceeded"
	// Held back while a container may run.
	if got := Merge(running(true), failed, true); got.Phase != v1.PodRunning || got.Reason != "" {
		t.Errorf("terminal phase reported with containers running: %s %s", got.Phase, got.Reason)
	}
	if got := Merge(running(true), failed, false); got.Phase != v1.PodFailed {
		t.Errorf("terminal phase not reported once stopped: %s", got.Phase)
	}
	// Never left.
	if got := Merge(failed, running(true), false); got.Phase != v1.PodFailed || got.Reason != "DeadlineExceeded" {
		t.Errorf("left a terminal phase: %s %s", got.Phase, got.Reason)
	}
	// A status with no phase yet over an empty one is Pending.
	if got := Merge(v1.PodStatus{}, failed, true); got.Phase != v1.PodPending {
		t.Errorf("phase = %q, want Pending", got.Phase)
	}
}

// The resize conditions are the node's: sent as it has them, and gone
// from the API once it no longer reports them.
func TestResizeConditionsOwned(t *testing.T) {
	pending := v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred}
	inProgress := v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue}
	old := running(true)
	old.Conditions = append(old.Conditions, pending)
	st := running(true)
	st.Conditions = append(st.Conditions, inProgress)
	got := Merge(old, st, true)
	var types []v1.PodConditionType
	for _, c := range got.Conditions {
		if c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress {
			types = append(types, c.Type)
		}
	}
	if !slices.Equal(types, []v1.PodConditionType{v1.PodResizeInProgress}) {
		t.Errorf("resize conditions sent: %v, want only the node's PodResizeInProgress", types)
	}
}

// The pod's claim statuses are the API's: the node neither clears them
// (its own status has none) nor sets them, else the NodeRestriction
// admission refuses the whole patch.
func TestClaimStatusesKept(t *testing.T) {
	old := running(true)
	old.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "dev", ResourceClaimName: ptr.To("gpu-dev-x7k2")}}
	old.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "gpu-extended-resources-q9"}
	old.NodeAllocatableResourceClaimStatuses = []v1.NodeAllocatableResourceClaimStatus{{ResourceClaimName: "gpu-node-alloc"}}
	for name, st := range map[string]v1.PodStatus{
		"none in the node's": running(true),
		"others in the node's": func() v1.PodStatus {
			s := running(true)
			s.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "dev"}}
			s.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "other"}
			return s
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			got := Merge(old, st, true)
			if !reflect.DeepEqual(got.ResourceClaimStatuses, old.ResourceClaimStatuses) ||
				!reflect.DeepEqual(got.ExtendedResourceClaimStatus, old.ExtendedResourceClaimStatus) ||
				!reflect.DeepEqual(got.NodeAllocatableResourceClaimStatuses, old.NodeAllocatableResourceClaimStatuses) {
				t.Errorf("claim statuses %+v %+v %+v; want the API's", got.ResourceClaimStatuses, got.ExtendedResourceClaimStatus, got.NodeAllocatableResourceClaimStatuses)
			}
			patch, _, err := StatusPatch("uid-1", old, got)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(patch), "laimStatus") {
				t.Errorf("the patch touches claim statuses: %s", patch)
			}
		})
	}
}

// The DisruptionTarget condition: the API's (an eviction through the
// API, the taint manager) stays; the node's own (it evicted the pod, or
// shut it down) goes out with the terminal phase once nothing runs, as
// the kubelet's mergePodStatus sends it, replacing the API's; not before.
func TestDisruptionTargetRules(t *testing.T) {
	dt := func(reason string) v1.PodCondition {
		return v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: reason}
	}
	with := func(s v1.PodStatus, phase v1.PodPhase, conds ...v1.PodCondition) v1.PodStatus {
		s.Phase = phase
		s.Conditions = append(s.Conditions, conds...)
		return s
	}
	byNode, byAPI := dt(v1.PodReasonTerminationByKubelet), dt("EvictionByEvictionAPI")
	for _, tc := range []struct {
		name      string
		old, st   v1.PodStatus
		couldRun  bool
		want      string // the DisruptionTarget's reason sent, "" for none
		wantPhase v1.PodPhase
	}{
		{"node's, terminal, stopped", running(true), with(running(false), v1.PodFailed, byNode), false, v1.PodReasonTerminationByKubelet, v1.PodFailed},
		{"node's, containers may run", running(true), with(running(false), v1.PodFailed, byNode), true, "", v1.PodRunning},
		{"node's, not terminal", running(true), with(running(false), v1.PodRunning, byNode), false, "", v1.PodRunning},
		{"API's kept", with(running(true), v1.PodRunning, byAPI), running(false), true, "EvictionByEvictionAPI", v1.PodRunning},
		{"API's kept at terminal", with(running(true), v1.PodRunning, byAPI), with(running(false), v1.PodSucceeded), false, "EvictionByEvictionAPI", v1.PodSucceeded},
		{"node's replaces API's at terminal", with(running(true), v1.PodRunning, byAPI), with(running(false), v1.PodFailed, byNode), false, v1.PodReasonTerminationByKubelet, v1.PodFailed},
		{"already terminal: API's kept", with(running(false), v1.PodFailed, byAPI), with(running(false), v1.PodFailed, byNode), false, "EvictionByEvictionAPI", v1.PodFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(tc.old, tc.st, tc.couldRun)
			var reasons []string
			for _, c := range got.Conditions {
				if c.Type == v1.DisruptionTarget {
					reasons = append(reasons, c.Reason)
				}
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !slices.Equal(reasons, want) || got.Phase != tc.wantPhase {
				t.Errorf("DisruptionTarget reasons %q, phase %s; want %q, %s", reasons, got.Phase, want, tc.wantPhase)
			}
		})
	}
}

// A pod whose worker finished, told through Deps.Finished (the pod
// workers' OnFinished), is deleted for good in a pass at once, not at the
// next full one.
func TestFinishedStartsPass(t *testing.T) {
	pod := deletedPod("web", "uid-1")
	h := newHarness(t, pod)
	finished := notify.NewUIDs()
	h.s.deps.Finished = finished
	stopped := running(false)
	stopped.Phase = v1.PodSucceeded
	h.statuses.SetPodStatus(pod, stopped)
	h.s.SyncBatch(t.Context(), false)
	h.refresh()
	h.workers.finished["uid-1"] = true
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); h.s.Run(ctx) }()
	finished.Add("uid-1")
	testutil.Eventually(t, "the final delete", func() bool {
		_, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return err != nil
	})
	cancel()
	<-done
}

// A pod the API marked for deletion is deleted for good (grace 0, UID
// precondition) once its worker finished, not before; its final status
// goes first.
func TestFinalDelete(t *testing.T) {
	pod := deletedPod("web", "uid-1")
	h := newHarness(t, pod)
	ctx := context.Background()
	h.workers.running["uid-1"] = true
	h.statuses.SetPodStatus(pod, running(true))
	h.s.SyncBatch(ctx, false)
	h.refresh()
	h.workers.running["uid-1"] = false
	stopped := running(false)
	stopped.Phase = v1.PodSucceeded
	h.statuses.SetPodStatus(pod, stopped)
	h.s.SyncBatch(ctx, false)
	if w := h.writes(); len(w) != 1 || !strings.HasPrefix(w[0], "patch") {
		t.Fatalf("writes = %q, want the final status and no delete before the worker finished", w)
	}
	h.refresh()
	h.workers.finished["uid-1"] = true
	// The worker says it finished: a pass at once, not at the next full one.
	h.s.PodFinished("uid-1")
	select {
	case <-h.s.wake:
	default:
		t.Fatal("a finished pod does not start a pass")
	}
	h.s.SyncBatch(ctx, false)
	if w := h.writes(); len(w) != 1 || w[0] != "delete default/web grace=0 uid=uid-1" {
		t.Fatalf("writes = %q, want the final delete", w)
	}
	if len(h.s.pods) != 0 {
		t.Error("a deleted pod is still tracked")
	}
}

// A static pod's status goes to its mirror pod, once there is one; the
// mirror pod is never deleted by the status syncer.
func TestStaticPodStatusToMirror(t *testing.T) {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-node-a", UID: "static-uid",
		Annotations: map[string]string{podspec.AnnotationConfigSource: "file"}}}
	h := newHarness(t)
	ctx := context.Background()
	h.statuses.SetPodStatus(static, running(true))
	h.s.SyncBatch(ctx, false)
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote with no mirror pod: %q", w)
	}
	mirror := static.DeepCopy()
	mirror.UID = "mirror-uid"
	mirror.Annotations = map[string]string{podspec.AnnotationConfigMirror: "static-uid"}
	now := metav1.NewTime(t0)
	mirror.DeletionTimestamp = &now
	if _, err := h.client.CoreV1().Pods("kube-system").Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.s.SyncBatch(ctx, true)
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote to a mirror pod being deleted: %q", w)
	}
	mirror.DeletionTimestamp = nil
	if _, err := h.client.CoreV1().Pods("kube-system").Update(ctx, mirror, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.workers.finished["static-uid"] = true
	h.s.SyncBatch(ctx, true)
	w := h.writes()
	if len(w) != 1 || !strings.Contains(w[0], `"uid":"mirror-uid"`) {
		t.Fatalf("writes = %q, want one status patch of the mirror pod", w)
	}

	// The static pod gone (housekeeping dropped its status): forgotten.
	h.statuses.RemoveOrphans(func(types.UID) bool { return false })
	h.s.SyncBatch(ctx, true)
	if len(h.s.pods) != 0 {
		t.Error("a static pod no source wants is still tracked")
	}
}

// After the pod informer lost its watch, the next pass compares with the
// API server's own pods: what the node lifecycle controller wrote while
// the node was away (Ready False) is set right at once, though the
// informer's copy still shows the old status.
func TestStaleInformerReadsTheAPI(t *testing.T) {
	pod := apiPod("web", "uid-1")
	h := newHarness(t, pod)
	h.s.deps.NodeName = "node-a"
	ctx := context.Background()
	h.statuses.SetPodStatus(pod, running(true))
	h.s.SyncBatch(ctx, false)
	h.refresh()
	// The controller marks the pod NotReady; the informer does not see it.
	h.markNotReady("web")
	h.s.SyncBatch(ctx, true)
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("patched from the informer's stale copy: %q", w)
	}
	h.s.Stale()
	h.s.SyncBatch(ctx, false)
	w := h.writes()
	if len(w) != 1 || !strings.Contains(w[0], `"status":"True","type":"Ready"`) {
		t.Fatalf("writes = %q, want Ready set True again", w)
	}
	h.s.SyncBatch(ctx, true)
	if lists := len(h.client.Actions()); lists != 0 {
		t.Errorf("%d more requests after the one re-read", lists)
	}
}

// A mirror pod created on this node takes the static pod's status at
// once, before the informer shows it (after an outage, the informer's
// watch comes back only with back-off). Without one, the mirror manager
// is asked for it.
func TestStatusToCreatedMirror(t *testing.T) {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-node-a", UID: "static-uid",
		Annotations: map[string]string{podspec.AnnotationConfigSource: "file"}}}
	h := newHarness(t)
	kicks := 0
	h.s.deps.KickMirrors = func() { kicks++ }
	ctx := context.Background()
	h.statuses.SetPodStatus(static, running(true))
	h.s.SyncBatch(ctx, false)
	if w := h.writes(); len(w) != 0 || kicks != 1 {
		t.Fatalf("with no mirror pod: writes %q, %d kicks; want none and 1", w, kicks)
	}

	mirror := static.DeepCopy()
	mirror.UID = "mirror-uid"
	mirror.Annotations = map[string]string{podspec.AnnotationConfigMirror: "static-uid"}
	created, err := h.client.CoreV1().Pods("kube-system").Create(ctx, mirror, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.client.ClearActions()
	h.s.MirrorCreated(created) // the informer does not show it
	select {
	case <-h.s.wake:
	default:
		t.Fatal("a created mirror pod does not start a pass")
	}
	h.s.SyncBatch(ctx, false)
	w := h.writes()
	if len(w) != 1 || !strings.Contains(w[0], `"uid":"mirror-uid"`) || !strings.Contains(w[0], `"phase":"Running"`) {
		t.Fatalf("writes = %q, want the status patched onto the created mirror pod", w)
	}
	// Nothing changed since: no second patch, though the informer
	// still has nothing.
	h.s.SyncBatch(ctx, true)
	if w := h.writes(); len(w) != 0 || kicks != 1 {
		t.Fatalf("second pass: writes %q, %d kicks; want none and 1", w, kicks)
	}
	// The informer caught up: its copy is used from now on.
	h.refresh()
	h.s.SyncBatch(ctx, true)
	if w := h.writes(); len(w) != 0 || len(h.s.created) != 0 {
		t.Fatalf("after the informer caught up: writes %q, %d created kept", w, len(h.s.created))
	}
}

// While the informer has not listed again since it lost its watch (its
// resource version unchanged), each full pass reads the API anew: what the
// node lifecycle controller writes after the first read is put right too.
// Once the informer listed, its copies are used again.
func TestStaleUntilInformerListed(t *testing.T) {
	pod := apiPod("web", "uid-1")
	h := newHarness(t, pod)
	h.s.deps.NodeName = "node-a"
	version := "10"
	h.s.deps.APIPodsVersion = func() string { return version }
	ctx := context.Background()
	h.statuses.SetPodStatus(pod, running(true))
	h.s.SyncBatch(ctx, false)
	h.refresh()
	h.s.Stale()
	h.s.SyncBatch(ctx, true) // the API is back: read, nothing to put right yet
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("writes = %q, want none", w)
	}
	h.markNotReady("web")                       // the controller, after that read
	h.statuses.SetPodStatus(pod, running(true)) // no change: the entry dirty all the same
	h.s.SyncBatch(ctx, false)
	if a := h.client.Actions(); len(a) != 0 {
		t.Fatalf("a pass for a change read the API again or patched: %v", a)
	}
	h.s.SyncBatch(ctx, true)
	if w := h.writes(); len(w) != 1 || !strings.Contains(w[0], `"status":"True","type":"Ready"`) {
		t.Fatalf("writes = %q, want Ready set True again", w)
	}
	version = "11" // the informer listed again
	h.s.SyncBatch(ctx, true)
	if n := len(h.client.Actions()); n != 0 {
		t.Errorf("%d requests after the informer listed again, want none", n)
	}
}

// While a static pod's older version terminates, each version's status
// goes only to its own mirror pod: the old one's final phase never lands
// on the new version's mirror pod (which could then never leave it).
func TestStaticPodVersionsOwnMirrors(t *testing.T) {
	version := func(uid types.UID) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-node-a", UID: uid,
			Annotations: map[string]string{podspec.AnnotationConfigSource: "file", podspec.AnnotationConfigHash: string(uid)}}}
	}
	mirrorOf := func(hash string, uid types.UID) *v1.Pod {
		m := version(uid)
		m.Annotations = map[string]string{podspec.AnnotationConfigMirror: hash}
		m.Status = running(true)
		return m
	}
	cases := []struct {
		name   string
		mirror *v1.Pod
		// want is the phase the status patch sends, "" for no patch.
		want v1.PodPhase
	}{
		{name: "old version's mirror pod kept while it terminates", mirror: mirrorOf("v1", "mirror-1"), want: v1.PodFailed},
		{name: "new version's mirror pod", mirror: mirrorOf("v2", "mirror-2")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.mirror)
			ctx := context.Background()
			old := version("v1")
			failed := running(false)
			failed.Phase = v1.PodFailed
			failed.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137}}
			h.statuses.SetPodStatus(old, failed)
			h.s.SyncBatch(ctx, false)
			w := h.writes()
			switch {
			case tc.want == "" && len(w) != 0:
				t.Errorf("the old version's status written to the new version's mirror pod: %q", w)
			case tc.want != "" && (len(w) != 1 || !strings.Contains(w[0], `"phase":"`+string(tc.want)+`"`) ||
				!strings.Contains(w[0], `"uid":"`+string(tc.mirror.UID)+`"`)):
				t.Errorf("writes = %q, want the %s phase patched onto %s", w, tc.want, tc.mirror.UID)
			}
		})
	}
}

// A pod's final status set after the syncer took the pod's last one, its
// worker finished by then: the status patched before the final delete is
// the final one, not the one taken (it would never reach the API after).
func TestFinalStatusBeforeDelete(t *testing.T) {
	pod := deletedPod("web", "uid-1")
	h := newHarness(t, pod)
	ctx := context.Background()
	h.workers.running["uid-1"] = true
	h.statuses.SetPodStatus(pod, running(true))
	h.s.take()
	// Meanwhile: the containers stopped, the final status was set, the
	// worker finished.
	failed := running(false)
	failed.Phase = v1.PodFailed
	h.statuses.SetPodStatus(pod, failed)
	h.workers.running["uid-1"] = false
	h.workers.finished["uid-1"] = true
	h.s.syncPod(ctx, "uid-1")
	w := h.writes()
	if len(w) != 2 || !strings.Contains(w[0], `"phase":"Failed"`) || w[1] != "delete default/web grace=0 uid=uid-1" {
		t.Fatalf("writes = %q, want the Failed status patched, then the delete", w)
	}
}

// A worker that finishes while a pass sends its pod's status (after the
// pass merged it with a container maybe running, the terminal phase held
// back) does not have its pod deleted on that pass: the pod would leave
// the API last reported Running, as a drained pod once did. The finish
// makes the next pass, which sends the terminal phase and then deletes.
func TestFinishDuringPassDeletesAfterTerminalPhase(t *testing.T) {
	pod := deletedPod("web", "uid-1")
	h := newHarness(t, pod)
	ctx := context.Background()
	h.workers.running["uid-1"] = true
	stopped := running(false)
	stopped.Phase = v1.PodSucceeded
	h.statuses.SetPodStatus(pod, stopped)
	h.workers.onRunning = func(uid types.UID) {
		h.workers.running[uid], h.workers.finished[uid] = false, true
		h.workers.onRunning = nil
	}
	h.s.SyncBatch(ctx, false)
	w := h.writes()
	if len(w) != 1 || !strings.HasPrefix(w[0], "patch") || strings.Contains(w[0], `"phase":"Succeeded"`) {
		t.Fatalf("writes = %q, want one patch with the phase held back and no delete", w)
	}
	h.refresh()
	h.s.PodFinished("uid-1")
	h.s.SyncBatch(ctx, false)
	w = h.writes()
	if len(w) != 2 || !strings.Contains(w[0], `"phase":"Succeeded"`) || w[1] != "delete default/web grace=0 uid=uid-1" {
		t.Fatalf("writes = %q, want the Succeeded status patched, then the delete", w)
	}
}

// A finished pod whose phase is not terminal (nothing set it) stays in the
// API, as the kubelet's status manager keeps it, and says why.
func TestNoDeleteWithoutTerminalPhase(t *testing.T) {
	pod := deletedPod("web", "uid-1")
	h := newHarness(t, pod)
	h.workers.finished["uid-1"] = true
	h.statuses.SetPodStatus(pod, running(false))
	h.s.SyncBatch(context.Background(), false)
	for _, w := range h.writes() {
		if strings.HasPrefix(w, "delete") {
			t.Fatalf("deleted a pod whose phase is %s", running(false).Phase)
		}
	}
}
