package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec asks the runtime to prepare an exec stream and returns the URL of
// its streaming server, where the caller proxies the client's upgraded
// request.
func (c *Client) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (string, error) {
	op := "exec in container " + req.GetContainerId()
	url, err := call(ctx, c, c.timeouts.Default, op,
		func(ctx context.Context) (string, error) {
			resp, err := c.rs.Exec(ctx, req)
			return resp.GetUrl(), err
		})
	return streamURL(op, url, err)
}

// Attach asks the runtime to prepare an attach stream and returns its URL.
func (c *Client) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (string, error) {
	op := "attach to container " + req.GetContainerId()
	url, err := call(ctx, c, c.timeouts.Default, op,
		func(ctx context.Context) (string, error) {
			resp, err := c.rs.Attach(ctx, req)
			return resp.GetUrl(), err
		})
	return streamURL(op, url, err)
}

// PortForward asks the runtime to prepare a port-forward stream into a pod
// sandbox and returns its URL.
func (c *Client) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (string, error) {
	op := "port-forward to pod sandbox " + req.GetPodSandboxId()
	url, err := call(ctx, c, c.timeouts.Default, op,
		func(ctx context.Context) (string, error) {
			resp, err := c.rs.PortForward(ctx, req)
			return resp.GetUrl(), err
		})
	return streamURL(op, url, err)
}

// streamURL rejects an empty URL from a runtime that answered without one.
func streamURL(op, url string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if url == "" {
		return "", fmt.Errorf("%s: the runtime returned no streaming URL", op)
	}
	return url, nil
}
