package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls an image and returns its reference (usually its ID).
// It is bounded by Timeouts.Pull (0: only by ctx).
func (c *Client) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	return call(ctx, c, c.timeouts.Pull, "pull image "+image.GetImage(),
		func(ctx context.Context) (string, error) { return c.is.PullImage(ctx, image, auth, sandboxCfg) })
}

// ImageStatus returns the status of an image; its Image is nil when the
// image is not present.
func (c *Client) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec) (*runtimeapi.ImageStatusResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get status of image "+image.GetImage(),
		func(ctx context.Context) (*runtimeapi.ImageStatusResponse, error) {
			return c.is.ImageStatus(ctx, image, false)
		})
}

// ListImages lists the images matching filter (nil: all).
func (c *Client) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return call(ctx, c, c.timeouts.Default, "list images",
		func(ctx context.Context) ([]*runtimeapi.Image, error) { return c.is.ListImages(ctx, filter) })
}

// RemoveImage removes an image.
func (c *Client) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return callErr(ctx, c, c.timeouts.Default, "remove image "+image.GetImage(),
		func(ctx context.Context) error { return c.is.RemoveImage(ctx, image) })
}

// ImageFsInfo returns the usage of the filesystems holding images and
// containers' writable layers.
func (c *Client) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get image filesystem info", c.is.ImageFsInfo)
}
