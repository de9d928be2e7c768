package resize

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Resources are one container's CPU and memory as the runtime is given
// them: CPU in milliCPU, memory in bytes, 0 for unset.
type Resources struct {
	CPURequest int64 `json:"cpuRequest,omitempty"`
	CPULimit   int64 `json:"cpuLimit,omitempty"`
	MemRequest int64 `json:"memoryRequest,omitempty"`
	MemLimit   int64 `json:"memoryLimit,omitempty"`
}

// ResourcesOf reads r (limits missing from r stay 0; requests are as
// given, the API server having defaulted them to the limits).
func ResourcesOf(r v1.ResourceRequirements) Resources {
	return Resources{
		CPURequest: r.Requests.Cpu().MilliValue(),
		CPULimit:   r.Limits.Cpu().MilliValue(),
		MemRequest: r.Requests.Memory().Value(),
		MemLimit:   r.Limits.Memory().Value(),
	}
}

// Container is one running container of the pod, as Plan needs it.
type Container struct {
	Name string
	// ID is the runtime's container ID.
	ID string
	// Init: an init container (a sidecar: only running ones are here).
	Init bool
	// Allocated is what the container should have (from the allocation).
	Allocated Resources
	// Actuated is what it was last given (the actuated record, or its
	// creation's resources); without a record it is the zero value, as the
	// kubelet assumes, and every value is sent again (idempotent).
	Actuated Resources
	// Policy is the container's resizePolicy.
	Policy []v1.ContainerResizePolicy
}

// PodCgroup is the pod cgroup's configuration: cpu.shares, the CFS quota
// (microseconds per period; -1 for none, as the kernel writes it) and the
// memory limit in bytes (0 for none). In PodDesired, a quota of 0 means
// the pod has no CPU limit and the current quota stays, as the kubelet
// leaves it (removing a limit in place is not supported).
type PodCgroup struct {
	CPUShares   int64
	CPUQuota    int64
	MemoryLimit int64
}

// Input is everything Plan decides from.
type Input struct {
	// Containers are the pod's running containers (app containers and
	// running sidecars), in spec order.
	Containers []Container
	// PodCurrent is the pod cgroup as it is now, PodDesired what the
	// allocated pod's resources make it.
	PodCurrent, PodDesired PodCgroup
}

// Kind is what one step does.
type Kind int

// The kinds of steps.
const (
	// SetPodMemoryLimit writes the pod cgroup's memory limit.
	SetPodMemoryLimit Kind = iota
	// SetPodCPUQuota writes the pod cgroup's CFS quota.
	SetPodCPUQuota
	// SetPodCPUShares writes the pod cgroup's cpu.shares.
	SetPodCPUShares
	// UpdateContainer calls UpdateContainerResources with Resources.
	UpdateContainer
)

// Step is one write, in order. A failed step ends the resize; the next sync
// plans again from what was actuated.
type Step struct {
	Kind Kind
	// Value is the pod cgroup's new value (SetPod* kinds).
	Value int64
	// Container and ContainerID name the container (UpdateContainer);
	// Resources is all it is given: the resource of this step's phase as
	// allocated, the other as actuated so far.
	Container   string
	ContainerID string
	Resources   Resources
}

// Restart is a container whose resize policy requires a restart.
type Restart struct {
	Container, ContainerID string
	Init                   bool
	Message                string
}

// Plan is what it takes to actuate the allocation.
type Plan struct {
	// Restart are killed and started again with the allocated resources;
	// their resources are not updated in place.
	Restart []Restart
	// Steps are the in-place writes, in this order: memory, then CPU. In
	// each phase, a pod cgroup value that grows is written before the
	// containers' updates and one that shrinks after them (for CPU the
	// quota grows before the shares and the shares shrink before the
	// quota, keeping requests under limits); containers whose value
	// decreases are updated before those whose value increases.
	Steps []Step
	// DecreasingMemory are the containers whose memory limit is set lower
	// (or set where there was none), with the new limit;
	// PodMemoryDecreasing whether the pod's is. CheckMemoryDecrease
	// must pass for them before any step runs.
	DecreasingMemory    map[string]int64
	PodMemoryDecreasing bool
}

// Empty: nothing to actuate.
func (p Plan) Empty() bool { return len(p.Restart) == 0 && len(p.Steps) == 0 }

// Compute plans the actuation, as the kubelet's computePodResizeAction and
// doPodResizeAction: a container with a changed resource whose policy is
// RestartContainer is restarted; the others are updated in place. The pod
// cgroup is written only when some container changes.
func Compute(in Input) Plan {
	var p Plan
	var mem, cpu []update
	for _, c := range in.Containers {
		if c.Allocated == c.Actuated {
			continue
		}
		if needsRestart(c) {
			p.Restart = append(p.Restart, Restart{Container: c.Name, ContainerID: c.ID, Init: c.Init,
				Message: fmt.Sprintf("Container %s resize requires restart", c.Name)})
			continue
		}
		if u, ok := memoryUpdate(c); ok {
			mem = insert(mem, u)
		}
		if u, ok := cpuUpdate(c); ok {
			cpu = insert(cpu, u)
		}
	}
	if len(mem) == 0 && len(cpu) == 0 && len(p.Restart) == 0 {
		return p
	}
	cur := map[string]Resources{}
	for _, c := range in.Containers {
		cur[c.Name] = c.Actuated
	}
	restarts := len(p.Restart) > 0
	p.Steps = append(p.Steps, memorySteps(in, mem, cur, restarts)...)
	p.Steps = append(p.Steps, cpuSteps(in, cpu, cur, restarts)...)
	p.DecreasingMemory = decreasingMemory(mem)
	p.PodMemoryDecreasing = in.PodDesired.MemoryLimit != 0 &&
		(in.PodCurrent.MemoryLimit == 0 || in.PodDesired.MemoryLimit < in.PodCurrent.MemoryLimit)
	if !p.PodMemoryDecreasing && len(p.DecreasingMemory) == 0 {
		p.DecreasingMemory = nil
	}
	return p
}

