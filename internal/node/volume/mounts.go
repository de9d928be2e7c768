package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/node/csi"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Mounts returns the CRI mounts for the volumeMounts of container c, in
// their order; call it after SetUp. env is the container's environment,
// which subPathExpr is expanded with ($(VAR), "$$" for a literal "$"; an
// unset or empty variable is an error, as in the kubelet).
//
// A subPath is resolved below the volume without ever leaving it, whatever
// symlinks a container planted or swaps in meanwhile; missing directories
// are created with the mode of the volume root; and the result is
// bind-mounted onto <rootDir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>,
// which is the host path returned. Those mounts stay until TearDown.
//
// configMap, secret, downwardAPI and projected volumes are always
// read-only, as the kubelet mounts them. supportsRRO tells whether the
// pod's runtime handler supports recursive read-only mounts: a
// recursiveReadOnly mount is resolved with it (podspec.RecursiveReadOnly),
// and Enabled without that support is an error.
//
// An image volume is mounted by the runtime, as the kubelet's makeMounts
// does it: images holds, by volume name, the image the runtime manager
// pulled for each image volume, and the mount names it (Mount.Image, its
// subPath as ImageSubPath, resolved by the runtime inside the image),
// always read-only, with no host path. An image volume missing from images
// is an error.
func (m *Manager) Mounts(pod *v1.Pod, c *v1.Container, env map[string]string, supportsRRO bool,
	images map[string]*runtimeapi.ImageSpec) ([]*runtimeapi.Mount, error) {
	if err := checkPathElement("pod UID", string(pod.UID)); err != nil {
		return nil, err
	}
	unlock := m.locks.lock(pod.UID)
	defer unlock()

	vols := make(map[string]*v1.Volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	out := make([]*runtimeapi.Mount, 0, len(c.VolumeMounts))
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		mnt, err := m.containerMount(pod.UID, c, i, vm, vols[vm.Name], env, supportsRRO, images)
		if err != nil {
			return nil, fmt.Errorf("volumeMount %q of container %q: %w", vm.Name, c.Name, err)
		}
		out = append(out, mnt)
	}
	return out, nil
}

// containerMount is the CRI mount of one volumeMount.
func (m *Manager) containerMount(uid types.UID, c *v1.Container, index int, vm *v1.VolumeMount, vol *v1.Volume, env map[string]string, supportsRRO bool,
	images map[string]*runtimeapi.ImageSpec) (*runtimeapi.Mount, error) {
	if vol == nil {
		return nil, fmt.Errorf("volume %q is not defined by the pod", vm.Name)
	}
	subPath, err := subPathOf(vm, env)
	if err != nil {
		return nil, err
	}
	if vol.Image != nil {
		image := images[vol.Name]
		if image == nil {
			return nil, fmt.Errorf("image volume %q: its image %q has not been pulled", vol.Name, vol.Image.Reference)
		}
		mnt, err := mountOf(c, vm, "", true, supportsRRO)
		if err != nil {
			return nil, err
		}
		mnt.Image = &runtimeapi.ImageSpec{Image: image.Image, UserSpecifiedImage: image.UserSpecifiedImage,
			RuntimeHandler: image.RuntimeHandler, Annotations: maps.Clone(image.Annotations)}
		mnt.ImageSubPath = subPath
		return mnt, nil
	}
	hostPath, mustReadOnly, err := m.volumeHostPath(uid, vol)
	if err != nil {
		return nil, err
	}
	if subPath != "" {
		if err := checkPathElement("container name", c.Name); err != nil {
			return nil, err
		}
		target := m.subPathTarget(uid, vol.Name, c.Name, index)
		if hostPath, err = bindSubPath(hostPath, subPath, target); err != nil {
			return nil, err
		}
	}
	return mountOf(c, vm, hostPath, mustReadOnly, supportsRRO)
}

