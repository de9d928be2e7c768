package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerEvents streams the runtime's container events (CRI
// GetContainerEvents) into out until ctx ends or the stream fails, calling
// connected (if not nil) once the stream is open, before any event. A
// runtime without the call (containerd before 1.7) gives an error for which
// IsUnimplemented is true, after connected. The call has no deadline: it
// lives as long as ctx.
func (c *Client) ContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse, connected func()) error {
	var onOpen func(runtimeapi.RuntimeService_GetContainerEventsClient)
	if connected != nil {
		onOpen = func(runtimeapi.RuntimeService_GetContainerEventsClient) { connected() }
	}
	return callErr(ctx, c, 0, "stream container events",
		func(ctx context.Context) error { return c.rs.GetContainerEvents(ctx, out, onOpen) })
}
