package prober

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/httpget"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/envvars"
)

// outcome is what one probe run found (the kubelet's probe.Result; an
// error takes the place of Unknown).
type outcome int

const (
	outcomeSuccess outcome = iota
	outcomeWarning         // success, with something worth an event
	outcomeFailure
)

// maxOutput bounds what is kept of a probe's output (exec output, HTTP
// body), as the kubelet does: 10 KiB.
const maxOutput = 10 << 10

// maxBodyRead bounds what a plain-HTTP probe reads of a body on the wire:
// maxOutput of content in chunks as small as one byte (6 bytes each on the
// wire) with room to spare. Past it the body is cut where it is: it is only
// output.
const maxBodyRead = 8 * maxOutput

// errHeadersTooLarge fails a probe whose response headers do not end within
// httpget.MaxResponseHeaderBytes; its text matches net/http's for HTTPS.
var errHeadersTooLarge = fmt.Errorf("response headers exceeded %d bytes", httpget.MaxResponseHeaderBytes)

// userAgent is sent by HTTP probes unless the probe sets one: applications
// recognise the kubelet's "kube-probe/<major>.<minor>".
const userAgent = "kube-probe/1.37"

// errNoPodIP is a probe error: no host to probe.
var errNoPodIP = errors.New("pod has no IP to probe")

// target is the instance a probe runs against.
type target struct {
	containerID string
	host        string // the pod IP
}

// handler runs one kind of probe action. An error means the probe could
// not be run at all (its result is thrown away); a failure is an outcome.
type handler interface {
	probe(ctx context.Context, t target, timeout time.Duration) (outcome, string, error)
	close()
}

// newHandler returns the handler of spec's action for container c.
func (m *Manager) newHandler(spec *v1.Probe, c *v1.Container) handler {
	ctr := *c
	switch {
	case spec.Exec != nil:
		return execHandler{exec: m.exec, cmd: expandCommand(spec.Exec.Command, c.Env)}
	case spec.HTTPGet != nil:
		return newHTTPHandler(*spec.HTTPGet, &ctr, seconds(spec.TimeoutSeconds, defaultTimeout))
	case spec.TCPSocket != nil:
		return tcpHandler{action: *spec.TCPSocket, container: &ctr}
	case spec.GRPC != nil:
		service := ""
		if spec.GRPC.Service != nil {
			service = *spec.GRPC.Service
		}
		return grpcHandler{check: m.grpc, port: int(spec.GRPC.Port), service: service}
	}
	return missingHandler{}
}

type missingHandler struct{}

func (missingHandler) probe(context.Context, target, time.Duration) (outcome, string, error) {
	return outcomeFailure, "", errors.New("probe has no handler (exec, httpGet, tcpSocket or grpc)")
}

func (missingHandler) close() {}

// execHandler runs a command in the container through the CRI.
type execHandler struct {
	exec ExecRunner
	cmd  []string
}

func (h execHandler) probe(ctx context.Context, t target, timeout time.Duration) (outcome, string, error) {
	if h.exec == nil {
		return outcomeFailure, "", errors.New("exec probes are not supported: no exec runner")
	}
	stdout, stderr, code, err := h.exec.ExecSync(ctx, t.containerID, h.cmd, timeout)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || cri.IsDeadlineExceeded(err) {
			// The kubelet counts a timed-out command as a failure.
			return outcomeFailure, fmt.Sprintf("command %q timed out", strings.Join(h.cmd, " ")), nil
		}
		return outcomeFailure, "", fmt.Errorf("exec in container %s: %w", t.containerID, err)
	}
	out := limit(append(bytes.Clone(stdout), stderr...))
	if code != 0 {
		return outcomeFailure, out, nil
	}
	return outcomeSuccess, out, nil
}

func (execHandler) close() {}

func limit(b []byte) string {
	if len(b) > maxOutput {
		b = b[:maxOutput]
	}
	return string(b)
}

