package stats

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares got with testdata/<name>.golden (-update rewrites it).
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

// The fake host: one pod (sandbox a…, container b…), a container the
// runtime lists whose cgroup is gone (c…), one whose cgroup lost its
// files (d…), a host-network sandbox (f…) and a cgroup of a container
// nodelet does not manage (e…).
var (
	sbID       = strings.Repeat("a", 64)
	ctrID      = strings.Repeat("b", 64)
	goneID     = strings.Repeat("c", 64)
	emptyID    = strings.Repeat("d", 64)
	foreignID  = strings.Repeat("e", 64)
	hostSbID   = strings.Repeat("f", 64)
	podUID     = "0a1b2c3d-0000-4000-8000-000000000001"
	hostPodUID = "0a1b2c3d-0000-4000-8000-000000000002"
	layerMount = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"
	cgroupT0   = time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
)

type fakeHost struct {
	t    *testing.T
	root string
}

func (h fakeHost) write(rel, content string) {
	h.t.Helper()
	p := filepath.Join(h.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h fakeHost) symlink(target, rel string) {
	h.t.Helper()
	p := filepath.Join(h.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		h.t.Fatal(err)
	}
}

func (h fakeHost) mkdir(rel string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Join(h.root, rel), 0o755); err != nil {
		h.t.Fatal(err)
	}
}

// writeProc lays out /proc: the sandbox's pause (100), the container's
// two processes (200, 201), the host-network pause (300), and sysfs's
// block devices.
func (h fakeHost) writeProc() {
	limits := "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max cpu time              unlimited            unlimited            seconds   \n" +
		"Max open files            1048576              1048576              files     \n"
	h.symlink("net:[4026531840]", "proc/self/ns/net")
	h.symlink("/dev/null", "proc/100/fd/0")
	h.write("proc/100/status", "Name:\tpause\nThreads:\t1\n")
	h.write("proc/100/limits", limits)
	h.symlink("net:[4026532999]", "proc/100/ns/net")
	h.write("proc/100/net/dev", "Inter-|   Receive                                                |  Transmit\n"+
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"+
		"    lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0\n"+
		"  eth0:    3062      25    1    2    0     0          0         0     1186      13    3    4    0     0       0          0\n")
	for _, fd := range []string{"0", "1", "2"} {
		h.symlink("/dev/null", "proc/200/fd/"+fd)
	}
	h.symlink("socket:[555]", "proc/200/fd/3")
	h.write("proc/200/status", "Name:\tsh\nThreads:\t2\n")
	h.write("proc/200/limits", limits)
	h.symlink("pipe:[7]", "proc/201/fd/0")
	h.write("proc/201/status", "Name:\tsleep\nThreads:\t1\n")
	h.symlink("/dev/null", "proc/300/fd/0")
	h.write("proc/300/status", "Name:\tpause\nThreads:\t1\n")
	h.symlink("net:[4026531840]", "proc/300/ns/net")
	h.write("proc/300/net/dev", "  eth9: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n")
	h.write("sys/dev/block/8:0/uevent", "MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\n")
	h.write("sys/dev/block/254:1/uevent", "MAJOR=254\nMINOR=1\nDEVNAME=vda1\nDEVTYPE=partition\n")
}

func (h fakeHost) writeV1() {
	h.writeV1Pod(podUID, sbID, ctrID)
	pod := "kubepods/burstable/pod" + podUID
	hostPod := "kubepods/besteffort/pod" + hostPodUID
	cg := func(ctrl, id, file, content string) {
		dir := pod
		if id == hostSbID {
			dir = hostPod
		}
		h.write(filepath.Join("cgroup", ctrl, dir, id, file), content)
	}
	// A cgroup whose files went away, one nodelet does not manage, and
	// the host-network sandbox.
	h.mkdir(filepath.Join("cgroup", "memory", pod, emptyID))
	cg("memory", foreignID, "memory.usage_in_bytes", "1\n")
	cg("cpuacct", hostSbID, "cpuacct.usage", "1000\n")
	cg("memory", hostSbID, "memory.usage_in_bytes", "4096\n")
	cg("pids", hostSbID, "cgroup.procs", "300\n")
}

