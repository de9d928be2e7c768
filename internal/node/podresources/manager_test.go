package podresources

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/cgroupmount"
)

// fakeTree builds a cgroup v1 layout under a temporary root: one directory
// per hierarchy with its root interface files, plus a hybrid v2 "unified".
func fakeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]map[string]string{
		"cpu":     {"cpu.shares": "1024", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"},
		"cpuacct": {"cpuacct.usage": "0"},
		"cpuset":  {"cpuset.cpus": "0-3", "cpuset.mems": "0"},
		"memory":  {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "0"},
		"pids":    {"pids.max": "max"},
		"systemd": {},
	}
	for dir, fs := range files {
		write(t, filepath.Join(root, dir, "tasks"), "")
		for name, v := range fs {
			write(t, filepath.Join(root, dir, name), v)
		}
	}
	write(t, filepath.Join(root, "unified", "cgroup.controllers"), "")
	write(t, filepath.Join(root, "unified", "cgroup.procs"), "")
	// Neither a hierarchy nor a directory.
	write(t, filepath.Join(root, "stray"), "")
	return root
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

var allHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "systemd", "unified"}

func podWith(uid string, r v1.ResourceRequirements) *v1.Pod {
	p := basePod()
	p.UID = types.UID(uid)
	p.Spec.Containers[0].Resources = r
	return p
}

func TestManagerEnsureQoS(t *testing.T) {
	root := fakeTree(t)
	m := NewManager(root, nil, nil)
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	for _, h := range allHierarchies {
		for _, d := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
			if !exists(filepath.Join(root, h, d)) {
				t.Errorf("%s/%s missing", h, d)
			}
		}
	}
	if exists(filepath.Join(root, "stray", "kubepods")) {
		t.Error("created under a non-hierarchy")
	}
	if got := read(t, filepath.Join(root, "cpu/kubepods/besteffort/cpu.shares")); got != "2" {
		t.Errorf("besteffort cpu.shares = %s, want 2", got)
	}
	if got := read(t, filepath.Join(root, "cpu/kubepods/burstable/cpu.shares")); got != "2" {
		t.Errorf("burstable cpu.shares = %s, want 2", got)
	}
	for _, d := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		if got := read(t, filepath.Join(root, "cpuset", d, "cpuset.cpus")); got != "0-3" {
			t.Errorf("%s cpuset.cpus = %q", d, got)
		}
		if got := read(t, filepath.Join(root, "cpuset", d, "cpuset.mems")); got != "0" {
			t.Errorf("%s cpuset.mems = %q", d, got)
		}
	}
	// cpu settings land only in the cpu hierarchy.
	if exists(filepath.Join(root, "memory/kubepods/besteffort/cpu.shares")) {
		t.Error("cpu.shares written into memory")
	}
	// Idempotent.
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
}