// expandCommand expands $(VAR) references to the container's environment
// in cmd, as the kubelet's ExpandContainerCommandOnlyStatic: only the
// literal values of env count (a variable set from a source is empty),
// "$$" stands for "$", and an unknown or unterminated reference stays as
// written.
func expandCommand(cmd []string, env []v1.EnvVar) []string {
	if len(cmd) == 0 {
		return cmd
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = envvars.Expand(s, vars)
	}
	return out
}

// httpHandler runs an httpGet probe with a transport of its own that keeps
// no connection alive (as the kubelet) and lingers at most a second on
// close.
type httpHandler struct {
	action    v1.HTTPGetAction
	container *v1.Container
	transport *http.Transport
	client    *http.Client
	// dial opens every connection of the probe, plain or TLS (the
	// probeDialer; tests wrap it to count the bytes read).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newHTTPHandler(action v1.HTTPGetAction, c *v1.Container, timeout time.Duration) *httpHandler {
	h := &httpHandler{action: action, container: c, dial: probeDialer().DialContext}
	h.transport = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return h.dial(ctx, network, addr)
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // probes never verify, as the kubelet
		DisableKeepAlives: true,
		ForceAttemptHTTP2: true,
		// Status line and headers; HTTP/2 advertises it as
		// SETTINGS_MAX_HEADER_LIST_SIZE. The body is read through
		// io.LimitReader.
		MaxResponseHeaderBytes: httpget.MaxResponseHeaderBytes,
	}
	h.client = &http.Client{Transport: h.transport, Timeout: timeout, CheckRedirect: checkRedirect}
	return h
}

// checkRedirect follows redirects to the same host only, at most 10; a
// redirect elsewhere ends the probe with the redirect response itself (a
// success with a warning).
func checkRedirect(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

func (h *httpHandler) probe(ctx context.Context, t target, timeout time.Duration) (outcome, string, error) {
	req, err := h.request(ctx, t.host)
	if err != nil {
		return outcomeFailure, "", err
	}
	status, b, err := h.do(ctx, req, timeout)
	if errors.Is(err, errReadBody) {
		return outcomeFailure, "", err
	}
	if err != nil {
		return outcomeFailure, err.Error(), nil
	}
	switch {
	case status >= http.StatusOK && status < http.StatusMultipleChoices:
		return outcomeSuccess, string(b), nil
	case status >= http.StatusMultipleChoices && status < http.StatusBadRequest:
		return outcomeWarning, "Probe terminated redirects, Response body: " + string(b), nil
	}
	// The kubelet keeps the body out of the failure message (it ends up
	// in events).
	return outcomeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", status), nil
}

var errReadBody = errors.New("read response body")

// do sends req and returns the final status and body. Plain-HTTP requests
// (nearly every probe) go over one dialed connection written and read
// directly: net/http's Transport would start two goroutines and a dial
// goroutine per request for a connection it may not keep anyway, which
// was half of nodelet's CPU with 100 HTTP probes a second. Redirects are
// followed as checkRedirect says; anything else (HTTPS, a redirect to
// HTTPS) goes through the client.
func (h *httpHandler) do(ctx context.Context, req *http.Request, timeout time.Duration) (int, []byte, error) {
	for hops := 0; req.URL.Scheme == "http"; hops++ {
		status, header, body, err := h.roundTripPlain(ctx, req, timeout)
		if err != nil || status < http.StatusMultipleChoices || status >= http.StatusBadRequest || header.Get("Location") == "" {
			return status, body, err
		}
		next, err := req.URL.Parse(header.Get("Location"))
		if err != nil || next.Hostname() != req.URL.Hostname() {
			return status, body, nil // not followed: a warning, as checkRedirect's ErrUseLastResponse
		}
		if hops+1 >= 10 {
			return 0, nil, fmt.Errorf("get %q: stopped after 10 redirects", next.Redacted())
		}
		req = req.Clone(ctx)
		req.URL, req.Host = next, ""
		if host := req.Header.Get("Host"); host != "" {
			req.Host = host
		}
	}
	res, err := h.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxOutput))
	if err != nil {
		return 0, nil, fmt.Errorf("%w from %s: %w", errReadBody, req.URL.Redacted(), err)
	}
	return res.StatusCode, b, nil
}

