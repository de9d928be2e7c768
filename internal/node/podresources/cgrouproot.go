package podresources

import (
	"errors"
	"fmt"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// DefaultCgroupRoot is the kubelet's cgroupRoot when cgroupsPerQOS is on:
// the root cgroup, so that the QoS hierarchy is /kubepods (cgroupfs) or
// kubepods.slice (systemd).
const DefaultCgroupRoot = "/"

// MaxCgroupRootLen bounds cgroupRoot. A pod's systemd slice unit name
// repeats every level of it and systemd takes unit names of at most 255
// bytes; "-kubepods-besteffort-pod<uid>.slice" needs 66 of them.
const MaxCgroupRootLen = 128

// CgroupRoot is the kubelet's cgroupRoot (--cgroup-root): the cgroup the
// QoS hierarchy "kubepods" is made in, one element per level, none for
// the root cgroup. As the kubelet takes it, it is written as a cgroupfs
// path with either driver: "/nodelet-a" is the cgroup /nodelet-a with
// cgroupfs (pods in /nodelet-a/kubepods/burstable/pod<uid>) and the slice
// nodelet_a.slice with systemd (pods in nodelet_a-kubepods-burstable-
// pod<uid>.slice), a dash in an element becoming an underscore.
type CgroupRoot []string

// ParseCgroupRoot checks and splits a cgroupRoot for driver ("" is
// cgroupfs): an absolute, clean path ("/", "/nodelet-a", "/a/b") of at most
// MaxCgroupRootLen bytes whose elements are letters, digits and ".", "_",
// "-", ":" (no "." or ".." element); with systemd, no element ends in
// ".slice", since the slice name is made from the path ("/system.slice"
// would be system.slice.slice).
func ParseCgroupRoot(s string, driver Driver) (CgroupRoot, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf("cgroupRoot is empty: want an absolute cgroup path such as %q", DefaultCgroupRoot)
	case len(s) > MaxCgroupRootLen:
		return nil, fmt.Errorf("cgroupRoot %.20q... is %d bytes long: at most %d", s, len(s), MaxCgroupRootLen)
	case !strings.HasPrefix(s, "/"):
		return nil, fmt.Errorf("cgroupRoot %q is not absolute: want a cgroup path starting with /, such as /nodelet-a", s)
	case path.Clean(s) != s:
		return nil, fmt.Errorf("cgroupRoot %q is not a clean path (no empty, \".\" or \"..\" element, no trailing /): want %q", s, path.Clean(s))
	case s == "/":
		return CgroupRoot{}, nil
	}
	elems := strings.Split(s[1:], "/")
	for _, e := range elems {
		if err := checkCgroupRootElem(e); err != nil {
			return nil, fmt.Errorf("cgroupRoot %q: %w", s, err)
		}
		if driver == DriverSystemd && strings.HasSuffix(e, sliceSuffix) {
			return nil, fmt.Errorf("cgroupRoot %q: with the systemd driver cgroupRoot is still a cgroupfs-style path, as the kubelet takes it (/nodelet-a is the slice nodelet_a.slice): %q would become %s%s",
				s, e, escapeSlicePart(e), sliceSuffix)
		}
	}
	return CgroupRoot(elems), nil
}

// checkCgroupRootElem refuses an element that is no plain cgroup name.
func checkCgroupRootElem(e string) error {
	if e == "." || e == ".." {
		return fmt.Errorf("element %q is not allowed", e)
	}
	for _, r := range e {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.', r == '_', r == '-', r == ':':
		default:
			return fmt.Errorf("element %q has %q: want letters, digits, '.', '_', '-' or ':'", e, r)
		}
	}
	return nil
}

// String is the cgroupfs path ("/" for the root cgroup).
func (r CgroupRoot) String() string { return "/" + strings.Join(r, "/") }

// top is the QoS hierarchy's top cgroup, relative to a hierarchy's root,
// with the cgroupfs driver: "kubepods", "nodelet-a/kubepods".
func (r CgroupRoot) top() string { return join(r.rel(), defaultTopCgroupName) }

// rel is the root itself relative to a hierarchy's root ("" for "/").
func (r CgroupRoot) rel() string { return join(r...) }

// escapeSlicePart is an element of a slice name: a dash is a level in
// systemd's slice names, so it becomes an underscore, as the kubelet's
// escapeSystemdCgroupName does.
func escapeSlicePart(p string) string { return strings.ReplaceAll(p, "-", "_") }

// ErrCgroupRootMissing is returned (wrapped, naming the cgroup) where the
// cgroupRoot does not exist: nodelet makes kubepods in it but not the
// cgroupRoot itself, as the kubelet checks it exists and refuses to start
// otherwise. Whoever chose it creates it (mkdir in each cgroup v1
// hierarchy or in the unified one; a slice unit with systemd).
var ErrCgroupRootMissing = errors.New("the cgroupRoot cgroup does not exist: create it first, or choose another cgroupRoot")

// QoSTopCgroups are the QoS hierarchy's top cgroups under cgroupRoot,
// relative to the cgroup mount, with either driver: "kubepods" and
// "kubepods.slice" under "/", "nodelet-a/kubepods" and
// "nodelet_a.slice/nodelet_a-kubepods.slice" under "/nodelet-a". Where
// the pod cgroups are looked for (the cAdvisor metrics); nil for a
// cgroupRoot ParseCgroupRoot refuses.
func QoSTopCgroups(cgroupRoot string) []string {
	root, err := ParseCgroupRoot(cgroupRoot, DriverCgroupfs)
	if err != nil {
		return nil
	}
	return []string{root.top(), systemdLayout{root: root}.qosDir(v1.PodQOSGuaranteed)}
}
