package podsource

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// manifestServer serves a body that the test changes, and hands each
// request's headers to the test.
type manifestServer struct {
	mu     sync.Mutex
	status int
	etag   string
	body   string
	chunk  bool // send the body without a Content-Length

	requests chan http.Header
}

func (m *manifestServer) set(status int, etag, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.etag, m.body = status, etag, body
}

func (m *manifestServer) chunked(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.chunk = on
}

func (m *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	status, etag, body, chunk := m.status, m.etag, m.body, m.chunk
	m.mu.Unlock()
	// Handed over before answering (but after choosing the answer): once
	// the source has its answer, it may close the connection and so end
	// r's context.
	select {
	case m.requests <- r.Header.Clone():
	case <-r.Context().Done(): // the source stopped
		return
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			status, body = http.StatusNotModified, ""
		}
	}
	if body != "" && !chunk {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	if chunk {
		w.(http.Flusher).Flush() // the header goes out before the body's length is known
	}
	_, _ = w.Write([]byte(body))
}

type httpHarness struct {
	t       *testing.T
	srv     *manifestServer
	url     string
	clk     *notifyClock
	out     chan Update
	metrics *counter
	logs    *logBuffer
}

func startHTTPSource(t *testing.T, status int, etag, body string) *httpHarness {
	t.Helper()
	// requests is unbuffered: each poll waits for the test to look at it,
	// so that the test knows which poll an Update comes from.
	srv := &manifestServer{requests: make(chan http.Header)}
	srv.set(status, etag, body)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	log, logs := newTestLog()
	h := &httpHarness{t: t, srv: srv, url: ts.URL + "/pods", clk: newNotifyClock(), out: make(chan Update), metrics: &counter{}, logs: logs}
	header := http.Header{"Authorization": {"Bearer s3cret"}, "X-Node": {"a", "b"}}
	src := NewHTTPSource(h.url, header, "node1", 20*time.Second, h.clk, log, h.metrics, nil)
	header.Set("Authorization", "changed after the call") // the source keeps its own copy
	ctx := t.Context()
	runDone(t, func() { src.Run(ctx, h.out) })
	return h
}

// request waits for the next request the server answers.
func (h *httpHarness) request() http.Header {
	h.t.Helper()
	select {
	case hdr := <-h.srv.requests:
		return hdr
	case <-time.After(waitLimit):
		h.t.Fatal("no request")
		return nil
	}
}

// poll makes the source poll once, and returns the request's headers.
func (h *httpHarness) poll() http.Header {
	h.t.Helper()
	h.clk.Step(20 * time.Second)
	return h.request()
}

func (h *httpHarness) next() Update {
	h.t.Helper()
	select {
	case u := <-h.out:
		if u.Source != SourceHTTP {
			h.t.Fatalf("update from source %q", u.Source)
		}
		return u
	case <-time.After(waitLimit):
		h.t.Fatal("no update")
		return Update{}
	}
}

