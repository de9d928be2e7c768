package volume

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/node/csi"
)

// setUpCSI publishes a CSI volume under the name dirName in the pod's
// kubernetes.io~csi directory (an inline volume's name; a persistent
// volume's is the PV's name, as the kubelet's) and applies the pod's
// fsGroup, by its fsGroupChangePolicy, when the driver's fsGroupPolicy
// leaves that to the node (the kubelet's SetVolumeOwnership after
// NodePublishVolume).
func (m *Manager) setUpCSI(ctx context.Context, pod *v1.Pod, dirName string, src csi.Source) error {
	if m.csi == nil {
		return errors.New("type csi is not supported without CSI drivers")
	}
	if err := checkPathElement("volume name", dirName); err != nil {
		return err
	}
	dir := m.volumeDir(pod.UID, csi.PluginDir, dirName)
	res, err := m.csi.SetUp(ctx, pod, dir, src)
	if err != nil {
		return err
	}
	if res.ApplyFSGroup {
		if err := setVolumeOwnership(csi.TargetPath(dir), fsGroup(pod), fsGroupChangePolicy(pod)); err != nil {
			return fmt.Errorf("applying fsGroup: %w", err)
		}
	}
	return nil
}

// setUpCSIPersistent publishes a PersistentVolume with spec.csi in the
// pod's kubernetes.io~csi/<pv name> directory, as the kubelet names it;
// it is published read-only, and its containers mount it so, when the
// claim or the PV says so. Its stats carry the pod's name of the volume
// and the claim.
func (m *Manager) setUpCSIPersistent(ctx context.Context, pod *v1.Pod, volName string, p Persistent) (claimed, error) {
	src, err := csi.FromPV(p.PV)
	if err != nil {
		return claimed{}, err
	}
	src.ReadOnly = src.ReadOnly || p.ReadOnly
	src.PodVolume = volName
	if p.Claim != nil {
		src.Claim = p.Claim.Name
	}
	if err := m.setUpCSI(ctx, pod, p.PV.Name, src); err != nil {
		return claimed{}, err
	}
	dir := m.volumeDir(pod.UID, csi.PluginDir, p.PV.Name)
	return claimed{hostPath: csi.TargetPath(dir), readOnly: src.ReadOnly, inPodDir: true}, nil
}

// tearDownCSI unpublishes every CSI volume of the pod (and unstages those
// no other pod uses), before the rest of its volumes are unmounted and
// removed: the driver, not nodelet, unmounts what it mounted.
func (m *Manager) tearDownCSI(ctx context.Context, uid types.UID) error {
	dirs, err := filepath.Glob(filepath.Join(m.podDir(uid), volumesDirName, csi.PluginDir, "*"))
	if err != nil || len(dirs) == 0 {
		return err
	}
	if m.csi == nil {
		return fmt.Errorf("the pod has CSI volumes (%s) and nodelet has no CSI drivers", dirs[0])
	}
	var errs []error
	for _, d := range dirs {
		if err := m.csi.TearDown(ctx, d); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", filepath.Base(d), err))
		}
	}
	return errors.Join(errs...)
}
