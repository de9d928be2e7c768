package podresources

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// SwapBehavior is memorySwap.swapBehavior: how much swap pods' containers
// may use on a node with swap.
type SwapBehavior string

// The kubelet's swap behaviours.
const (
	// NoSwap (the default, and ""): no container swaps.
	NoSwap SwapBehavior = "NoSwap"
	// LimitedSwap: a Burstable pod's container with a memory request
	// below its limit may swap its share of the node's swap
	// (LimitedSwapBytes); every other container swaps nothing.
	LimitedSwap SwapBehavior = "LimitedSwap"
)

// ParseSwapBehavior reads memorySwap.swapBehavior: "" is NoSwap.
func ParseSwapBehavior(s string) (SwapBehavior, error) {
	switch SwapBehavior(s) {
	case "", NoSwap:
		return NoSwap, nil
	case LimitedSwap:
		return LimitedSwap, nil
	}
	return "", fmt.Errorf("memorySwap.swapBehavior %q: want %q or %q", s, NoSwap, LimitedSwap)
}

// Swap is what the swap settings of a container depend on.
type Swap struct {
	// Behavior is memorySwap.swapBehavior.
	Behavior SwapBehavior
	// Controller: the kernel accounts swap in memory cgroups (cgroup v2's
	// memory.swap.max, v1's memory.memsw.limit_in_bytes, which needs
	// swapaccount=1). Without it nothing is set, as the kubelet sets
	// nothing.
	Controller bool
	// V2 is cgroup v2 (the unified hierarchy).
	V2 bool
	// MemoryCapacity and SwapCapacity are the node's memory and swap, in
	// bytes (/proc/meminfo, /proc/swaps).
	MemoryCapacity, SwapCapacity int64
}

// Swaps tells whether container c of pod may swap (a behaviour other
// than NoSwap): an in-place resize of its memory request is then
// infeasible (resize.Node.Swaps).
func (s Swap) Swaps(pod *v1.Pod, c *v1.Container) bool {
	return s.ContainerSwapBehavior(pod, c) != NoSwap
}

// ContainerSwapBehavior is the kubelet's GetContainerSwapBehavior: the
// behaviour container c of pod gets. LimitedSwap only applies on cgroup
// v2 with the swap controller, to a container of a Burstable pod that is
// not critical and that requests memory below its limit (or has no
// limit); everything else gets NoSwap.
//
// Critical is podspec.IsCritical, nodelet's one critical-pod rule; the
// kubelet also counts every static pod, which standalone would be every
// pod (see podspec.IsCritical).
func (s Swap) ContainerSwapBehavior(pod *v1.Pod, c *v1.Container) SwapBehavior {
	if s.Behavior != LimitedSwap || !s.Controller || !s.V2 || podspec.IsCritical(pod) {
		return NoSwap
	}
	req, limit := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if podspec.QOSClass(pod) != v1.PodQOSBurstable || (req.IsZero() && limit.IsZero()) || req.Cmp(*limit) == 0 {
		return NoSwap
	}
	return LimitedSwap
}

// LimitedSwapBytes is a container's swap under LimitedSwap, the kubelet's
// calcSwapForBurstablePods: its share of the node's memory, of the node's
// swap (memoryRequest / memoryCapacity * swapCapacity, rounded down).
// A node without memory, or a request larger than it, is an error.
func LimitedSwapBytes(memoryRequest, memoryCapacity, swapCapacity int64) (int64, error) {
	if memoryCapacity <= 0 {
		return 0, errors.New("total node memory is 0")
	}
	if memoryRequest > memoryCapacity {
		return 0, fmt.Errorf("container request %d is larger than total node memory %d", memoryRequest, memoryCapacity)
	}
	return int64(float64(memoryRequest) / float64(memoryCapacity) * float64(swapCapacity)), nil
}

// fileSwapMax is the cgroup v2 file of a container's swap limit.
const fileSwapMax = "memory.swap.max"

// ApplySwap sets the swap limit of container c of pod in res, as the
// kubelet's configureContainerSwapResources: nothing without the swap
// controller; NoSwap is memory.swap.max 0 on cgroup v2 and, on v1,
// memory+swap equal to the memory limit (res.MemoryLimitInBytes, so that
// nothing swaps beyond it; an unlimited container stays unlimited);
// LimitedSwap is memory.swap.max LimitedSwapBytes. A share that cannot be
// computed is NoSwap, and the error says why.
func (s Swap) ApplySwap(pod *v1.Pod, c *v1.Container, res *runtimeapi.LinuxContainerResources) error {
	if !s.Controller {
		return nil
	}
	if !s.V2 {
		res.MemorySwapLimitInBytes = res.MemoryLimitInBytes
		return nil
	}
	var limit int64
	var err error
	if s.ContainerSwapBehavior(pod, c) == LimitedSwap {
		if limit, err = LimitedSwapBytes(c.Resources.Requests.Memory().Value(), s.MemoryCapacity, s.SwapCapacity); err != nil {
			limit, err = 0, fmt.Errorf("container %s: cannot calculate swap allocation amount, disallowing swap: %w", c.Name, err)
		}
	}
	if res.Unified == nil {
		res.Unified = map[string]string{}
	}
	res.Unified[fileSwapMax] = strconv.FormatInt(limit, 10)
	return err
}

// maxSwapsLines bounds what is read of /proc/swaps.
const maxSwapsLines = 1024

// Swaps is what /proc/swaps says: the swap areas in use and their total
// size in bytes.
type Swaps struct {
	Areas    []string
	Capacity int64
}

// ParseSwaps reads /proc/swaps: a header line, then one line per swap
// area (filename, type, size in KiB, used, priority). Read at most
// maxSwapsLines lines.
func ParseSwaps(r io.Reader) (Swaps, error) {
	var out Swaps
	sc := bufio.NewScanner(r)
	for n := 0; sc.Scan(); n++ {
		if n >= maxSwapsLines {
			return Swaps{}, fmt.Errorf("/proc/swaps: more than %d lines", maxSwapsLines)
		}
		fields := strings.Fields(sc.Text())
		if n == 0 || len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return Swaps{}, fmt.Errorf("/proc/swaps: line %d: %q has no size", n+1, sc.Text())
		}
		kib, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || kib < 0 {
			return Swaps{}, fmt.Errorf("/proc/swaps: line %d: size %q", n+1, fields[2])
		}
		out.Areas = append(out.Areas, fields[0])
		out.Capacity += kib * 1024
	}
	if err := sc.Err(); err != nil {
		return Swaps{}, fmt.Errorf("read /proc/swaps: %w", err)
	}
	return out, nil
}

// CheckFailSwapOn is the kubelet's failSwapOn: with it, a node with swap
// in use is refused (nodelet does not start); without it, swap is
// allowed and memorySwap.swapBehavior decides what pods get.
func CheckFailSwapOn(s Swaps, failSwapOn bool) error {
	if !failSwapOn || len(s.Areas) == 0 {
		return nil
	}
	return fmt.Errorf("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false (failSwapOn: false); /proc/swaps lists %s", strings.Join(s.Areas, ", "))
}
