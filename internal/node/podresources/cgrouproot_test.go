package podresources

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func cpuList(cpu string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("64Mi")}
}

func TestParseCgroupRoot(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxCgroupRootLen)
	for _, tc := range []struct {
		in      string
		driver  Driver
		want    CgroupRoot
		wantErr string
	}{
		{"/", DriverCgroupfs, CgroupRoot{}, ""},
		{"/", DriverSystemd, CgroupRoot{}, ""},
		{"/nodelet-a", DriverCgroupfs, CgroupRoot{"nodelet-a"}, ""},
		{"/nodelet-a", DriverSystemd, CgroupRoot{"nodelet-a"}, ""},
		{"/a/b_c/d.e:f", "", CgroupRoot{"a", "b_c", "d.e:f"}, ""},
		{"", DriverCgroupfs, nil, "empty"},
		{"nodelet-a", DriverCgroupfs, nil, "not absolute"},
		{"/nodelet-a/", DriverCgroupfs, nil, "not a clean path"},
		{"/a//b", DriverCgroupfs, nil, "not a clean path"},
		{"/a/../b", DriverCgroupfs, nil, "not a clean path"},
		{"/..", DriverCgroupfs, nil, "not a clean path"},
		{"/a/./b", DriverCgroupfs, nil, "not a clean path"},
		{"/a b", DriverCgroupfs, nil, `has ' '`},
		{"/a\nb", DriverCgroupfs, nil, `has '\n'`},
		{"/a\x00b", DriverCgroupfs, nil, `has '\x00'`},
		{"/a@b", DriverSystemd, nil, `has '@'`},
		{"/a\\x2db", DriverSystemd, nil, `has '\\'`},
		{long, DriverCgroupfs, nil, "bytes long"},
		{"/system.slice", DriverSystemd, nil, "system.slice.slice"},
		{"/system.slice", DriverCgroupfs, CgroupRoot{"system.slice"}, ""},
	} {
		got, err := ParseCgroupRoot(tc.in, tc.driver)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseCgroupRoot(%q, %s) = %v, %v; want error with %q", tc.in, tc.driver, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) || got == nil {
			t.Errorf("ParseCgroupRoot(%q, %s) = %#v, %v; want %#v", tc.in, tc.driver, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("%q String() = %q", tc.in, got.String())
		}
	}
}

// rootPods are a pod of each QoS tier.
func rootPods(prefix string) []*v1.Pod {
	r := func(cpu string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: cpuList(cpu), Limits: cpuList(cpu)}
	}
	g := unifiedPod(prefix+"-g", r("100m"))
	b := unifiedPod(prefix+"-b", v1.ResourceRequirements{Requests: cpuList("100m")})
	be := unifiedPod(prefix+"-be", v1.ResourceRequirements{})
	return []*v1.Pod{g, b, be}
}

// cgroupNamer is what the naming golden test drives of the three managers.
type cgroupNamer interface {
	EnsureQoS() error
	EnsurePod(pod *v1.Pod) (string, error)
	Pods() ([]types.UID, error)
}

