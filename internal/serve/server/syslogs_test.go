package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// systemLogDir makes a log directory with a file, a subdirectory, a FIFO,
// a symlink inside it and symlinks out of it to a secret.
func systemLogDir(t *testing.T) string {
	t.Helper()
	outside := t.TempDir()
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "secret"), "the secret")
	dir := filepath.Join(t.TempDir(), "log")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, "syslog"), "hello from syslog\n")
	write(filepath.Join(dir, "sub", "app.log"), "app line\n")
	write(filepath.Join(dir, "page.log"), "<html><script>alert(1)</script></html>")
	for link, target := range map[string]string{
		"inside":   "syslog",
		"escape":   filepath.Join(outside, "secret"),
		"up":       "../../" + filepath.Base(outside) + "/secret",
		"escdir":   outside,
		"sub/back": "../../",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{"escape", "up", "escdir/secret"} { // they do lead out
		if b, err := os.ReadFile(filepath.Join(dir, link)); err != nil || string(b) != "the secret" {
			t.Fatalf("%s: %q %v", link, b, err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSystemLogs(t *testing.T) {
	deps, _, _ := testDeps()
	deps.SystemLogs = systemLogDir(t)
	s := open(t, deps)
	for _, c := range []struct {
		target string
		code   int
		want   string // in the body
	}{
		{"/logs/", 200, `<a href="syslog">syslog</a>`},
		{"/logs/", 200, `<a href="sub/">sub/</a>`},
		{"/logs/syslog", 200, "hello from syslog\n"},
		{"/logs/inside", 200, "hello from syslog\n"}, // a symlink within the directory
		{"/logs/sub/app.log", 200, "app line\n"},
		{"/logs/sub/", 200, `<a href="app.log">app.log</a>`},
		{"/logs/sub", 301, ""},
		{"/logs/nope.log", 404, "404 page not found"},
		{"/logs/sub/nope/x", 404, ""},
		{"/logs/syslog/x", 404, ""},
		{"/logs/syslog?query=kubelet&tailLines=1", 200, "hello from syslog\n"}, // NodeLogQuery is not implemented
		// Out of the directory: never.
		{"/logs/escape", 404, ""},
		{"/logs/up", 404, ""},
		{"/logs/escdir/secret", 404, ""},
		{"/logs/escdir/", 404, ""},
		{"/logs/sub/back/syslog", 404, ""},
		{"/logs/../secret", 400, ""},
		{"/logs/%2e%2e/secret", 400, ""},
		{"/logs/sub%2f..%2fsyslog", 400, ""},
		// Not a regular file: refused at once, not waited on.
		{"/logs/fifo", 403, ""},
	} {
		done := make(chan struct{})
		var code int
		var body string
		go func() {
			defer close(done)
			code, body = do(t, s, "GET", c.target, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("GET %s hangs", c.target)
		}
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.target, code, body, c.code, c.want)
		}
		if strings.Contains(body, "the secret") {
			t.Errorf("GET %s: served the file outside the log directory", c.target)
		}
	}
}

func TestSystemLogsHeaders(t *testing.T) {
	deps, _, _ := testDeps()
	deps.SystemLogs = systemLogDir(t)
	s := open(t, deps)
	for target, want := range map[string]string{
		"/logs/page.log": "text/plain; charset=utf-8", // never run as a page
		"/logs/":         "text/html; charset=utf-8",
	} {
		rec := serve1(s, "GET", target, nil)
		if got := rec.Header().Get("Content-Type"); got != want {
			t.Errorf("GET %s: Content-Type %q, want %q", target, got, want)
		}
		if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", target, got)
		}
	}
	rec := serve1(s, "GET", "/logs/syslog", http.Header{"Range": {"bytes=6-9"}})
	if rec.Code != http.StatusPartialContent || rec.Body.String() != "from" {
		t.Errorf("range: %d %q", rec.Code, rec.Body.String())
	}
	if code, _ := do(t, s, "POST", "/logs/syslog", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
}

func TestSystemLogsDisabled(t *testing.T) {
	deps, _, _ := testDeps()
	s := open(t, deps)
	if code, body := do(t, s, "GET", "/logs/syslog", nil); code != http.StatusMethodNotAllowed || !strings.Contains(body, "logs endpoint is disabled.") {
		t.Errorf("disabled: %d %q", code, body)
	}
}

// TestSystemLogsNeedNodesLog: /logs/ is nodes/log, and a refusal names it.
func TestSystemLogsNeedNodesLog(t *testing.T) {
	deps, _, _ := testDeps()
	deps.SystemLogs = systemLogDir(t)
	s := newTestServer(t, Config{Tokens: groupTokens, AuthorizationMode: AuthorizationNodeletGroups, NodeName: "node-a"}, deps)
	code, body := do(t, s, "GET", "/logs/syslog", bearer("reader-token"))
	if code != http.StatusForbidden || !strings.Contains(body, "user=alice, verb=get, resource=nodes, subresource=log") {
		t.Errorf("reader: %d %q", code, body)
	}
	if code, body := do(t, s, "GET", "/logs/syslog", bearer("admin-token")); code != http.StatusOK || body != "hello from syslog\n" {
		t.Errorf("admin: %d %q", code, body)
	}
}

func serve1(h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	h.ServeHTTP(rec, req)
	return rec
}