func TestManagerEnsurePod(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		pod                   *v1.Pod
		parent                string
		shares, period, quota string // "" not written
		memory                string
	}{
		{
			name:   "guaranteed",
			pod:    podWith("g1", rr("500m", "256Mi", "500m", "256Mi")),
			parent: "/kubepods/podg1",
			shares: "512", period: "100000", quota: "50000", memory: strconv.Itoa(256 << 20),
		},
		{
			name:   "burstable with limits",
			pod:    podWith("b1", rr("250m", "64Mi", "1", "128Mi")),
			parent: "/kubepods/burstable/podb1",
			shares: "256", period: "100000", quota: "100000", memory: strconv.Itoa(128 << 20),
		},
		{
			name:   "burstable without limits",
			pod:    podWith("b2", rr("250m", "64Mi", "", "")),
			parent: "/kubepods/burstable/podb2",
			shares: "256",
		},
		{
			name:   "best effort",
			pod:    podWith("e1", v1.ResourceRequirements{}),
			parent: "/kubepods/besteffort/pode1",
			shares: "2",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeTree(t)
			m := NewManager(root, nil, nil)
			// EnsurePod sets up the QoS tiers itself when needed.
			parent, err := m.EnsurePod(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if parent != tc.parent {
				t.Errorf("parent = %q, want %q", parent, tc.parent)
			}
			if parent != CgroupParent(tc.pod) {
				t.Errorf("parent %q differs from CgroupParent %q", parent, CgroupParent(tc.pod))
			}
			for _, h := range allHierarchies {
				if !exists(filepath.Join(root, h, parent)) {
					t.Errorf("%s%s missing", h, parent)
				}
			}
			check := func(file, want string) {
				t.Helper()
				p := filepath.Join(root, strings.SplitN(file, ".", 2)[0], parent, file)
				if want == "" {
					if exists(p) {
						t.Errorf("%s written: %s", file, read(t, p))
					}
					return
				}
				if !exists(p) {
					t.Errorf("%s not written", file)
					return
				}
				if got := read(t, p); got != want {
					t.Errorf("%s = %s, want %s", file, got, want)
				}
			}
			check("cpu.shares", tc.shares)
			check("cpu.cfs_period_us", tc.period)
			check("cpu.cfs_quota_us", tc.quota)
			check("memory.limit_in_bytes", tc.memory)
			if got := read(t, filepath.Join(root, "cpuset", parent, "cpuset.cpus")); got != "0-3" {
				t.Errorf("pod cpuset.cpus = %q", got)
			}
			// Again: idempotent.
			if again, err := m.EnsurePod(tc.pod); err != nil || again != parent {
				t.Errorf("second EnsurePod = %q, %v", again, err)
			}
		})
	}
}

