package cli

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// podStates serves one state of the node's pods a poll, staying on the
// last one; when asked for the one after the last, every state has been
// printed (polls are one after the other) and done is closed.
type podStates struct {
	mu     sync.Mutex
	states [][]v1.Pod
	polls  int
	done   chan struct{}
}

func (s *podStates) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	i := min(s.polls, len(s.states)-1)
	s.polls++
	if s.polls == len(s.states)+1 {
		close(s.done)
	}
	s.mu.Unlock()
	writeJSON(w, v1.PodList{Items: s.states[i]})
}

func watchStates() [][]v1.Pod {
	web := newPod("web", 10*time.Minute, "app")
	web.Status = v1.PodStatus{Phase: v1.PodPending,
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: waiting("ContainerCreating")}}}
	db := newPod("db", time.Hour, "db")
	db.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.3",
		ContainerStatuses: []v1.ContainerStatus{{Name: "db", Ready: true, State: running(time.Hour)}}}

	webUp := *web.DeepCopy()
	webUp.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.4",
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, State: running(time.Minute)}}}
	// A new status time that changes no column is not a change.
	webUpLater := *webUp.DeepCopy()
	webUpLater.Status.ContainerStatuses[0].State = running(30 * time.Second)
	cache := newPod("cache", 2*time.Second, "redis")
	cache.Namespace = "kube-system"
	cache.Status.Phase = v1.PodPending

	return [][]v1.Pod{
		{web, db},
		{db, web},           // nothing changed
		{web, db},           // nothing changed
		{webUp, db},         // web is up
		{webUpLater, db},    // nothing shown changed
		{webUpLater, cache}, // db gone, cache (another namespace) new
		{webUpLater, cache}, // nothing changed
	}
}

func runWatch(t *testing.T, format string) string {
	t.Helper()
	states := &podStates{states: watchStates(), done: make(chan struct{})}
	c := newTestClient(t, newTestServer(t, states))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- watchPods(ctx, c.Pods, &out, time.Millisecond, format, func() time.Time { return now })
	}()
	select {
	case <-states.done:
	case <-ctx.Done():
		t.Fatal("the watch did not poll every state")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestWatchPodsPrintsChanges(t *testing.T) {
	want := `NAME   READY   STATUS              RESTARTS   AGE   IP
db     1/1     Running             0          60m   10.88.0.3
web    0/1     ContainerCreating   0          10m   <none>
web    1/1     Running             0          10m   10.88.0.4
kube-system/cache   0/1     Pending             0          2s    <none>
db                  1/1     Deleted             0          60m   10.88.0.3
`
	if got := runWatch(t, FormatTable); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestWatchPodsYAML(t *testing.T) {
	got := runWatch(t, FormatYAML)
	// Any change of the object counts here: db, web, web up, web's new
	// start time, cache; db's deletion is not printed.
	if n := strings.Count(got, "\n---\n"); n != 4 {
		t.Errorf("%d separators, want 4", n)
	}
	var names []string
	for line := range strings.Lines(got) {
		if name, ok := strings.CutPrefix(line, "  name: "); ok {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if want := "db web web web cache"; strings.Join(names, " ") != want {
		t.Errorf("printed %q, want %q", names, want)
	}
}

func TestWatchPodsErrors(t *testing.T) {
	if err := WatchPods(t.Context(), nil, &bytes.Buffer{}, time.Second, "xml"); err == nil {
		t.Error("unknown format accepted")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	c := newTestClient(t, newTestServer(t, mux))
	err := WatchPods(t.Context(), c, &bytes.Buffer{}, time.Millisecond, "")
	if err == nil || !strings.Contains(err.Error(), "500 Internal Server Error: boom") {
		t.Errorf("got %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := WatchPods(ctx, c, &bytes.Buffer{}, time.Millisecond, ""); err != nil {
		t.Errorf("ended context: %v", err)
	}
}
