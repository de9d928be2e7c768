package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

type statics []*v1.Pod

func (s statics) StaticPods() []*v1.Pod { return s }

// apiPods lists the fake API's pods, as the informer store would.
type apiPods struct{ client *fake.Clientset }

func (a apiPods) List() []any {
	list, _ := a.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	out := make([]any, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

func static(name, hash string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name + "-node-a", UID: types.UID(hash),
			Labels: map[string]string{"tier": "control-plane"},
			Annotations: map[string]string{podspec.AnnotationConfigSource: "file", podspec.AnnotationConfigHash: hash,
				podspec.AnnotationConfigSeen: "2026-11-23T10:00:00Z", podspec.AnnotationConfigFile: "/etc/kubernetes/manifests/" + name + ".yaml"}},
		Spec: v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: name, Image: "busybox"}}},
	}
}

func newManager(t *testing.T, pods ...*v1.Pod) (*Manager, *fake.Clientset) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}}
	client := fake.NewClientset(node)
	// The API server gives every object it creates a new UID.
	n := 0
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n++
		a.(k8stesting.CreateAction).GetObject().(*v1.Pod).UID = types.UID(fmt.Sprintf("mirror-uid-%d", n))
		return false, nil, nil
	})
	m := New(Deps{Client: client, NodeName: "node-a", Sources: statics(pods), APIPods: apiPods{client},
		Clock: testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))})
	return m, client
}

func mirrors(t *testing.T, client *fake.Clientset) []v1.Pod {
	list, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// The mirror pod as the API receives it: the static pod's spec, labels
// and annotations, the config.mirror hash, the Node as owner, no local
// path.
func TestMirrorPodGolden(t *testing.T) {
	p := Pod(static("etcd", "hash-1"), "node-a", "node-uid")
	got, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "mirror.golden.json")
	if *update {
		_ = os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("mirror pod:\n%s\nwant\n%s", got, want)
	}
}

// Lifecycle: created once; recreated after a delete; replaced when the
// static pod changes; deleted when the static pod goes; an API pod of the
// same name is left alone.
func TestMirrorLifecycle(t *testing.T) {
	ctx := context.Background()
	etcd := static("etcd", "hash-1")
	m, client := newManager(t, etcd)
	m.Reconcile(ctx)
	m.Reconcile(ctx)
	got := mirrors(t, client)
	if len(got) != 1 || got[0].Annotations[podspec.AnnotationConfigMirror] != "hash-1" ||
		got[0].OwnerReferences[0].UID != "node-uid" {
		t.Fatalf("mirror pods = %+v, want one for hash-1 owned by the node", got)
	}
	creates := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d creates for one static pod over two passes, want 1", creates)
	}

	// Deleted by a user: the API server marks it and waits for the node,
	// which deletes it at once (grace 0) and creates it again.
	marked := got[0].DeepCopy()
	now := metav1.Now()
	marked.DeletionTimestamp = &now
	if _, err := client.CoreV1().Pods("kube-system").Update(ctx, marked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	var handed []*v1.Pod
	m.deps.Created = func(p *v1.Pod) { handed = append(handed, p) }
	m.Reconcile(ctx)
	got = mirrors(t, client)
	if len(got) != 1 || got[0].DeletionTimestamp != nil || got[0].UID == marked.UID {
		t.Fatalf("mirror pod being deleted not replaced in one pass: %+v", got)
	}
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && (d.GetDeleteOptions().GracePeriodSeconds == nil || *d.GetDeleteOptions().GracePeriodSeconds != 0) {
			t.Errorf("mirror pod deleted with grace %v, want 0", d.GetDeleteOptions().GracePeriodSeconds)
		}
	}
	// The new one is handed over as created, before any informer shows it.
	if len(handed) != 1 || handed[0].Name != "etcd-node-a" || handed[0].UID != got[0].UID {
		t.Fatalf("created mirror pods handed over = %+v, want the new one", handed)
	}

	// The static pod changed: the old mirror goes and the new one comes.
	m.deps.Sources = statics{static("etcd", "hash-2")}
	m.Reconcile(ctx)
	if got := mirrors(t, client); len(got) != 1 || got[0].Annotations[podspec.AnnotationConfigMirror] != "hash-2" {
		t.Fatalf("mirror pod not replaced: %+v", got)
	}

	// Static pod gone: mirror deleted; API pods untouched.
	apiPod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "web", UID: "api-uid"}}
	if _, err := client.CoreV1().Pods("kube-system").Create(ctx, apiPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.deps.Sources = statics{}
	m.Reconcile(ctx)
	if got := mirrors(t, client); len(got) != 1 || got[0].Name != "web" {
		t.Fatalf("pods = %+v, want only the API pod", got)
	}
}

