package podconfig

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pipeline/podsource"
)

const waitLimit = 10 * time.Second

type harness struct {
	t    *testing.T
	cfg  *Config
	clk  *testingclock.FakeClock
	in   chan podsource.Update
	logs *testutil.SyncBuffer
}

func start(t *testing.T, sources ...string) *harness {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	h := &harness{
		t:    t,
		clk:  testingclock.NewFakeClock(t0),
		in:   make(chan podsource.Update),
		logs: logs,
	}
	h.cfg = New(sources, h.clk, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.cfg.Run(ctx, h.in)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Error("Run did not return after its context ended")
		}
	})
	return h
}

// send hands u to Run; when it returns, Run has finished with the previous
// Update.
func (h *harness) send(u podsource.Update) {
	h.t.Helper()
	select {
	case h.in <- u:
	case <-time.After(waitLimit):
		h.t.Fatal("Run does not take the update")
	}
}

func (h *harness) recv() PodUpdate {
	h.t.Helper()
	select {
	case u := <-h.cfg.Updates():
		return u
	case <-time.After(waitLimit):
		h.t.Fatal("no operation")
		return PodUpdate{}
	}
}

func (h *harness) recvAll(n int) []string {
	h.t.Helper()
	var ops []PodUpdate
	for range n {
		ops = append(ops, h.recv())
	}
	return describe(ops)
}

func TestConfigSourcesReady(t *testing.T) {
	h := start(t, podsource.SourceFile, podsource.SourceHTTP)
	if h.cfg.SourcesReady() {
		t.Fatal("ready before any source reported")
	}
	h.send(podsource.Update{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("a", "1")}})
	if got := h.recvAll(1); got[0] != "ADD file: default/a(1)" {
		t.Fatalf("got %q", got)
	}
	if h.cfg.SourcesReady() {
		t.Fatal("ready with the http source not heard from")
	}
	h.send(podsource.Update{Source: podsource.SourceHTTP})
	if got := h.recvAll(1); got[0] != "ADD http:" {
		t.Fatalf("got %q", got)
	}
	if !h.cfg.SourcesReady() {
		t.Fatal("not ready after every source reported")
	}
}

func TestConfigDeliversInOrder(t *testing.T) {
	h := start(t, podsource.SourceFile)
	updates := []podsource.Update{
		{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("a", "1"), pod("b", "2")}},
		{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("a", "1b"), pod("b", "2")}},
		{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("a", "1b"), pod("b", "2")}}, // no change
		{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("a", "1b", withLabel)}},
		{Source: podsource.SourceFile},
	}
	go func() {
		for _, u := range updates {
			h.in <- u
		}
	}()
	want := []string{
		"ADD file: default/a(1) default/b(2)",
		"REMOVE file: default/a(1)",
		"ADD file: default/a(1b)",
		"REMOVE file: default/b(2)",
		"UPDATE file: default/a(1b)",
		"REMOVE file: default/a(1b)",
	}
	if got := h.recvAll(len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("operations\n got %q\nwant %q", got, want)
	}
}

func TestConfigPodsAcrossSources(t *testing.T) {
	h := start(t, podsource.SourceFile, podsource.SourceHTTP)
	h.send(podsource.Update{Source: podsource.SourceHTTP, Pods: []*v1.Pod{pod("web", "h1"), pod("other", "h2")}})
	h.recv()
	h.clk.Step(time.Hour)
	h.send(podsource.Update{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("web", "f1")}})
	h.recv()

	pods := h.cfg.Pods()
	if d := describeState(State{"all": podMap(pods)}); d["all"] != "other(h2)@t0 web(f1)@t1" {
		t.Errorf("pods %s, want the file source's web, seen when first merged", d["all"])
	}
	if n := strings.Count(h.logs.String(), "pod defined by two sources"); n != 1 {
		t.Errorf("conflict logged %d times, want 1", n)
	}
	pods[0].Name = "changed" // the caller owns the pods
	if h.cfg.Pods()[0].Name != "other" {
		t.Error("Pods returned the stored pods")
	}

	// Again (still conflicting): not logged again. The file pod goes away:
	// the http one is used.
	h.send(podsource.Update{Source: podsource.SourceHTTP, Pods: []*v1.Pod{pod("web", "h1"), pod("other", "h2")}})
	h.send(podsource.Update{Source: podsource.SourceFile})
	h.recv()
	if d := describeState(State{"all": podMap(h.cfg.Pods())}); d["all"] != "other(h2)@t0 web(h1)@t0" {
		t.Errorf("pods %s", d["all"])
	}
	if n := strings.Count(h.logs.String(), "pod defined by two sources"); n != 1 {
		t.Errorf("conflict logged %d times, want 1", n)
	}
}

func TestConfigIgnoresUnknownSource(t *testing.T) {
	h := start(t, podsource.SourceFile)
	h.send(podsource.Update{Source: "api", Pods: []*v1.Pod{pod("a", "1")}})
	h.send(podsource.Update{Source: podsource.SourceFile})
	if got := h.recvAll(1); got[0] != "ADD file:" {
		t.Errorf("got %q", got)
	}
	if len(h.cfg.Pods()) != 0 || strings.Count(h.logs.String(), "not configured") != 1 {
		t.Errorf("pods %v, unknown source logged %d times", h.cfg.Pods(), strings.Count(h.logs.String(), "not configured"))
	}
}

func podMap(pods []*v1.Pod) map[types.UID]*v1.Pod {
	m := map[types.UID]*v1.Pod{}
	for _, p := range pods {
		m[p.UID] = p
	}
	return m
}

// StaticPods is Pods without the API server's pods: the file and URL
// sources' only, copied.
func TestConfigStaticPods(t *testing.T) {
	h := start(t, podsource.SourceFile, podsource.SourceAPI)
	h.send(podsource.Update{Source: podsource.SourceFile, Pods: []*v1.Pod{pod("etcd", "f1")}})
	h.recv()
	h.send(podsource.Update{Source: podsource.SourceAPI, Pods: []*v1.Pod{pod("web", "a1")}})
	h.recv()
	if n := len(h.cfg.Pods()); n != 2 {
		t.Fatalf("%d pods, want 2", n)
	}
	static := h.cfg.StaticPods()
	if len(static) != 1 || static[0].Name != "etcd" {
		t.Fatalf("static pods %v, want etcd only", static)
	}
	static[0].Name = "changed"
	if h.cfg.StaticPods()[0].Name != "etcd" {
		t.Error("StaticPods returned the stored pods")
	}
}
