package resize_test

// The actuation plans as golden files (testdata/plan.txt; regenerate with
// `go test ./internal/pure/resize -rewrite` and read the diff first).
//
// Each "plan" command describes the pod cgroup and the running containers:
//
//	pod now=shares:N,quota:N,mem:Q want=shares:N,quota:N,mem:Q
//	container NAME actual=CPUREQ/CPULIM,MEMREQ/MEMLIM want=... [cpu=POLICY]
//	    [memory=POLICY] [init] [unknown]
//
// A resource is a quantity or - for unset; quota -1 is no quota, mem 0 no
// limit. POLICY is NotRequired or RestartContainer; unknown means no
// actuated record (actual is then ignored: zero values). The output lists
// the restarts, the steps in order, and the memory decrease to check.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

func TestPlan(t *testing.T) {
	datadriven.RunTest(t, "testdata/plan.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "plan" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		in, err := parsePlanInput(d.Input)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		return renderPlan(in, resize.Compute(in))
	})
}

func parsePlanInput(input string) (resize.Input, error) {
	var in resize.Input
	for _, l := range strings.Split(input, "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		a := testutil.ParseGoldenLine(l)
		var err error
		switch a.Kind {
		case "pod":
			if in.PodCurrent, err = parseCgroup(a.KV["now"]); err == nil {
				in.PodDesired, err = parseCgroup(a.KV["want"])
			}
		case "container":
			var c resize.Container
			c, err = parseContainer(a)
			in.Containers = append(in.Containers, c)
		default:
			err = fmt.Errorf("unknown line %q", a.Kind)
		}
		if err != nil {
			return in, fmt.Errorf("%q: %w", l, err)
		}
	}
	return in, nil
}

func parseCgroup(s string) (resize.PodCgroup, error) {
	var p resize.PodCgroup
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, ":")
		switch k {
		case "shares", "quota":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return p, err
			}
			if k == "shares" {
				p.CPUShares = n
			} else {
				p.CPUQuota = n
			}
		case "mem":
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return p, err
			}
			p.MemoryLimit = q.Value()
		default:
			return p, fmt.Errorf("unknown pod cgroup key %q", k)
		}
	}
	return p, nil
}

func parseContainer(a testutil.GoldenLine) (resize.Container, error) {
	c := resize.Container{Name: a.Words[0], ID: a.Words[0] + "-id", Init: a.Has("init")}
	var err error
	if !a.Has("unknown") {
		if c.Actuated, err = parseResources(a.KV["actual"]); err != nil {
			return c, err
		}
	}
	if c.Allocated, err = parseResources(a.KV["want"]); err != nil {
		return c, err
	}
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if p, ok := a.KV[string(r)]; ok {
			c.Policy = append(c.Policy, v1.ContainerResizePolicy{ResourceName: r, RestartPolicy: v1.ResourceResizeRestartPolicy(p)})
		}
	}
	return c, nil
}

// parseResources reads CPUREQ/CPULIM,MEMREQ/MEMLIM.
func parseResources(s string) (resize.Resources, error) {
	cpu, mem, ok := strings.Cut(s, ",")
	if !ok {
		return resize.Resources{}, fmt.Errorf("resources %q: want CPUREQ/CPULIM,MEMREQ/MEMLIM", s)
	}
	var v [4]int64
	for i, q := range append(strings.Split(cpu, "/"), strings.Split(mem, "/")...) {
		if i > 3 {
			return resize.Resources{}, fmt.Errorf("resources %q: too many values", s)
		}
		if q == "-" {
			continue
		}
		p, err := resource.ParseQuantity(q)
		if err != nil {
			return resize.Resources{}, err
		}
		if i < 2 {
			v[i] = p.MilliValue()
		} else {
			v[i] = p.Value()
		}
	}
	return resize.Resources{CPURequest: v[0], CPULimit: v[1], MemRequest: v[2], MemLimit: v[3]}, nil
}

func renderPlan(in resize.Input, p resize.Plan) string {
	var b strings.Builder
	if p.Empty() {
		b.WriteString("nothing to do\n")
	}
	for _, r := range p.Restart {
		fmt.Fprintf(&b, "restart %s init=%t: %s\n", r.Container, r.Init, r.Message)
	}
	for _, s := range p.Steps {
		switch s.Kind {
		case resize.SetPodMemoryLimit:
			fmt.Fprintf(&b, "pod memory limit %s\n", mem(s.Value))
		case resize.SetPodCPUQuota:
			fmt.Fprintf(&b, "pod cpu quota %d\n", s.Value)
		case resize.SetPodCPUShares:
			fmt.Fprintf(&b, "pod cpu shares %d\n", s.Value)
		case resize.UpdateContainer:
			r := s.Resources
			fmt.Fprintf(&b, "update %s (%s) cpu=%s/%s memory=%s/%s\n", s.Container, s.ContainerID,
				cpu(r.CPURequest), cpu(r.CPULimit), mem(r.MemRequest), mem(r.MemLimit))
		}
	}
	if p.PodMemoryDecreasing {
		fmt.Fprintf(&b, "check pod memory below %s\n", mem(in.PodDesired.MemoryLimit))
	}
	names := make([]string, 0, len(p.DecreasingMemory))
	for n := range p.DecreasingMemory {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "check %s memory below %s\n", n, mem(p.DecreasingMemory[n]))
	}
	return b.String()
}

func cpu(m int64) string {
	if m == 0 {
		return "-"
	}
	return resource.NewMilliQuantity(m, resource.DecimalSI).String()
}

func mem(v int64) string {
	if v == 0 {
		return "-"
	}
	return resource.NewQuantity(v, resource.BinarySI).String()
}
