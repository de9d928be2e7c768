package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// The JSON of a cached summary is made once and shared; a new summary
// gets a new encoding and a new tag.
func TestSummaryJSONOncePerSnapshot(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	ctx := context.Background()
	get := func(only bool) ([]byte, string) {
		t.Helper()
		body, etag, err := e.p.SummaryJSON(ctx, only)
		if err != nil {
			t.Fatal(err)
		}
		return body, etag
	}
	body, etag := get(false)
	var decoded v1alpha1.Summary
	if err := json.Unmarshal(body, &decoded); err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(summary(t, e.p, false))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want) || decoded.Node.NodeName != "node-1" || len(decoded.Pods) != 2 {
		t.Errorf("body is not the summary's encoding:\n%s\nwant\n%s", body, want)
	}
	if len(etag) < 3 || etag[0] != '"' || etag[len(etag)-1] != '"' {
		t.Errorf("etag %q is not a quoted strong tag", etag)
	}

	// Within the cache period: the same bytes, not a copy.
	e.clk.Step(500 * time.Millisecond)
	again, etag2 := get(false)
	if &again[0] != &body[0] || etag2 != etag {
		t.Error("a cached summary was encoded again")
	}
	// The CPU-and-memory slot has its own encoding, without filesystems.
	cpuMem, etagCPU := get(true)
	if etagCPU == etag || bytes.Contains(cpuMem, []byte(`"fs"`)) || !bytes.Contains(body, []byte(`"fs"`)) {
		t.Errorf("CPU-and-memory encoding: etag %s (full %s)\n%s", etagCPU, etag, cpuMem)
	}

	// A new summary: new bytes, new tag.
	e.machine.setCPU(200e9)
	e.clk.Step(time.Second)
	fresh, etag3 := get(false)
	if etag3 == etag || bytes.Equal(fresh, body) {
		t.Error("a refreshed summary kept the old encoding")
	}
}

func TestSummaryJSONError(t *testing.T) {
	e := newEnv(t)
	e.rt.err = errors.New("runtime down")
	if body, etag, err := e.p.SummaryJSON(context.Background(), false); err == nil || body != nil || etag != "" {
		t.Errorf("SummaryJSON = %q, %q, %v; want an error", body, etag, err)
	}
}

// The resource metrics of a cached summary are built once and shared;
// a failed scrape is not kept.
func TestResourceGathererCache(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	g := e.p.ResourceGatherer()
	first, err := g.Gather()
	if err != nil || len(first) == 0 {
		t.Fatalf("Gather = %d families, %v", len(first), err)
	}
	again, err := g.Gather()
	if err != nil || len(again) != len(first) || again[0] != first[0] {
		t.Error("a cached summary's metrics were built again")
	}

	e.rt.err = errors.New("runtime down")
	e.clk.Step(time.Second)
	if got := series(t, g); metricValue(got["scrape_error{}"]) != 1 || len(got) != 2 {
		t.Errorf("failed scrape: %v", got)
	}
	e.rt.err = nil
	e.machine.setCPU(250e9)
	if got := series(t, g); metricValue(got["scrape_error{}"]) != 0 || metricValue(got["node_cpu_usage_seconds_total{}"]) != 250 {
		t.Errorf("scrape after the failure: %v", got)
	}
}

// Served stale while refreshing, JSON callers never wait for an encoding:
// the refresh a JSON caller started encodes before it publishes.
func TestRefreshEncodesBeforePublishing(t *testing.T) {
	e := newEnv(t, WithServeStale(10*time.Second))
	twoPods(e)
	ctx := context.Background()
	first, _, err := e.p.SummaryJSON(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Step(2 * time.Second)
	if stale, _, err := e.p.SummaryJSON(ctx, false); err != nil || &stale[0] != &first[0] {
		t.Fatalf("stale call: %v, same bytes %v", err, err == nil && &stale[0] == &first[0])
	}
	published := func(k kind) *snapshot {
		e.p.mu.Lock()
		defer e.p.mu.Unlock()
		return e.p.cache[k]
	}
	testutil.Eventually(t, "the background refresh to land", func() bool {
		s := published(kindFull)
		return s != nil && s.json != nil && &s.json[0] != &first[0]
	})
	// Its CPU-and-memory view nobody asked JSON of is not encoded.
	if s := published(kindCPUMem); s == nil || s.json != nil {
		t.Error("the CPU-and-memory view of a full refresh was encoded unasked")
	}
	// Summary callers do not make refreshes encode.
	e.clk.Step(2 * time.Second)
	if _, err := e.p.Summary(ctx, false); err != nil {
		t.Fatal(err)
	}
	prev := published(kindFull)
	testutil.Eventually(t, "the second refresh to land", func() bool { return published(kindFull) != prev })
	if s := published(kindFull); s.json != nil {
		t.Error("a refresh no JSON caller waited for was encoded")
	}
}

// A refresh that takes longer than the cache period keeps its snapshot
// fresh for as long as it took: the runtime rests at least half of the
// time however many callers there are.
func TestSlowRefreshRestsTheRuntime(t *testing.T) {
	e := newEnv(t)
	twoPods(e)
	e.rt.onCall = func(name string) {
		if name == "ListPodSandbox" {
			e.clk.Step(3 * time.Second) // the refresh takes 3 s
		}
	}
	summary(t, e.p, false)
	if n := e.rt.count("ListPodSandbox"); n != 1 {
		t.Fatalf("%d refreshes, want 1", n)
	}
	// Published at t0+3s: fresh until t0+6s, not t0+1s.
	e.clk.SetTime(t0.Add(6*time.Second - time.Millisecond))
	summary(t, e.p, false)
	summary(t, e.p, true)
	if n := e.rt.count("ListPodSandbox"); n != 1 {
		t.Errorf("%d refreshes within the rest, want 1", n)
	}
	e.clk.SetTime(t0.Add(6 * time.Second))
	summary(t, e.p, false)
	if n := e.rt.count("ListPodSandbox"); n != 2 {
		t.Errorf("%d refreshes after the rest, want 2", n)
	}
}
