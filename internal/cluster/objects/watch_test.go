package objects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/node/volume"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// api is a fake API server: a fake clientset that counts the open watches
// by what they watch ("configmaps app metadata.name=a").
type api struct {
	client *fake.Clientset

	mu      sync.Mutex
	open    map[string]int
	started []string
}

func newAPI(objects ...runtime.Object) *api {
	a := &api{client: fake.NewClientset(objects...), open: map[string]int{}}
	a.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		opts := action.(k8stesting.WatchActionImpl).ListOptions
		w, err := a.client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		what := action.GetResource().Resource + " " + action.GetNamespace() + " " + opts.FieldSelector
		a.mu.Lock()
		a.open[what]++
		a.started = append(a.started, what)
		a.mu.Unlock()
		return true, &countedWatch{Interface: w, stopped: func() {
			a.mu.Lock()
			a.open[what]--
			a.mu.Unlock()
		}}, nil
	})
	return a
}

// openWatches is how many watches of what are open.
func (a *api) openWatches(what string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.open[what]
}

// anyOpen is how many watches are open in all.
func (a *api) anyOpen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.open {
		n += c
	}
	return n
}

type countedWatch struct {
	watch.Interface
	once    sync.Once
	stopped func()
}

func (w *countedWatch) Stop() {
	w.once.Do(w.stopped)
	w.Interface.Stop()
}

// notifications counts the Watcher's change signals.
type notifications struct{ c chan struct{} }

func newNotifications() *notifications { return &notifications{c: make(chan struct{}, 100)} }

func (n *notifications) notify() { n.c <- struct{}{} }

// wait waits for one signal.
func (n *notifications) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-n.c:
	case <-time.After(time.Minute):
		t.Fatalf("no change signalled: %s", what)
	}
}

// pending is how many signals are waiting.
func (n *notifications) pending() int { return len(n.c) }

func configMap(ns, name, value string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": value}}
}

func secret(ns, name, value string) *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"k": []byte(value)}}
}

// apiPod is a pod of the API server in namespace app referring to the
// ConfigMaps (env) and Secrets (volumes) named.
func apiPod(uid string, configMaps []string, secrets []string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "pod-" + uid, UID: types.UID(uid),
		Annotations: map[string]string{podspec.AnnotationConfigSource: podspec.ConfigSourceAPI}}}
	c := v1.Container{Name: "c"}
	for _, n := range configMaps {
		c.EnvFrom = append(c.EnvFrom, v1.EnvFromSource{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: n}}})
	}
	p.Spec.Containers = []v1.Container{c}
	for _, n := range secrets {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: n, VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: n}}})
	}
	return p
}

// runWatcher runs a Watcher over a until the test ends. Its clock is fake
// and never steps: a read waits for the first list however long it takes.
func runWatcher(t *testing.T, a *api, n *notifications, opts ...WatcherOption) *Watcher {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := NewWatcher(a.client, n.notify, clk, slog.New(slog.DiscardHandler), opts...)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if open := a.anyOpen(); open != 0 {
			t.Errorf("%d watches still open after Run returned", open)
		}
	})
	return w
}

