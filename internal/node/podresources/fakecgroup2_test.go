package podresources

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// fakeCgroup2 is an in-memory cgroup2 filesystem that behaves as the
// kernel's where the manager relies on it:
//   - a cgroup's cgroup.controllers is its parent's cgroup.subtree_control
//     (the root's: every controller the fake was given);
//   - "+ctrl" into cgroup.subtree_control fails with ENOENT unless ctrl is
//     in the cgroup's cgroup.controllers; a token not "+name"/"-name" of a
//     known controller is EINVAL; disabling one a child has enabled is
//     EBUSY;
//   - no internal processes: a non-root cgroup with processes cannot
//     enable controllers for children (EBUSY), and a process cannot join
//     a non-root cgroup with controllers enabled for children (EBUSY);
//   - a controller's interface files exist in a non-root cgroup only while
//     it is in its cgroup.controllers (none in the root), with the
//     kernel's defaults; values are checked (cpu.weight 1..10000, "max" or
//     a number, cpu.max "quota period");
//   - rmdir is EBUSY while the cgroup has a process or a child;
//   - interface files cannot be created: writing a missing one is ENOENT,
//     and cgroup.controllers, cgroup.procs of others, etc. are read-only;
//   - cgroup.kill kills every process of the subtree.
type fakeCgroup2 struct {
	mu     sync.Mutex
	avail  []string
	nodes  map[string]*fakeNode
	hugeSz []string
	// writes records every successful write, "rel/file=value", in order.
	writes []string
}

type fakeNode struct {
	subtree []string
	values  map[string]string
	procs   []int
}

// controllerFiles are each controller's files with the kernel's defaults
// (hugetlb's get one per page size).
var controllerFiles = map[string]map[string]string{
	"cpu":    {"cpu.weight": "100", "cpu.max": "max 100000", "cpu.weight.nice": "0", "cpu.stat": ""},
	"memory": {"memory.max": "max", "memory.high": "max", "memory.min": "0", "memory.low": "0", "memory.current": "0"},
	"pids":   {"pids.max": "max", "pids.current": "0"},
	"io":     {"io.weight": "default 100"},
	"cpuset": {"cpuset.cpus": "", "cpuset.mems": ""},
}

func newFakeCgroup2(controllers ...string) *fakeCgroup2 {
	f := &fakeCgroup2{avail: controllers, nodes: map[string]*fakeNode{}, hugeSz: []string{"2MB", "1GB"}}
	f.nodes[""] = &fakeNode{values: map[string]string{}}
	return f
}

func parentOf(rel string) string {
	i := strings.LastIndex(rel, "/")
	if i < 0 {
		return ""
	}
	return rel[:i]
}

func errno(op, rel string, e syscall.Errno) error {
	return &fs.PathError{Op: op, Path: rel, Err: e}
}

// controllersLocked is rel's cgroup.controllers.
func (f *fakeCgroup2) controllersLocked(rel string) []string {
	if rel == "" {
		return f.avail
	}
	return f.nodes[parentOf(rel)].subtree
}

// filesLocked is rel's interface files with their current values.
func (f *fakeCgroup2) filesLocked(rel string) map[string]string {
	n := f.nodes[rel]
	out := map[string]string{
		"cgroup.controllers":     strings.Join(f.controllersLocked(rel), " "),
		"cgroup.subtree_control": strings.Join(n.subtree, " "),
		"cgroup.procs":           "",
		"cgroup.max.depth":       "max",
	}
	if len(n.procs) > 0 {
		var b strings.Builder
		for _, p := range n.procs {
			fmt.Fprintf(&b, "%d\n", p)
		}
		out["cgroup.procs"] = b.String()
	}
	if rel == "" {
		return out
	}
	out["cgroup.kill"] = ""
	out["cgroup.type"] = "domain"
	for _, c := range f.controllersLocked(rel) {
		defaults := controllerFiles[c]
		if c == "hugetlb" {
			defaults = map[string]string{}
			for _, s := range f.hugeSz {
				defaults["hugetlb."+s+".max"] = "max"
				defaults["hugetlb."+s+".current"] = "0"
			}
		}
		for k, v := range defaults {
			if cur, ok := n.values[k]; ok {
				v = cur
			}
			out[k] = v
		}
	}
	return out
}

func (f *fakeCgroup2) split(path string) (rel, file string) {
	return parentOf(path), path[strings.LastIndex(path, "/")+1:]
}

func (f *fakeCgroup2) Mkdir(rel string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.nodes[rel]; ok || rel == "" {
		return errno("mkdir", rel, syscall.EEXIST)
	}
	if _, ok := f.nodes[parentOf(rel)]; !ok {
		return errno("mkdir", rel, syscall.ENOENT)
	}
	if _, isFile := f.filesLocked(parentOf(rel))[rel[strings.LastIndex(rel, "/")+1:]]; isFile {
		return errno("mkdir", rel, syscall.EEXIST)
	}
	f.nodes[rel] = &fakeNode{values: map[string]string{}}
	return nil
}

func (f *fakeCgroup2) childrenLocked(rel string) []string {
	var out []string
	for p := range f.nodes {
		if p != "" && p != rel && parentOf(p) == rel {
			out = append(out, p[strings.LastIndex(p, "/")+1:])
		}
	}
	slices.Sort(out)
	return out
}

func (f *fakeCgroup2) Rmdir(rel string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[rel]
	switch {
	case !ok:
		return errno("rmdir", rel, syscall.ENOENT)
	case rel == "" || len(n.procs) > 0 || len(f.childrenLocked(rel)) > 0:
		return errno("rmdir", rel, syscall.EBUSY)
	}
	delete(f.nodes, rel)
	return nil
}

