package cri

import (
	"strings"
	"time"
)

// Observer is told of every CRI call: the kubelet's operation name (as in
// kubelet_runtime_operations_*), how long it took and how it ended.
type Observer func(operation string, took time.Duration, err error)

// Option tunes New and Dial.
type Option func(*Client)

// WithObserver makes o be told of every call (those of Dial's handshake
// aside).
func WithObserver(o Observer) Option { return func(c *Client) { c.observer = o } }

// kubeletOperation maps this package's operation descriptions (without
// the object ID) to the kubelet's operation_type label values.
func kubeletOperation(desc string) (string, bool) {
	switch desc {
	case "run pod sandbox":
		return "run_podsandbox", true
	case "stop pod sandbox":
		return "stop_podsandbox", true
	case "remove pod sandbox":
		return "remove_podsandbox", true
	case "get pod sandbox status":
		return "podsandbox_status", true
	case "list pod sandboxes":
		return "list_podsandbox", true
	case "create container in pod sandbox":
		return "create_container", true
	case "start container":
		return "start_container", true
	case "stop container":
		return "stop_container", true
	case "remove container":
		return "remove_container", true
	case "list containers":
		return "list_containers", true
	case "get container status":
		return "container_status", true
	case "update resources of container":
		return "update_container", true
	case "reopen log of container":
		return "reopen_container_log", true
	case "exec in container":
		return "exec_sync", true
	case "get stats of container":
		return "container_stats", true
	case "list container stats":
		return "list_container_stats", true
	case "get stats of pod sandbox":
		return "podsandbox_stats", true
	case "list pod sandbox stats":
		return "list_podsandbox_stats", true
	case "list metric descriptors":
		return "list_metric_descriptors", true
	case "list pod sandbox metrics":
		return "list_podsandbox_metrics", true
	case "get runtime version":
		return "version", true
	case "get runtime status":
		return "status", true
	case "get runtime config":
		return "runtime_config", true
	case "update runtime config":
		return "update_runtime_config", true
	case "pull image":
		return "pull_image", true
	case "get status of image":
		return "image_status", true
	case "list images":
		return "list_images", true
	case "remove image":
		return "remove_image", true
	case "get image filesystem info":
		return "image_fs_info", true
	case "stream container events":
		return "get_container_events", true
	}
	return "", false
}

// operationName is the kubelet's name for op ("start container 3f2a…" →
// "start_container"); unknown descriptions become snake case.
func operationName(op string) string {
	for desc := op; desc != ""; {
		if name, ok := kubeletOperation(desc); ok {
			return name
		}
		i := strings.LastIndexByte(desc, ' ')
		if i < 0 {
			break
		}
		desc = desc[:i]
	}
	return strings.ReplaceAll(op, " ", "_")
}

// observe reports one call to the observer, if any.
func (c *Client) observe(op string, start time.Time, err error) {
	if c.observer != nil {
		c.observer(operationName(op), time.Since(start), err)
	}
}