// mountOf is the CRI mount of volumeMount vm of container c from hostPath,
// read-only when vm or the volume's type says so.
func mountOf(c *v1.Container, vm *v1.VolumeMount, hostPath string, mustReadOnly, supportsRRO bool) (*runtimeapi.Mount, error) {
	prop, err := propagation(vm.MountPropagation, c)
	if err != nil {
		return nil, err
	}
	rro, err := podspec.RecursiveReadOnly(vm, supportsRRO)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
	}
	containerPath := vm.MountPath
	if !strings.HasPrefix(containerPath, "/") {
		// The API server accepts a relative mountPath; the kubelet mounts
		// it below the container's root.
		containerPath = "/" + containerPath
	}
	return &runtimeapi.Mount{
		ContainerPath: containerPath,
		HostPath:      hostPath,
		Readonly:      vm.ReadOnly || mustReadOnly,
		// The runtime makes every submount read-only too (runc's
		// mount_setattr with AT_RECURSIVE).
		RecursiveReadOnly: rro,
		SelinuxRelabel:    false,
		Propagation:       prop,
		MountOptions:      slices.Clone(vm.BindMountOptions),
	}, nil
}

// volumeHostPath is the host path of a volume's root and whether the
// volume must be mounted read-only.
func (m *Manager) volumeHostPath(uid types.UID, vol *v1.Volume) (string, bool, error) {
	if vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil {
		c, ok := m.claimed.get(uid, vol.Name)
		if !ok {
			return "", false, fmt.Errorf("volume %q is not set up", vol.Name)
		}
		return c.hostPath, c.readOnly, nil
	}
	plugin, err := pluginDir(&vol.VolumeSource)
	if err != nil {
		return "", false, fmt.Errorf("volume %q: %w", vol.Name, err)
	}
	if plugin == "" {
		return filepath.Clean(vol.HostPath.Path), false, nil
	}
	if err := checkPathElement("volume name", vol.Name); err != nil {
		return "", false, err
	}
	dir := m.volumeDir(uid, plugin, vol.Name)
	mustReadOnly := plugin != pluginEmptyDir
	if plugin == csi.PluginDir {
		dir = csi.TargetPath(dir)
		mustReadOnly = vol.CSI.ReadOnly != nil && *vol.CSI.ReadOnly
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return "", false, fmt.Errorf("volume %q is not set up", vol.Name)
	}
	if err != nil {
		return "", false, fmt.Errorf("volume %q: %w", vol.Name, err)
	}
	return dir, mustReadOnly, nil
}

// subPathOf is the checked subPath of a volumeMount, subPathExpr expanded;
// "" for none.
func subPathOf(vm *v1.VolumeMount, env map[string]string) (string, error) {
	subPath := vm.SubPath
	if vm.SubPathExpr != "" {
		if vm.SubPath != "" {
			return "", errors.New("subPath and subPathExpr are mutually exclusive")
		}
		expanded, err := expandSubPathExpr(vm.SubPathExpr, env)
		if err != nil {
			return "", err
		}
		subPath = expanded
	}
	switch {
	case subPath == "":
		return "", nil
	case filepath.IsAbs(subPath):
		return "", fmt.Errorf("subPath %q must not be an absolute path", subPath)
	case slices.Contains(strings.Split(subPath, "/"), ".."):
		return "", fmt.Errorf("subPath %q must not contain '..'", subPath)
	}
	return subPath, nil
}

// expandSubPathExpr expands $(VAR) references with env; every variable
// must be set and not empty.
func expandSubPathExpr(expr string, env map[string]string) (string, error) {
	out, err := envvars.ExpandRequired(expr, env)
	if err != nil {
		return "", fmt.Errorf("subPathExpr %q: %w", expr, err)
	}
	return out, nil
}

// propagation translates a volumeMount's propagation; Bidirectional needs
// a privileged container.
func propagation(mode *v1.MountPropagationMode, c *v1.Container) (runtimeapi.MountPropagation, error) {
	if mode == nil {
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	}
	switch *mode {
	case v1.MountPropagationNone:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	case v1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, nil
	case v1.MountPropagationBidirectional:
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			return 0, errors.New("mount propagation Bidirectional is available only to privileged containers")
		}
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, nil
	default:
		return 0, fmt.Errorf("invalid MountPropagation mode: %q", *mode)
	}
}
