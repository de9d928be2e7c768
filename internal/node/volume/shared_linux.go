package volume

import (
	"fmt"
	"github.com/nodelet/nodelet/internal/base/mountinfo"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// shareVolume makes the host directory of a volume that a container mounts
// with propagation a shared mount point: the runtime refuses Bidirectional
// propagation from a source that is not on a shared mount ("is mounted on /
// but it is not a shared mount"), and HostToContainer needs a shared or
// slave one. The kubelet makes its whole root dir shared at start; nodelet
// makes only such a volume's directory so, when it is set up, bound onto
// itself first if it is no mount point: the host's other mounts keep their
// propagation, and no mount made earlier is copied (a recursive bind of a
// directory holding mounts hides the originals, which can then not be
// unmounted by path). Pod teardown unmounts it with the pod's other mounts.
// A hostPath volume is the host's: left as it is, as is the host path of
// a hostPath PersistentVolume; a local one's bind mount is made shared.
func (m *Manager) shareVolume(uid types.UID, vol *v1.Volume) error {
	if vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil {
		if c, ok := m.claimed.get(uid, vol.Name); ok && c.inPodDir {
			return makeShared(c.hostPath)
		}
		return nil
	}
	plugin, err := pluginDir(&vol.VolumeSource)
	if err != nil || plugin == "" {
		return err
	}
	return makeShared(m.volumeDir(uid, plugin, vol.Name))
}

func makeShared(dir string) error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	mounted := false
	for _, mi := range mounts {
		if mi.MountPoint == dir {
			if mi.Shared {
				return nil
			}
			mounted = true
		}
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount propagation: bind-mount %s onto itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("mount propagation: make %s a shared mount: %w", dir, err)
	}
	return nil
}