// v1Dirs is the cgroups under the memory hierarchy of a fake v1 tree.
func v1Dirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	base := filepath.Join(root, "memory")
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != base {
			rel, _ := filepath.Rel(base, p)
			out = append(out, "/"+filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fakeV1Root makes a cgroupRoot in every hierarchy of a fake v1 tree, as
// an administrator would, cpuset's cpus and mems copied from the parent.
func fakeV1Root(t *testing.T, tree string, root CgroupRoot) {
	t.Helper()
	for _, h := range allHierarchies {
		dir := filepath.Join(tree, h, root.rel())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if h == "cpuset" {
			write(t, filepath.Join(dir, "cpuset.cpus"), "0-3")
			write(t, filepath.Join(dir, "cpuset.mems"), "0")
		}
	}
}

// v2Dirs is the cgroups of a fake cgroup2 tree.
func v2Dirs(f *fakeCgroup2) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p := range f.nodes {
		if p != "" {
			out = append(out, name(p))
		}
	}
	slices.Sort(out)
	return out
}

// The QoS and pod cgroups' names under a cgroupRoot, for the three
// managers (cgroup v1 cgroupfs, cgroup v2 cgroupfs, cgroup v2 systemd;
// systemd through a fake only: this machine has no systemd), as the
// kubelet's CgroupName.ToCgroupfs and ToSystemd make them.
func TestCgroupRootNamingGolden(t *testing.T) {
	var out strings.Builder
	for _, rootPath := range []string{"/", "/nodelet-a", "/a/b-c"} {
		for _, kind := range []string{"v1-cgroupfs", "v2-cgroupfs", "v2-systemd"} {
			driver := DriverCgroupfs
			if kind == "v2-systemd" {
				driver = DriverSystemd
			}
			root, err := ParseCgroupRoot(rootPath, driver)
			if err != nil {
				t.Fatal(err)
			}
			var m cgroupNamer
			var dirs func() []string
			switch kind {
			case "v1-cgroupfs":
				tree := fakeTree(t)
				fakeV1Root(t, tree, root)
				m = NewManager(tree, root, nil)
				dirs = func() []string { return v1Dirs(t, tree) }
			case "v2-cgroupfs":
				f := newFakeCgroup2(allControllers...)
				mkdirAll(t, f, root.rel())
				u, err := NewUnified(f, UnifiedOptions{CgroupRoot: root})
				if err != nil {
					t.Fatal(err)
				}
				m, dirs = u, func() []string { return v2Dirs(f) }
			case "v2-systemd":
				f := newFakeCgroup2(allControllers...)
				mkdirAll(t, f, systemdLayout{root: root}.rootDir())
				u, err := NewUnified(f, UnifiedOptions{Driver: DriverSystemd, Systemd: &fakeSystemd{fs: f}, CgroupRoot: root})
				if err != nil {
					t.Fatal(err)
				}
				m, dirs = u, func() []string { return v2Dirs(f) }
			}
			fmt.Fprintf(&out, "cgroupRoot %s, %s\n", rootPath, kind)
			if err := m.EnsureQoS(); err != nil {
				t.Fatalf("%s %s: %v", rootPath, kind, err)
			}
			for _, p := range rootPods("p") {
				parent, err := m.EnsurePod(p)
				if err != nil {
					t.Fatalf("%s %s: %v", rootPath, kind, err)
				}
				fmt.Fprintf(&out, "  pod %s: parent %s\n", p.UID, parent)
			}
			uids, err := m.Pods()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "  pods: %v\n", uids)
			for _, d := range dirs() {
				fmt.Fprintf(&out, "  %s\n", d)
			}
		}
	}
	golden(t, "cgroup-root", out.String())
}

// mkdirAll makes cgroup rel and its ancestors in a fake cgroup2 tree.
func mkdirAll(t *testing.T, f *fakeCgroup2, rel string) {
	t.Helper()
	cur := ""
	for _, p := range strings.Split(rel, "/") {
		if p == "" {
			continue
		}
		cur = join(cur, p)
		must(t, f.Mkdir(cur))
	}
}

// A cgroupRoot that does not exist is an error, for every manager, and
// nothing is created: the kubelet checks it exists and makes only
// kubepods in it.
func TestCgroupRootMustExist(t *testing.T) {
	root := CgroupRoot{"nodelet-a"}
	tree := fakeTree(t)
	f := newFakeCgroup2(allControllers...)
	sf := newFakeCgroup2(allControllers...)
	unified, err := NewUnified(f, UnifiedOptions{CgroupRoot: root})
	must(t, err)
	systemd, err := NewUnified(sf, UnifiedOptions{Driver: DriverSystemd, Systemd: &fakeSystemd{fs: sf}, CgroupRoot: root})
	must(t, err)
	for name, m := range map[string]Cgroups{"v1": NewManager(tree, root, nil), "v2": unified, "systemd": systemd} {
		err := m.EnsureQoS()
		if !errors.Is(err, ErrCgroupRootMissing) || !strings.Contains(err.Error(), "nodelet") {
			t.Errorf("%s: EnsureQoS %v, want ErrCgroupRootMissing naming the cgroup", name, err)
		}
		if _, err := m.EnsurePod(unifiedPod("x", v1.ResourceRequirements{})); !errors.Is(err, ErrCgroupRootMissing) {
			t.Errorf("%s: EnsurePod %v", name, err)
		}
	}
	if d := v1Dirs(t, tree); len(d) != 0 {
		t.Errorf("v1 created %v", d)
	}
	if d := v2Dirs(f); len(d) != 0 {
		t.Errorf("v2 created %v", d)
	}
	if d := v2Dirs(sf); len(d) != 0 {
		t.Errorf("systemd created %v", d)
	}
	// v1: missing in one hierarchy the kubelet checks is missing; in one
	// it does not check (blkio here, unified), the pod cgroups' ancestors
	// are made.
	tree = fakeTree(t)
	fakeV1Root(t, tree, root)
	must(t, os.Remove(filepath.Join(tree, "pids", "nodelet-a")))
	if err := NewManager(tree, root, nil).EnsureQoS(); !errors.Is(err, ErrCgroupRootMissing) || !strings.Contains(err.Error(), "pids/nodelet-a") {
		t.Errorf("missing in pids: %v", err)
	}
	must(t, os.Mkdir(filepath.Join(tree, "pids", "nodelet-a"), 0o755))
	must(t, os.Remove(filepath.Join(tree, "unified", "nodelet-a")))
	if err := NewManager(tree, root, nil).EnsureQoS(); err != nil {
		t.Errorf("missing only in unified: %v", err)
	}
}