// Each object is watched on its own, with a field selector on its name in
// its namespace, once however many pods refer to it; the watch stops when
// the last of them goes.
func TestWatcherRefcounts(t *testing.T) {
	a := newAPI()
	w := runWatcher(t, a, newNotifications())
	podA := apiPod("a", []string{"shared", "only-a"}, []string{"creds"})
	podB := apiPod("b", []string{"shared", "only-b"}, nil)
	w.RegisterPod(podA)
	w.RegisterPod(podB)
	w.RegisterPod(podA) // idempotent
	want := []string{"configmap app/only-a", "configmap app/only-b", "configmap app/shared", "secret app/creds"}
	if got := w.Watching(); !slices.Equal(got, want) {
		t.Fatalf("watching %q, want %q", got, want)
	}
	for _, what := range []string{"configmaps app metadata.name=shared", "configmaps app metadata.name=only-a", "secrets app metadata.name=creds"} {
		testutil.Eventually(t, "a watch of "+what, func() bool { return a.openWatches(what) == 1 })
	}

	w.UnregisterPod(podA)
	if got, want := w.Watching(), []string{"configmap app/only-b", "configmap app/shared"}; !slices.Equal(got, want) {
		t.Errorf("after pod a went: watching %q, want %q", got, want)
	}
	testutil.Eventually(t, "the watch of only-a to stop", func() bool { return a.openWatches("configmaps app metadata.name=only-a") == 0 })
	testutil.Eventually(t, "the watch of creds to stop", func() bool { return a.openWatches("secrets app metadata.name=creds") == 0 })
	if a.openWatches("configmaps app metadata.name=shared") != 1 {
		t.Error("the watch of shared stopped while pod b still refers to it")
	}

	// A new version of pod b that no longer refers to only-b drops it.
	w.RegisterPod(apiPod("b", []string{"shared"}, nil))
	if got, want := w.Watching(), []string{"configmap app/shared"}; !slices.Equal(got, want) {
		t.Errorf("after pod b's update: watching %q, want %q", got, want)
	}
	w.UnregisterPod(podB)
	w.UnregisterPod(podB) // idempotent
	if got := w.Watching(); len(got) != 0 {
		t.Errorf("no pod left: watching %q", got)
	}
	testutil.Eventually(t, "every watch to stop", func() bool { return a.anyOpen() == 0 })

	// Every list and watch named one object.
	for _, action := range a.client.Actions() {
		if lw, ok := action.(k8stesting.ListActionImpl); ok && !strings.HasPrefix(lw.ListOptions.FieldSelector, "metadata.name=") {
			t.Errorf("a list without a name: %s %s %q", lw.GetResource().Resource, lw.GetNamespace(), lw.ListOptions.FieldSelector)
		}
		if wa, ok := action.(k8stesting.WatchActionImpl); ok && !strings.HasPrefix(wa.ListOptions.FieldSelector, "metadata.name=") {
			t.Errorf("a watch without a name: %s %s %q", wa.GetResource().Resource, wa.GetNamespace(), wa.ListOptions.FieldSelector)
		}
	}
}

