//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/base/mountinfo"
)

// What a run of the tests leaves on the host is checked at its end, after
// every test's own clean-up and the shared runtime's tear-down: a test
// that stops its node agent and runtime with pods still running leaves
// their volume mounts (the kubelet leaves them too when it stops), and a
// runtime killed by a test can leave its shims and their containers. The
// sweep removes what is the run's own, says what it removed, and the run
// fails if any of it is still there afterwards:
//
//   - processes whose executable or command line lies in the run's work
//     directory (its nodelets, runtimes, shims, control plane), and the
//     containers those shims ran: killed;
//   - mounts under the work directory: detached;
//   - cgroups the run created at the top of a hierarchy that are a node's
//     (its nodes' --cgroup-root, holding kubepods in some hierarchy; the
//     kubelet's kubepods on a fresh host) and the run's (runCgroupTop:
//     named after its work directory, or claimed by the test that made
//     them; never those of another run beside it): removed,
//     deepest first, once their processes are gone (one still in use
//     belongs to another agent of the host, and is only reported);
//   - the work directory itself: removed.
//
// Network namespaces that appeared during the run are reported, not
// removed: a runtime of this host started outside the tests (`make run`)
// makes them too, and nothing ties one to the tests.
type hostBefore struct {
	cgroupTops map[string]bool // <hierarchy>/<top dir>
	netns      map[string]bool
}

// recordHost notes what is on the host before the run.
func recordHost() hostBefore {
	h := hostBefore{cgroupTops: map[string]bool{}, netns: map[string]bool{}}
	for _, dir := range cgroupTopDirs() {
		h.cgroupTops[dir] = true
	}
	for _, n := range netnsNames() {
		h.netns[n] = true
	}
	return h
}

// sweep removes what the run left under work and reports it; the error
// lists what it could not remove.
func sweep(work string, before hostBefore) (removed []string, err error) {
	var problems []string
	procs := ownProcesses(work)
	if len(procs) > 0 {
		for _, p := range procs {
			removed = append(removed, fmt.Sprintf("process %d %s", p.pid, p.name))
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && slices.ContainsFunc(procs, func(p proc) bool { return p.alive() }) {
			time.Sleep(100 * time.Millisecond)
		}
		for _, p := range procs {
			if p.alive() {
				problems = append(problems, fmt.Sprintf("process %d %s survived SIGKILL", p.pid, p.name))
			}
		}
	}
	mounts, err := mountsUnder(work)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if err := detachMounts(mounts); err != nil {
		problems = append(problems, err.Error())
	}
	if len(mounts) > 0 {
		removed = append(removed, fmt.Sprintf("%d mounts under %s (first: %s)", len(mounts), work, mounts[len(mounts)-1]))
	}
	tops := cgroupTopDirs()
	nodeTops := nodeCgroupNames(tops)
	for _, top := range tops {
		if before.cgroupTops[top] {
			continue
		}
		name := filepath.Base(top)
		if !nodeTops[name] {
			// Not a node's: on a systemd host a slice started meanwhile
			// (machine.slice) is a new top too, and not the run's.
			removed = append(removed, fmt.Sprintf("(not removed, holds no kubepods in any hierarchy) cgroup %s", top))
			continue
		}
		if !runCgroupTop(work, name) {
			// Another node's: made meanwhile by an e2e run beside this
			// one (hack/e2e-lanes.sh; its names start as this run's do)
			// or by another agent of the host. Its tree may be in use.
			if !strings.HasPrefix(name, e2eWorkPrefix) {
				removed = append(removed, fmt.Sprintf("(not removed, not the run's) cgroup %s", top))
			}
			continue
		}
		n, err := removeCgroupTree(top)
		if n > 0 {
			removed = append(removed, fmt.Sprintf("cgroup %s (%d dirs)", top, n))
		}
		if err != nil {
			// Its processes are not the run's (those are gone): some
			// other agent of this host made it during the run.
			removed = append(removed, fmt.Sprintf("(not removed, in use) %v", err))
		}
	}
	if err := os.RemoveAll(work); err != nil {
		problems = append(problems, fmt.Sprintf("remove %s: %v", work, err))
	}
	if rest, _ := mountsUnder(work); len(rest) > 0 {
		problems = append(problems, fmt.Sprintf("%d mounts still under %s", len(rest), work))
	}
	var appeared []string
	for _, n := range netnsNames() {
		if !before.netns[n] {
			appeared = append(appeared, n)
		}
	}
	if len(appeared) > 0 {
		removed = append(removed, fmt.Sprintf("(not removed) network namespaces that appeared during the run: %s", strings.Join(appeared, " ")))
	}
	if len(problems) > 0 {
		return removed, errors.New(strings.Join(problems, "; "))
	}
	return removed, nil
}

type proc struct {
	pid   int
	name  string
	start string // field 22 of stat: tells a reused pid apart
}

func (p proc) alive() bool {
	return procStart(p.pid) == p.start && p.start != ""
}

func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// comm may hold spaces; the fields after its ')' are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 || fields[0] == "Z" {
		return ""
	}
	return fields[19]
}

func procPPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(fields[1])
	return n
}

// ownProcesses are the processes of the run: their executable or command
// line in work, and every descendant of those (the containers of its
// shims live in their own pid namespaces, with host binaries).
func ownProcesses(work string) []proc {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	children := map[int][]int{}
	own := map[int]bool{}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		pids = append(pids, pid)
		children[procPPID(pid)] = append(children[procPPID(pid)], pid)
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(exe, work+"/") || bytes.Contains(cmd, []byte(work+"/")) {
			own[pid] = true
		}
	}
	var stack []int
	for pid := range own {
		stack = append(stack, pid)
	}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[pid] {
			if !own[c] {
				own[c] = true
				stack = append(stack, c)
			}
		}
	}
	var out []proc
	for _, pid := range pids {
		if !own[pid] {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out = append(out, proc{pid: pid, name: strings.TrimSpace(string(comm)), start: procStart(pid)})
	}
	return out
}

// mountsUnder lists the mount points under dir, the deepest first.
func mountsUnder(dir string) ([]string, error) {
	table, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range table {
		if strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, m.MountPoint)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, nil
}

// detachMounts detaches each of mounts (lazily: a busy one goes once
// unused), in order; one already gone is no error.
func detachMounts(mounts []string) error {
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies are the mount points of the cgroup hierarchies: the
// unified one alone on a cgroup v2 host (whose subdirectories are cgroups,
// not hierarchies), else every v1 controller's, not the links to a
// co-mounted pair (cpu, cpuacct: links to cpu,cpuacct), and a hybrid
// host's unified one.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var out []string
	hs, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hs {
		if fi, err := os.Lstat(h); err == nil && fi.IsDir() {
			out = append(out, h)
		}
	}
	return out
}

// makeCgroupRootB makes cgroup root (as an administrator gives a node
// agent its --cgroup-root) in every hierarchy, cpuset's cpus and mems
// copied from the parent, and claims it as the run's (claimCgroupTops).
func makeCgroupRootB(root string) error {
	claimCgroupTops(root)
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeCgroupRoot removes root and whatever cgroups are left under it,
// deepest first, in every hierarchy (removeCgroupTree).
func removeCgroupRoot(root string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		if _, err := removeCgroupTree(filepath.Join(h, root)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cgroupTopDirs are the directories at the top of each cgroup hierarchy.
func cgroupTopDirs() []string {
	var out []string
	for _, r := range cgroupHierarchies() {
		entries, _ := os.ReadDir(r)
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, filepath.Join(r, e.Name()))
			}
		}
	}
	return out
}

// e2eWorkPrefix begins the name of every run's work directory (in /tmp),
// and so of its cgroup roots.
const e2eWorkPrefix = "nle2e-"

// claimedCgroupTops are the top cgroups the run made (makeCgroupRoot,
// makeCgroupRootB) or had made (claimCgroupTops), by name: the sweep
// removes those and the run's own (runCgroupTop) only, never a node's of
// a run beside it.
var claimedCgroupTops = struct {
	sync.Mutex
	names map[string]bool
}{names: map[string]bool{}}

// claimCgroupTops says that the run makes, or has an agent make, the top
// cgroups named root (with or without its leading slash).
func claimCgroupTops(roots ...string) {
	claimedCgroupTops.Lock()
	defer claimedCgroupTops.Unlock()
	for _, r := range roots {
		claimedCgroupTops.names[strings.TrimPrefix(r, "/")] = true
	}
}

// runCgroupTop reports whether the top cgroup named name is the run's:
// named after its work directory (the cgroup root of its agents, and
// <root>-<suffix>), or claimed.
func runCgroupTop(work, name string) bool {
	base := filepath.Base(work)
	if name == base || strings.HasPrefix(name, base+"-") {
		return true
	}
	claimedCgroupTops.Lock()
	defer claimedCgroupTops.Unlock()
	return claimedCgroupTops.names[name]
}