func TestManagerBurstableShares(t *testing.T) {
	root := fakeTree(t)
	m := NewManager(root, nil, nil)
	shares := func() string { return read(t, filepath.Join(root, "cpu/kubepods/burstable/cpu.shares")) }
	a := podWith("a", rr("500m", "", "", ""))
	b := podWith("b", rr("1", "", "2", ""))
	g := podWith("g", rr("1", "1Gi", "1", "1Gi"))
	for _, p := range []*v1.Pod{a, b, g} {
		if _, err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := shares(); got != "1536" {
		t.Errorf("burstable shares = %s, want 1536 (1.5 CPU)", got)
	}
	if err := m.RemovePod("a", v1.PodQOSBurstable); err != nil {
		t.Fatal(err)
	}
	if got := shares(); got != "1024" {
		t.Errorf("burstable shares after removal = %s, want 1024", got)
	}
	if err := m.RemovePod("b", ""); err != nil {
		t.Fatal(err)
	}
	if got := shares(); got != "2" {
		t.Errorf("burstable shares with no pod = %s, want 2", got)
	}
}

func TestManagerRemovePod(t *testing.T) {
	root := fakeTree(t)
	m := NewManager(root, nil, nil)
	p := podWith("r1", rr("100m", "", "", ""))
	parent, err := m.EnsurePod(p)
	if err != nil {
		t.Fatal(err)
	}
	// The runtime's container cgroups, one still with a task.
	for _, h := range []string{"cpu", "memory"} {
		write(t, filepath.Join(root, h, parent, "ctr1", "tasks"), "")
		write(t, filepath.Join(root, h, parent, "ctr1", "nested", "tasks"), "")
	}
	write(t, filepath.Join(root, "memory", parent, "ctr1", "nested", "tasks"), "4242\n4243\n")

	err = m.RemovePod("r1", v1.PodQOSBurstable)
	if !errors.Is(err, ErrPodCgroupBusy) {
		t.Fatalf("RemovePod with a task = %v, want ErrPodCgroupBusy", err)
	}
	for _, h := range allHierarchies {
		if !exists(filepath.Join(root, h, parent)) {
			t.Errorf("%s%s removed while busy", h, parent)
		}
	}
	if uids, err := m.Pods(); err != nil || !slices.Equal(uids, []types.UID{"r1"}) {
		t.Errorf("Pods = %v, %v", uids, err)
	}

	write(t, filepath.Join(root, "memory", parent, "ctr1", "nested", "tasks"), "")
	if err := m.RemovePod("r1", v1.PodQOSBurstable); err != nil {
		t.Fatal(err)
	}
	for _, h := range allHierarchies {
		if exists(filepath.Join(root, h, parent)) {
			t.Errorf("%s%s left", h, parent)
		}
		if !exists(filepath.Join(root, h, "kubepods/burstable")) {
			t.Errorf("%s tier removed", h)
		}
	}
	// Missing: no error.
	if err := m.RemovePod("r1", v1.PodQOSBurstable); err != nil {
		t.Errorf("RemovePod of a missing cgroup = %v", err)
	}
	if uids, err := m.Pods(); err != nil || len(uids) != 0 {
		t.Errorf("Pods = %v, %v", uids, err)
	}
}

func TestManagerPodsAndOrphans(t *testing.T) {
	root := fakeTree(t)
	m := NewManager(root, nil, nil)
	for _, p := range []*v1.Pod{
		podWith("g", rr("1", "1Gi", "1", "1Gi")),
		podWith("b", rr("1", "", "", "")),
		podWith("e", v1.ResourceRequirements{}),
	} {
		if _, err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	// A leftover only in one hierarchy, from a previous run.
	if err := os.Mkdir(filepath.Join(root, "pids/kubepods/besteffort/podold"), 0o755); err != nil {
		t.Fatal(err)
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if want := []types.UID{"b", "e", "g", "old"}; !slices.Equal(uids, want) {
		t.Errorf("Pods = %v, want %v", uids, want)
	}
	// A fresh manager (restart) finds them too, and removes orphans of
	// unknown class.
	m2 := NewManager(root, nil, nil)
	for _, uid := range []types.UID{"old", "g"} {
		if err := m2.RemovePod(uid, ""); err != nil {
			t.Fatal(err)
		}
	}
	uids, err = m2.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if want := []types.UID{"b", "e"}; !slices.Equal(uids, want) {
		t.Errorf("Pods after removal = %v, want %v", uids, want)
	}
	// The guaranteed tier is kubepods itself: removing pod g left the tiers.
	if !exists(filepath.Join(root, "cpu/kubepods/burstable")) {
		t.Error("tier removed with a guaranteed pod")
	}
}

func TestManagerCombinedMount(t *testing.T) {
	// cpu and cpuacct co-mounted, with the usual symlinks.
	root := t.TempDir()
	write(t, filepath.Join(root, "cpu,cpuacct", "tasks"), "")
	write(t, filepath.Join(root, "cpu,cpuacct", "cpu.shares"), "1024")
	write(t, filepath.Join(root, "memory", "tasks"), "")
	write(t, filepath.Join(root, "memory", "memory.limit_in_bytes"), "0")
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	hs, err := discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("hierarchies = %v, want 2", hs)
	}
	m := NewManager(root, nil, nil)
	parent, err := m.EnsurePod(podWith("c", rr("2", "", "", "")))
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "cpu", parent, "cpu.shares")); got != "2048" {
		t.Errorf("cpu.shares = %s", got)
	}
	if err := m.RemovePod("c", ""); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "cpu,cpuacct", parent)) {
		t.Error("pod cgroup left")
	}
}

func TestManagerCgroupV2(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory pids")
	m := NewManager(root, nil, nil)
	if err := m.EnsureQoS(); !errors.Is(err, ErrCgroupV2) {
		t.Errorf("EnsureQoS = %v, want ErrCgroupV2", err)
	}
	if _, err := m.EnsurePod(podWith("x", v1.ResourceRequirements{})); !errors.Is(err, ErrCgroupV2) {
		t.Errorf("EnsurePod = %v, want ErrCgroupV2", err)
	}
	if err := m.RemovePod("x", ""); !errors.Is(err, ErrCgroupV2) {
		t.Errorf("RemovePod = %v, want ErrCgroupV2", err)
	}
	if _, err := m.Pods(); !errors.Is(err, ErrCgroupV2) {
		t.Errorf("Pods = %v, want ErrCgroupV2", err)
	}
	if err := m.EnsureQoS(); err == nil || !strings.Contains(err.Error(), "not supported yet") {
		t.Errorf("message = %v", err)
	}
}