// writeV1Pod writes the v1 cgroups of a burstable pod's sandbox (process
// 100) and container (processes 200 and 201).
func (h fakeHost) writeV1Pod(uid, sbID, ctrID string) {
	pod := "kubepods/burstable/pod" + uid
	cg := func(ctrl, id, file, content string) {
		h.write(filepath.Join("cgroup", ctrl, pod, id, file), content)
	}
	// The sandbox.
	cg("cpuacct", sbID, "cpuacct.usage", "20000000\n")
	cg("cpuacct", sbID, "cpuacct.stat", "user 1\nsystem 1\n")
	cg("cpu", sbID, "cpu.cfs_period_us", "100000\n")
	cg("cpu", sbID, "cpu.cfs_quota_us", "-1\n")
	cg("cpu", sbID, "cpu.shares", "2\n")
	cg("memory", sbID, "memory.usage_in_bytes", "294912\n")
	cg("memory", sbID, "memory.limit_in_bytes", "9223372036854771712\n")
	cg("memory", sbID, "memory.stat", "total_rss 40960\ntotal_inactive_file 0\n")
	cg("pids", sbID, "pids.current", "1\n")
	cg("pids", sbID, "pids.max", "max\n")
	cg("pids", sbID, "cgroup.procs", "100\n")
	// The container.
	cg("cpuacct", ctrID, "cpuacct.usage", "1500000000\n")
	cg("cpuacct", ctrID, "cpuacct.stat", "user 100\nsystem 50\n")
	cg("cpu", ctrID, "cpu.stat", "nr_periods 10\nnr_throttled 2\nthrottled_time 3000000\n")
	cg("cpu", ctrID, "cpu.cfs_period_us", "100000\n")
	cg("cpu", ctrID, "cpu.cfs_quota_us", "50000\n")
	cg("cpu", ctrID, "cpu.shares", "51\n")
	cg("memory", ctrID, "memory.usage_in_bytes", "4194304\n")
	cg("memory", ctrID, "memory.max_usage_in_bytes", "8388608\n")
	cg("memory", ctrID, "memory.failcnt", "0\n")
	cg("memory", ctrID, "memory.kmem.usage_in_bytes", "65536\n")
	cg("memory", ctrID, "memory.limit_in_bytes", "79998976\n")
	cg("memory", ctrID, "memory.soft_limit_in_bytes", "9223372036854771712\n")
	cg("memory", ctrID, "memory.memsw.limit_in_bytes", "79998976\n")
	cg("memory", ctrID, "memory.stat", "cache 1\nrss 2\npgfault 500\npgmajfault 3\ntotal_cache 1048576\ntotal_rss 2097152\n"+
		"total_mapped_file 4096\ntotal_swap 0\ntotal_inactive_file 524288\ntotal_active_file 262144\ntotal_dirty 8192\ntotal_writeback 0\n")
	cg("memory", ctrID, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	cg("blkio", ctrID, "blkio.io_service_bytes_recursive", "Total 0\n")
	cg("blkio", ctrID, "blkio.throttle.io_service_bytes_recursive",
		"8:0 Read 8192\n8:0 Write 16384\n8:0 Sync 24576\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 24576\nTotal 24576\n")
	cg("blkio", ctrID, "blkio.throttle.io_serviced_recursive",
		"8:0 Read 2\n8:0 Write 4\n8:0 Sync 6\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 6\nTotal 6\n")
	cg("pids", ctrID, "pids.current", "3\n")
	cg("pids", ctrID, "pids.max", "4096\n")
	cg("pids", ctrID, "cgroup.procs", "201\n200\n")
}

func (h fakeHost) writeV2() {
	pod := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice"
	hostPod := "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(hostPodUID, "-", "_") + ".slice"
	cg := func(id, file, content string) {
		dir := pod
		if id == hostSbID {
			dir = hostPod
		}
		h.write(filepath.Join("cgroup", dir, "cri-containerd-"+id+".scope", file), content)
	}
	cg(sbID, "cpu.stat", "usage_usec 20000\nuser_usec 10000\nsystem_usec 10000\n")
	cg(sbID, "cpu.max", "max 100000\n")
	cg(sbID, "cpu.weight", "1\n")
	cg(sbID, "memory.current", "294912\n")
	cg(sbID, "memory.max", "max\n")
	cg(sbID, "memory.stat", "anon 40960\nfile 0\ninactive_file 0\n")
	cg(sbID, "pids.current", "1\n")
	cg(sbID, "pids.max", "max\n")
	cg(sbID, "cgroup.procs", "100\n")

	cg(ctrID, "cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 10\nnr_throttled 2\nthrottled_usec 3000\nnr_bursts 0\nburst_usec 0\n")
	cg(ctrID, "cpu.max", "50000 100000\n")
	cg(ctrID, "cpu.weight", "2\n")
	cg(ctrID, "memory.current", "4194304\n")
	cg(ctrID, "memory.peak", "8388608\n")
	cg(ctrID, "memory.max", "79998976\n")
	cg(ctrID, "memory.min", "0\n")
	cg(ctrID, "memory.swap.current", "0\n")
	cg(ctrID, "memory.swap.max", "0\n")
	cg(ctrID, "memory.stat", "anon 2097152\nfile 1048576\nkernel 65536\nfile_mapped 4096\nactive_file 262144\ninactive_file 524288\n"+
		"file_dirty 8192\nfile_writeback 0\npgfault 500\npgmajfault 3\npgscan 7\npgsteal 6\nworkingset_refault_anon 1\nworkingset_refault_file 2\n")
	cg(ctrID, "memory.events", "low 0\nhigh 4\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n")
	cg(ctrID, "io.stat", "8:0 rbytes=8192 wbytes=16384 rios=2 wios=4 dbytes=0 dios=0\n")
	cg(ctrID, "pids.current", "3\n")
	cg(ctrID, "pids.max", "4096\n")
	cg(ctrID, "cgroup.procs", "201\n200\n")

	h.mkdir(filepath.Join("cgroup", pod, "cri-containerd-"+emptyID+".scope"))
	cg(foreignID, "memory.current", "1\n")
	cg(hostSbID, "cpu.stat", "usage_usec 1\n")
	cg(hostSbID, "cgroup.procs", "300\n")
}

// cgroupRuntime lists the sandboxes and containers of the fake host.
func cgroupRuntime() *fakeRuntime {
	rt := newFakeRuntime()
	managed := func(l map[string]string) map[string]string {
		l[podspec.LabelManagedBy] = podspec.ManagedByValue
		return l
	}
	podLabels := func(name, uid string) map[string]string {
		return map[string]string{podspec.LabelPodName: name, podspec.LabelPodNamespace: "default", podspec.LabelPodUID: uid}
	}
	rt.sandboxes = []*runtimeapi.PodSandbox{
		{Id: sbID, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: cgroupT0.Add(-time.Minute).UnixNano(),
			Labels: managed(podLabels("web", podUID)), Annotations: map[string]string{podspec.AnnotationHostNetwork: "false"}},
		// The host network, not told by an annotation: the namespace is
		// nodelet's own.
		{Id: hostSbID, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: cgroupT0.Add(-time.Minute).UnixNano(),
			Labels: managed(podLabels("host", hostPodUID))},
	}
	ctr := func(id, name string) *runtimeapi.Container {
		l := managed(podLabels("web", podUID))
		l[podspec.LabelContainerName] = name
		return &runtimeapi.Container{Id: id, PodSandboxId: sbID, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			CreatedAt: cgroupT0.Add(-30 * time.Second).UnixNano(), Labels: l,
			Image: &runtimeapi.ImageSpec{Image: "sha256:0123", UserSpecifiedImage: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"}}
	}
	rt.containers = []*runtimeapi.Container{ctr(ctrID, "app"), ctr(goneID, "gone"), ctr(emptyID, "empty")}
	rt.stats = []*runtimeapi.ContainerStats{{
		Attributes: &runtimeapi.ContainerAttributes{Id: ctrID},
		WritableLayer: &runtimeapi.FilesystemUsage{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: layerMount},
			UsedBytes: &runtimeapi.UInt64Value{Value: 12288}},
	}}
	return rt
}

func newCgroupMetrics(t *testing.T, version CgroupVersion) (*ContainerMetrics, *fakeRuntime) {
	h := fakeHost{t: t, root: t.TempDir()}
	h.writeProc()
	if version == CgroupV1 {
		h.writeV1()
	} else {
		h.writeV2()
	}
	machine := &HostMachine{ProcDir: filepath.Join(h.root, "proc"), CgroupDir: filepath.Join(h.root, "cgroup"),
		SysDir: filepath.Join(h.root, "sys"), Cgroup: version}
	rt := cgroupRuntime()
	m := NewContainerMetrics(rt, machine, testingclock.NewFakePassiveClock(cgroupT0), discardLogger())
	m.statDevice = func(path string) (uint64, uint64, bool) {
		if path == layerMount {
			return 254, 1, true
		}
		return 0, 0, false
	}
	return m, rt
}

func exposition(t *testing.T, m *ContainerMetrics) string {
	t.Helper()
	fams, err := m.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

func TestContainerMetricsCgroupV1(t *testing.T) {
	m, _ := newCgroupMetrics(t, CgroupV1)
	golden(t, "cadvisor_cgroup_v1", exposition(t, m))
}

func TestContainerMetricsCgroupV2(t *testing.T) {
	m, _ := newCgroupMetrics(t, CgroupV2)
	golden(t, "cadvisor_cgroup_v2", exposition(t, m))
}

// The golden files are checked by eye once; these pin what the upstream
// conformance test (ContainerMetrics, /metrics/cadvisor) looks at, so a
// regenerated golden file cannot silently lose them.
func TestContainerMetricsHasWhatConformanceChecks(t *testing.T) {
	for _, v := range []CgroupVersion{CgroupV1, CgroupV2} {
		m, _ := newCgroupMetrics(t, v)
		got := series(t, m)
		app := func(name string, extra ...string) string {
			labels := []string{"container=app",
				"id=/kubepods/burstable/pod" + podUID + "/" + ctrID,
				"image=registry.k8s.io/e2e-test-images/busybox:1.37.0-1", "name=" + ctrID, "namespace=default", "pod=web"}
			if v == CgroupV2 {
				labels[1] = "id=/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
					strings.ReplaceAll(podUID, "-", "_") + ".slice/cri-containerd-" + ctrID + ".scope"
			}
			all := append(extra, labels...)
			sort.Strings(all)
			return name + "{" + strings.Join(all, ",") + "}"
		}
		want := map[string]float64{
			app("container_cpu_usage_seconds_total", "cpu=total"):    1.5,
			app("container_cpu_user_seconds_total"):                  1,
			app("container_cpu_system_seconds_total"):                0.5,
			app("container_memory_usage_bytes"):                      4194304,
			app("container_memory_working_set_bytes"):                4194304 - 524288,
			app("container_memory_rss"):                              2097152,
			app("container_memory_cache"):                            1048576,
			app("container_memory_max_usage_bytes"):                  8388608,
			app("container_memory_swap"):                             0,
			app("container_spec_memory_limit_bytes"):                 79998976,
			app("container_spec_cpu_period"):                         100000,
			app("container_spec_cpu_quota"):                          50000,
			app("container_processes"):                               2,
			app("container_file_descriptors"):                        5,
			app("container_sockets"):                                 1,
			app("container_threads"):                                 3,
			app("container_threads_max"):                             4096,
			app("container_ulimits_soft", "ulimit=max_open_files"):   1048576,
			app("container_oom_events_total"):                        1,
			app("container_fs_usage_bytes", "device=/dev/vda1"):      12288,
			app("container_fs_reads_bytes_total", "device=/dev/sda"): 8192,
			app("container_fs_writes_total", "device=/dev/sda"):      4,
			app("container_fs_writes_total", "device=/dev/vda1"):     0,
			app("container_start_time_seconds"):                      float64(cgroupT0.Add(-30 * time.Second).Unix()),
			app("container_last_seen"):                               float64(cgroupT0.Unix()),
			app("container_blkio_device_usage_total", "device=/dev/sda", "major=8", "minor=0", "operation=Write"):    16384,
			app("container_blkio_device_usage_total", "device=/dev/vda1", "major=254", "minor=1", "operation=Write"): 0,
		}
		for k, w := range want {
			if s, ok := got[k]; !ok || metricValue(s) != w {
				t.Errorf("v%d: %s = %v (present %v), want %v", v, k, metricValue(s), ok, w)
			}
		}
		var pods []string
		for k := range got {
			if strings.HasPrefix(k, "container_network_receive_bytes_total{") {
				pods = append(pods, k)
			}
			for _, id := range []string{goneID, emptyID, foreignID} {
				if strings.Contains(k, id) {
					t.Errorf("v%d: series of a container without cgroup readings: %s", v, k)
				}
			}
		}
		// Only the pod's own network namespace, lo left out.
		if len(pods) != 1 || !strings.Contains(pods[0], "container=POD") || !strings.Contains(pods[0], "interface=eth0") ||
			metricValue(got[pods[0]]) != 3062 {
			t.Errorf("v%d: network series %v", v, pods)
		}
	}
}

func TestContainerMetricsRuntimeError(t *testing.T) {
	m, rt := newCgroupMetrics(t, CgroupV1)
	rt.err = errors.New("runtime down")
	got := series(t, m)
	if len(got) != 1 || metricValue(got["container_scrape_error{}"]) != 1 {
		t.Errorf("series = %v, want only container_scrape_error 1", got)
	}
}

// BenchmarkContainerMetrics30 scrapes 15 pods of one container each (30
// cgroups: containers and sandboxes) laid out as on a cgroup v1 host,
// with a fake runtime: the cost of the cgroup and /proc reads.
func BenchmarkContainerMetrics30(b *testing.B) {
	h := fakeHost{t: &testing.T{}, root: b.TempDir()}
	h.writeProc()
	rt := newFakeRuntime()
	for i := range 15 {
		uid := fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i)
		sb, ctr := fmt.Sprintf("%064x", 2*i+1), fmt.Sprintf("%064x", 2*i+2)
		h.writeV1Pod(uid, sb, ctr)
		l := map[string]string{podspec.LabelPodName: fmt.Sprintf("p%d", i), podspec.LabelPodNamespace: "default",
			podspec.LabelPodUID: uid, podspec.LabelManagedBy: podspec.ManagedByValue}
		rt.sandboxes = append(rt.sandboxes, &runtimeapi.PodSandbox{Id: sb, State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: l})
		cl := map[string]string{podspec.LabelContainerName: "main"}
		maps.Copy(cl, l)
		rt.containers = append(rt.containers, &runtimeapi.Container{Id: ctr, PodSandboxId: sb,
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: cl, Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	}
	machine := &HostMachine{ProcDir: filepath.Join(h.root, "proc"), CgroupDir: filepath.Join(h.root, "cgroup"),
		SysDir: filepath.Join(h.root, "sys"), Cgroup: CgroupV1}
	m := NewContainerMetrics(rt, machine, testingclock.NewFakePassiveClock(cgroupT0), discardLogger())
	fams, err := m.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "container_cpu_usage_seconds_total" && len(f.GetMetric()) != 30 {
			b.Fatalf("%d series of %s, want 30", len(f.GetMetric()), f.GetName())
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
