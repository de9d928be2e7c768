// Package httpget is beside the pipeline: the kubelet's semantics of a
// container's HTTPGetAction and named ports, shared by HTTP probes (prober)
// and HTTP lifecycle hooks (podruntime): which port, which URL, which
// headers.
package httpget

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ResolvePort returns the port number of p, looking a name up in the
// container's ports; a name that is not found may still be a number, as
// the kubelet's ResolveContainerPort allows.
func ResolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		found := false
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				return 0, fmt.Errorf("port %q not found in container %s", p.StrVal, c.Name)
			}
			port = n
		}
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}

// NewRequest builds the GET request of an HTTPGetAction (the kubelet's
// NewRequestForHTTPGetAction): host defaults to host (the pod IP), scheme
// to HTTP, the action's headers are sent with userAgent and "Accept: */*"
// unless it sets them, and a Host header becomes the request's Host.
func NewRequest(ctx context.Context, action v1.HTTPGetAction, c *v1.Container, host, userAgent string) (*http.Request, error) {
	scheme := strings.ToLower(string(action.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	if action.Host != "" {
		host = action.Host
	}
	port, err := ResolvePort(action.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(action.Path)
	if err != nil {
		u = &url.URL{Path: action.Path} // as the kubelet: too late to reject it
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("http request: %w", err)
	}
	headers := http.Header{}
	for _, hd := range action.HTTPHeaders {
		headers.Add(hd.Name, hd.Value)
	}
	if _, ok := headers["User-Agent"]; !ok {
		headers.Set("User-Agent", userAgent)
	}
	if _, ok := headers["Accept"]; !ok {
		headers.Set("Accept", "*/*")
	} else if headers.Get("Accept") == "" {
		headers.Del("Accept")
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}

// MaxResponseHeaderBytes bounds what a probe or hook reads of a response
// before its body: the status line and every header. The kubelet keeps Go's
// client default of 10 MiB. nodelet keeps 64 KiB, less than the Go server's
// 1 MiB default for requests: every running probe may hold that much at
// once and a hostile container chooses what its endpoint answers, while
// real header blocks are a few KiB (nginx proxies a response's headers in
// a 4 or 8 KiB buffer by default, and accepts at most 32 KiB of request
// headers). 1,000 probes at once then hold at most 64 MiB, not 10 GiB.
const MaxResponseHeaderBytes = 64 << 10