// roundTripPlain sends one plain-HTTP request on a fresh connection that
// it closes, within timeout. It reads at most a budget of the connection:
// httpget.MaxResponseHeaderBytes for the status line and headers, then
// maxBodyRead more for the body (which closing the body would otherwise
// drain to its end).
func (h *httpHandler) roundTripPlain(ctx context.Context, req *http.Request, timeout time.Duration) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := h.dial(ctx, "tcp", req.URL.Host)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("get %q: %w", req.URL.Redacted(), err)
	}
	defer func() { _ = conn.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req.Close = true // "Connection: close": one request per connection
	if err := req.Write(conn); err != nil {
		return 0, nil, nil, fmt.Errorf("get %q: %w", req.URL.Redacted(), err)
	}
	budget := &budgetReader{r: conn, left: httpget.MaxResponseHeaderBytes}
	res, err := http.ReadResponse(bufio.NewReaderSize(budget, 4096), req)
	if budget.spent {
		return 0, nil, nil, fmt.Errorf("get %q: %w", req.URL.Redacted(), errHeadersTooLarge)
	}
	if err != nil {
		return 0, nil, nil, fmt.Errorf("get %q: %w", req.URL.Redacted(), err)
	}
	budget.left += maxBodyRead
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxOutput))
	if err != nil && !budget.spent {
		return 0, nil, nil, fmt.Errorf("%w from %s: %w", errReadBody, req.URL.Redacted(), err)
	}
	return res.StatusCode, res.Header, b, nil
}

// budgetReader reads at most left bytes of r; past them it fails, and
// spent tells that it did.
type budgetReader struct {
	r     io.Reader
	left  int64
	spent bool
}

var errBudgetSpent = errors.New("response read budget spent")

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.spent = true
		return 0, errBudgetSpent
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// request builds the probe's GET request to the pod IP unless the action
// names a host.
func (h *httpHandler) request(ctx context.Context, podIP string) (*http.Request, error) {
	if h.action.Host == "" && podIP == "" {
		return nil, errNoPodIP
	}
	req, err := httpget.NewRequest(ctx, h.action, h.container, podIP, userAgent)
	if err != nil {
		return nil, fmt.Errorf("http probe %w", err)
	}
	return req, nil
}

func (h *httpHandler) close() { h.transport.CloseIdleConnections() }

// tcpHandler opens a TCP connection and closes it.
type tcpHandler struct {
	action    v1.TCPSocketAction
	container *v1.Container
}

func (h tcpHandler) probe(ctx context.Context, t target, timeout time.Duration) (outcome, string, error) {
	port, err := httpget.ResolvePort(h.action.Port, h.container)
	if err != nil {
		return outcomeFailure, "", err
	}
	host := h.action.Host
	if host == "" {
		host = t.host
	}
	if host == "" {
		return outcomeFailure, "", errNoPodIP
	}
	d := probeDialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return outcomeFailure, err.Error(), nil
	}
	_ = conn.Close() // connected: that was the probe
	return outcomeSuccess, "", nil
}

func (tcpHandler) close() {}

// grpcHandler calls grpc.health.v1.Health/Check on the pod IP.
type grpcHandler struct {
	check   GRPCChecker
	port    int
	service string
}

func (h grpcHandler) probe(ctx context.Context, t target, timeout time.Duration) (outcome, string, error) {
	if h.check == nil {
		return outcomeFailure, "", errors.New("grpc probes are not supported: no gRPC checker")
	}
	if t.host == "" {
		return outcomeFailure, "", errNoPodIP
	}
	serving, err := h.check.Check(ctx, net.JoinHostPort(t.host, strconv.Itoa(h.port)), h.service, timeout)
	switch {
	case err != nil:
		// Any failure to check is a probe failure, as with grpc_health_probe.
		return outcomeFailure, err.Error(), nil
	case !serving:
		return outcomeFailure, "service unhealthy (responded with a status other than SERVING)", nil
	}
	return outcomeSuccess, "service healthy", nil
}

func (grpcHandler) close() {}
