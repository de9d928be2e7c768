package podsetup

import (
	"context"
	"errors"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// mount contributes one mount named name, resources when given, and an
// annotation.
func mount(name string, res *runtimeapi.LinuxContainerResources) Contributor {
	return ContributorFunc(func(Container) (Additions, error) {
		return Additions{Mounts: []*runtimeapi.Mount{{ContainerPath: name}}, Resources: res, Annotations: map[string]string{"by": name}}, nil
	})
}

func paths(ms []*runtimeapi.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ContainerPath)
	}
	return out
}

// Merge: a later setup's single values replace an earlier one's only when
// set; lists keep the hooks' order.
func TestMerge(t *testing.T) {
	ns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
	check := func(context.Context, string) error { return nil }
	creds := pullcreds.Union{}
	got := Merge(
		Setup{PodDir: "/pods/u", Containers: []Contributor{mount("a", nil)}},
		Setup{CgroupParent: "kubepods-podu.slice", PullCredentials: creds, PodCgroup: fakePodCgroup{}},
		Setup{UserNamespace: ns, SandboxChecks: []Check{check}, Containers: []Contributor{mount("b", nil)}},
		Setup{},
	)
	if got.PodDir != "/pods/u" || got.CgroupParent != "kubepods-podu.slice" || got.UserNamespace != ns || len(got.SandboxChecks) != 1 ||
		got.PullCredentials == nil || got.PodCgroup == nil {
		t.Errorf("merged %+v", got)
	}
	add, err := got.Apply(Container{})
	if err != nil || !slices.Equal(paths(add.Mounts), []string{"a", "b"}) || add.Annotations["by"] != "b" {
		t.Errorf("applied %+v %v", add, err)
	}
	if zero := Merge(); zero.PodDir != "" || zero.Containers != nil || zero.Probes != nil || zero.PullCredentials != nil || zero.PodCgroup != nil {
		t.Errorf("Merge() = %+v, want the zero value", zero)
	}
}

type fakePodCgroup struct{}

func (fakePodCgroup) Now() (resize.PodCgroup, error) { return resize.PodCgroup{}, nil }
func (fakePodCgroup) Want() resize.PodCgroup         { return resize.PodCgroup{} }
func (fakePodCgroup) Set(resize.Step) error          { return nil }
func (fakePodCgroup) MemoryUsage() (uint64, error)   { return 0, nil }

// Apply: a later contributor's resources replace an earlier one's, and
// the first error is the container's.
func TestApply(t *testing.T) {
	first, second := &runtimeapi.LinuxContainerResources{CpuShares: 2}, &runtimeapi.LinuxContainerResources{CpuShares: 3}
	s := Setup{Containers: []Contributor{mount("a", first), mount("b", second), mount("c", nil)}}
	add, err := s.Apply(Container{})
	if err != nil || add.Resources != second {
		t.Errorf("resources %v %v, want the last set", add.Resources, err)
	}
	boom := errors.New("no such volume")
	s.Containers = append(s.Containers, ContributorFunc(func(Container) (Additions, error) { return Additions{}, boom }))
	if _, err := s.Apply(Container{}); !errors.Is(err, boom) {
		t.Errorf("Apply = %v, want %v", err, boom)
	}
}

// The CPU manager's cpuset goes into the resources whoever made them,
// without changing the contributor's; alone, it makes resources of its own.
func TestApplyCpusetCpus(t *testing.T) {
	res := &runtimeapi.LinuxContainerResources{CpuShares: 1024}
	cpus := ContributorFunc(func(Container) (Additions, error) { return Additions{CpusetCpus: "1"}, nil })
	add, err := Setup{Containers: []Contributor{cpus, mount("a", res)}}.Apply(Container{})
	if err != nil || add.Resources.GetCpusetCpus() != "1" || add.Resources.GetCpuShares() != 1024 || res.CpusetCpus != "" {
		t.Errorf("resources %v (contributor's %v), %v", add.Resources, res, err)
	}
	add, err = Setup{Containers: []Contributor{cpus}}.Apply(Container{})
	if err != nil || add.Resources.GetCpusetCpus() != "1" {
		t.Errorf("cpuset alone: %v %v", add.Resources, err)
	}
	add, _ = Setup{Containers: []Contributor{mount("a", res)}}.Apply(Container{})
	if add.Resources != res {
		t.Errorf("without a cpuset the resources are the contributor's")
	}
}
