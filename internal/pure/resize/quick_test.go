package resize_test

import (
	"math/rand"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/resize"
)

// TestPlanQuick checks Compute against a naive reading of the kubelet's
// rules on random pods: a container with a changed resource under a
// RestartContainer policy is restarted and never updated; every other
// changed container ends with exactly its allocation; the pod's memory limit
// is written before its CPU values (the order inside a phase is in
// testdata/plan.txt).
func TestPlanQuick(t *testing.T) {
	values := []int64{0, 10, 20, 30}
	pick := func(r *rand.Rand) int64 { return values[r.Intn(len(values))] }
	res := func(r *rand.Rand) resize.Resources {
		return resize.Resources{CPURequest: pick(r), CPULimit: pick(r), MemRequest: pick(r), MemLimit: pick(r)}
	}
	check := func(seed int64) bool {
		r := rand.New(rand.NewSource(seed))
		var in resize.Input
		names := []string{"a", "b", "c"}[:1+r.Intn(3)]
		for _, n := range names {
			c := resize.Container{Name: n, ID: n, Allocated: res(r), Actuated: res(r)}
			if r.Intn(3) == 0 {
				c.Policy = []v1.ContainerResizePolicy{{ResourceName: []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}[r.Intn(2)], RestartPolicy: v1.RestartContainer}}
			}
			in.Containers = append(in.Containers, c)
		}
		in.PodCurrent = resize.PodCgroup{CPUShares: pick(r), CPUQuota: pick(r), MemoryLimit: pick(r)}
		in.PodDesired = resize.PodCgroup{CPUShares: pick(r), CPUQuota: pick(r), MemoryLimit: pick(r)}
		p := resize.Compute(in)

		restarted := map[string]bool{}
		for _, x := range p.Restart {
			restarted[x.Container] = true
		}
		last := map[string]resize.Resources{}
		phase := 0 // 0 memory, 1 cpu (from the first pod CPU write)
		for _, s := range p.Steps {
			switch s.Kind {
			case resize.SetPodCPUQuota, resize.SetPodCPUShares:
				phase = 1
			case resize.SetPodMemoryLimit:
				if phase == 1 {
					t.Logf("seed %d: memory step after a CPU step", seed)
					return false
				}
			case resize.UpdateContainer:
				if restarted[s.Container] {
					t.Logf("seed %d: %s restarted and updated", seed, s.Container)
					return false
				}
				last[s.Container] = s.Resources
			}
		}
		for _, c := range in.Containers {
			changed := c.Allocated != c.Actuated
			wantRestart := changed && naiveRestart(c)
			if restarted[c.Name] != wantRestart {
				t.Logf("seed %d: %s restarted=%t, want %t", seed, c.Name, restarted[c.Name], wantRestart)
				return false
			}
			if changed && !wantRestart && last[c.Name] != c.Allocated {
				t.Logf("seed %d: %s ends at %+v, want %+v", seed, c.Name, last[c.Name], c.Allocated)
				return false
			}
			if !changed {
				if _, ok := last[c.Name]; ok {
					t.Logf("seed %d: unchanged %s updated", seed, c.Name)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 2000}); err != nil {
		t.Error(err)
	}
}

func naiveRestart(c resize.Container) bool {
	for _, p := range c.Policy {
		if p.RestartPolicy != v1.RestartContainer {
			continue
		}
		a, b := c.Allocated, c.Actuated
		if p.ResourceName == v1.ResourceCPU && (a.CPURequest != b.CPURequest || a.CPULimit != b.CPULimit) {
			return true
		}
		if p.ResourceName == v1.ResourceMemory && (a.MemRequest != b.MemRequest || a.MemLimit != b.MemLimit) {
			return true
		}
	}
	return false
}
