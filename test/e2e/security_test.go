//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// maxRSSMiB bounds nodelet's resident memory while it is attacked.
const maxRSSMiB = 150

// The security group: every attack of the hardening issue, tried against
// one running nodelet (managed mode, so it runs its own registry too). Each
// attack fails with a clear error; all the while nodelet's RSS stays under
// maxRSSMiB, the pods that were running keep their containers, and at the
// end a new pod still runs.
func TestSecurity(t *testing.T) {
	podLogs := filepath.Join(shared.work, "pod-logs-sec")
	tokens := filepath.Join(shared.work, "sec-tokens.csv")
	if err := os.WriteFile(tokens, []byte("readertoken,reader,1001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Secrets a user can give nodelet: in the manifest URL, its headers and
	// the environment. None may come back through the API or the log.
	// And an image pull secret's password (a manifest directory Secret).
	secrets := []string{"urlsecret", "querysecret", "hdrsecret", "envsecret", pullPassword}
	t.Setenv("NODELET_E2E_SECRET", "envsecret")
	urlSrv, fetched := podListServer(t)
	manifestURL := "http://nodeuser:urlsecret@" + urlSrv + "/pods?token=querysecret"
	bomb := headerBombServer(t)
	port := freePort(t)
	api := "https://127.0.0.1:" + port
	m := startManaged(t, "sec", "nle2e3", "10.46.0.0/24", "--file-check-frequency", "1s", "--healthz-port", "0",
		"--port", port, "--address", "127.0.0.1", "--node-ip", "127.0.0.1",
		"--anonymous-auth", "--token-auth-file", tokens,
		"--manifest-url", manifestURL, "--manifest-url-header", "X-Key:hdrsecret", "--http-check-frequency", "2s")
	n, root, manifests, cfg, rt := m.n, m.root, m.manifests, m.cfg, m.rt
	for i := range 2 {
		writeManifest(t, manifests, fmt.Sprintf("victim%d.yaml", i), fmt.Sprintf(sleeperPod, fmt.Sprintf("victim%d", i)))
	}
	rss := watchRSS(n.cmd.Process.Pid)
	ctx := context.Background()
	victims := map[string]string{}
	eventually(t, 120*time.Second, "victims running", func() error {
		for i := range 2 {
			pod := fmt.Sprintf("victim%d-e2e", i)
			c, err := runningContainer(ctx, rt, pod, "main")
			if err != nil {
				return err
			}
			victims[pod] = c.Id
		}
		return nil
	})
	admin := adminClient(t, root)
	node := n.api(t)
	manifest := func(name string) string { return filepath.Join(manifests, name) }

	t.Run("registry is read-only to an unprivileged client", func(t *testing.T) {
		checkRegistryReadOnly(t, managedRegistryAddr(t, cfg), root)
	})

	t.Run("a FIFO in the manifest directory is skipped without blocking", func(t *testing.T) {
		if err := syscall.Mkfifo(filepath.Join(manifests, "pipe.yaml"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, node, 30*time.Second, "pipe.yaml skipped", manifestEvent(manifest("pipe.yaml"), `named pipe is not a regular file`))
		writeManifest(t, manifests, "afterpipe.yaml", fmt.Sprintf(sleeperPod, "afterpipe"))
		eventually(t, 60*time.Second, "a pod written after the FIFO runs", func() error {
			_, err := runningContainer(ctx, rt, "afterpipe-e2e", "main")
			return err
		})
	})

	t.Run("a giant manifest is refused", func(t *testing.T) {
		giant := "apiVersion: v1\nkind: Pod\nmetadata: {name: giant}\n" + strings.Repeat("# padding padding padding padding\n", 64<<10)
		writeManifest(t, manifests, "giant.yaml", giant)
		waitEvent(t, node, 30*time.Second, "giant.yaml refused", manifestEvent(manifest("giant.yaml"), `larger than the limit of 1572864 bytes`))
	})

	t.Run("invalid fields get the API server's verdict", func(t *testing.T) {
		writeManifest(t, manifests, "badport.yaml", `apiVersion: v1
kind: Pod
metadata: {name: badport}
spec:
  containers:
  - name: main
    image: busybox:1.35
    ports: [{containerPort: -5}]
`)
		waitEvent(t, node, 30*time.Second, "badport.yaml refused", manifestEvent(manifest("badport.yaml"),
			`spec\.containers\[0\]\.ports\[0\]\.containerPort: Invalid value: -5: must be between 1 and 65535, inclusive`))
	})

	t.Run("a ConfigMap key cannot replace ..data", func(t *testing.T) {
		writeManifest(t, manifests, "dotdata.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: dotdata}
data:
  "./..data": "x"
`)
		waitEvent(t, node, 30*time.Second, "dotdata.yaml refused", manifestEvent(manifest("dotdata.yaml"), `data\[\./\.\.data\]: Invalid value`))
	})

	t.Run("a header bomb fails the probe, bounded", func(t *testing.T) {
		writeManifest(t, manifests, "bomb.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: bomb}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sleep", "3600"]
    readinessProbe:
      httpGet: {port: %s}
      periodSeconds: 1
`, bomb))
		unhealthy := podEvent("bomb-e2e", v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: ")
		waitEvent(t, node, 60*time.Second, "bomb-e2e's probe fails, bounded", func(e server.EventItem) bool {
			return unhealthy(e) && strings.Contains(e.Message, "exceeded 65536 bytes")
		})
	})

	t.Run("container logs do not leave the pod logs directory", func(t *testing.T) {
		for _, path := range []string{"/containerLogs/default/victim0-e2e/..", "/containerLogs/default/..%2F..%2Fetc/main", "/containerLogs/..%2F..%2F..%2Fetc/shadow/x/main"} {
			code, body := request(t, admin, "GET", api+path)
			if code < 400 || code >= 500 || strings.Contains(body, "root:") {
				t.Errorf("GET %s: %d %q, want 4xx", path, code, body)
			}
		}
		logs, err := filepath.Glob(filepath.Join(podLogs, "default_victim1-e2e_*", "main", "0.log"))
		if err != nil || len(logs) != 1 {
			t.Fatalf("victim1's log: %v %v", logs, err)
		}
		if err := os.Remove(logs[0]); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/shadow", logs[0]); err != nil {
			t.Fatal(err)
		}
		code, body := request(t, admin, "GET", api+"/containerLogs/default/victim1-e2e/main")
		if code == http.StatusOK || strings.Contains(body, "root:") {
			t.Errorf("log replaced by a symlink to /etc/shadow: %d %q", code, body)
		}
	})

	t.Run("followed logs are capped", func(t *testing.T) {
		const maxFollows = 64
		var follows []io.Closer
		defer func() {
			for _, c := range follows {
				c.Close()
			}
		}()
		for i := range maxFollows {
			resp, err := admin.Get(api + "/containerLogs/default/victim0-e2e/main?follow=true")
			if err != nil {
				t.Fatal(err)
			}
			follows = append(follows, resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("follow %d: %d", i, resp.StatusCode)
			}
		}
		code, body := request(t, admin, "GET", api+"/containerLogs/default/victim0-e2e/main?follow=true")
		if code != http.StatusTooManyRequests {
			t.Errorf("follow %d: %d %q, want 429", maxFollows+1, code, body)
		}
	})

	t.Run("anonymous and read-only clients cannot exec", func(t *testing.T) {
		anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		reader := &http.Client{Transport: bearer{"readertoken", anonymous.Transport}}
		execURL := api + "/exec/default/victim0-e2e/main?command=id&output=1"
		for _, tc := range []struct {
			who         string
			client      *http.Client
			method, url string
			want        int
		}{
			{"anonymous", anonymous, "GET", api + "/pods", http.StatusForbidden},
			{"anonymous", anonymous, "POST", execURL, http.StatusForbidden},
			{"anonymous", anonymous, "GET", api + "/configz", http.StatusForbidden},
			{"reader", reader, "GET", api + "/pods", http.StatusOK},
			{"reader", reader, "POST", execURL, http.StatusForbidden},
			{"reader", reader, "GET", api + "/debug/pprof/cmdline", http.StatusForbidden},
			{"bad token", &http.Client{Transport: bearer{"readertokenX", anonymous.Transport}}, "GET", api + "/pods", http.StatusUnauthorized},
		} {
			if code, body := request(t, tc.client, tc.method, tc.url); code != tc.want {
				t.Errorf("%s %s %s: %d %q, want %d", tc.who, tc.method, tc.url, code, body, tc.want)
			}
		}
		if code, _ := request(t, admin, "POST", execURL); code == http.StatusForbidden || code == http.StatusUnauthorized {
			t.Errorf("admin exec: %d", code)
		}
	})

	t.Run("anonymous access with AlwaysAllow is refused at start", func(t *testing.T) {
		cmdCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cmdCtx, shared.nodelet, "--root-dir", filepath.Join(shared.work, "sec-anon"),
			"--hostname-override", "e2e", "--container-runtime-endpoint", "unix:///nonexistent.sock",
			"--anonymous-auth", "--authorization-mode", "AlwaysAllow").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "anonymous") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
			t.Errorf("nodelet --anonymous-auth --authorization-mode AlwaysAllow: %v, want one line refusing it:\n%s", err, out)
		}
	})

	t.Run("image pull secrets are used, a wrong one refused", func(t *testing.T) {
		r, refs := privateRegistry(t, "sec-right", "sec-wrong")
		writeManifest(t, manifests, "regcred.yaml", pullSecretManifest("regcred", r.Host, pullUser, pullPassword))
		// The wrong Secret holds the password for another user: it must
		// not show in the pull's error either.
		writeManifest(t, manifests, "wrongcred.yaml", pullSecretManifest("wrongcred", r.Host, "someone-else", pullPassword))
		writeManifest(t, manifests, "private.yaml", privatePod("private", refs["sec-right"], "regcred"))
		writeManifest(t, manifests, "refused.yaml", privatePod("refused", refs["sec-wrong"], "wrongcred"))
		eventually(t, 60*time.Second, "the private image's pod runs", func() error {
			_, err := runningContainer(ctx, rt, "private-e2e", "main")
			return err
		})
		waitEvent(t, node, 60*time.Second, "refused-e2e's pull refused", func(e server.EventItem) bool {
			return podEvent("refused-e2e", v1.EventTypeWarning, "Failed", `Failed to pull image "`+refs["sec-wrong"]+`"`)(e) && strings.Contains(e.Message, "401")
		})
	})

	t.Run("secrets are not served or logged", func(t *testing.T) {
		eventually(t, 30*time.Second, "the manifest URL fetched with its header", func() error {
			if !fetched() {
				return fmt.Errorf("not fetched")
			}
			return nil
		})
		for _, path := range []string{"/configz", "/debug/pprof/cmdline", "/pods", "/events"} {
			code, body := request(t, admin, "GET", api+path)
			if code != http.StatusOK {
				t.Errorf("GET %s: %d", path, code)
			}
			for _, s := range secrets {
				if strings.Contains(body, s) {
					t.Errorf("GET %s shows %q", path, s)
				}
			}
		}
		// The log is an output too: no secret may reach it.
		for _, s := range secrets {
			if strings.Contains(n.stderr.String(), s) {
				t.Errorf("nodelet's log shows %q", s)
			}
		}
	})

	// nodelet still works: the pods that ran keep their containers, and a
	// new pod runs.
	for pod, id := range victims {
		if c, err := runningContainer(ctx, rt, pod, "main"); err != nil || c.Id != id {
			t.Errorf("%s: %v (err %v), want its container %s untouched", pod, c, err, id)
		}
	}
	writeManifest(t, manifests, "final.yaml", fmt.Sprintf(sleeperPod, "final"))
	eventually(t, 60*time.Second, "a new pod runs after the attacks", func() error {
		_, err := runningContainer(ctx, rt, "final-e2e", "main")
		return err
	})
	if peak := rss(); peak >= maxRSSMiB {
		t.Errorf("nodelet's RSS peaked at %.0f MiB, want under %d MiB", peak, maxRSSMiB)
	} else {
		t.Logf("nodelet's RSS peaked at %.0f MiB", peak)
	}
}

// watchRSS samples pid's RSS every 100 ms until the process is gone and
// returns a function that reports the peak so far.
func watchRSS(pid int) func() float64 {
	var mu sync.Mutex
	var peak float64
	go func() {
		for {
			v := rssMiB(pid)
			if v == 0 {
				return
			}
			mu.Lock()
			peak = max(peak, v)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// request sends a request without a body and returns the status and up to
// 64 KiB of the body.
func request(t *testing.T, c *http.Client, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body)
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// podListServer serves an empty PodList on 127.0.0.1 and returns its
// host:port and whether it was asked with the header X-Key: hdrsecret.
func podListServer(t *testing.T) (string, func() bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var fetched atomic.Bool
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") == "hdrsecret" {
			fetched.Store(true)
		}
		io.WriteString(w, "apiVersion: v1\nkind: PodList\nitems: []\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), fetched.Load
}

// headerBombServer answers every request on 127.0.0.1 with a status line
// and then headers without end (up to 1 GiB), and returns its port.
func headerBombServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: testutil.HeaderBomb{Total: 1 << 30}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}
