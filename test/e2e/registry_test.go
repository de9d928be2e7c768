//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// registryClientEnv, set to a registry address, makes the test binary act
// as registryClient instead of running tests.
const registryClientEnv = "NODELET_E2E_REGISTRY_CLIENT"

// nobody is the unprivileged user registryClient runs as.
const nobody = 65534

// managedRegistryAddr is the registry address a managed nodelet gave its
// containerd, read from the generated hosts.toml.
func managedRegistryAddr(t *testing.T, cfg containerd.Config) string {
	t.Helper()
	hosts, err := os.ReadFile(filepath.Join(cfg.Dir, "certs.d", "docker.io", "hosts.toml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\[host\."http://(127\.0\.0\.1:[0-9]+)"\]`).FindSubmatch(hosts)
	if m == nil {
		t.Fatalf("no local mirror in hosts.toml:\n%s", hosts)
	}
	return string(m[1])
}

// checkRegistryReadOnly runs registryClient as uid 65534 against the
// registry at addr: it may pull, but every push, delete and catalog
// request fails, and the store under root is unchanged.
func checkRegistryReadOnly(t *testing.T, addr, root string) {
	t.Helper()
	before := storeEntries(t, root)
	bin := publicCopyOfTestBinary(t)
	cmd := exec.Command(bin)
	cmd.Env = []string{registryClientEnv + "=" + addr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("registry client as uid %d: %v\n%s", nobody, err, out)
	}
	t.Logf("registry client as uid %d:\n%s", nobody, out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 3 || lines[0] != fmt.Sprintf("uid %d", nobody) || !strings.HasPrefix(lines[1], "GET /v2/library/busybox/manifests/latest 200") {
		t.Fatalf("registry client did not pull as uid %d:\n%s", nobody, out)
	}
	for _, line := range lines[2:] {
		if strings.HasPrefix(line, "push") {
			if !strings.HasPrefix(line, "push refused") {
				t.Errorf("unprivileged push: %s", line)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[2] < "400" || f[2] >= "500" {
			t.Errorf("unprivileged request not refused with 4xx: %s", line)
		}
	}
	if !strings.Contains(string(out), "\npush refused") {
		t.Errorf("registry client's push was not refused:\n%s", out)
	}
	if after := storeEntries(t, root); !slices.Equal(before, after) {
		t.Errorf("the image store changed:\nbefore %v\nafter  %v", before, after)
	}
}

func storeEntries(t *testing.T, root string) []registry.Entry {
	t.Helper()
	s, err := registry.OpenStore(registry.StoreDir(root), nil)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// publicCopyOfTestBinary copies the test binary where uid 65534 can run
// it (go test keeps it in a private directory).
func publicCopyOfTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nle2e-client-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// registryClient is a local user trying the registry at addr. It prints
// its uid, then "METHOD PATH STATUS" for each request, then how a push
// with go-containerregistry ended. It pulls busybox:latest first, as
// containerd would, so refusals are not a matter of reachability.
func registryClient(addr string) int {
	fmt.Printf("uid %d\n", os.Getuid())
	client := &http.Client{Timeout: time.Minute}
	base := "http://" + addr + "/v2/"
	send := func(method, path string, body []byte) []byte {
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			fmt.Println(method, "/v2/"+path, "error:", err)
			return nil
		}
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(method, "/v2/"+path, "error:", err)
			return nil
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		fmt.Println(method, "/v2/"+path, resp.StatusCode)
		return data
	}
	manifest := send(http.MethodGet, "library/busybox/manifests/latest", nil)
	var m struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil || len(m.Layers) == 0 {
		fmt.Println("GET manifest unreadable:", err)
		return 1
	}
	layer := m.Layers[0].Digest
	send(http.MethodPut, "library/busybox/manifests/latest", manifest)
	send(http.MethodPut, "library/busybox/manifests/evil", manifest)
	send(http.MethodPost, "library/busybox/blobs/uploads/", nil)
	send(http.MethodPatch, "library/busybox/blobs/uploads/1", []byte("evil"))
	send(http.MethodPut, "library/busybox/blobs/uploads/1?digest="+layer, []byte("evil"))
	send(http.MethodDelete, "library/busybox/blobs/"+layer, nil)
	send(http.MethodDelete, "library/busybox/manifests/latest", nil)
	send(http.MethodGet, "_catalog", nil)
	send(http.MethodGet, "_catalog?ns=docker.io", nil)
	img, err := random.Image(1024, 1)
	if err != nil {
		fmt.Println("push error:", err)
		return 1
	}
	target, err := name.ParseReference(addr+"/library/busybox:latest", name.Insecure)
	if err != nil {
		fmt.Println("push error:", err)
		return 1
	}
	if err := remote.Write(target, img); err != nil {
		fmt.Println("push refused:", strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		fmt.Println("push succeeded")
	}
	return 0
}

// checkImportWhileRunning imports a new image with `nodelet images import`
// (as root) into the store of the running managed nodelet at root and
// runs a pod with it, without restarting nodelet.
func checkImportWhileRunning(t *testing.T, root, manifests string, rt *cri.Client) {
	t.Helper()
	base, err := shared.registryImage(registry.BusyboxRef)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Config(base, withCmd(base, []string{"sh", "-c", "echo imported; trap 'exit 0' TERM; while true; do sleep 1; done"}))
	if err != nil {
		t.Fatal(err)
	}
	const ref = "example.com/e2e/managed-import:v1"
	tag, _ := name.NewTag(ref)
	archive := filepath.Join(shared.work, "managed-import.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(shared.nodelet, "images", "import", archive, "--root-dir", root).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "imported "+ref) {
		t.Fatalf("import: %v\n%s", err, out)
	}
	writeManifest(t, manifests, "imported.yaml", `apiVersion: v1
kind: Pod
metadata: {name: imported}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: `+ref+`
`)
	ctx := context.Background()
	var c *runtimeapi.Container
	eventually(t, 90*time.Second, "pod of the imported image running", func() (err error) {
		c, err = runningContainer(ctx, rt, "imported-e2e", "main")
		return err
	})
	// A docker save archive keeps config and layers, not the manifest:
	// compare with what the store holds.
	var digest v1.Hash
	for _, e := range storeEntries(t, root) {
		if e.Ref == ref {
			digest = e.Digest
		}
	}
	st, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: c.GetImageRef()})
	if err != nil || !containsDigest(st.GetImage().GetRepoDigests(), digest.String()) {
		t.Errorf("image status %v (%v), want repo digest %s", st.GetImage(), err, digest)
	}
}