// Two nodelets with their own cgroupRoot on one host: neither lists the
// other's pod cgroups (the orphans it would remove), and removing a UID
// only the other has removes nothing of it.
func TestCgroupRootsSideBySide(t *testing.T) {
	a, b := CgroupRoot{"nodelet-a"}, CgroupRoot{"nodelet-b"}
	check := func(t *testing.T, ma, mb Cgroups, exists func(parent string) bool) {
		t.Helper()
		must(t, ma.EnsureQoS())
		must(t, mb.EnsureQoS())
		var bParents []string
		for _, p := range rootPods("a") {
			if _, err := ma.EnsurePod(p); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range rootPods("b") {
			parent, err := mb.EnsurePod(p)
			if err != nil {
				t.Fatal(err)
			}
			bParents = append(bParents, parent)
		}
		for m, want := range map[Cgroups][]types.UID{ma: {"a-b", "a-be", "a-g"}, mb: {"b-b", "b-be", "b-g"}} {
			got, err := m.Pods()
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("Pods() = %v, %v; want %v", got, err, want)
			}
		}
		for _, p := range rootPods("b") {
			must(t, ma.RemovePod(p.UID, ""))
		}
		for _, parent := range bParents {
			if !exists(parent) {
				t.Errorf("%s gone after the other manager removed its UID", parent)
			}
		}
	}
	t.Run("v1", func(t *testing.T) {
		tree := fakeTree(t)
		fakeV1Root(t, tree, a)
		fakeV1Root(t, tree, b)
		check(t, NewManager(tree, a, nil), NewManager(tree, b, nil), func(parent string) bool {
			return exists(filepath.Join(tree, "memory", parent))
		})
	})
	t.Run("v2", func(t *testing.T) {
		f := newFakeCgroup2(allControllers...)
		mkdirAll(t, f, "nodelet-a")
		mkdirAll(t, f, "nodelet-b")
		ma, err := NewUnified(f, UnifiedOptions{CgroupRoot: a})
		must(t, err)
		mb, err := NewUnified(f, UnifiedOptions{CgroupRoot: b})
		must(t, err)
		check(t, ma, mb, func(parent string) bool { return slices.Contains(v2Dirs(f), parent) })
	})
	t.Run("systemd", func(t *testing.T) {
		f := newFakeCgroup2(allControllers...)
		mkdirAll(t, f, "nodelet_a.slice")
		mkdirAll(t, f, "nodelet_b.slice")
		ma, err := NewUnified(f, UnifiedOptions{Driver: DriverSystemd, Systemd: &fakeSystemd{fs: f}, CgroupRoot: a})
		must(t, err)
		mb, err := NewUnified(f, UnifiedOptions{Driver: DriverSystemd, Systemd: &fakeSystemd{fs: f}, CgroupRoot: b})
		must(t, err)
		check(t, ma, mb, func(parent string) bool { return slices.Contains(v2Dirs(f), "/"+slicePath(parent)) })
	})
}

func TestQoSTopCgroups(t *testing.T) {
	for in, want := range map[string][]string{
		"/":          {"kubepods", "kubepods.slice"},
		"/nodelet-a": {"nodelet-a/kubepods", "nodelet_a.slice/nodelet_a-kubepods.slice"},
		"/a/b":       {"a/b/kubepods", "a.slice/a-b.slice/a-b-kubepods.slice"},
		"relative":   nil,
	} {
		if got := QoSTopCgroups(in); !slices.Equal(got, want) {
			t.Errorf("QoSTopCgroups(%q) = %v, want %v", in, got, want)
		}
	}
}
