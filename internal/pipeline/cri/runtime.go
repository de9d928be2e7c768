package cri

import (
	"context"
	"errors"
	"math"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// RunPodSandbox creates and starts a pod sandbox and returns its ID.
func (c *Client) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	return call(ctx, c, c.timeouts.Sandbox, "run pod sandbox",
		func(ctx context.Context) (string, error) { return c.rs.RunPodSandbox(ctx, cfg, handler) })
}

// StopPodSandbox stops a sandbox and force-stops its containers.
func (c *Client) StopPodSandbox(ctx context.Context, id string) error {
	return callErr(ctx, c, c.timeouts.Default, "stop pod sandbox "+id,
		func(ctx context.Context) error { return c.rs.StopPodSandbox(ctx, id) })
}

// RemovePodSandbox removes a sandbox and its containers.
func (c *Client) RemovePodSandbox(ctx context.Context, id string) error {
	return callErr(ctx, c, c.timeouts.Default, "remove pod sandbox "+id,
		func(ctx context.Context) error { return c.rs.RemovePodSandbox(ctx, id) })
}

// PodSandboxStatus returns the status of a sandbox.
func (c *Client) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get pod sandbox status "+id,
		func(ctx context.Context) (*runtimeapi.PodSandboxStatusResponse, error) {
			return c.rs.PodSandboxStatus(ctx, id, false)
		})
}

// ListPodSandbox lists the sandboxes matching filter (nil: all).
func (c *Client) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return call(ctx, c, c.timeouts.Default, "list pod sandboxes",
		func(ctx context.Context) ([]*runtimeapi.PodSandbox, error) { return c.rs.ListPodSandbox(ctx, filter) })
}

// CreateContainer creates a container in a sandbox and returns its ID.
func (c *Client) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	return call(ctx, c, c.timeouts.Default, "create container in pod sandbox "+sandboxID,
		func(ctx context.Context) (string, error) {
			return c.rs.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
		})
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	return callErr(ctx, c, c.timeouts.Default, "start container "+id,
		func(ctx context.Context) error { return c.rs.StartContainer(ctx, id) })
}

// StopContainer stops a container, killing it after grace (rounded up to
// whole seconds). The call may take grace + Timeouts.StopExtra.
func (c *Client) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	secs := ceilSeconds(grace)
	d := time.Duration(secs)*time.Second + c.timeouts.StopExtra
	return callErr(ctx, c, d, "stop container "+id,
		func(ctx context.Context) error { return c.rs.StopContainer(ctx, id, secs) })
}

// RemoveContainer removes a container.
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	return callErr(ctx, c, c.timeouts.Default, "remove container "+id,
		func(ctx context.Context) error { return c.rs.RemoveContainer(ctx, id) })
}

// ListContainers lists the containers matching filter (nil: all).
func (c *Client) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return call(ctx, c, c.timeouts.Default, "list containers",
		func(ctx context.Context) ([]*runtimeapi.Container, error) { return c.rs.ListContainers(ctx, filter) })
}

// ContainerStatus returns the status of a container.
func (c *Client) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatusResponse, error) {
	return call(ctx, c, c.timeouts.Default, "get container status "+id,
		func(ctx context.Context) (*runtimeapi.ContainerStatusResponse, error) {
			return c.rs.ContainerStatus(ctx, id, false)
		})
}

// UpdateContainerResources changes the resources of a running container.
func (c *Client) UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.ContainerResources) error {
	return callErr(ctx, c, c.timeouts.Default, "update resources of container "+id,
		func(ctx context.Context) error { return c.rs.UpdateContainerResources(ctx, id, res) })
}

// ExecSync runs cmd in a container and waits for it. timeout bounds the
// command (rounded up to whole seconds; 0: none); the call may take timeout +
// Timeouts.Default. A command that ran and exited non-zero is not an error:
// its exit code is returned with err == nil.
func (c *Client) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error) {
	timeout = time.Duration(ceilSeconds(timeout)) * time.Second
	var d time.Duration
	if timeout > 0 {
		d = timeout + c.timeouts.Default
	}
	ctx, cancel := c.callCtx(ctx, d)
	defer cancel()
	start := time.Now()
	stdout, stderr, err = c.rs.ExecSync(ctx, id, cmd, timeout)
	code, exited := exitStatus(err)
	if exited {
		err = nil // the command ran; its exit code is the answer
	}
	c.observe("exec in container "+id, start, err)
	if exited {
		return stdout, stderr, code, nil
	}
	if err != nil {
		return nil, nil, 0, translate(err, "exec in container "+id)
	}
	return stdout, stderr, 0, nil
}

// exitStatus extracts the exit code of a command that ran but failed.
func exitStatus(err error) (int32, bool) {
	var ee utilexec.ExitError
	if err == nil || !errors.As(err, &ee) {
		return 0, false
	}
	return int32(ee.ExitStatus()), true
}

// ceilSeconds rounds d up to whole seconds; negative becomes 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// ReopenContainerLog asks the runtime to reopen a container's log file.
func (c *Client) ReopenContainerLog(ctx context.Context, id string) error {
	return callErr(ctx, c, c.timeouts.Default, "reopen log of container "+id,
		func(ctx context.Context) error { return c.rs.ReopenContainerLog(ctx, id) })
}

// ContainerStats returns the stats of one container.
func (c *Client) ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error) {
	return call(ctx, c, c.timeouts.Default, "get stats of container "+id,
		func(ctx context.Context) (*runtimeapi.ContainerStats, error) { return c.rs.ContainerStats(ctx, id) })
}

// ListContainerStats returns the stats of the containers matching filter.
func (c *Client) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return call(ctx, c, c.timeouts.Default, "list container stats",
		func(ctx context.Context) ([]*runtimeapi.ContainerStats, error) {
			return c.rs.ListContainerStats(ctx, filter)
		})
}

// PodSandboxStats returns the stats of one sandbox.
func (c *Client) PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	return call(ctx, c, c.timeouts.Default, "get stats of pod sandbox "+id,
		func(ctx context.Context) (*runtimeapi.PodSandboxStats, error) { return c.rs.PodSandboxStats(ctx, id) })
}

// ListPodSandboxStats returns the stats of the sandboxes matching filter.
func (c *Client) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return call(ctx, c, c.timeouts.Default, "list pod sandbox stats",
		func(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error) {
			return c.rs.ListPodSandboxStats(ctx, filter)
		})
}

// ListMetricDescriptors returns the descriptors of the metrics
// ListPodSandboxMetrics returns (name, help, label keys).
func (c *Client) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return call(ctx, c, c.timeouts.Default, "list metric descriptors",
		func(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
			return c.rs.ListMetricDescriptors(ctx)
		})
}

// ListPodSandboxMetrics returns the metrics of every running sandbox and
// its containers (the CRI request has no filter).
func (c *Client) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return call(ctx, c, c.timeouts.Default, "list pod sandbox metrics",
		func(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
			return c.rs.ListPodSandboxMetrics(ctx)
		})
}
