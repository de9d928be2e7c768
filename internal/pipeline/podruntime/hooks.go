package podruntime

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/httpget"
)

// hookTimeout bounds a postStart hook, which has no deadline of its own.
const hookTimeout = 2 * time.Minute

// runHook runs a lifecycle handler (exec, httpGet or sleep) for the
// container id of pod c, with the pod IP for httpGet. It returns a message
// for the event when the hook fails.
func (m *Manager) runHook(ctx context.Context, h *v1.LifecycleHandler, id string, c *v1.Container, podIP string) error {
	switch {
	case h.Exec != nil:
		timeout := hookTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(dl), time.Second)
		}
		stdout, stderr, code, err := m.rt.ExecSync(ctx, id, h.Exec.Command, timeout)
		if err != nil {
			return fmt.Errorf("exec %q: %w", h.Exec.Command, err)
		}
		if code != 0 {
			return fmt.Errorf("command %q exited with %d: %s", h.Exec.Command, code, strings.TrimSpace(string(stdout)+string(stderr)))
		}
		return nil
	case h.HTTPGet != nil:
		return httpHook(ctx, h.HTTPGet, c, podIP, m.dialHook)
	case h.Sleep != nil:
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.clock.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return nil
		}
	case h.TCPSocket != nil:
		return fmt.Errorf("tcpSocket is not supported as a lifecycle hook")
	}
	return fmt.Errorf("lifecycle handler has no action")
}

// dialFunc opens a connection, as net.Dialer.DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// hookUserAgent is the kubelet's User-Agent for HTTP hooks.
const hookUserAgent = "kube-lifecycle/1.37"

// httpHook sends the hook's GET; any status below 400 is success, as the
// kubelet's hook runner has it.
func httpHook(ctx context.Context, g *v1.HTTPGetAction, c *v1.Container, podIP string, dial dialFunc) error {
	req, err := httpget.NewRequest(ctx, *g, c, podIP, hookUserAgent)
	if err != nil {
		return fmt.Errorf("http hook: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext:       dial,
		DisableKeepAlives: true,
		// The body is never read; the headers are bounded.
		MaxResponseHeaderBytes: httpget.MaxResponseHeaderBytes,
		TLSClientConfig:        &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify hook targets
	}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("http hook GET %s: %w", req.URL.Redacted(), err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("http hook GET %s: %s", req.URL.Redacted(), resp.Status)
	}
	return nil
}
