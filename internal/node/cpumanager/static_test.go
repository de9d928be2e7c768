package cpumanager

// The static policy's decisions as golden files (testdata/*.txt; run
// `go test ./internal/node/cpumanager -rewrite` to regenerate them, and
// read the diff first).
//
// Commands:
//
//	machine cpus=N [threads=T] [sockets=S] [reserved=LIST] [reservedMilli=M] [single-numa-node]
//	    N logical CPUs, T per core numbered as Linux does (the siblings of
//	    CPU i are i + N/T, ...), S sockets each its own NUMA node; the
//	    policy (NewStatic, topologyManagerPolicy single-numa-node or none)
//	    and the initial state.
//	pod NAME [burstable] [init=(C:CPU,...)] [sidecars=(C:CPU,...)] containers=(C:CPU,...)
//	    a pod; Guaranteed (limits = requests, memory too) unless burstable.
//	allocate POD CONTAINER     the container's CPUs and the state after.
//	remove POD CONTAINER       the state after.
//	validate [default=LIST] [POD/CONTAINER=LIST ...]   a restored state.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/cpuset"
)

func TestStaticGolden(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var policy Static
		var state State
		pods := map[string]*v1.Pod{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "machine":
				var err error
				if policy, err = newMachine(d); err != nil {
					return "error: " + err.Error() + "\n"
				}
				state = policy.Initial()
				return fmt.Sprintf("reserved: %s\n", policy.Reserved) + render(state)
			case "pod":
				pod := newPod(t, d)
				pods[pod.Name] = pod
				return ""
			case "allocate":
				pod, c := lookup(t, d, pods)
				next, cpus, err := policy.Allocate(state, pod, c)
				if ae := (*AdmissionError)(nil); errors.As(err, &ae) {
					return fmt.Sprintf("refused: %s: %s\n", ae.Reason, ae.Message) + render(next)
				}
				if err != nil {
					return "error: " + err.Error() + "\n" + render(next)
				}
				state = next
				got := "shared"
				if !cpus.IsEmpty() {
					got = cpus.String()
				}
				return fmt.Sprintf("cpus: %s\n", got) + render(state)
			case "remove":
				pod, c := lookup(t, d, pods)
				state = policy.Remove(state, pod.UID, c.Name)
				return render(state)
			case "validate":
				s := State{Assignments: map[types.UID]map[string]cpuset.Set{}}
				for _, arg := range d.CmdArgs {
					set := mustParse(t, arg.Vals[0])
					if arg.Key == "default" {
						s.Default = set
						continue
					}
					uid, name, _ := strings.Cut(arg.Key, "/")
					if s.Assignments[types.UID(uid)] == nil {
						s.Assignments[types.UID(uid)] = map[string]cpuset.Set{}
					}
					s.Assignments[types.UID(uid)][name] = set
				}
				if err := policy.Validate(s); err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			}
			t.Fatalf("unknown command %s", d.Cmd)
			return ""
		})
	})
}

func newMachine(d *datadriven.TestData) (Static, error) {
	n, threads, sockets := 0, 1, 1
	var reserved cpuset.Set
	var milli int64
	single := false
	for _, arg := range d.CmdArgs {
		v := ""
		if len(arg.Vals) > 0 {
			v = arg.Vals[0]
		}
		switch arg.Key {
		case "cpus":
			n, _ = strconv.Atoi(v)
		case "threads":
			threads, _ = strconv.Atoi(v)
		case "sockets":
			sockets, _ = strconv.Atoi(v)
		case "reserved":
			var err error
			if reserved, err = cpuset.Parse(v); err != nil {
				return Static{}, err
			}
		case "reservedMilli":
			milli, _ = strconv.ParseInt(v, 10, 64)
		case "single-numa-node":
			single = true
		}
	}
	p, err := NewStatic(linuxTopology(n, threads, sockets), reserved, milli)
	p.SingleNUMANode = single
	return p, err
}

// linuxTopology numbers CPUs as Linux does on x86: the first thread of
// every core, then the second ones.
func linuxTopology(n, threads, sockets int) Topology {
	cores := n / threads
	perSocket := cores / sockets
	topo := make(Topology, n)
	for id := range n {
		core := id % cores
		topo[id] = CPU{ID: id, Core: core, Socket: core / perSocket, NUMA: core / perSocket}
	}
	return topo
}

func newPod(t *testing.T, d *datadriven.TestData) *v1.Pod {
	pod := &v1.Pod{}
	burstable := false
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "burstable":
			burstable = true
		case "init", "sidecars", "containers":
			for _, v := range arg.Vals {
				name, cpu, _ := strings.Cut(v, ":")
				c := v1.Container{Name: name}
				q := resource.MustParse(cpu)
				mem := resource.MustParse("64Mi")
				c.Resources.Requests = v1.ResourceList{v1.ResourceCPU: q, v1.ResourceMemory: mem}
				c.Resources.Limits = v1.ResourceList{v1.ResourceCPU: q, v1.ResourceMemory: mem}
				switch arg.Key {
				case "init":
					pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
				case "sidecars":
					always := v1.ContainerRestartPolicyAlways
					c.RestartPolicy = &always
					pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
				default:
					pod.Spec.Containers = append(pod.Spec.Containers, c)
				}
			}
		default:
			pod.Name = arg.Key
		}
	}
	if burstable {
		for i := range pod.Spec.Containers {
			delete(pod.Spec.Containers[i].Resources.Limits, v1.ResourceMemory)
		}
	}
	pod.UID = types.UID(pod.Name)
	if pod.Name == "" {
		t.Fatal("pod without a name")
	}
	return pod
}

func lookup(t *testing.T, d *datadriven.TestData, pods map[string]*v1.Pod) (*v1.Pod, *v1.Container) {
	if len(d.CmdArgs) != 2 {
		t.Fatalf("want POD CONTAINER")
	}
	pod := pods[d.CmdArgs[0].Key]
	if pod == nil {
		t.Fatalf("no pod %s", d.CmdArgs[0].Key)
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == d.CmdArgs[1].Key {
				return pod, &list[i]
			}
		}
	}
	t.Fatalf("no container %s in pod %s", d.CmdArgs[1].Key, pod.Name)
	return nil, nil
}

func mustParse(t *testing.T, s string) cpuset.Set {
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// render is the state, assignments sorted.
func render(s State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "default: %s\n", s.Default)
	var lines []string
	for uid, byName := range s.Assignments {
		for name, cpus := range byName {
			lines = append(lines, fmt.Sprintf("%s/%s: %s\n", uid, name, cpus))
		}
	}
	sortStrings(lines)
	for _, l := range lines {
		b.WriteString(l)
	}
	return b.String()
}

func sortStrings(s []string) { slices.Sort(s) }
