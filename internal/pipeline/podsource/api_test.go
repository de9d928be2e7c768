package podsource

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/base/testutil/fakeapi"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

func apiTestPod(name string, mirror bool) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{NodeName: "node-a"}}
	if mirror {
		p.Annotations = map[string]string{podspec.AnnotationConfigMirror: "hash"}
	}
	return p
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// The API source sends the full set of the node's pods after its first
// list and after each change, mirror pods left out; nothing before the
// list (an API server not answering is not a node without pods).
func TestAPISource(t *testing.T) {
	client := fake.NewClientset(apiTestPod("b", false), apiTestPod("a", false), apiTestPod("etcd-node-a", true))
	watches := fakeapi.CountWatches(client)
	informer := NewNodePodInformer(client, "node-a")
	src := NewAPISource(informer, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.Run(ctx.Done())
	out := make(chan Update)
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, out) }()

	recv := func() Update {
		t.Helper()
		select {
		case u := <-out:
			return u
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
			return Update{}
		}
	}
	if u := recv(); u.Source != SourceAPI || len(u.Pods) != 2 || u.Pods[0].Name != "a" || u.Pods[1].Name != "b" {
		t.Fatalf("first update: %s %q, want api [a b]", u.Source, names(u.Pods))
	}
	testutil.Eventually(t, "the informer to watch", func() bool { return watches.Load() > 0 })
	if err := client.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		u := recv()
		if len(u.Pods) == 1 && u.Pods[0].Name == "b" {
			break
		}
	}
	cancel()
	<-done
}

// The node's pod informer lists and watches only the pods bound to the
// node, in every namespace, indexed by namespace as the shared factory's.
func TestNodePodInformerSelectsTheNode(t *testing.T) {
	client := fake.NewClientset()
	selectors := make(chan string, 2)
	record := func(a clienttesting.Action) (bool, runtime.Object, error) {
		var f string
		switch a := a.(type) {
		case clienttesting.ListAction:
			f = a.GetListRestrictions().Fields.String()
		case clienttesting.WatchAction:
			f = a.GetWatchRestrictions().Fields.String()
		}
		select {
		case selectors <- a.GetVerb() + " " + a.GetNamespace() + " " + f:
		default:
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "pods", record)
	client.PrependWatchReactor("pods", func(a clienttesting.Action) (bool, watch.Interface, error) {
		_, _, err := record(a)
		return false, nil, err
	})
	informer := NewNodePodInformer(client, "node-a")
	if _, ok := informer.GetIndexer().GetIndexers()[cache.NamespaceIndex]; !ok {
		t.Error("no namespace index")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go informer.RunWithContext(ctx)
	for _, want := range []string{"list  spec.nodeName=node-a", "watch  spec.nodeName=node-a"} {
		select {
		case got := <-selectors:
			if got != want {
				t.Errorf("request %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no request; want %q", want)
		}
	}
}
