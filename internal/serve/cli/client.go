// Package cli is beside the pipeline: the client side of nodelet's command
// line: a client of the node's HTTPS API (/pods, /events, /containerLogs)
// authenticating with a client certificate, and the printers behind
// `nodelet get pods` (kubectl's table, wide, yaml and json, and -w),
// `nodelet describe pod` (kubectl's layout plus a startup timeline) and
// `nodelet logs`.
package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/events"
)

// DefaultServer is where the API is when Config.Server is empty.
const DefaultServer = "https://127.0.0.1:10250"

// DefaultTimeout bounds a request when Config.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Config is how to reach nodelet's HTTPS API.
type Config struct {
	// Server is the base URL, e.g. https://127.0.0.1:10250.
	Server string
	// CAFile holds the certificates the server's serving certificate is
	// checked against (nodelet's self-signed serving certificate); empty
	// uses the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key; both
	// or neither.
	CertFile, KeyFile string
	// Timeout bounds a whole request for Pods and Events, and the wait
	// for the response headers of Logs (a followed log stream is not cut).
	Timeout time.Duration
	// TrustHint tells the user what to do when the server's certificate
	// is not signed by CAFile, e.g. which --root-dir to pass.
	TrustHint string
	// Warnings, when set, gets the server's warnings (the Warning
	// headers of /pods: the node's pressure conditions), one
	// "Warning: ..." line each, as kubectl prints them.
	Warnings io.Writer
}

// Client talks to one nodelet.
type Client struct {
	warnings  io.Writer
	server    *url.URL
	http      *http.Client
	timeout   time.Duration
	caFile    string
	trustHint string
}

// LogOptions are the query parameters of /containerLogs.
type LogOptions struct {
	// Follow keeps the stream open and copies new lines as they come.
	Follow bool
	// TailLines, when set, starts that many lines from the end.
	TailLines *int64
	// Previous reads the log of the container's previous instance.
	Previous bool
	// Timestamps prefixes each line with its RFC3339 time.
	Timestamps bool
}

// StatusError is a non-2xx answer of the server.
type StatusError struct {
	// Server is the base URL asked.
	Server string
	// Code is the HTTP status code, Status its text ("401 Unauthorized").
	Code   int
	Status string
	// Message is the start of the response body, trimmed.
	Message string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("server %s: %s", e.Server, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	switch e.Code {
	case http.StatusUnauthorized:
		msg += " (no client certificate, or one the server does not trust)"
	case http.StatusForbidden:
		msg += " (the client certificate's user may not do this)"
	}
	return msg
}

// NewClient checks cfg and loads its certificates.
func NewClient(cfg Config) (*Client, error) {
	server := cfg.Server
	if server == "" {
		server = DefaultServer
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server %q: want https://host:port", server)
	}
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/"), ""
	u.RawQuery, u.Fragment = "", ""
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}

	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	switch {
	case cfg.CertFile != "" && cfg.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	case cfg.CertFile != "" || cfg.KeyFile != "":
		return nil, errors.New("client certificate: give both the certificate and the key file")
	}

	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Client{server: u, http: &http.Client{Transport: transport}, timeout: timeout, caFile: cfg.CAFile, trustHint: cfg.TrustHint,
		warnings: cfg.Warnings}, nil
}

// explainTrust turns a server certificate that CAFile does not vouch for
// into an error that says so and what to do; other errors are returned
// as they are.
func (c *Client) explainTrust(err error) error {
	var unknown x509.UnknownAuthorityError
	var cause error
	switch {
	case errors.As(err, &unknown):
		cause = unknown
	case strings.Contains(err.Error(), "certificate signed by unknown authority"):
		cause = err // client-go's SPDY dialer passes the TLS error on as text
	default:
		return err
	}
	msg := fmt.Sprintf("the nodelet at %s presented a certificate not signed by the CA in %s", c.server, c.caFile)
	if c.caFile == "" {
		msg = fmt.Sprintf("the nodelet at %s presented a certificate not signed by a CA this machine trusts", c.server)
	}
	if c.trustHint != "" {
		msg += ": " + c.trustHint
	}
	return fmt.Errorf("%s (%w)", msg, cause)
}

// Pods returns the node's pods with their status.
func (c *Client) Pods(ctx context.Context) ([]v1.Pod, error) {
	var list v1.PodList
	if err := c.getJSON(ctx, "/pods", &list); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	return list.Items, nil
}