func TestManagerErrors(t *testing.T) {
	t.Run("no hierarchy", func(t *testing.T) {
		root := t.TempDir()
		if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := NewManager(root, nil, nil).EnsureQoS(); err == nil || !strings.Contains(err.Error(), "no cgroup v1 hierarchy") {
			t.Errorf("EnsureQoS = %v", err)
		}
	})
	t.Run("missing root", func(t *testing.T) {
		if err := NewManager(filepath.Join(t.TempDir(), "nope"), nil, nil).EnsureQoS(); err == nil {
			t.Error("EnsureQoS succeeded")
		}
	})
	t.Run("bad UIDs", func(t *testing.T) {
		m := NewManager(fakeTree(t), nil, nil)
		for _, uid := range []types.UID{"", ".", "..", "../x", "a/b"} {
			if _, err := m.EnsurePod(podWith(string(uid), v1.ResourceRequirements{})); err == nil {
				t.Errorf("EnsurePod(%q) succeeded", uid)
			}
			if err := m.RemovePod(uid, ""); err == nil {
				t.Errorf("RemovePod(%q) succeeded", uid)
			}
		}
	})
	t.Run("empty parent cpuset", func(t *testing.T) {
		root := fakeTree(t)
		write(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "")
		if err := NewManager(root, nil, nil).EnsureQoS(); err == nil || !strings.Contains(err.Error(), "cpuset") {
			t.Errorf("EnsureQoS = %v", err)
		}
	})
}

