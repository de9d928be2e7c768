package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// emptyDirMode is the mode of an emptyDir directory, as the kubelet's.
const emptyDirMode fs.FileMode = 0o777

// setUpEmptyDir creates the directory of an emptyDir volume and, for
// medium Memory, mounts a tmpfs on it. fsGroup is applied once, when the
// volume is created, as the kubelet does when it mounts the volume.
func (m *Manager) setUpEmptyDir(pod *v1.Pod, vol *v1.Volume) error {
	dir := m.volumeDir(pod.UID, pluginEmptyDir, vol.Name)
	created, err := ensureDir(dir, emptyDirMode)
	if err != nil {
		return err
	}
	switch medium := vol.EmptyDir.Medium; medium {
	case v1.StorageMediumDefault:
	case v1.StorageMediumMemory:
		mounted, err := ensureTmpfs(dir, tmpfsSize(pod, vol.EmptyDir.SizeLimit))
		if err != nil {
			return err
		}
		if mounted {
			m.log.Info("Mounted tmpfs for emptyDir", "pod", podRef(pod), "podUID", pod.UID, "volume", vol.Name)
			created = true
		}
	default:
		return fmt.Errorf("emptyDir medium %q is not supported by nodelet", medium)
	}
	if gid := fsGroup(pod); gid != nil && created {
		if err := applyFSGroup(dir, *gid, false); err != nil {
			return err
		}
	}
	return nil
}

// ensureDir creates dir (and its missing parents) with mode perm, whatever
// the umask. It reports whether it created dir. An existing dir is left as
// it is.
func ensureDir(dir string, perm fs.FileMode) (bool, error) {
	fi, err := os.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		return false, nil
	case err == nil:
		return false, fmt.Errorf("%s exists and is not a directory", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("checking volume directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return false, fmt.Errorf("creating volume directory: %w", err)
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("creating volume directory: %w", err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		return true, fmt.Errorf("setting the mode of the volume directory: %w", err)
	}
	return true, nil
}

// tmpfsSize is the size of the tmpfs of a memory-backed emptyDir, as the
// kubelet computes it without knowing the node's allocatable memory: the
// volume's sizeLimit or the pod's memory limit, whichever is smaller and
// positive; nil (the kernel's default) when neither is set.
func tmpfsSize(pod *v1.Pod, sizeLimit *resource.Quantity) *resource.Quantity {
	size := podMemoryLimit(pod)
	if sizeLimit != nil && sizeLimit.Sign() > 0 && (size == nil || sizeLimit.Cmp(*size) <= 0) {
		size = sizeLimit
	}
	return size
}

// podMemoryLimit is the memory limit of the pod's cgroup: the pod-level
// limit, or else the larger of the sum over app containers and restartable
// init containers and the largest init container limit; nil when an app
// container or a sidecar has no memory limit.
func podMemoryLimit(pod *v1.Pod) *resource.Quantity {
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[v1.ResourceMemory]; ok && q.Sign() > 0 {
			return &q
		}
	}
	sum := resource.NewQuantity(0, resource.BinarySI)
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok || q.Sign() <= 0 {
			return nil
		}
		sum.Add(q)
	}
	var initMax resource.Quantity
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		sidecar := podspec.IsSidecar(&c)
		switch {
		case sidecar && (!ok || q.Sign() <= 0):
			return nil
		case sidecar:
			sum.Add(q)
		case ok && q.Cmp(initMax) > 0:
			initMax = q
		}
	}
	if initMax.Cmp(*sum) > 0 {
		return &initMax
	}
	return sum
}

// fsGroup is the pod's fsGroup, nil when not set.
func fsGroup(pod *v1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// podRef is the namespace/name of a pod for logs.
func podRef(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }
