//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/serve/server"
	"github.com/nodelet/nodelet/test/authregistry"
)

// registriesFilePod runs image (from a private registry) as a sleeping
// busybox, with no pull secret.
const registriesFilePod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`

// The managed containerd reaches private TLS registries with only what
// the registries file (--private-registry) says: with the registry's CA
// and credentials there, a pull without any credentials of its own (CRI
// PullImage without AuthConfig) and a static pod succeed, the registry
// seeing the file's user; with the credentials but not the CA, the pull
// fails on the certificate and the registry
// never saw a request (the credentials did not travel over an unverified
// connection; the event has the certificate error on containerd 1.6, the
// local mirror's 404 on 2.x, whose log has the certificate error). No credential reaches an event or nodelet's output.
func TestPrivateRegistryFile(t *testing.T) {
	busybox, err := shared.registryImage(registry.BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	start := func(password string) (*authregistry.Registry, string) {
		r, err := authregistry.Start(authregistry.Options{User: "alice", Password: password, TLS: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		ref, err := r.Push("team/app", "v1", busybox)
		if err != nil {
			t.Fatal(err)
		}
		return r, ref
	}
	good, goodRef := start("s3cret-with-ca")
	noCA, noCARef := start("s3cret-without-ca")
	noCAPushed := len(noCA.Requests())
	skip, skipRef := start("s3cret-skip-verify")

	dir := filepath.Join(shared.work, "privreg-files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, good.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "registries.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`configs:
  %q:
    auth:
      username: alice
      password: s3cret-with-ca
    tls:
      ca_file: %s
  %q:
    auth:
      username: alice
      password: s3cret-without-ca
  %q:
    auth:
      username: alice
      password: s3cret-skip-verify
    tls:
      insecure_skip_verify: true
`, good.Host, ca, noCA.Host, skip.Host)), 0o600); err != nil {
		t.Fatal(err)
	}

	m := startManaged(t, "privreg", "nlpreg0", "10.84.0.0/24", "--port", freePort(t), "--address", "127.0.0.1",
		"--private-registry", file)
	api := m.n.api(t)

	// CRI: a pull that carries no credentials gets the file's.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := m.rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: goodRef}, nil, nil); err != nil {
		t.Fatalf("pull %s with the file's CA and credentials: %v", goodRef, err)
	}
	if !sawUser(good, "alice") {
		t.Errorf("%s never saw the file's user: %+v", good.Host, good.Requests())
	}
	// insecure_skip_verify holds for its host only (noCA's pull fails
	// below).
	if _, err := m.rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: skipRef}, nil, nil); err != nil {
		t.Fatalf("pull %s with insecure_skip_verify: %v", skipRef, err)
	}

	// A static pod of that image runs; one from the registry whose CA the
	// file does not give waits on the certificate error.
	writeManifest(t, m.manifests, "good.yaml", fmt.Sprintf(registriesFilePod, "privreg-good", goodRef))
	writeManifest(t, m.manifests, "noca.yaml", fmt.Sprintf(registriesFilePod, "privreg-noca", noCARef))
	waitPod(t, api, "privreg-good-e2e", 2*time.Minute, "running", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	// containerd tries the local mirror first. 1.6 reports the
	// certificate error; 2.x reports the mirror's 404 instead (its
	// resolver ranks a 404 above a failed connection), and only its log
	// has the certificate error for that host.
	want := "x509: certificate signed by unknown authority"
	if shared.containerd.Config().Major >= 2 {
		want = noCARef + ": not found"
	}
	ev := waitEvent(t, api, 2*time.Minute, "failed pull of "+noCARef, func(e server.EventItem) bool {
		return e.Pod == "privreg-noca-e2e" && e.Type == v1.EventTypeWarning && strings.Contains(e.Message, "Failed to pull image \""+noCARef) &&
			strings.Contains(e.Message, want)
	})
	t.Logf("event: %s %s", ev.Reason, ev.Message)
	waitPod(t, api, "privreg-noca-e2e", time.Minute, "waiting on the pull", func(p *v1.Pod) error {
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				return nil
			}
		}
		return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
	})
	if !logHas(t, m.cfg.LogPath(), noCA.Host, "x509: certificate signed by unknown authority") {
		t.Errorf("containerd's log has no certificate error for %s", noCA.Host)
	}
	if logHas(t, m.cfg.LogPath(), good.Host, "x509") {
		t.Errorf("containerd's log has a certificate error for %s, whose CA the file gives", good.Host)
	}
	if reqs := noCA.Requests()[noCAPushed:]; len(reqs) != 0 {
		t.Errorf("%s answered containerd without a verified certificate: %+v", noCA.Host, reqs)
	}

	evs, err := api.events()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(e.Message, "s3cret") {
			t.Errorf("event shows a credential: %s", e.Message)
		}
	}
	if strings.Contains(m.n.stderr.String(), "s3cret") {
		t.Errorf("nodelet's output shows a credential")
	}
	if logHas(t, m.cfg.LogPath(), "s3cret") {
		t.Errorf("containerd's log shows a credential")
	}
}

// logHas reports whether a line of the file at path has every one of
// words.
func logHas(t *testing.T, path string, words ...string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// sawUser reports whether r answered a request of user with 200.
func sawUser(r *authregistry.Registry, user string) bool {
	for _, q := range r.Requests() {
		if q.User == user && q.Status == http.StatusOK && q.Method == http.MethodGet {
			return true
		}
	}
	return false
}

// A registries file with a mistake stops nodelet at start, before it
// runs anything, with the file and the line in its one-line error.
func TestPrivateRegistryFileMalformed(t *testing.T) {
	dir := filepath.Join(shared.work, "privreg-bad")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "registries.yaml")
	if err := os.WriteFile(file, []byte("mirrors:\n  docker.io:\n    endpoints:\n      - https://mirror.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shared.nodelet, "--root-dir", filepath.Join(dir, "root"), "--hostname-override", "e2e",
		"--private-registry", file)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); !ok || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("nodelet with a malformed registries file: %v, want exit 1\n%s", err, out)
	}
	want := file + ": yaml: unmarshal errors: line 3: field endpoints not found"
	if !strings.Contains(string(out), want) {
		t.Errorf("output does not name the file and line (%q):\n%s", want, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "root", "containerd")); err == nil {
		t.Errorf("nodelet set up its runtime before refusing the file")
	}
}
