package credprovider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

const okResponse = `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"127.0.0.1:5000":{"username":"u","password":"s3cret"}}}`

// script puts a shell-script plugin into a new bin directory and returns
// a runner over it.
func script(t *testing.T, name, body string, timeout time.Duration) (execRunner, *Provider) {
	t.Helper()
	bin := t.TempDir()
	writeFile(t, bin, name, "#!/bin/sh\n"+body+"\n", 0o755)
	return execRunner{binDir: bin, timeout: timeout}, &Provider{Name: name, APIVersion: protocolV1}
}

// The plugin gets the request on stdin, its args and only its configured
// environment; its response is decoded.
func TestExecProtocol(t *testing.T) {
	t.Setenv("NODELET_SECRET_ENV", "leaked")
	out := filepath.Join(t.TempDir(), "out")
	r, p := script(t, "fake", `cat > "$OUT.req"; echo "$@" > "$OUT.args"; env > "$OUT.env"; echo '`+okResponse+`'`, time.Minute)
	p.Args = []string{"--one", "two"}
	p.Env = []string{"OUT=" + out}
	resp, err := r.run(context.Background(), p, request{Image: "127.0.0.1:5000/app", Token: "tok", Annotations: map[string]string{"a.io/b": "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.cacheKeyType != credentialproviderv1.RegistryPluginCacheKeyType || *resp.cacheDuration != 5*time.Minute || resp.auth["127.0.0.1:5000"].Password != "s3cret" {
		t.Errorf("response = %+v", resp)
	}
	read := func(suffix string) string {
		data, err := os.ReadFile(out + suffix)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got, want := read(".req"), `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"127.0.0.1:5000/app","serviceAccountToken":"tok","serviceAccountAnnotations":{"a.io/b":"c"}}`; got != want {
		t.Errorf("request:\n got %s\nwant %s", got, want)
	}
	if got := read(".args"); got != "--one two\n" {
		t.Errorf("args = %q", got)
	}
	if env := read(".env"); strings.Contains(env, "NODELET_SECRET_ENV") || !strings.Contains(env, "OUT="+out) {
		t.Errorf("environment:\n%s", env)
	}
}

// What the plugin does wrong is an error that names it and never quotes
// its output.
func TestExecFailures(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"exit status", `echo "it broke" >&2; exit 3`, "plugin fake: exit status 3"},
		{"not JSON", `echo 'password=s3cret'`, "its response is not a JSON object"},
		{"wrong apiVersion", `echo '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}'`, `apiVersion "credentialprovider.kubelet.k8s.io/v1beta1"`},
		{"wrong kind", `echo '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","cacheKeyType":"Image"}'`, `kind "CredentialProviderRequest"`},
		{"unknown field", `echo '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"r":{"username":"u","password":"s3cret","extra":"s3cret"}}}'`,
			"does not decode as a CredentialProviderResponse"},
		{"bad cacheKeyType", `echo '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Pod"}'`, `cacheKeyType "Pod"`},
		{"empty", `true`, "not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, p := script(t, "fake", c.body, time.Minute)
			_, err := r.run(context.Background(), p, request{Image: "x"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes the output: %v", err)
			}
		})
	}
}

// stderr is kept (bounded) for the log, apart from the error's message.
func TestExecStderr(t *testing.T) {
	r, p := script(t, "fake", `echo "first line" >&2; head -c 100000 /dev/zero | tr '\0' x >&2; exit 1`, time.Minute)
	_, err := r.run(context.Background(), p, request{Image: "x"})
	s := stderrOf(err)
	if !strings.HasPrefix(s, "first line\nxxx") || len(s) != maxStderr || strings.Contains(err.Error(), "first line") {
		t.Errorf("stderr %d bytes %q..., error %v", len(s), s[:min(len(s), 20)], err)
	}
}

// A plugin writing more than the bound is refused, not parsed in part.
func TestExecTooLarge(t *testing.T) {
	r, p := script(t, "fake", `printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","x":"'; head -c 2000000 /dev/zero | tr '\0' x; echo '"}'`, time.Minute)
	_, err := r.run(context.Background(), p, request{Image: "x"})
	if !errors.Is(err, bounded.ErrTooLarge) {
		t.Errorf("error %v, want ErrTooLarge", err)
	}
}

// A plugin that hangs, with a child holding its stdout, is killed as a
// group at the timeout.
func TestExecTimeout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	r, p := script(t, "fake", `sleep 1000 & echo $! > "$PIDFILE"; wait`, 300*time.Millisecond)
	p.Env = []string{"PIDFILE=" + pidFile}
	_, err := r.run(context.Background(), p, request{Image: "x"})
	if err == nil || !strings.Contains(err.Error(), "ran out of time (300ms) and was killed") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	// The child was killed with the group: it goes (or is a zombie of
	// init) as soon as the kernel has delivered the SIGKILL, which may be
	// a moment after the run returned; a child left out of the kill
	// sleeps on for 1000 s.
	proc := "/proc/" + strings.TrimSpace(string(data)) + "/stat"
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile(proc)
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's child still runs 10 s after the kill: %s", stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A plugin replaced by an unsafe file after start is refused at its run.
func TestExecChecksTheBinaryEachRun(t *testing.T) {
	r, p := script(t, "fake", `echo '`+okResponse+`'`, time.Minute)
	if _, err := r.run(context.Background(), p, request{Image: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(r.binDir, "fake"), 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(context.Background(), p, request{Image: "x"}); err == nil || !strings.Contains(err.Error(), "world-writable") {
		t.Errorf("error %v", err)
	}
}

// BenchmarkExecShellPlugin is the cost of one uncached run of a shell
// plugin: fork, exec, the request, the response decoded.
func BenchmarkExecShellPlugin(b *testing.B) {
	bin := b.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "fake"), []byte("#!/bin/sh\ncat >/dev/null\necho '"+okResponse+"'\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	r, p := execRunner{binDir: bin, timeout: time.Minute}, &Provider{Name: "fake", APIVersion: protocolV1}
	for b.Loop() {
		if _, err := r.run(context.Background(), p, request{Image: "127.0.0.1:5000/app"}); err != nil {
			b.Fatal(err)
		}
	}
}