// TestManagerRealCgroupV1 creates and removes a test-only hierarchy
// ("kubepods-nodelet-test-<pid>") in the host's cgroup v1 hierarchies. It needs
// root and a v1 host.
func TestManagerRealCgroupV1(t *testing.T) {
	const root = "/sys/fs/cgroup"
	if testing.Short() {
		t.Skip("touches the host's cgroups")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if exists(filepath.Join(root, "cgroup.controllers")) || cgroupmount.IsCgroup2(root) || !exists(filepath.Join(root, "cpu", "tasks")) {
		t.Skip("needs cgroup v1")
	}
	m := NewManager(root, nil, nil)
	// Per process, so that concurrent runs do not collide.
	m.top = "kubepods-nodelet-test-" + strconv.Itoa(os.Getpid())
	tiers := []string{m.top + "/burstable", m.top + "/besteffort", m.top}
	cleanup := func() {
		for _, uid := range []types.UID{"nodelet-test-b", "nodelet-test-g"} {
			if err := m.RemovePod(uid, ""); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		hs, _ := discover(root)
		for _, h := range hs {
			for _, d := range tiers {
				if err := removeCgroup(filepath.Join(h.path, d)); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
		}
	}
	cleanup()
	t.Cleanup(cleanup)

	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "cpu", m.top, "besteffort", "cpu.shares")); got != "2" {
		t.Errorf("besteffort cpu.shares = %s", got)
	}
	b := podWith("nodelet-test-b", rr("250m", "32Mi", "500m", "64Mi"))
	parent, err := m.EnsurePod(b)
	if err != nil {
		t.Fatal(err)
	}
	if parent != "/"+m.top+"/burstable/podnodelet-test-b" {
		t.Errorf("parent = %q", parent)
	}
	for file, want := range map[string]string{
		"cpu/" + parent + "/cpu.shares":                 "256",
		"cpu/" + parent + "/cpu.cfs_period_us":          "100000",
		"cpu/" + parent + "/cpu.cfs_quota_us":           "50000",
		"memory/" + parent + "/memory.limit_in_bytes":   strconv.Itoa(64 << 20),
		"cpu/" + m.top + "/burstable/cpu.shares":        "256",
		"cpuset/" + parent + "/cpuset.cpus":             read(t, filepath.Join(root, "cpuset", "cpuset.cpus")),
		"cpuset/" + m.top + "/besteffort/cpuset.mems":   read(t, filepath.Join(root, "cpuset", "cpuset.mems")),
		"memory/" + m.top + "/burstable/tasks":          "",
		"pids/" + parent + "/tasks":                     "",
		"cpuacct/" + m.top + "/besteffort/cgroup.procs": "",
	} {
		if got := read(t, filepath.Join(root, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	g := podWith("nodelet-test-g", rr("100m", "16Mi", "100m", "16Mi"))
	if _, err := m.EnsurePod(g); err != nil {
		t.Fatal(err)
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if want := []types.UID{"nodelet-test-b", "nodelet-test-g"}; !slices.Equal(uids, want) {
		t.Errorf("Pods = %v, want %v", uids, want)
	}

	// A process in the pod's cpu cgroup (only there: this test's own
	// memory cgroup is left alone) keeps it.
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	defer func() {
		if !done {
			_ = sleep.Process.Kill()
			_ = sleep.Wait()
		}
	}()
	ctr := filepath.Join(root, "cpu", parent, "ctr")
	if err := os.Mkdir(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod(b.UID, v1.PodQOSBurstable); !errors.Is(err, ErrPodCgroupBusy) {
		t.Fatalf("RemovePod with a process = %v, want ErrPodCgroupBusy", err)
	}
	if !exists(filepath.Join(root, "memory", parent)) {
		t.Error("removed from memory while busy in cpu")
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	done = true
	if err := m.RemovePod(b.UID, v1.PodQOSBurstable); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "cpu", parent)) || exists(filepath.Join(root, "memory", parent)) {
		t.Error("pod cgroup left")
	}
	if got := read(t, filepath.Join(root, "cpu", m.top, "burstable", "cpu.shares")); got != "2" {
		t.Errorf("burstable cpu.shares after removal = %s", got)
	}
	if err := m.RemovePod(g.UID, ""); err != nil {
		t.Fatal(err)
	}
	if uids, err := m.Pods(); err != nil || len(uids) != 0 {
		t.Errorf("Pods = %v, %v", uids, err)
	}
}

// TestManagerEnsurePodWritesOnlyChanges: ensuring a pod whose cgroup
// exists writes none of its values (a value changed behind its back stays
// so, as under the kubelet), even when the pod's resources changed: a
// resized pod's cgroup is written by SetPodCgroup alone. A cgroup removed
// behind its back is made again, with the pod's values.
func TestManagerEnsurePodWritesOnlyChanges(t *testing.T) {
	root := fakeTree(t)
	m := NewManager(root, nil, nil)
	pod := podWith("g1", rr("500m", "256Mi", "500m", "256Mi"))
	parent, err := m.EnsurePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	shares := filepath.Join(root, "cpu", parent, "cpu.shares")
	if err := os.WriteFile(shares, []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	if got := read(t, shares); got != "7" {
		t.Fatalf("unchanged pod ensured again: cpu.shares rewritten to %s", got)
	}
	resized := podWith("g1", rr("1", "256Mi", "1", "256Mi"))
	if _, err := m.EnsurePod(resized); err != nil {
		t.Fatal(err)
	}
	if got := read(t, shares); got != "7" {
		t.Fatalf("resized pod ensured: cpu.shares rewritten to %s", got)
	}
	if err := os.RemoveAll(filepath.Join(root, "memory", parent)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.EnsurePod(resized); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "memory", parent, "memory.limit_in_bytes")); got != strconv.Itoa(256<<20) {
		t.Fatalf("cgroup made again: memory.limit_in_bytes = %s", got)
	}
}
