package csi

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// Driver is a registered CSI driver.
type Driver struct {
	Name     string
	Endpoint string // the driver's unix socket
	Version  string // the highest CSI version both support
}

// NodeInfo is what a driver's NodeGetInfo says about this node, for the
// CSINode object and the Node's topology labels.
type NodeInfo struct {
	NodeID            string
	MaxVolumesPerNode int64             // 0: no limit given
	Topology          map[string]string // the accessible topology segments
}

// Listener hears about drivers as they come and go (cluster mode: the
// CSINode object and the Node). DriverRegistered failing fails the
// registration, as the kubelet's nodeinfomanager.InstallCSIDriver does.
type Listener interface {
	DriverRegistered(ctx context.Context, name string, info NodeInfo) error
	DriverDeregistered(ctx context.Context, name string) error
}

// Registry is the set of registered drivers, by name.
type Registry struct {
	mu      sync.RWMutex
	drivers map[string]Driver
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{drivers: map[string]Driver{}} }

// Driver returns the registered driver of that name; the error is the
// kubelet's words when there is none.
func (r *Registry) Driver(name string) (Driver, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.drivers[name]
	if !ok {
		return Driver{}, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	return d, nil
}

// Names lists the registered drivers.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.drivers))
	for n := range r.drivers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (r *Registry) set(d Driver) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drivers[d.Name] = d
}

// remove drops the driver when it is still the one at endpoint (a newer
// registration of the same name on another socket stays).
func (r *Registry) remove(name, endpoint string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.drivers[name]; ok && d.Endpoint == endpoint {
		delete(r.drivers, name)
		return true
	}
	return false
}

// highestVersion is the highest of versions that nodelet speaks: CSI 1.x,
// as the kubelet's highestSupportedVersion ("1.0.0", "v1.2", "1"). It is an
// error when there is none.
func highestVersion(versions []string) (string, error) {
	best, bestParts := "", []int(nil)
	for _, v := range versions {
		parts, err := parseVersion(v)
		if err != nil || parts[0] != 1 {
			continue
		}
		if bestParts == nil || slices.Compare(parts, bestParts) > 0 {
			best, bestParts = v, parts
		}
	}
	if bestParts == nil {
		return "", fmt.Errorf("none of the CSI versions reported by this driver are supported: %q", versions)
	}
	return best, nil
}

// parseVersion parses "v1", "1.2" or "1.2.3" into three numbers.
func parseVersion(v string) ([]int, error) {
	fields := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(fields) > 3 {
		return nil, fmt.Errorf("version %q has more than three parts", v)
	}
	out := make([]int, 3)
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("version %q: part %q is not a number", v, f)
		}
		out[i] = n
	}
	return out, nil
}

// nodeInfoOf translates NodeGetInfo's answer; a driver must give a node ID.
func nodeInfoOf(resp *csipb.NodeGetInfoResponse) (NodeInfo, error) {
	if resp.GetNodeId() == "" {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo returned an empty node ID")
	}
	if len(resp.GetNodeId()) > 192 {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo returned a node ID longer than 192 bytes")
	}
	if resp.GetMaxVolumesPerNode() < 0 {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo returned a negative max_volumes_per_node %d", resp.GetMaxVolumesPerNode())
	}
	return NodeInfo{
		NodeID:            resp.GetNodeId(),
		MaxVolumesPerNode: resp.GetMaxVolumesPerNode(),
		Topology:          resp.GetAccessibleTopology().GetSegments(),
	}, nil
}