func (f *fakeCgroup2) ReadFile(path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rel, file := f.split(path)
	if _, ok := f.nodes[rel]; !ok {
		return nil, errno("open", path, syscall.ENOENT)
	}
	v, ok := f.filesLocked(rel)[file]
	if !ok {
		return nil, errno("open", path, syscall.ENOENT)
	}
	if v != "" && !strings.HasSuffix(v, "\n") {
		v += "\n"
	}
	return []byte(v), nil
}

func (f *fakeCgroup2) WriteFile(path string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rel, file := f.split(path)
	n, ok := f.nodes[rel]
	if !ok {
		return errno("open", path, syscall.ENOENT)
	}
	if _, ok := f.filesLocked(rel)[file]; !ok {
		return errno("open", path, syscall.ENOENT)
	}
	v := strings.TrimSpace(string(data))
	if err := f.applyLocked(rel, n, file, v); err != nil {
		return errno("write", path, err.(syscall.Errno))
	}
	f.writes = append(f.writes, path+"="+v)
	return nil
}

func (f *fakeCgroup2) applyLocked(rel string, n *fakeNode, file, v string) error {
	switch file {
	case "cgroup.subtree_control":
		return f.subtreeLocked(rel, n, v)
	case "cgroup.kill":
		if v != "1" {
			return syscall.EINVAL
		}
		for p, m := range f.nodes {
			if p == rel || strings.HasPrefix(p, rel+"/") {
				m.procs = nil
			}
		}
		return nil
	case "cgroup.procs":
		pid, err := strconv.Atoi(v)
		if err != nil {
			return syscall.EINVAL
		}
		return f.addProcLocked(rel, pid)
	case "cpu.weight":
		w, err := strconv.Atoi(v)
		if err != nil || w < 1 || w > 10000 {
			return syscall.ERANGE
		}
	case "cpu.max":
		if _, _, ok := parseCPUMax(v); !ok {
			return syscall.EINVAL
		}
	case "memory.max", "memory.high", "memory.min", "memory.low", "pids.max":
		if _, err := strconv.ParseUint(v, 10, 64); err != nil && v != "max" {
			return syscall.EINVAL
		}
	default:
		if !strings.HasPrefix(file, "hugetlb.") || !strings.HasSuffix(file, ".max") {
			return syscall.EACCES // read-only
		}
		if v != "max" {
			if _, err := strconv.ParseUint(v, 10, 64); err != nil {
				return syscall.EINVAL
			}
		}
	}
	n.values[file] = v
	return nil
}

// subtreeLocked applies "+a -b" to rel's cgroup.subtree_control.
func (f *fakeCgroup2) subtreeLocked(rel string, n *fakeNode, v string) error {
	on := slices.Clone(n.subtree)
	for _, tok := range strings.Fields(v) {
		op, c := tok[0], tok[1:]
		if (op != '+' && op != '-') || !slices.Contains(controllerOrder, c) {
			return syscall.EINVAL
		}
		if op == '+' {
			if !slices.Contains(f.controllersLocked(rel), c) {
				return syscall.ENOENT
			}
			if rel != "" && len(n.procs) > 0 {
				return syscall.EBUSY // no internal processes
			}
			if !slices.Contains(on, c) {
				on = append(on, c)
			}
			continue
		}
		for _, child := range f.childrenLocked(rel) {
			if slices.Contains(f.nodes[join(rel, child)].subtree, c) {
				return syscall.EBUSY
			}
		}
		on = slices.DeleteFunc(on, func(s string) bool { return s == c })
	}
	slices.SortFunc(on, func(a, b string) int { return slices.Index(controllerOrder, a) - slices.Index(controllerOrder, b) })
	n.subtree = on
	return nil
}

func (f *fakeCgroup2) addProcLocked(rel string, pid int) error {
	n := f.nodes[rel]
	if rel != "" && len(n.subtree) > 0 {
		return syscall.EBUSY // no internal processes
	}
	for _, m := range f.nodes {
		m.procs = slices.DeleteFunc(m.procs, func(p int) bool { return p == pid })
	}
	n.procs = append(n.procs, pid)
	return nil
}

func (f *fakeCgroup2) Children(rel string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.nodes[rel]; !ok {
		return nil, errno("open", rel, syscall.ENOENT)
	}
	return f.childrenLocked(rel), nil
}

func (f *fakeCgroup2) Files(rel string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.nodes[rel]; !ok {
		return nil, errno("open", rel, syscall.ENOENT)
	}
	var out []string
	for k := range f.filesLocked(rel) {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// addProc puts a process into cgroup rel, as the runtime would.
func (f *fakeCgroup2) addProc(rel string, pid int) error {
	return f.WriteFile(join(rel, "cgroup.procs"), []byte(strconv.Itoa(pid)))
}

// dump is the tree: per cgroup, its controllers, subtree_control and the
// values written to it, sorted.
func (f *fakeCgroup2) dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var paths []string
	for p := range f.nodes {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var b strings.Builder
	for _, p := range paths {
		n := f.nodes[p]
		fmt.Fprintf(&b, "%s\n  controllers: %s\n  subtree_control: %s\n", name(p), strings.Join(f.controllersLocked(p), " "), strings.Join(n.subtree, " "))
		var keys []string
		for k := range n.values {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s: %s\n", k, n.values[k])
		}
	}
	return b.String()
}
