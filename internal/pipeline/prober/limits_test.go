package prober

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/base/httpget"
	"github.com/nodelet/nodelet/internal/base/testutil"
)

// hostileTotal is how much a hostile server sends before it gives up: far
// beyond any budget, and small enough that the code before the bound
// (which read it all) fails the test instead of exhausting the machine.
const hostileTotal = 32 << 20

// hostileServer answers every request with a status line and headers that
// do not end within hostileTotal bytes: one endless header line ("line"),
// or an endless list of short headers ("list"). It returns the port.
func hostileServer(t *testing.T, tls bool, kind string) int {
	t.Helper()
	h := testutil.HeaderBomb{List: kind == "list", Total: hostileTotal}
	srv := httptest.NewUnstartedServer(h)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// An HTTP probe reads at most a bounded response: a server sending endless
// headers fails the probe with a message naming the bound, and the probe
// reads (and so allocates) no more than the budget plus a buffer.
func TestHTTPProbeBoundsResponseHeaders(t *testing.T) {
	const (
		// readSlack is what may be read beyond the header budget: one
		// read buffer, and for TLS the rest of a record (16 KiB plus
		// overhead) and the handshake.
		readSlack = 64 << 10
		// allocBound is a generous bound on what one probe allocates;
		// before the bound it was hundreds of MiB.
		allocBound = 16 << 20
	)
	for _, tc := range []struct {
		kind string
		tls  bool
	}{{"line", false}, {"list", false}, {"line", true}, {"list", true}} {
		name := tc.kind
		if tc.tls {
			name = "https " + name
		}
		t.Run(name, func(t *testing.T) {
			port := hostileServer(t, tc.tls, tc.kind)
			action := v1.HTTPGetAction{Path: "/", Port: intstr.FromInt(port)}
			if tc.tls {
				action.Scheme = v1.URISchemeHTTPS
			}
			h := newHTTPHandler(action, &v1.Container{Name: "c"}, wait)
			defer h.close()
			var read atomic.Int64
			h.dial = testutil.CountingDial(&read, h.dial)

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			got, out, err := h.probe(t.Context(), target{host: "127.0.0.1"}, wait)
			runtime.ReadMemStats(&after)

			if err != nil || got != outcomeFailure {
				t.Fatalf("probe = %v, %q, %v; want a failure", got, out, err)
			}
			want := "response headers exceeded " + strconv.Itoa(httpget.MaxResponseHeaderBytes) + " bytes"
			if !strings.Contains(out, want) {
				t.Errorf("output %q does not say %q", out, want)
			}
			if n := read.Load(); n > httpget.MaxResponseHeaderBytes+readSlack {
				t.Errorf("read %d bytes, want at most %d", n, httpget.MaxResponseHeaderBytes+readSlack)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			if alloc > allocBound {
				t.Errorf("allocated %d bytes, want at most %d", alloc, allocBound)
			}
			t.Logf("read %d bytes, allocated %d bytes", read.Load(), alloc)
		})
	}
}

// A body is kept to maxOutput, and what is read of it on the wire is
// bounded too, even when the server sends it in tiny chunks.
func TestHTTPProbeBoundsBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		for i := 0; i < 1<<20; i++ { // 1 MiB in one-byte chunks
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			f.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	h := newHTTPHandler(v1.HTTPGetAction{Path: "/", Port: intstr.FromInt(port)}, &v1.Container{Name: "c"}, wait)
	defer h.close()
	var read atomic.Int64
	h.dial = testutil.CountingDial(&read, h.dial)
	got, out, err := h.probe(t.Context(), target{host: "127.0.0.1"}, wait)
	if err != nil || got != outcomeSuccess {
		t.Fatalf("probe = %v, %v", got, err)
	}
	if len(out) == 0 || len(out) > maxOutput || strings.Trim(out, "x") != "" {
		t.Errorf("kept %d bytes of body, want 1..%d x's", len(out), maxOutput)
	}
	if n := read.Load(); n > httpget.MaxResponseHeaderBytes+maxBodyRead {
		t.Errorf("read %d bytes, want at most %d", n, httpget.MaxResponseHeaderBytes+maxBodyRead)
	}
}
