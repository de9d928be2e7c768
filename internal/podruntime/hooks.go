package podruntime

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
		return httpHook(ctx, h.HTTPGet, c, podIP)
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

// httpHook sends the hook's GET; any status below 400 is success, as the
// kubelet's hook runner has it.
func httpHook(ctx context.Context, g *v1.HTTPGetAction, c *v1.Container, podIP string) error {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = podIP
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	if !strings.HasPrefix(u.Path, "/") {
		u.Path = "/" + u.Path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("http hook: %w", err)
	}
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify hook targets
	}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("http hook GET %s: %w", u.String(), err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("http hook GET %s: %s", u.String(), resp.Status)
	}
	return nil
}

// resolvePort turns a number or a named container port into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q is not a number and no container port has that name", p.StrVal)
}
