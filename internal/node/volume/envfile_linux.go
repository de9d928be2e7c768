package volume

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/pure/envvars"
)

// EnvFile returns the content of the env file a fileKeyRef names: the file
// at rel below the root of pod's emptyDir volume named volName (the API
// server admits fileKeyRef to emptyDir volumes only), at most limit bytes.
// It implements envvars.Files; call it after SetUp.
//
// A container writes the file, so it is read as hostile input: rel is
// resolved below the volume root and never leaves it, no symlink is
// followed (not even one that stays in the volume), anything but a regular
// file is refused without being opened, and a file larger than limit is an
// error. A leading "/" and ".." elements of rel are resolved lexically
// within the volume, as the kubelet's secure join does (the API server
// refuses ".." anyway).
//
// A volume the pod does not define, or that is not set up, is an error
// wrapping envvars.ErrVolumeNotFound. Errors name rel, not the host path.
func (m *Manager) EnvFile(pod *v1.Pod, volName, rel string, limit int64) ([]byte, error) {
	if err := checkPathElement("pod UID", string(pod.UID)); err != nil {
		return nil, err
	}
	var vol *v1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == volName {
			vol = &pod.Spec.Volumes[i]
			break
		}
	}
	if vol == nil {
		return nil, fmt.Errorf("volume %q is not defined by the pod: %w", volName, envvars.ErrVolumeNotFound)
	}
	if vol.EmptyDir == nil {
		return nil, fmt.Errorf("volume %q is a %s volume: env files are read from emptyDir volumes only", volName, volumeType(&vol.VolumeSource))
	}
	if err := checkPathElement("volume name", volName); err != nil {
		return nil, err
	}
	unlock := m.locks.lock(pod.UID)
	defer unlock()

	root, err := beneath.OpenRoot(m.volumeDir(pod.UID, pluginEmptyDir, volName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("volume %q is not set up: %w", volName, envvars.ErrVolumeNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", volName, err)
	}
	defer root.Close()

	name := strings.TrimLeft(path.Clean("/"+rel), "/")
	f, err := root.OpenFile(name)
	if err != nil {
		return nil, withoutHostPath(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > limit {
		return nil, fmt.Errorf("the file is larger than %d bytes", limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, withoutHostPath(err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("the file is larger than %d bytes", limit)
	}
	return data, nil
}

// withoutHostPath drops the host path from a path error: what is left
// ("symlink refused", "no such file or directory") goes into the
// container's status, where the caller names the file by its path in the
// volume.
func withoutHostPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
