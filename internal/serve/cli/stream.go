package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	//lint:ignore SA1019 client-go v0.37's SPDY upgrader still takes apimachinery's httpstream types
	httpstreamspdy "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
)

// Exec runs command in a container of a pod over the node's /exec
// endpoint (SPDY), copying stdin to it and its output to stdout and
// stderr; a nil stream is not asked for. With tty the command gets a
// terminal and stderr is merged into stdout. A command that exits with a
// non-zero code returns an error that errors.As finds as client-go's
// exec.CodeExitError (k8s.io/client-go/util/exec), carrying the code.
func (c *Client) Exec(ctx context.Context, namespace, pod, container string, command []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) error {
	if tty {
		stderr = nil
	}
	u, err := c.execURL(namespace, pod, container, command, stdin != nil, stdout != nil, stderr != nil, tty)
	if err != nil {
		return err
	}
	rt, err := c.spdyRoundTripper()
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewSPDYExecutorForTransports(rt, rt, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr, Tty: tty})
	if err != nil {
		var exit interface{ ExitStatus() int }
		if errors.As(err, &exit) {
			return err
		}
		return fmt.Errorf("exec in pod %s/%s container %q: %w", namespace, pod, container, c.explainTrust(err))
	}
	return nil
}

// PortForward forwards each "LOCAL:REMOTE" (or "PORT", or ":REMOTE" for a
// random local port) of ports from 127.0.0.1 to the pod over the node's
// /portForward endpoint, until ctx ends. ready, when not nil, is closed
// once every port listens; out and errOut get client-go's messages.
func (c *Client) PortForward(ctx context.Context, namespace, pod string, ports []string, ready chan struct{}, out, errOut io.Writer) error {
	if len(ports) == 0 {
		return errors.New("port-forward: no ports given")
	}
	u := c.streamURL("portForward", []string{namespace, pod}, nil)
	rt, err := c.spdyRoundTripper()
	if err != nil {
		return err
	}
	dialer := spdy.NewDialer(rt, &http.Client{Transport: rt}, http.MethodPost, u)
	fw, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, ports, ready, out, errOut)
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, err)
	}
	if err := fw.ForwardPorts(); err != nil {
		return fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, c.explainTrust(err))
	}
	return nil
}

// execURL is the /exec URL with the kubelet's query options.
func (c *Client) execURL(namespace, pod, container string, command []string, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	if len(command) == 0 {
		return nil, errors.New("exec: no command given")
	}
	if !stdin && !stdout && !stderr {
		return nil, errors.New("exec: at least one of stdin, stdout and stderr is needed")
	}
	q := url.Values{"command": command}
	for name, on := range map[string]bool{"stdin": stdin, "stdout": stdout, "stderr": stderr, "tty": tty} {
		if on {
			q.Set(name, "true")
		}
	}
	return c.streamURL("exec", []string{namespace, pod, container}, q), nil
}

// streamURL is the server's /<kind>/<parts...> URL.
func (c *Client) streamURL(kind string, parts []string, q url.Values) *url.URL {
	u := *c.server
	u.RawPath = ""
	u.Path += "/" + kind
	for _, p := range parts {
		u.Path += "/" + p
	}
	u.RawQuery = q.Encode()
	return &u
}

// spdyRoundTripper upgrades connections to SPDY with the client's TLS
// settings (CA, client certificate).
func (c *Client) spdyRoundTripper() (*httpstreamspdy.SpdyRoundTripper, error) {
	rt, err := httpstreamspdy.NewRoundTripperWithConfig(httpstreamspdy.RoundTripperConfig{
		TLS:        c.spdyTLSConfig(),
		Proxier:    http.ProxyFromEnvironment,
		PingPeriod: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", c.server, err)
	}
	return rt, nil
}

// spdyTLSConfig is a copy of the client's TLS settings for HTTP/1.1.
func (c *Client) spdyTLSConfig() *tls.Config {
	var tlsConfig *tls.Config
	if t, ok := c.http.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		tlsConfig = t.TLSClientConfig.Clone()
	} else {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	// The upgrade is HTTP/1.1 only.
	tlsConfig.NextProtos = []string{"http/1.1"}
	return tlsConfig
}