// A mirror pod the API refuses (NodeRestriction: a static pod that uses a
// secret) is not retried in a loop of errors: the static pod runs anyway.
func TestMirrorRefused(t *testing.T) {
	m, client := newManager(t, static("etcd", "hash-1"))
	creates := 0
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtimeObject, error) {
		creates++
		return true, nil, forbidden()
	})
	m.Reconcile(context.Background())
	m.Reconcile(context.Background())
	if got := mirrors(t, client); len(got) != 0 || creates != 1 {
		t.Fatalf("mirror pods = %+v after %d creates, want none after 1", got, creates)
	}
	m.deps.Sources = statics{static("etcd", "hash-2")} // changed: asked again
	m.Reconcile(context.Background())
	if creates != 2 {
		t.Errorf("%d creates after the static pod changed, want 2", creates)
	}
}

type runtimeObject = runtime.Object

// Passes come every 2 s; a create that failed (the API server away) is
// tried again after RetryAfter, not at each pass, and a pass with nothing
// to do sends nothing.
func TestMirrorRetryHeldBack(t *testing.T) {
	m, client := newManager(t, static("etcd", "hash-1"))
	clk := m.deps.Clock.(*testingclock.FakeClock)
	down := true
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtimeObject, error) {
		if down {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return false, nil, nil
	})
	creates := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "create" {
				n++
			}
		}
		client.ClearActions()
		return n
	}
	for range 4 {
		m.Reconcile(context.Background())
		clk.Step(Period)
	}
	if n := creates(); n != 1 {
		t.Fatalf("%d creates in 4 passes over 8 s, want 1", n)
	}
	down = false
	clk.Step(RetryAfter - 4*Period)
	m.Reconcile(context.Background())
	if n := creates(); n != 1 || len(mirrors(t, client)) != 1 {
		t.Fatalf("%d creates once RetryAfter passed, want 1 and the mirror pod", n)
	}
	client.ClearActions()
	m.Reconcile(context.Background())
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" { // the fake informer's
			t.Errorf("a pass in step sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "etcd-node-a",
		errors.New(`pod does not have "kubernetes.io/config.mirror" annotation, node "node-a" can only create mirror pods`))
}

// The informer's handler starts a pass when a mirror pod is deleted or
// marked for deletion, and for nothing else.
func TestMirrorHandlerKicks(t *testing.T) {
	m, _ := newManager(t)
	h := m.Handler()
	kicked := func() bool {
		select {
		case <-m.kick.C():
			return true
		default:
			return false
		}
	}
	mirror := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-node-a", Annotations: map[string]string{podspec.AnnotationConfigMirror: "h"}}}
	marked := mirror.DeepCopy()
	now := metav1.Now()
	marked.DeletionTimestamp = &now
	other := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", DeletionTimestamp: &now}}

	h.OnUpdate(mirror, mirror)
	h.OnUpdate(other, other)
	h.OnDelete(other)
	if kicked() {
		t.Fatal("kicked for a mirror pod in step or an API pod")
	}
	h.OnUpdate(mirror, marked)
	if !kicked() {
		t.Error("not kicked for a mirror pod marked for deletion")
	}
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "kube-system/etcd-node-a", Obj: mirror})
	if !kicked() {
		t.Error("not kicked for a mirror pod deleted")
	}
}

