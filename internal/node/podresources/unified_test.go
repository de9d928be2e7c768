package podresources

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (-update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// allControllers is what a cgroup v2 host with systemd usually offers.
var allControllers = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}

func TestFakeCgroup2BehavesLikeTheKernel(t *testing.T) {
	f := newFakeCgroup2("cpu", "memory")
	if err := f.WriteFile("cgroup.subtree_control", []byte("+pids")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("+pids without the controller: %v, want ENOENT", err)
	}
	if err := f.Mkdir("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFile("a/cpu.weight"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cpu.weight before +cpu: %v", err)
	}
	if err := f.WriteFile("a/cgroup.subtree_control", []byte("+cpu")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("+cpu in a child whose parent did not enable it: %v", err)
	}
	if err := f.WriteFile("cgroup.subtree_control", []byte("+cpu")); err != nil {
		t.Fatal(err)
	}
	if b, err := f.ReadFile("a/cpu.weight"); err != nil || string(b) != "100\n" {
		t.Errorf("cpu.weight after +cpu: %q %v", b, err)
	}
	if _, err := f.ReadFile("a/memory.max"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("memory.max without +memory: %v", err)
	}
	if err := f.Mkdir("a/b"); err != nil {
		t.Fatal(err)
	}
	if err := f.addProc("a", 10); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile("a/cgroup.subtree_control", []byte("+cpu")); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("no internal processes: %v, want EBUSY", err)
	}
	if err := f.Rmdir("a"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("rmdir with a child and a process: %v", err)
	}
	if err := f.addProc("a/b", 10); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile("a/cgroup.subtree_control", []byte("+cpu")); err != nil {
		t.Fatalf("process moved to the leaf: %v", err)
	}
	if err := f.addProc("a", 11); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("joining a cgroup with controllers for children: %v", err)
	}
	if err := f.WriteFile("cgroup.subtree_control", []byte("-cpu")); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("-cpu while a child enables it: %v", err)
	}
	if err := f.Rmdir("a/b"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("rmdir with a process: %v", err)
	}
	if err := f.WriteFile("a/cgroup.kill", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := f.Rmdir("a/b"); err != nil {
		t.Errorf("rmdir after cgroup.kill: %v", err)
	}
	if err := f.WriteFile("a/cpu.weight", []byte("0")); err == nil {
		t.Error("cpu.weight 0 accepted")
	}
	if err := f.WriteFile("a/cgroup.controllers", []byte("cpu")); err == nil {
		t.Error("cgroup.controllers written")
	}
	if err := f.WriteFile("a/nosuch", []byte("1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file created: %v", err)
	}
}

func unifiedPod(uid string, r v1.ResourceRequirements) *v1.Pod {
	p := basePod()
	p.UID = types.UID(uid)
	p.Spec.Containers[0].Resources = r
	return p
}

func testQoS() *MemoryQoS {
	return &MemoryQoS{ThrottlingFactor: DefaultMemoryThrottlingFactor, NodeAllocatableMemory: 4 * gi, PageSize: 4096}
}

// goldenPods are one pod of each QoS class and the cases where the v2
// files differ: CPU limit or not, pod-level resources (pod memory.high),
// huge pages.
func goldenPods() []*v1.Pod {
	g := unifiedPod("g-1", rr("500m", "256Mi", "500m", "256Mi"))
	b := unifiedPod("b-1", rr("250m", "64Mi", "1", "128Mi"))
	bn := unifiedPod("b-2", rr("100m", "64Mi", "", ""))
	be := unifiedPod("e-1", v1.ResourceRequirements{})
	pl := unifiedPod("p-1", rr("100m", "100Mi", "", ""))
	pl.Spec.Resources = &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")},
	}
	hp := unifiedPod("h-1", rr("1", "1Gi", "1", "1Gi"))
	hp.Spec.Containers[0].Resources.Requests["hugepages-2Mi"] = resource.MustParse("4Mi")
	hp.Spec.Containers[0].Resources.Limits["hugepages-2Mi"] = resource.MustParse("4Mi")
	return []*v1.Pod{g, b, bn, be, pl, hp}
}

func TestUnifiedGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts UnifiedOptions
	}{
		{"cgroupfs", UnifiedOptions{PodPidsLimit: 1024}},
		{"cgroupfs-memoryqos", UnifiedOptions{MemoryQoS: testQoS()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCgroup2(allControllers...)
			m, err := NewUnified(f, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.EnsureQoS(); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			for _, p := range goldenPods() {
				parent, err := m.EnsurePod(p)
				if err != nil {
					t.Fatalf("%s: %v", p.UID, err)
				}
				if parent != m.CgroupParent(p) {
					t.Errorf("%s: EnsurePod %q, CgroupParent %q", p.UID, parent, m.CgroupParent(p))
				}
				fmt.Fprintf(&out, "pod %s: parent %s\n", p.UID, parent)
				for _, c := range p.Spec.Containers {
					fmt.Fprintf(&out, "  container %s unified: %v\n", c.Name, m.ContainerUnified(p, &c))
				}
			}
			out.WriteString("\n" + f.dump())
			golden(t, "unified-"+tc.name, out.String())
			// Idempotent: a second round writes nothing.
			n := len(f.writes)
			if err := m.EnsureQoS(); err != nil {
				t.Fatal(err)
			}
			for _, p := range goldenPods() {
				if _, err := m.EnsurePod(p); err != nil {
					t.Fatal(err)
				}
			}
			if len(f.writes) != n {
				t.Errorf("second round wrote %v", f.writes[n:])
			}
		})
	}
}

func TestUnifiedMissingControllerIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		avail []string
		setup func(f *fakeCgroup2)
		want  string
	}{
		{"no memory at the root", []string{"cpu", "pids", "hugetlb"}, nil, `controller "memory" is not available at the root`},
		{"only hugetlb", []string{"hugetlb"}, nil, `controller "cpu" is not available at the root`},
		{"kubepods made without cpu by someone else", allControllers, func(f *fakeCgroup2) {
			must(t, f.WriteFile("cgroup.subtree_control", []byte("+memory +pids")))
			must(t, f.Mkdir("kubepods"))
			must(t, f.Mkdir("kubepods/leaf"))
			must(t, f.addProc("kubepods", 7))
		}, "enable controller cpuset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCgroup2(tc.avail...)
			if tc.setup != nil {
				tc.setup(f)
			}
			m, err := NewUnified(f, UnifiedOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = m.EnsureQoS()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EnsureQoS: %v, want %q", err, tc.want)
			}
			if _, err := m.EnsurePod(unifiedPod("x", v1.ResourceRequirements{})); err == nil {
				t.Error("EnsurePod succeeded")
			}
		})
	}
	// The error names the controller and is ErrControllerMissing.
	m, _ := NewUnified(newFakeCgroup2("cpu", "pids"), UnifiedOptions{})
	if err := m.EnsureQoS(); !errors.Is(err, ErrControllerMissing) {
		t.Errorf("%v is not ErrControllerMissing", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnifiedRemovePod(t *testing.T) {
	f := newFakeCgroup2(allControllers...)
	m, _ := NewUnified(f, UnifiedOptions{})
	pods := goldenPods()
	for _, p := range pods {
		if _, err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	b := pods[1] // burstable, 250m
	// The runtime's container cgroup under the pod's, with a process.
	sandbox := "kubepods/burstable/podb-1/cri-sandbox"
	must(t, f.Mkdir(sandbox))
	must(t, f.addProc(sandbox, 42))
	// b-1 250m, b-2 100m, p-1 2 (its pod-level CPU limit, no request):
	// 2350m, 2406 shares.
	if got := read2(t, f, "kubepods/burstable/cpu.weight"); got != "92" {
		t.Errorf("burstable weight %s", got)
	}
	err := m.RemovePod(b.UID, "")
	if !errors.Is(err, ErrPodCgroupBusy) {
		t.Fatalf("busy pod: %v", err)
	}
	if _, err := f.ReadFile("kubepods/burstable/podb-1/cgroup.procs"); err != nil {
		t.Fatal("a busy pod cgroup was removed")
	}
	if !slices.Contains(f.writes, "kubepods/burstable/podb-1/cgroup.kill=1") {
		t.Errorf("leftovers not killed: %v", f.writes)
	}
	// Killed: the retry removes the tree, deepest first.
	if err := m.RemovePod(b.UID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Children("kubepods/burstable/podb-1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pod cgroup left: %v", err)
	}
	if got := read2(t, f, "kubepods/burstable/cpu.weight"); got != "82" { // 2100m, 2150 shares
		t.Errorf("burstable weight after removal %s", got)
	}
	if err := m.RemovePod(b.UID, v1.PodQOSBurstable); err != nil {
		t.Errorf("removing a missing cgroup: %v", err)
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	want := []types.UID{"b-2", "e-1", "g-1", "h-1", "p-1"}
	if !slices.Equal(uids, want) {
		t.Errorf("Pods = %v, want %v", uids, want)
	}
	// A new manager (nodelet restarted) finds and removes an orphan in
	// any tier.
	m2, _ := NewUnified(f, UnifiedOptions{})
	for _, uid := range want {
		if err := m2.RemovePod(uid, ""); err != nil {
			t.Fatal(err)
		}
	}
	if uids, _ := m2.Pods(); len(uids) != 0 {
		t.Errorf("left: %v", uids)
	}
	if err := m.RemovePod("../x", ""); err == nil {
		t.Error("bad UID accepted")
	}
}

func read2(t *testing.T, f FS, rel string) string {
	t.Helper()
	b, err := f.ReadFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSharesToWeight(t *testing.T) {
	for _, tc := range []struct{ shares, weight int64 }{
		{0, 0}, {2, 1}, {1, 1}, {102, 4}, {1024, 39}, {1024 * 4, 157}, {262144, 10000}, {300000, 10000},
	} {
		if got := SharesToWeight(tc.shares); got != tc.weight {
			t.Errorf("SharesToWeight(%d) = %d, want %d", tc.shares, got, tc.weight)
		}
	}
}

func TestContainerUnified(t *testing.T) {
	q := testQoS()
	page := int64(4096)
	floorPage := func(v float64) string { return fmt.Sprint(int64(v) / page * page) }
	for _, tc := range []struct {
		name string
		r    v1.ResourceRequirements
		pod  *v1.ResourceRequirements
		q    *MemoryQoS
		want map[string]string
	}{
		{"off", rr("", "64Mi", "", "128Mi"), nil, nil, map[string]string{"memory.high": "max"}},
		{"guaranteed", rr("1", "128Mi", "1", "128Mi"), nil, q, map[string]string{"memory.min": "0", "memory.low": "0"}},
		{"burstable with limit", rr("", "64Mi", "", "128Mi"), nil, q,
			map[string]string{"memory.min": "0", "memory.low": "0", "memory.high": floorPage(64<<20 + 0.9*(64<<20))}},
		{"no limit: node allocatable", rr("", "1Gi", "", ""), nil, q,
			map[string]string{"memory.min": "0", "memory.low": "0", "memory.high": floorPage(float64(gi) + 0.9*float64(3*gi))}},
		{"best effort", v1.ResourceRequirements{}, nil, q,
			map[string]string{"memory.min": "0", "memory.low": "0", "memory.high": floorPage(0.9 * float64(4*gi))}},
		{"no limit, pod-level limit: left to the pod", rr("", "64Mi", "", ""),
			&v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}, q,
			map[string]string{"memory.min": "0", "memory.low": "0"}},
	} {
		p := unifiedPod("u", tc.r)
		p.Spec.Resources = tc.pod
		got := ContainerUnified(p, &p.Spec.Containers[0], tc.q)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPodMemoryHigh(t *testing.T) {
	q := testQoS()
	p := unifiedPod("p", rr("", "100Mi", "", ""))
	if got := podMemoryHigh(p, q); got != 0 {
		t.Errorf("without pod-level resources: %d", got)
	}
	p.Spec.Resources = &v1.ResourceRequirements{ // as the API server defaults them
		Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")},
		Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")},
	}
	req, lim := float64(100<<20), float64(gi)
	want := int64(req+0.9*(lim-req)) / 4096 * 4096
	if got := podMemoryHigh(p, q); got != want {
		t.Errorf("pod-level limit: %d, want %d", got, want)
	}
	p.Spec.Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	if got := podMemoryHigh(p, q); got != 0 {
		t.Errorf("request = limit: %d", got)
	}
	if got := podMemoryHigh(p, nil); got != 0 {
		t.Errorf("MemoryQoS off: %d", got)
	}
}

func TestHugetlbFileSize(t *testing.T) {
	for file, want := range map[string]int64{"hugetlb.2MB.max": 2 << 20, "hugetlb.1GB.max": 1 << 30, "hugetlb.64KB.max": 64 << 10,
		"hugetlb.2MB.current": 0, "hugetlb.2MB.rsvd.max": 0, "cpu.max": 0} {
		got, ok := hugetlbFileSize(file)
		if got != want || ok != (want > 0) {
			t.Errorf("%s: %d %v", file, got, ok)
		}
	}
}

func TestOpenRefusesWhatItCannotManage(t *testing.T) {
	root := t.TempDir() // not a cgroup2 mount: cgroup v1
	_, err := Open(context.Background(), Options{MountDir: root, Driver: DriverSystemd})
	if err == nil || !strings.Contains(err.Error(), "systemd on cgroup v1") {
		t.Errorf("systemd on v1: %v", err)
	}
	if _, err := Open(context.Background(), Options{MountDir: root, Driver: "upstart"}); err == nil {
		t.Error("unknown driver accepted")
	}
	c, err := Open(context.Background(), Options{MountDir: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*Manager); !ok {
		t.Errorf("cgroupfs on v1: %T", c)
	}
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
		c, err := Open(context.Background(), Options{MountDir: "/sys/fs/cgroup/unified", Driver: DriverSystemd,
			ConnectSystemd: func(context.Context) (Systemd, error) { return nil, errors.New("no systemd here") }})
		if err == nil || !strings.Contains(err.Error(), "no systemd here") {
			t.Errorf("systemd unreachable on v2: %v %T", err, c)
		}
		c, err = Open(context.Background(), Options{MountDir: "/sys/fs/cgroup/unified"})
		if _, ok := c.(*UnifiedManager); !ok || err != nil {
			t.Errorf("cgroupfs on a cgroup2 mount: %T %v", c, err)
		}
	}
}

func TestConnectSystemdWithoutSystemd(t *testing.T) {
	if _, err := os.Stat(systemdRunDir); err == nil {
		t.Skipf("systemd runs here (%s exists)", systemdRunDir)
	}
	_, err := ConnectSystemd(context.Background())
	if err == nil || !strings.Contains(err.Error(), "systemd is not running") {
		t.Errorf("ConnectSystemd: %v", err)
	}
}
