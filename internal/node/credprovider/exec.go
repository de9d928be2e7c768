package credprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	kjson "sigs.k8s.io/json"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// Bounds of what a plugin may write.
const (
	maxStdout = 1 << 20
	maxStderr = 4 << 10
)

// DefaultTimeout is how long a plugin may run, as the kubelet's catch-all.
const DefaultTimeout = time.Minute

// request is what a plugin is asked.
type request struct {
	Image       string
	Token       string
	Annotations map[string]string
}

// response is a plugin's answer, checked.
type response struct {
	cacheKeyType credentialproviderv1.PluginCacheKeyType
	// cacheDuration is nil when the plugin gave none.
	cacheDuration *time.Duration
	auth          map[string]credentialproviderv1.AuthConfig
}

// runner runs a plugin once.
type runner interface {
	run(ctx context.Context, p *Provider, req request) (*response, error)
}

// execRunner runs plugins from binDir as child processes.
type execRunner struct {
	binDir  string
	timeout time.Duration
}

// errStderr carries what a failed plugin wrote to stderr, for the log line
// only (never an event: a plugin may echo what it was given).
type errStderr struct {
	err    error
	stderr string
}

func (e *errStderr) Error() string { return e.err.Error() }
func (e *errStderr) Unwrap() error { return e.err }

// stderrOf returns the stderr a plugin error carries, if any.
func stderrOf(err error) string {
	if e, ok := errors.AsType[*errStderr](err); ok {
		return e.stderr
	}
	return ""
}

// run runs p's binary with its args and only its configured environment,
// in its own process group, writes the request to its stdin and decodes
// its stdout. Past the timeout the whole group is killed.
func (r execRunner) run(ctx context.Context, p *Provider, req request) (*response, error) {
	bin, err := pluginPath(r.binDir, p.Name)
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(credentialproviderv1.CredentialProviderRequest{
		TypeMeta:                  metav1.TypeMeta{APIVersion: p.APIVersion, Kind: "CredentialProviderRequest"},
		Image:                     req.Image,
		ServiceAccountToken:       req.Token,
		ServiceAccountAnnotations: req.Annotations,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, p.Args...)
	cmd.Env = append([]string{}, p.Env...) // never nil: nil would pass nodelet's own
	cmd.Stdin = bytes.NewReader(in)
	stdout := &capped{limit: maxStdout, fail: true}
	stderr := &capped{limit: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // a child keeping the pipes open is not waited for
	err = cmd.Run()
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("plugin %s ran out of time (%s) and was killed: %w", p.Name, r.timeout, ctx.Err())
	case stdout.over:
		err = fmt.Errorf("plugin %s wrote more than %d bytes to stdout: %w", p.Name, maxStdout, bounded.ErrTooLarge)
	case err != nil:
		err = fmt.Errorf("plugin %s: %w", p.Name, err)
	}
	if err != nil {
		return nil, &errStderr{err: err, stderr: stderr.String()}
	}
	resp, err := decodeResponse(stdout.Bytes(), p.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", p.Name, err)
	}
	return resp, nil
}

// decodeResponse checks a plugin's stdout: a CredentialProviderResponse
// of the version it was asked in, strictly decoded, with a known
// cacheKeyType. Its errors never quote the output (it holds credentials).
func decodeResponse(data []byte, apiVersion string) (*response, error) {
	var meta struct{ Kind, APIVersion string }
	if err := json.Unmarshal(data, &meta); err != nil {
		return nil, errors.New("its response is not a JSON object")
	}
	if meta.APIVersion != apiVersion {
		return nil, fmt.Errorf("its response has apiVersion %q, want %q", meta.APIVersion, apiVersion)
	}
	if meta.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("its response has kind %q, want CredentialProviderResponse", meta.Kind)
	}
	var r credentialproviderv1.CredentialProviderResponse
	strict, err := kjson.UnmarshalStrict(data, &r, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil || len(strict) > 0 {
		// Not wrapped: the decoder's message may quote a credential.
		return nil, errors.New("its response does not decode as a CredentialProviderResponse")
	}
	switch r.CacheKeyType {
	case credentialproviderv1.ImagePluginCacheKeyType, credentialproviderv1.RegistryPluginCacheKeyType, credentialproviderv1.GlobalPluginCacheKeyType:
	default:
		return nil, fmt.Errorf("its response has cacheKeyType %q, want Image, Registry or Global", r.CacheKeyType)
	}
	out := &response{cacheKeyType: r.CacheKeyType, auth: r.Auth}
	if r.CacheDuration != nil {
		d := r.CacheDuration.Duration
		out.cacheDuration = &d
	}
	return out, nil
}

// capped keeps the first limit bytes written to it; past them it fails the
// write (fail: the process's output is refused) or drops the rest. The
// buffer is not embedded: its ReadFrom would bypass the limit in io.Copy.
type capped struct {
	buf   bytes.Buffer
	limit int
	fail  bool
	over  bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.limit - c.buf.Len()
	if len(p) <= room {
		return c.buf.Write(p)
	}
	c.over = true
	c.buf.Write(p[:max(room, 0)])
	if c.fail {
		return 0, bounded.ErrTooLarge
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte  { return c.buf.Bytes() }
func (c *capped) String() string { return c.buf.String() }

// checkBinDir refuses a bin directory that is missing, not a directory,
// or writable by anyone.
func checkBinDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--image-credential-provider-bin-dir: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("--image-credential-provider-bin-dir %s is not a directory", dir)
	}
	if info.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("--image-credential-provider-bin-dir %s is world-writable (%s): anyone could replace its plugins", dir, info.Mode().Perm())
	}
	return nil
}

// pluginPath returns the file a provider runs: name in binDir, through
// symlinks only to a file below binDir; a regular executable file that is
// not world-writable.
func pluginPath(binDir, name string) (string, error) {
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("credential provider %s: "+format, append([]any{name}, args...)...)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fail("not a file name")
	}
	dir, err := filepath.EvalSymlinks(binDir)
	if err != nil {
		return fail("%w", err)
	}
	bin, err := filepath.EvalSymlinks(filepath.Join(dir, name))
	if err != nil {
		return fail("plugin binary: %w", err)
	}
	if !strings.HasPrefix(bin, dir+string(filepath.Separator)) {
		return fail("plugin binary %s is outside --image-credential-provider-bin-dir %s", bin, binDir)
	}
	info, err := os.Stat(bin)
	if err != nil {
		return fail("plugin binary: %w", err)
	}
	switch mode := info.Mode(); {
	case !mode.IsRegular():
		return fail("plugin binary %s is not a regular file", bin)
	case mode.Perm()&0o111 == 0:
		return fail("plugin binary %s is not executable", bin)
	case mode.Perm()&0o002 != 0:
		return fail("plugin binary %s is world-writable (%s)", bin, mode.Perm())
	}
	return bin, nil
}
