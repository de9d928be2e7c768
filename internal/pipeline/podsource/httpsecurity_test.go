package podsource

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// recorder is a server that serves goodPod on /pods, redirects the paths
// of redirects, and records the headers of each request.
type recorder struct {
	mu        sync.Mutex
	requests  map[string][]http.Header // path -> headers
	redirects map[string]string        // path -> Location
}

func newRecorder() *recorder {
	return &recorder{requests: map[string][]http.Header{}, redirects: map[string]string{}}
}

func (r *recorder) redirect(path, location string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.redirects[path] = location
}

func (r *recorder) got(path string) []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[path]
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests[req.URL.Path] = append(r.requests[req.URL.Path], req.Header.Clone())
	location := r.redirects[req.URL.Path]
	r.mu.Unlock()
	if location != "" {
		http.Redirect(w, req, location, http.StatusFound)
		return
	}
	_, _ = w.Write([]byte(goodPod))
}

// secretHeader is what --manifest-url-header gives in these tests.
func secretHeader() http.Header {
	return http.Header{"Authorization": {"Bearer s3cret"}, "X-Token": {"t0ken"}}
}

func newTestHTTPSource(t *testing.T, rawURL string) (*HTTPSource, *logBuffer, *counter, *eventSink) {
	t.Helper()
	log, logs := newTestLog()
	metrics, events := &counter{}, &eventSink{}
	return NewHTTPSource(rawURL, secretHeader(), "node1", 0, newNotifyClock(), log, metrics, events), logs, metrics, events
}

func TestHTTPSourceRedirectHeaders(t *testing.T) {
	a, b := newRecorder(), newRecorder()
	srvA, srvB := httptest.NewServer(a), httptest.NewServer(b)
	t.Cleanup(srvA.Close)
	t.Cleanup(srvB.Close)
	a.redirect("/same", "/pods")
	// Same host, another port: another origin (Go's client would still
	// send it Authorization).
	a.redirect("/other", srvB.URL+"/pods")
	// Away and back: the headers stay off.
	a.redirect("/away", srvB.URL+"/back")
	b.redirect("/back", srvA.URL+"/pods")

	for _, tc := range []struct {
		path   string
		server *recorder
		want   bool // headers expected at /pods
	}{
		{"/same?token=q", a, true},
		{"/other?token=q", b, false},
		{"/away?token=q", a, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			before := len(tc.server.got("/pods"))
			src, _, _, _ := newTestHTTPSource(t, srvA.URL+tc.path)
			if class, err := src.fetch(t.Context()); err != nil {
				t.Fatalf("fetch: %s %v", class, err)
			}
			reqs := tc.server.got("/pods")
			if len(reqs) != before+1 {
				t.Fatalf("%d requests at /pods", len(reqs)-before)
			}
			hdr := reqs[len(reqs)-1]
			has := hdr.Get("X-Token") == "t0ken" && hdr.Get("Authorization") == "Bearer s3cret"
			if has != tc.want {
				t.Errorf("headers at /pods: %v; want the custom ones: %v", hdr, tc.want)
			}
			if !tc.want && (hdr.Get("X-Token") != "" || hdr.Get("Authorization") != "") {
				t.Errorf("another origin got %v", hdr)
			}
			if ref := hdr.Get("Referer"); ref != "" {
				t.Errorf("Referer %q sent", ref)
			}
		})
	}
}

func TestHTTPSourceRefusesDowngradeToHTTP(t *testing.T) {
	plain := newRecorder()
	srvPlain := httptest.NewServer(plain)
	t.Cleanup(srvPlain.Close)
	tlsRec := newRecorder()
	srvTLS := httptest.NewTLSServer(tlsRec)
	t.Cleanup(srvTLS.Close)
	tlsRec.redirect("/pods", srvPlain.URL+"/pods")
	tlsRec.redirect("/to-https", "/ok")

	src, logs, metrics, _ := newTestHTTPSource(t, srvTLS.URL+"/pods")
	trustTestServer(src, srvTLS)
	out := make(chan Update, 1)
	src.poll(t.Context(), out)
	if n := len(plain.got("/pods")); n != 0 {
		t.Fatalf("the plain http server got %d requests", n)
	}
	if n := metrics.get(ReasonRedirect); n != 1 {
		t.Errorf("redirect errors counted %d", n)
	}
	if lines := logs.lines("manifest skipped", "from https to http"); len(lines) != 1 {
		t.Errorf("log %q", lines)
	}

	// A redirect that stays on https is followed.
	src, _, _, _ = newTestHTTPSource(t, srvTLS.URL+"/to-https")
	trustTestServer(src, srvTLS)
	if class, err := src.fetch(t.Context()); err != nil {
		t.Fatalf("https to https: %s %v", class, err)
	}
}

func trustTestServer(src *HTTPSource, srv *httptest.Server) {
	src.client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}

// The URL's credentials (user info, and query parameters that look like
// credentials) appear nowhere: not in errors, logs, events or annotations, however
// the fetch fails.
func TestHTTPSourceRedactsCredentials(t *testing.T) {
	secrets := []string{"alice", "pa55word", "T0KEN", "S1GNATURE", "bob", "hunter2", "acc3ss"}
	rec := newRecorder()
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(rec)
	closed.Close()
	userinfo := func(base string) string {
		return strings.Replace(base, "http://", "http://alice:pa55word@", 1)
	}
	query := "?token=T0KEN&x=1&X-Amz-Signature=S1GNATURE"
	rec.redirect("/to-closed", strings.Replace(closed.URL, "http://", "http://bob:hunter2@", 1)+"/pods?access_token=acc3ss")
	rec.redirect("/loop", "/loop")
	rec.redirect("/bad-location", "http://[::1/x")

	var seen []string
	for _, u := range []string{
		userinfo(closed.URL) + "/pods" + query,        // connection refused
		userinfo(srv.URL) + "/to-closed" + query,      // redirect, then refused
		userinfo(srv.URL) + "/loop" + query,           // too many redirects
		userinfo(srv.URL) + "/bad-location" + query,   // a Location that does not parse
		userinfo(srv.URL) + "/pods" + query + "#frag", // good
		"http://alice:pa55word/T0KEN@host/pods",       // does not parse
	} {
		src, logs, _, events := newTestHTTPSource(t, u)
		out := make(chan Update, 1)
		src.poll(context.Background(), out)
		seen = append(seen, logs.lines()...)
		for _, e := range events.all() {
			seen = append(seen, e.message)
		}
		select {
		case up := <-out:
			for _, p := range up.Pods {
				seen = append(seen, p.Annotations[podspec.AnnotationConfigFile])
				if got, want := p.Annotations[podspec.AnnotationConfigFile], "http://REDACTED:REDACTED@"+strings.TrimPrefix(srv.URL, "http://")+"/pods?token=REDACTED&x=1&X-Amz-Signature=REDACTED"; got != want {
					t.Errorf("annotation %q, want %q", got, want)
				}
			}
			for _, fe := range up.Errors {
				seen = append(seen, fe.Error(), fe.Path)
			}
		default:
		}
		_, err := src.fetch(context.Background())
		if err != nil {
			seen = append(seen, err.Error())
		}
	}
	if len(seen) < 6 {
		t.Fatalf("only %d strings to check: %q", len(seen), seen)
	}
	for _, s := range seen {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%q shows %q", s, secret)
			}
		}
	}
	t.Logf("checked: %q", seen)
}
