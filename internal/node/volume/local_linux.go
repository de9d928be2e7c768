package volume

import (
	"errors"
	"fmt"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// pluginLocal is the kubelet's plugin directory of local volumes.
const pluginLocal = "kubernetes.io~local-volume"

// setUpLocal sets up a local PersistentVolume as the kubelet's local
// volume plugin does: the PV's path, which must be a directory (block
// devices are not supported), is bind-mounted onto
// <pod dir>/volumes/kubernetes.io~local-volume/<pv name>, read-only when
// the claim is, with the PV's mount options; once mounted read-write, the
// pod's fsGroup is applied by its fsGroupChangePolicy (SetVolumeOwnership),
// unless another pod has it mounted already.
// A mount already there is left as it is (SetUp runs on every sync).
func (m *Manager) setUpLocal(pod *v1.Pod, p Persistent) (claimed, error) {
	fail := func(step string, err error) (claimed, error) {
		return claimed{}, &claimError{pv: p.PV.Name, step: step, err: err}
	}
	path := p.PV.Spec.Local.Path
	if path == "" {
		return fail(stepNewMounter, errors.New("local volume source is nil or local path is not set"))
	}
	if err := checkPathElement("PersistentVolume name", p.PV.Name); err != nil {
		return fail(stepNewMounter, err)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(stepNewMounter, fmt.Errorf("path %q does not exist", path))
	case err != nil:
		return fail(stepNewMounter, err)
	case fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0:
		return fail(stepNewMounter, fmt.Errorf("local volume %s is a block device: not supported by nodelet", path))
	case !fi.IsDir():
		return fail(stepNewMounter, errors.New("only directory and block device are supported"))
	}
	if err := checkNoBacksteps(path); err != nil {
		return fail(stepSetUp, fmt.Errorf("invalid path: %s %w", path, err))
	}
	dir := m.volumeDir(pod.UID, pluginLocal, p.PV.Name)
	out := claimed{hostPath: dir, readOnly: p.ReadOnly, inPodDir: true}
	if _, err := ensureDir(dir, 0o750); err != nil {
		return fail(stepSetUp, err)
	}
	mounted, err := mountinfo.IsMountPoint(dir)
	if err != nil {
		return fail(stepSetUp, err)
	}
	if mounted {
		return out, nil
	}
	flags, ignored := bindFlags(p.ReadOnly, p.PV.Spec.MountOptions)
	if len(ignored) > 0 {
		m.log.Warn("Mount options of a local volume that a bind mount cannot apply are ignored, as the kubelet's bind remount ignores them",
			"pod", podRef(pod), "podUID", pod.UID, "persistentVolume", p.PV.Name, "options", ignored)
	}
	if err := bindMount(path, dir, flags); err != nil {
		return fail(stepSetUp, err)
	}
	m.log.Info("Mounted local volume", "pod", podRef(pod), "podUID", pod.UID, "persistentVolume", p.PV.Name, "path", path, "readOnly", p.ReadOnly)
	if !p.ReadOnly {
		if err := m.localOwnership(pod, p.PV.Name, dir); err != nil {
			return fail(stepSetUp, err)
		}
	}
	return out, nil
}

// localOwnership applies the pod's fsGroup to a local volume it just
// mounted read-write, unless another pod has the volume mounted: then, as
// the kubelet's local plugin, ownership is left as the first pod made it,
// with a warning when the groups differ (the kubelet's
// WarnAlreadyMountedVolume event; a log line here).
func (m *Manager) localOwnership(pod *v1.Pod, pv, dir string) error {
	gid := fsGroup(pod)
	if gid == nil {
		return nil
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	if otherMounts(mounts, dir, m.podsDir()) == 0 {
		return setVolumeOwnership(dir, gid, fsGroupChangePolicy(pod))
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("failed to check fsGroup for %s (%w)", dir, err)
	}
	if int64(st.Gid) != *gid {
		m.log.Warn(fmt.Sprintf("The requested fsGroup is %d, but the volume %s has GID %d. The volume may not be shareable.", *gid, pv, st.Gid),
			"pod", podRef(pod), "podUID", pod.UID, "reason", "AlreadyMountedVolume")
	}
	return nil
}

// bindMount bind-mounts source onto target and, when flags are asked
// for, remounts the bind with them (a bind mount takes no flags at first).
// The flags of the source's mount that a bind keeps (nosuid, nodev,
// noexec, atime) are kept.
func bindMount(source, target string, flags uintptr) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s onto %s: %w", source, target, err)
	}
	if flags == 0 {
		return nil
	}
	var st unix.Statfs_t
	err := unix.Statfs(target, &st)
	if err == nil {
		kept := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
		err = unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|flags|kept, "")
	}
	if err != nil {
		if uerr := unix.Unmount(target, 0); uerr != nil {
			return fmt.Errorf("remounting %s with its options: %w (and unmounting it again: %v)", target, err, uerr)
		}
		return fmt.Errorf("remounting %s with its options: %w", target, err)
	}
	return nil
}

// bindFlags are the flags of a bind mount, read-only or not, with a PV's
// mount options. A bind mount can only change per-mount flags: the
// options of a file system (vers=4, discard, ...) are returned as
// ignored.
func bindFlags(readOnly bool, options []string) (flags uintptr, ignored []string) {
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	for _, o := range options {
		switch o {
		case "bind", "rw", "defaults", "suid", "dev", "exec", "atime", "diratime", "norelatime", "async":
		case "ro":
			flags |= unix.MS_RDONLY
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		case "noatime":
			flags |= unix.MS_NOATIME
		case "nodiratime":
			flags |= unix.MS_NODIRATIME
		case "relatime":
			flags |= unix.MS_RELATIME
		default:
			ignored = append(ignored, o)
		}
	}
	return flags, ignored
}

// fsGroupChangePolicy is the pod's fsGroupChangePolicy, nil when not set.
func fsGroupChangePolicy(pod *v1.Pod) *v1.PodFSGroupChangePolicy {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroupChangePolicy
	}
	return nil
}