func TestHTTPSourceETagAndHeaders(t *testing.T) {
	h := startHTTPSource(t, http.StatusOK, `"v1"`, goodPod)
	hdr := h.request()
	if hdr.Get("Authorization") != "Bearer s3cret" || strings.Join(hdr.Values("X-Node"), ",") != "a,b" {
		t.Errorf("headers sent: %v", hdr)
	}
	if hdr.Get("If-None-Match") != "" {
		t.Errorf("first request sent If-None-Match %q", hdr.Get("If-None-Match"))
	}
	u := h.next()
	if podNames(u) != "web-node1" || len(u.Errors) != 0 {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
	p := u.Pods[0]
	if p.Annotations[podspec.AnnotationConfigSource] != SourceHTTP || p.Annotations[podspec.AnnotationConfigFile] != h.url {
		t.Errorf("annotations %v", p.Annotations)
	}

	// Unchanged: 304, and no Update.
	if got := h.poll().Get("If-None-Match"); got != `"v1"` {
		t.Errorf("If-None-Match = %q, want the last ETag", got)
	}
	// Changed: the next Update is the new content (not one for the 304).
	h.srv.set(http.StatusOK, `"v2"`, podYAML("web", "busybox:1.36"))
	if got := h.poll().Get("If-None-Match"); got != `"v1"` {
		t.Errorf("If-None-Match = %q", got)
	}
	u = h.next()
	if podNames(u) != "web-node1" || u.Pods[0].UID == p.UID {
		t.Fatalf("after change: pods %q uid %s (old %s)", podNames(u), u.Pods[0].UID, p.UID)
	}
	if got := h.poll().Get("If-None-Match"); got != `"v2"` {
		t.Errorf("If-None-Match = %q, want the new ETag", got)
	}
}

func TestHTTPSourcePodList(t *testing.T) {
	list := `apiVersion: v1
kind: PodList
items:
- metadata: {name: a}
  spec: {containers: [{name: c, image: "busybox:1.35"}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: b, namespace: kube-system}
  spec: {containers: [{name: c, image: "busybox:1.35"}]}
`
	h := startHTTPSource(t, http.StatusOK, "", list)
	h.request()
	u := h.next()
	if podNames(u) != "a-node1,b-node1" || len(u.Errors) != 0 {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
	if u.Pods[1].Namespace != "kube-system" || u.Pods[0].Namespace != "default" {
		t.Errorf("namespaces %s %s", u.Pods[0].Namespace, u.Pods[1].Namespace)
	}
	// Also a multi-document body, with a duplicate name: the first wins.
	h.srv.set(http.StatusOK, "", goodPod+"---\n"+podYAML("web", "busybox:1.36"))
	h.poll()
	u = h.next()
	if podNames(u) != "web-node1" || u.Pods[0].Spec.Containers[0].Image != "busybox:1.35" || errorClasses(u) != ReasonDuplicate {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
}

func TestHTTPSourceErrorKeepsLastGood(t *testing.T) {
	h := startHTTPSource(t, http.StatusOK, "", goodPod)
	h.request()
	good := h.next().Pods[0]

	h.srv.set(http.StatusOK, "", "apiVersion: v1\nkind: Pod\nmetadata: {name: web\n")
	h.poll()
	u := h.next()
	if podNames(u) != "web-node1" || u.Pods[0].UID != good.UID {
		t.Fatalf("pods %q, want the last good one", podNames(u))
	}
	if len(u.Errors) != 1 || !u.Errors[0].Kept || u.Errors[0].Class != ReasonDecode || u.Errors[0].Path != h.url {
		t.Fatalf("errors %+v", u.Errors)
	}
	// The same failure again: no Update (the source would block on it and
	// not poll again), no new log line.
	h.poll()
	h.poll()

	h.srv.set(http.StatusInternalServerError, "", "boom")
	h.poll()
	u = h.next()
	if podNames(u) != "web-node1" || errorClasses(u) != ReasonHTTPStatus || !strings.Contains(u.Errors[0].Reason(), "500") {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}

	h.srv.set(http.StatusOK, "", goodPod)
	h.poll()
	if u := h.next(); u.Pods[0].UID != good.UID || len(u.Errors) != 0 {
		t.Fatalf("recovered: %+v", u)
	}
	if h.metrics.get(ReasonDecode) != 1 || h.metrics.get(ReasonHTTPStatus) != 1 {
		t.Errorf("counted %v", h.metrics.n)
	}
	if lines := h.logs.lines("keeping the last good version"); len(lines) != 2 {
		t.Errorf("logged %q, want one line per distinct reason", lines)
	}
}

func TestHTTPSourceNoUpdateBeforeFirstGoodAnswer(t *testing.T) {
	h := startHTTPSource(t, http.StatusNotFound, "", "")
	h.request()
	h.poll()
	// Not ready yet: nothing is known of the pods the URL wants. The
	// first Update is for the first good answer.
	h.srv.set(http.StatusOK, "", "")
	h.poll()
	if u := h.next(); len(u.Pods) != 0 || len(u.Errors) != 0 {
		t.Fatalf("first update %+v, want empty", u)
	}
	if n := h.metrics.get(ReasonHTTPStatus); n != 1 {
		t.Errorf("http_status counted %d", n)
	}
	if lines := h.logs.lines("manifest skipped", "404"); len(lines) != 1 {
		t.Errorf("logged %q", lines)
	}
}

func TestHTTPSourceRefusesLargeBody(t *testing.T) {
	h := startHTTPSource(t, http.StatusOK, "", goodPod)
	h.request()
	h.next()
	h.srv.set(http.StatusOK, "", goodPod+"\n#"+strings.Repeat("x", MaxManifestURLBody))
	h.poll()
	if u := h.next(); podNames(u) != "web-node1" || errorClasses(u) != ReasonTooLarge {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
}
