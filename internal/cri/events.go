package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerEvents streams the runtime's container events (CRI
// GetContainerEvents) into out until ctx ends or the stream fails. A
// runtime without the call (containerd before 1.7) gives an error for which
// IsUnimplemented is true. The call has no deadline: it lives as long as
// ctx.
func (c *Client) ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse) error {
	return callErr(ctx, c, 0, "stream container events",
		func(ctx context.Context) error { return c.rs.GetContainerEvents(ctx, out, nil) })
}
