package volume

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ensureSharedRoot makes the root dir a shared mount, once, as the kubelet
// does at start: a volume mounted with Bidirectional propagation needs its
// source on a shared mount (the runtime refuses it otherwise: "is mounted
// on / but it is not a shared mount"), HostToContainer on a shared or
// slave one. A root dir that is no mount point of its own is bind-mounted
// onto itself first, so that the host's other mounts keep their
// propagation.
func (m *Manager) ensureSharedRoot() error {
	if !m.shareRoot {
		return nil
	}
	m.shared.Do(func() { m.sharedErr = makeRShared(m.rootDir) })
	return m.sharedErr
}

func makeRShared(dir string) error {
	mounts, err := readMountInfo()
	if err != nil {
		return err
	}
	for _, mi := range mounts {
		if mi.mountPoint == dir && mi.shared {
			return nil
		}
	}
	mounted := false
	for _, mi := range mounts {
		mounted = mounted || mi.mountPoint == dir
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mount %s onto itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}