// While the static pod that ran under a name is terminating, the mirror
// pod of that name stays as it is (same UID, no request); once its
// containers stopped, the usual pass deletes or replaces it.
func TestMirrorKeptWhileStaticPodTerminates(t *testing.T) {
	cases := []struct {
		name string
		// after is what the sources want once the mirror pod of hash-1
		// exists; markDeleted: a user deleted the mirror pod meanwhile.
		after       statics
		markDeleted bool
		// want is the mirror pods' hashes once termination ended.
		want []string
	}{
		{name: "manifest removed", after: statics{}, want: nil},
		{name: "manifest changed", after: statics{static("etcd", "hash-2")}, want: []string{"hash-2"}},
		{name: "manifest changed, mirror pod deleted by a user", after: statics{static("etcd", "hash-2")},
			markDeleted: true, want: []string{"hash-2"}},
		{name: "manifest removed, mirror pod deleted by a user", after: statics{}, markDeleted: true, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, client := newManager(t, static("etcd", "hash-1"), static("web", "web-1"))
			terminating := map[string]bool{}
			m.deps.Terminating = func(fullName string) bool { return terminating[fullName] }
			m.Reconcile(ctx)
			before := mirrors(t, client)
			if len(before) != 2 {
				t.Fatalf("mirror pods = %+v, want etcd's and web's", before)
			}
			old := before[0]
			if tc.markDeleted {
				now := metav1.Now()
				old.DeletionTimestamp = &now
				if _, err := client.CoreV1().Pods("kube-system").Update(ctx, &old, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			terminating["kube-system/etcd-node-a"] = true
			m.deps.Sources = append(tc.after, static("web", "web-2")) // web changed too, and is not terminating
			clk := m.deps.Clock.(*testingclock.FakeClock)
			client.ClearActions()
			for range 3 {
				m.Reconcile(ctx)
				clk.Step(RetryAfter)
			}
			got := mirrors(t, client)
			if len(got) != 2 || got[0].UID != old.UID || got[0].Annotations[podspec.AnnotationConfigMirror] != "hash-1" {
				t.Fatalf("mirror pods while etcd terminates = %+v, want etcd's of hash-1 kept", got)
			}
			if got[1].Annotations[podspec.AnnotationConfigMirror] != "web-2" {
				t.Errorf("web's mirror pod not replaced while another static pod terminates: %+v", got[1])
			}
			for _, a := range client.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok && d.GetName() == "etcd-node-a" {
					t.Errorf("etcd's mirror pod deleted while its static pod terminates")
				}
				if c, ok := a.(k8stesting.CreateAction); ok && c.GetObject().(*v1.Pod).Name == "etcd-node-a" {
					t.Errorf("etcd's mirror pod created while its static pod terminates")
				}
			}

			terminating["kube-system/etcd-node-a"] = false
			m.Reconcile(ctx)
			var hashes []string
			for _, p := range mirrors(t, client) {
				if p.Name == "etcd-node-a" {
					hashes = append(hashes, p.Annotations[podspec.AnnotationConfigMirror])
				}
			}
			if fmt.Sprint(hashes) != fmt.Sprint(tc.want) {
				t.Errorf("etcd's mirror pods once terminated = %v, want %v", hashes, tc.want)
			}
		})
	}
}

func TestIsMirrorOf(t *testing.T) {
	etcd := static("etcd", "hash-1")
	mirror := Pod(etcd, "node-a", "node-uid")
	if !IsMirrorOf(mirror, etcd) {
		t.Error("a static pod's own mirror pod not recognised")
	}
	if IsMirrorOf(mirror, static("etcd", "hash-2")) {
		t.Error("the mirror pod of an older version taken for the new version's")
	}
	if IsMirrorOf(mirror, static("web", "hash-1")) {
		t.Error("the mirror pod of another name taken as this one's")
	}
}

// A kick sent on Deps.Kicks by another part (statussync) asks for a pass,
// as Kick does.
func TestDepsKicksAskForAPass(t *testing.T) {
	kicks := notify.NewKick()
	m := New(Deps{Kicks: kicks})
	kicks.Kick()
	select {
	case <-m.kick.C():
	default:
		t.Error("a kick on Deps.Kicks does not reach the manager")
	}
}