// Events returns the events nodelet keeps, oldest first.
func (c *Client) Events(ctx context.Context) ([]events.Event, error) {
	var wire []wireEvent
	if err := c.getJSON(ctx, "/events", &wire); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	evs := make([]events.Event, len(wire))
	for i, w := range wire {
		evs[i] = w.Event
		if evs[i].FirstTime.IsZero() {
			evs[i].FirstTime = w.FirstTimestamp
		}
		if evs[i].LastTime.IsZero() {
			evs[i].LastTime = w.LastTimestamp
		}
	}
	return evs, nil
}

// wireEvent reads an event either as events.Event encodes (FirstTime,
// LastTime) or with the server's firstTimestamp and lastTimestamp; the
// other fields match either way (JSON names match regardless of case).
type wireEvent struct {
	events.Event
	FirstTimestamp time.Time
	LastTimestamp  time.Time
}

// Logs copies the log of one container to w as it arrives. With
// opts.Follow it returns when the server ends the stream or, with nil,
// when ctx is canceled.
func (c *Client) Logs(ctx context.Context, namespace, pod, container string, opts LogOptions, w io.Writer) error {
	path := "/containerLogs/" + url.PathEscape(namespace) + "/" + url.PathEscape(pod) + "/" + url.PathEscape(container)
	q := url.Values{}
	if opts.Follow {
		q.Set("follow", "true")
	}
	if opts.TailLines != nil {
		q.Set("tailLines", strconv.FormatInt(*opts.TailLines, 10))
	}
	if opts.Previous {
		q.Set("previous", "true")
	}
	if opts.Timestamps {
		q.Set("timestamps", "true")
	}
	reqCtx := ctx
	if !opts.Follow {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.get(reqCtx, path, q)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			return fmt.Errorf("pod %s/%s not found (container %q): %w", namespace, pod, container, err)
		}
		return fmt.Errorf("logs of pod %s/%s container %q: %w", namespace, pod, container, err)
	}
	defer resp.Body.Close()
	if _, err := copyFlushing(w, resp.Body); err != nil {
		if opts.Follow && errors.Is(ctx.Err(), context.Canceled) {
			return nil
		}
		return fmt.Errorf("logs of pod %s/%s container %q: %w", namespace, pod, container, err)
	}
	return nil
}

// copyFlushing copies like io.Copy, passing each read on at once (and
// flushing w if it can be flushed) so that a followed log shows lines as
// they are written.
func copyFlushing(w io.Writer, r io.Reader) (int64, error) {
	flusher, _ := w.(interface{ Flush() error })
	buf := make([]byte, 32*1024)
	var n int64
	for {
		nr, rerr := r.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if flusher != nil {
				if err := flusher.Flush(); err != nil {
					return n, err
				}
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

func (c *Client) getJSON(ctx context.Context, path string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.get(ctx, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.warn(resp.Header.Values("Warning"))
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("server %s: decode %s: %w", c.server, path, err)
	}
	return nil
}

// get does one GET and turns a non-2xx answer into a *StatusError. The
// caller closes the body of a nil-error response.
func (c *Client) get(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	target := c.server.String() + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", c.server, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("server %s refused the connection: is nodelet running? (--port): %w", c.server, err)
		}
		if explained := c.explainTrust(err); explained != err {
			return nil, explained
		}
		return nil, fmt.Errorf("server %s: %w", c.server, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{
			Server:  c.server.String(),
			Code:    resp.StatusCode,
			Status:  resp.Status,
			Message: strings.TrimSpace(string(body)),
		}
	}
	return resp, nil
}

// maxWarnings bounds what the client prints of a server's warnings.
const maxWarnings, maxWarningLen = 10, 256

// warn prints the text of RFC 7234 warnings `299 - "text"`, bounded.
func (c *Client) warn(headers []string) {
	if c.warnings == nil {
		return
	}
	for i, h := range headers {
		if i == maxWarnings {
			return
		}
		_, quoted, ok := strings.Cut(h, " - ")
		text, err := strconv.Unquote(quoted)
		if !ok || err != nil {
			continue
		}
		if len(text) > maxWarningLen {
			text = text[:maxWarningLen]
		}
		fmt.Fprintf(c.warnings, "Warning: %s\n", strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return -1
			}
			return r
		}, text))
	}
}
