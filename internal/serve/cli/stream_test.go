package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/exec"
)

func TestExecURL(t *testing.T) {
	c := newTestClient(t, Config{Server: "https://node:10250/base/"})
	u, err := c.execURL("default", "web-0", "app", []string{"sh", "-c", "echo a b"}, true, true, false, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "https://node:10250/base/exec/default/web-0/app?command=sh&command=-c&command=echo+a+b&stdin=true&stdout=true&tty=true"
	if u.String() != want {
		t.Errorf("exec URL\n got %s\nwant %s", u, want)
	}
	if got := c.streamURL("portForward", []string{"default", "web-0"}, nil).String(); got != "https://node:10250/base/portForward/default/web-0" {
		t.Errorf("portForward URL %s", got)
	}
	if _, err := c.execURL("default", "web-0", "app", nil, false, true, false, false); err == nil {
		t.Error("no command: no error")
	}
	if _, err := c.execURL("default", "web-0", "app", []string{"ls"}, false, false, false, true); err == nil {
		t.Error("no stream: no error")
	}
}

func TestSPDYRoundTripperKeepsTLSAndHTTP1(t *testing.T) {
	cfg := newTestServer(t, http.NotFoundHandler())
	c := newTestClient(t, cfg)
	tc := c.spdyTLSConfig()
	if tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || len(tc.NextProtos) != 1 || tc.NextProtos[0] != "http/1.1" {
		t.Errorf("SPDY TLS config: %+v", tc)
	}
}

// The upgrade request reaches /exec with the options, as POST, over the
// client certificate; a refusal is an error, not an exit code.
func TestExecRequestAndRefusal(t *testing.T) {
	var mu sync.Mutex
	var got []string
	cfg := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Upgrade"))
		mu.Unlock()
		http.Error(w, "Forbidden (user=nodelet-cli, verb=create, resource=nodes, subresource=proxy)", http.StatusForbidden)
	}))
	c := newTestClient(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := c.Exec(ctx, "default", "web-0", "app", []string{"ls"}, nil, &out, &out, false)
	var exit exec.CodeExitError
	if err == nil || errors.As(err, &exit) || !strings.Contains(err.Error(), "web-0") {
		t.Errorf("Exec: %v, want a refusal error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "POST /exec/default/web-0/app?command=ls&stderr=true&stdout=true SPDY/3.1" {
		t.Errorf("server got %q", got)
	}
}

func TestPortForwardRefusal(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	cfg := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		http.Error(w, "pod default/web-1: not found", http.StatusNotFound)
	}))
	c := newTestClient(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.PortForward(ctx, "default", "web-1", nil, nil, nil, nil); err == nil {
		t.Error("no ports: no error")
	}
	var out, errOut bytes.Buffer
	if err := c.PortForward(ctx, "default", "web-1", []string{"0:80"}, nil, &out, &errOut); err == nil {
		t.Error("PortForward to a refusing server: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "POST /portForward/default/web-1" {
		t.Errorf("server got %q", paths)
	}
}