// Reads come from the watch; a change of a watched object (update,
// delete, create) is signalled and read at once; the first list is not a
// change.
func TestWatcherReadsAndSignalsChanges(t *testing.T) {
	a := newAPI(configMap("app", "settings", "v1"), configMap("app", "unrelated", "x"), secret("app", "creds", "s1"))
	n := newNotifications()
	w := runWatcher(t, a, n)
	pod := apiPod("a", []string{"settings", "later"}, []string{"creds"})
	w.RegisterPod(pod)

	cm, err := w.ConfigMap(pod, "settings")
	if err != nil || cm.Data["k"] != "v1" {
		t.Fatalf("ConfigMap settings = %v, %v", cm, err)
	}
	s, err := w.Secret(pod, "creds")
	if err != nil || string(s.Data["k"]) != "s1" {
		t.Fatalf("Secret creds = %v, %v", s, err)
	}
	_, err = w.ConfigMap(pod, "later")
	if !errors.Is(err, envvars.ErrObjectNotFound) || !errors.Is(err, volume.ErrObjectNotFound) {
		t.Errorf("a missing ConfigMap: %v, want every consumer's not-found", err)
	}
	if _, err := w.ConfigMap(pod, "unrelated"); err == nil || errors.Is(err, envvars.ErrObjectNotFound) {
		t.Errorf("a ConfigMap no pod refers to: %v, want a not-registered error", err)
	}
	// A returned object is a copy.
	cm.Data["k"] = "scribbled"
	if again, _ := w.ConfigMap(pod, "settings"); again.Data["k"] != "v1" {
		t.Error("ConfigMap returned the watch's object")
	}

	for _, what := range []string{"configmaps app metadata.name=settings", "configmaps app metadata.name=later", "secrets app metadata.name=creds"} {
		testutil.Eventually(t, "a watch of "+what, func() bool { return a.openWatches(what) == 1 })
	}
	cms := a.client.CoreV1().ConfigMaps("app")
	if _, err := cms.Update(t.Context(), configMap("app", "settings", "v2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.wait(t, "settings updated")
	if n.pending() != 0 {
		t.Errorf("%d more signals: the first list must not signal a change", n.pending())
	}
	if cm, _ := w.ConfigMap(pod, "settings"); cm.Data["k"] != "v2" {
		t.Errorf("after the update: %q", cm.Data["k"])
	}
	// A change of an object no pod refers to is not a change.
	if _, err := cms.Update(t.Context(), configMap("app", "unrelated", "y"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(t.Context(), configMap("app", "later", "new"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.wait(t, "later created")
	if n.pending() != 0 {
		t.Error("the update of an unrelated ConfigMap signalled a change")
	}
	if cm, err := w.ConfigMap(pod, "later"); err != nil || cm.Data["k"] != "new" {
		t.Errorf("after the creation: %v, %v", cm, err)
	}
	if err := a.client.CoreV1().Secrets("app").Delete(t.Context(), "creds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.wait(t, "creds deleted")
	if _, err := w.Secret(pod, "creds"); !errors.Is(err, envvars.ErrObjectNotFound) {
		t.Errorf("after the deletion: %v, want not found", err)
	}

	// Once the pod is gone, its objects are not readable any more.
	w.UnregisterPod(pod)
	if _, err := w.ConfigMap(pod, "settings"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("a ConfigMap of an unregistered pod: %v", err)
	}
}

// A read that gives up waiting for the first list is an error (not "not
// found": an optional reference must not be skipped for it), and the first
// list then signals a change so that the pod is synced again.
func TestWatcherSyncTimeout(t *testing.T) {
	a := newAPI(configMap("app", "slow", "v1"))
	release := make(chan struct{})
	a.client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil // on to the tracker
	})
	n := newNotifications()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := NewWatcher(a.client, n.notify, clk, slog.New(slog.DiscardHandler), WithSyncTimeout(time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	pod := apiPod("a", []string{"slow"}, nil)
	w.RegisterPod(pod)
	errc := make(chan error, 1)
	go func() { _, err := w.ConfigMap(pod, "slow"); errc <- err }()
	testutil.Eventually(t, "the read to wait on the clock", clk.HasWaiters)
	clk.Step(time.Second)
	err := <-errc
	if err == nil || errors.Is(err, envvars.ErrObjectNotFound) || !strings.Contains(err.Error(), "not read from the API server yet") {
		t.Fatalf("read before the first list: %v", err)
	}
	close(release)
	n.wait(t, "the first list after a reader gave up")
	if cm, err := w.ConfigMap(pod, "slow"); err != nil || cm.Data["k"] != "v1" {
		t.Errorf("after the first list: %v, %v", cm, err)
	}
}

// An immutable object is not watched after its first read; its copy stays.
func TestWatcherImmutable(t *testing.T) {
	frozen := configMap("app", "frozen", "v1")
	frozen.Immutable = new(true)
	a := newAPI(frozen)
	n := newNotifications()
	w := runWatcher(t, a, n)
	pod := apiPod("a", []string{"frozen"}, nil)
	w.RegisterPod(pod)
	if cm, err := w.ConfigMap(pod, "frozen"); err != nil || cm.Data["k"] != "v1" {
		t.Fatalf("ConfigMap frozen = %v, %v", cm, err)
	}
	testutil.Eventually(t, "the watch of an immutable object to stop", func() bool { return a.anyOpen() == 0 })
	if err := a.client.CoreV1().ConfigMaps("app").Delete(t.Context(), "frozen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if cm, err := w.ConfigMap(pod, "frozen"); err != nil || cm.Data["k"] != "v1" {
		t.Errorf("immutable object after its deletion: %v, %v; want the copy read first", cm, err)
	}
	if n.pending() != 0 {
		t.Error("an unwatched immutable object signalled a change")
	}
	if got := w.Watching(); !slices.Equal(got, []string{"configmap app/frozen"}) {
		t.Errorf("watching %q: the immutable copy is kept while a pod refers to it", got)
	}
}

// Static pods are never registered and read nothing from the API.
func TestWatcherIgnoresStaticPods(t *testing.T) {
	a := newAPI(configMap("app", "settings", "v1"))
	w := runWatcher(t, a, newNotifications())
	static := apiPod("s", []string{"settings"}, nil)
	static.Annotations[podspec.AnnotationConfigSource] = "file"
	w.RegisterPod(static)
	if got := w.Watching(); len(got) != 0 {
		t.Errorf("a static pod's references are watched: %q", got)
	}
	w.RegisterPod(apiPod("a", []string{"settings"}, nil))
	if _, err := w.ConfigMap(static, "settings"); err == nil || !strings.Contains(err.Error(), "static pods may not reference API objects") {
		t.Errorf("a static pod read an API object: %v", err)
	}
}

// Watches registered before Run start with it; Run stops them all.
func TestWatcherStartsWithRun(t *testing.T) {
	a := newAPI(configMap("app", "settings", "v1"))
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	w := NewWatcher(a.client, func() {}, clk, slog.New(slog.DiscardHandler))
	w.RegisterPod(apiPod("a", []string{"settings"}, nil))
	if len(a.client.Actions()) != 0 {
		t.Fatalf("NewWatcher and RegisterPod called the API before Run: %v", a.client.Actions())
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	testutil.Eventually(t, "the watch to start", func() bool { return a.anyOpen() == 1 })
	cancel()
	<-done
	if a.anyOpen() != 0 {
		t.Error("Run returned with a watch open")
	}
}

// saPod is a pod of namespace app as the ServiceAccount admission plugin
// leaves it: a projected volume of its token, the namespace's
// kube-root-ca.crt and its namespace.
func saPod(uid string) *v1.Pod {
	p := apiPod(uid, nil, nil)
	p.Spec.Volumes = []v1.Volume{{Name: "kube-api-access-x", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
	}}}}
	return p
}

// Thirty pods of one namespace that all mount kube-root-ca.crt (the
// projected service-account volume of every pod) make one list and one
// watch, of that ConfigMap alone, however often each is synced; the watch
// stops with the last of them, not before.
func TestWatcherSharedRootCA(t *testing.T) {
	const pods = 30
	a := newAPI(configMap("app", "kube-root-ca.crt", "ca"), configMap("app", "other", "x"))
	w := runWatcher(t, a, newNotifications())
	var all []*v1.Pod
	for i := range pods {
		p := saPod(fmt.Sprintf("uid-%d", i))
		all = append(all, p)
		for range 3 { // the sync loop registers before every sync
			w.RegisterPod(p)
			if cm, err := w.ConfigMap(p, "kube-root-ca.crt"); err != nil || cm.Data["k"] != "ca" {
				t.Fatalf("pod %d reads kube-root-ca.crt: %v, %v", i, cm, err)
			}
		}
	}
	const what = "configmaps app metadata.name=kube-root-ca.crt"
	testutil.Eventually(t, "the watch of kube-root-ca.crt", func() bool { return a.openWatches(what) == 1 })
	started := func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Clone(a.started)
	}
	if got := started(); !slices.Equal(got, []string{what}) {
		t.Errorf("%d pods started the watches %q, want one: %s", pods, got, what)
	}
	lists := 0
	for _, action := range a.client.Actions() {
		if l, ok := action.(k8stesting.ListActionImpl); ok {
			lists++
			if l.GetResource().Resource != "configmaps" || l.GetNamespace() != "app" || l.ListOptions.FieldSelector != "metadata.name=kube-root-ca.crt" {
				t.Errorf("a list of %s in %s with %q", l.GetResource().Resource, l.GetNamespace(), l.ListOptions.FieldSelector)
			}
		}
	}
	if lists != 1 {
		t.Errorf("%d pods listed %d times, want once", pods, lists)
	}

	for _, p := range all[:pods-1] {
		w.UnregisterPod(p)
	}
	if got := w.Watching(); !slices.Equal(got, []string{"configmap app/kube-root-ca.crt"}) {
		t.Errorf("one pod left: watching %q", got)
	}
	if a.openWatches(what) != 1 || len(started()) != 1 {
		t.Errorf("one pod left: %d open, %d started; want the first watch still open", a.openWatches(what), len(started()))
	}
	w.UnregisterPod(all[pods-1])
	testutil.Eventually(t, "the watch to stop with the last pod", func() bool { return a.anyOpen() == 0 })
	if got := w.Watching(); len(got) != 0 {
		t.Errorf("no pod left: watching %q", got)
	}
}
