package cpumanager

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/cpuset"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// This machine's shape: two CPUs, one core each, CPU 0 reserved.
func twoCPUs(dir string) Options {
	return Options{Policy: PolicyStatic, RootDir: dir, Topology: linuxTopology(2, 1, 1), ReservedSystemCPUs: cpuset.New(0)}
}

func guaranteed(uid string, cpus ...string) *v1.Pod {
	pod := &v1.Pod{}
	pod.UID, pod.Name = types.UID(uid), uid
	for i, cpu := range cpus {
		l := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("64Mi")}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: v1.ResourceRequirements{Requests: l, Limits: l}})
	}
	return pod
}

func TestAdmitAllocatesAndRestartKeepsIt(t *testing.T) {
	dir := t.TempDir()
	m, err := New(twoCPUs(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ContainerCPUs("p1", "a"); got != "0-1" {
		t.Errorf("before: shared pool %q, want 0-1", got)
	}
	if ok, reason, msg := m.Admit(t.Context(), guaranteed("p1", "1", "100m")); !ok {
		t.Fatalf("refused: %s %s", reason, msg)
	}
	if got := m.ContainerCPUs("p1", "a"); got != "1" {
		t.Errorf("exclusive %q, want 1", got)
	}
	if got := m.ContainerCPUs("p1", "b"); got != "0" {
		t.Errorf("shared %q, want 0", got)
	}
	if got := m.CPUsFor("p1", "a"); !slices.Equal(got, []int64{1}) {
		t.Errorf("CPUsFor %v", got)
	}
	if got := m.CPUsFor("p1", "b"); got != nil {
		t.Errorf("CPUsFor a shared container: %v", got)
	}
	if got := m.AllocatableCPUs(); !slices.Equal(got, []int64{1}) {
		t.Errorf("AllocatableCPUs %v", got)
	}
	// A second pod finds no CPU: the kubelet's reason, nothing held.
	ok, reason, msg := m.Admit(t.Context(), guaranteed("p2", "1"))
	if ok || reason != ReasonUnexpectedAdmission || msg != "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected" {
		t.Errorf("second pod: %v %q %q", ok, reason, msg)
	}
	if got := m.Pods(); !slices.Equal(got, []types.UID{"p1"}) {
		t.Errorf("pods %v", got)
	}
	// Restarted: the same assignment, from the checkpoint (0600).
	m2, err := New(twoCPUs(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got := m2.ContainerCPUs("p1", "a"); got != "1" {
		t.Errorf("after restart %q, want 1", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, StateFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint %v %v", fi, err)
	}
	if err := m2.RemovePod("p1"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := m2.Admit(t.Context(), guaranteed("p2", "1")); !ok || m2.ContainerCPUs("p2", "a") != "1" {
		t.Errorf("after the first pod went: %v %q", ok, m2.ContainerCPUs("p2", "a"))
	}
}

// A pod whose second container cannot have its CPUs holds none.
func TestAdmitRollsBack(t *testing.T) {
	m, err := New(Options{Policy: PolicyStatic, RootDir: t.TempDir(), Topology: linuxTopology(4, 1, 1), ReservedSystemCPUs: cpuset.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := m.Admit(t.Context(), guaranteed("p", "2", "2")); ok {
		t.Fatal("admitted 4 CPUs of 3")
	}
	if got := m.ContainerCPUs("other", "x"); got != "0-3" || len(m.Pods()) != 0 {
		t.Errorf("shared pool %q, pods %v after a refusal", got, m.Pods())
	}
}

func TestSingleNUMANodeRefusal(t *testing.T) {
	opts := Options{Policy: PolicyStatic, TopologyPolicy: TopologyPolicySingleNUMANode, RootDir: t.TempDir(),
		Topology: linuxTopology(4, 1, 2), ReservedSystemCPUs: cpuset.New(0)}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ok, reason, msg := m.Admit(t.Context(), guaranteed("p", "3"))
	if ok || reason != "TopologyAffinityError" || msg != "Resources cannot be allocated with Topology locality" {
		t.Errorf("3 CPUs over 2 NUMA nodes: %v %q %q", ok, reason, msg)
	}
	if ok, _, _ := m.Admit(t.Context(), guaranteed("q", "2")); !ok || m.ContainerCPUs("q", "a") != "2-3" {
		t.Errorf("2 CPUs of node 1: %v %q", ok, m.ContainerCPUs("q", "a"))
	}
}

func TestCheckpointRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first Options // writes the checkpoint (zero: content below)
		file  string
		then  func(dir string) Options
		err   string
	}{
		{name: "none, then static", first: Options{Policy: PolicyNone},
			then: twoCPUs, err: `configured policy "static" differs from state checkpoint policy "none"`},
		{name: "static, then none", first: Options{Policy: PolicyStatic, Topology: linuxTopology(2, 1, 1), ReservedSystemCPUs: cpuset.New(0)},
			then: func(dir string) Options { return Options{RootDir: dir} }, err: `configured policy "none" differs from state checkpoint policy "static"`},
		{name: "another machine", first: Options{Policy: PolicyStatic, Topology: linuxTopology(4, 1, 1), ReservedSystemCPUs: cpuset.New(0)},
			then: twoCPUs, err: `current set of available CPUs "0-1" doesn't match with CPUs in state "0-3"`},
		{name: "other reserved CPUs", first: Options{Policy: PolicyStatic, Topology: linuxTopology(2, 1, 1), ReservedSystemCPUs: cpuset.New(1)},
			file: "", then: twoCPUs},
		{name: "checksum", file: `{"policyName":"static","defaultCpuSet":"0-1","checksum":1}`, then: twoCPUs, err: "checksum mismatch"},
		{name: "not JSON", file: `{`, then: twoCPUs, err: "corrupt checkpoint"},
		{name: "too large", file: strings.Repeat(" ", maxStateFile+1), then: twoCPUs, err: "read "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				tc.first.RootDir = dir
				if _, err := New(tc.first); err != nil {
					t.Fatal(err)
				}
			}
			_, err := New(tc.then(dir))
			if tc.err == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "delete the CPU manager checkpoint file") && tc.name != "too large" {
				t.Errorf("err %v, want %q", err, tc.err)
			}
		})
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		err  string
	}{
		{Options{Policy: "dynamic"}, `cpuManagerPolicy "dynamic"`},
		{Options{Policy: PolicyStatic, Topology: linuxTopology(2, 1, 1)}, "requires systemreserved.cpu + kubereserved.cpu to be greater than zero"},
		{Options{TopologyPolicy: "restricted"}, `topologyManagerPolicy "restricted"`},
	} {
		tc.opts.RootDir = t.TempDir()
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: err %v, want %q", tc.opts, err, tc.err)
		}
	}
}

// The none policy sets no cpuset and allocates nothing.
func TestNonePolicy(t *testing.T) {
	m, err := New(Options{RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := m.Admit(t.Context(), guaranteed("p", "64")); !ok || m.ContainerCPUs("p", "a") != "" || m.AllocatableCPUs() != nil {
		t.Errorf("none policy: %v %q", ok, m.ContainerCPUs("p", "a"))
	}
}

type fakeRuntime struct {
	containers []*runtimeapi.Container
	updates    map[string]string
	fail       bool
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return f.containers, nil
}

func (f *fakeRuntime) UpdateContainerResources(_ context.Context, id string, res *runtimeapi.ContainerResources) error {
	if f.fail {
		return context.DeadlineExceeded
	}
	f.updates[id] = res.GetLinux().GetCpusetCpus()
	return nil
}

func running(id, uid, name string) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, Labels: map[string]string{podspec.LabelPodUID: uid, podspec.LabelContainerName: name}}
}

// A container on the shared pool leaves the CPU given exclusively to
// another, and gets it back when that one goes; each change is sent once.
func TestReconcile(t *testing.T) {
	m, err := New(twoCPUs(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{containers: []*runtimeapi.Container{running("c1", "shared", "a"), {Id: "not-a-pod"}}, updates: map[string]string{}}
	ctx := context.Background()
	m.Reconcile(ctx, rt)
	if rt.updates["c1"] != "0-1" || len(rt.updates) != 1 {
		t.Fatalf("first pass %v", rt.updates)
	}
	if ok, _, _ := m.Admit(t.Context(), guaranteed("p", "1")); !ok {
		t.Fatal("refused")
	}
	rt.containers = append(rt.containers, running("c2", "p", "a"))
	clear(rt.updates)
	m.Reconcile(ctx, rt)
	if rt.updates["c1"] != "0" || rt.updates["c2"] != "1" {
		t.Errorf("after the exclusive pod: %v", rt.updates)
	}
	clear(rt.updates)
	m.Reconcile(ctx, rt)
	if len(rt.updates) != 0 {
		t.Errorf("nothing changed, still sent %v", rt.updates)
	}
	// A failed update is tried again.
	if err := m.RemovePod("p"); err != nil {
		t.Fatal(err)
	}
	rt.containers = rt.containers[:1]
	rt.fail = true
	m.Reconcile(ctx, rt)
	rt.fail = false
	m.Reconcile(ctx, rt)
	if rt.updates["c1"] != "0-1" {
		t.Errorf("after the exclusive pod went: %v", rt.updates)
	}
}

// A root directory not made yet is made (0700), as other state under it.
func TestNewMakesRootDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	if _, err := New(Options{RootDir: dir}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, StateFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint %v %v", fi, err)
	}
}

// The cost of admitting a pod with an exclusive CPU and giving it back:
// two checkpoint writes (each fsynced) dominate.
func BenchmarkAdmitAndRemove(b *testing.B) {
	m, err := New(Options{Policy: PolicyStatic, RootDir: b.TempDir(), Topology: linuxTopology(64, 2, 2), ReservedSystemCPUs: cpuset.New(0, 32)})
	if err != nil {
		b.Fatal(err)
	}
	pod := guaranteed("p", "4", "100m")
	for b.Loop() {
		if ok, reason, msg := m.Admit(b.Context(), pod); !ok {
			b.Fatal(reason, msg)
		}
		if err := m.RemovePod(pod.UID); err != nil {
			b.Fatal(err)
		}
	}
}

// The static policy's decision alone, on a 64-CPU machine.
func BenchmarkStaticAllocate(b *testing.B) {
	p, err := NewStatic(linuxTopology(64, 2, 2), cpuset.New(0, 32), 0)
	if err != nil {
		b.Fatal(err)
	}
	s := p.Initial()
	pod := guaranteed("p", "4")
	for b.Loop() {
		if _, _, err := p.Allocate(s, pod, &pod.Spec.Containers[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// Asking again for a pod's CPUs (every sync does) and giving back a pod
// that has none write nothing.
func TestNoWriteWithoutChange(t *testing.T) {
	dir := t.TempDir()
	m, err := New(twoCPUs(dir))
	if err != nil {
		t.Fatal(err)
	}
	pod := guaranteed("p", "1")
	if err := m.Allocate(pod); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, StateFileName)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := m.Allocate(pod); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod("other"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("checkpoint written without a change")
	}
	if err := m.RemovePod("p"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("checkpoint not written after a change: %v", err)
	}
}