// nodeCgroupNames are the names of the top cgroups that are a node's: the
// kubelet's own kubepods (kubepods.slice with the systemd driver) and any
// top holding one, a node's --cgroup-root. A v1 node makes its root in
// every hierarchy but kubepods only in the controllers it uses, so a name
// counts in all hierarchies once it holds kubepods in one.
func nodeCgroupNames(tops []string) map[string]bool {
	names := map[string]bool{}
	for _, top := range tops {
		base := filepath.Base(top)
		if strings.HasPrefix(base, "kubepods") {
			names[base] = true
			continue
		}
		for _, child := range []string{"kubepods", "kubepods.slice"} {
			if fi, err := os.Stat(filepath.Join(top, child)); err == nil && fi.IsDir() {
				names[base] = true
			}
		}
	}
	return names
}

// removeCgroupTree removes top and every cgroup under it, deepest first,
// and says how many it removed.
func removeCgroupTree(top string) (int, error) {
	var dirs []string
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	n := 0
	var failed []string
	for _, d := range dirs {
		err := os.Remove(d)
		// A cgroup whose last process has just been killed can stay busy
		// for a moment.
		for i := 0; errors.Is(err, unix.EBUSY) && i < 20; i++ {
			time.Sleep(50 * time.Millisecond)
			err = os.Remove(d)
		}
		switch {
		case err == nil:
			n++
		case errors.Is(err, fs.ErrNotExist):
		default:
			failed = append(failed, fmt.Sprintf("remove cgroup %s: %v", d, err))
		}
	}
	if len(failed) > 0 {
		return n, errors.New(strings.Join(failed, "; "))
	}
	return n, nil
}

func netnsNames() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// warnLowDisk says so when the filesystem of dir is near the kubelet's
// default hard eviction thresholds (nodefs.available<10%,
// imagefs.available<15%), which the tests' nodes keep: below them every
// node reports DiskPressure and is tainted, and the cluster tests' pods
// are not scheduled (CoreDNS first). The disk is the host's, shared with
// everything else on it.
func warnLowDisk(dir string) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return
	}
	if pct := float64(st.Bavail) / float64(st.Blocks) * 100; pct < 20 {
		fmt.Fprintf(os.Stderr, "e2e: WARNING: the filesystem of %s has %.1f%% available (%d GiB); below 15%% the tests' nodes report "+
			"DiskPressure (imagefs.available<15%%) and the cluster tests' pods are not scheduled\n",
			dir, pct, st.Bavail*uint64(st.Bsize)>>30)
	}
}

// hostPods are the processes in the pod cgroups of the default cgroup
// root (kubepods, kubepods.slice) when the run began: the pods of the
// host's own node agent (make run's nodelet, a kubelet), which the run
// must leave running. Every agent the run starts has a root of its own
// (env.cgroupRoot), and the conformance slice, which needs the default
// root, does not run beside them (checkNoHostPods).
type hostPods []hostPod

type hostPod struct {
	proc
	cgroup string
}

// foreignPodProcesses lists the processes in the pod cgroups of the
// default root, in every hierarchy.
func foreignPodProcesses() hostPods {
	var tops []string
	for _, pattern := range []string{"/sys/fs/cgroup/kubepods*", "/sys/fs/cgroup/*/kubepods*"} {
		m, _ := filepath.Glob(pattern)
		tops = append(tops, m...)
	}
	seen := map[int]bool{}
	var out hostPods
	for _, top := range tops {
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			// A pod's cgroup: pod<uid> (cgroupfs) or
			// kubepods-<tier>-pod<uid>.slice (systemd), below the top.
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" || !strings.Contains(strings.TrimPrefix(p, top), "pod") {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil || seen[pid] {
					continue
				}
				seen[pid] = true
				start := procStart(pid)
				if start == "" {
					continue // gone already
				}
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				out = append(out, hostPod{proc: proc{pid: pid, name: strings.TrimSpace(string(comm)), start: start}, cgroup: filepath.Dir(p)})
			}
			return nil
		})
	}
	return out
}

// gone describes the processes of h no longer running.
func (h hostPods) gone() []string {
	var out []string
	for _, p := range h {
		if !p.alive() {
			out = append(out, fmt.Sprintf("pid %d (%s) of %s", p.pid, p.name, p.cgroup))
		}
	}
	return out
}