// update is one container's change in one phase; from and to are the
// value that orders it (the limit if it changes, else the request).
type update struct {
	c        Container
	from, to int64
	newLimit int64
	oldLimit int64
}

func needsRestart(c Container) bool {
	a, b := c.Allocated, c.Actuated
	if (a.CPURequest != b.CPURequest || a.CPULimit != b.CPULimit) && restartPolicyOf(c.Policy, v1.ResourceCPU) == v1.RestartContainer {
		return true
	}
	return (a.MemRequest != b.MemRequest || a.MemLimit != b.MemLimit) && restartPolicyOf(c.Policy, v1.ResourceMemory) == v1.RestartContainer
}

func restartPolicyOf(ps []v1.ContainerResizePolicy, name v1.ResourceName) v1.ResourceResizeRestartPolicy {
	return restartPolicy(&v1.Container{ResizePolicy: ps}, name)
}

func memoryUpdate(c Container) (update, bool) {
	a, b := c.Allocated, c.Actuated
	u := update{c: c, newLimit: a.MemLimit, oldLimit: b.MemLimit}
	switch {
	case a.MemLimit != b.MemLimit:
		u.from, u.to = b.MemLimit, a.MemLimit
	case a.MemRequest != b.MemRequest:
		u.from, u.to = b.MemRequest, a.MemRequest
	default:
		return u, false
	}
	return u, true
}

func cpuUpdate(c Container) (update, bool) {
	a, b := c.Allocated, c.Actuated
	u := update{c: c}
	switch {
	case a.CPULimit != b.CPULimit:
		u.from, u.to = b.CPULimit, a.CPULimit
	case a.CPURequest != b.CPURequest:
		u.from, u.to = b.CPURequest, a.CPURequest
	default:
		return u, false
	}
	return u, true
}

// insert puts a decrease before every update so far and an increase after
// them, as the kubelet orders ContainersToUpdate.
func insert(us []update, u update) []update {
	if u.to < u.from {
		return append([]update{u}, us...)
	}
	return append(us, u)
}

// memorySteps is the memory phase: it runs when a container's memory
// changes in place or a container restarts (the kubelet's
// UpdatePodResources), and writes the pod cgroup only where it differs.
func memorySteps(in Input, us []update, cur map[string]Resources, restarts bool) []Step {
	if len(us) == 0 && !restarts {
		return nil
	}
	from, to := in.PodCurrent.MemoryLimit, in.PodDesired.MemoryLimit
	if to == 0 {
		// No pod limit: the current one stays (removing a limit is not
		// supported, as in the kubelet).
		to = from
	}
	var steps []Step
	if growing(unlimited(from), unlimited(to)) {
		steps = append(steps, Step{Kind: SetPodMemoryLimit, Value: to})
	}
	for _, u := range us {
		r := cur[u.c.Name]
		r.MemLimit, r.MemRequest = u.c.Allocated.MemLimit, u.c.Allocated.MemRequest
		cur[u.c.Name] = r
		steps = append(steps, Step{Kind: UpdateContainer, Container: u.c.Name, ContainerID: u.c.ID, Resources: r})
	}
	if shrinking(unlimited(from), unlimited(to)) {
		steps = append(steps, Step{Kind: SetPodMemoryLimit, Value: to})
	}
	return steps
}

// cpuSteps is the CPU phase, run as memorySteps is.
func cpuSteps(in Input, us []update, cur map[string]Resources, restarts bool) []Step {
	if len(us) == 0 && !restarts {
		return nil
	}
	qFrom, qTo := in.PodCurrent.CPUQuota, in.PodDesired.CPUQuota
	if qTo == 0 {
		qTo = qFrom
	}
	sFrom, sTo := in.PodCurrent.CPUShares, in.PodDesired.CPUShares
	var steps []Step
	if growing(qFrom, qTo) {
		steps = append(steps, Step{Kind: SetPodCPUQuota, Value: qTo})
	}
	if sTo > sFrom {
		steps = append(steps, Step{Kind: SetPodCPUShares, Value: sTo})
	}
	for _, u := range us {
		r := cur[u.c.Name]
		r.CPULimit, r.CPURequest = u.c.Allocated.CPULimit, u.c.Allocated.CPURequest
		cur[u.c.Name] = r
		steps = append(steps, Step{Kind: UpdateContainer, Container: u.c.Name, ContainerID: u.c.ID, Resources: r})
	}
	if sTo < sFrom {
		steps = append(steps, Step{Kind: SetPodCPUShares, Value: sTo})
	}
	if shrinking(qFrom, qTo) {
		steps = append(steps, Step{Kind: SetPodCPUQuota, Value: qTo})
	}
	return steps
}

// unlimited maps a memory limit of 0 (none) to -1, as growing and
// shrinking take it.
func unlimited(v int64) int64 {
	if v == 0 {
		return -1
	}
	return v
}

// growing and shrinking compare CFS quotas, where -1 (the kernel's "no
// quota") is the largest.
func growing(from, to int64) bool   { return from != to && (to < 0 || (from >= 0 && to > from)) }
func shrinking(from, to int64) bool { return from != to && !growing(from, to) }

func decreasingMemory(us []update) map[string]int64 {
	out := map[string]int64{}
	for _, u := range us {
		if u.newLimit != 0 && (u.oldLimit == 0 || u.newLimit < u.oldLimit) {
			out[u.c.Name] = u.newLimit
		}
	}
	return out
}
