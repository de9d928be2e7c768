package csi

import (
	"crypto/sha256"
	"fmt"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Source is one CSI volume as the mounter needs it: an inline (ephemeral)
// volume of a pod or a PersistentVolume with spec.csi.
type Source struct {
	Driver       string
	VolumeHandle string // "" for an inline volume: derived from the pod and the volume name
	ReadOnly     bool
	FSType       string
	MountFlags   []string
	Attributes   map[string]string
	// AccessMode is the PV's first access mode (ReadWriteOnce for an
	// inline volume), as the kubelet's.
	AccessMode v1.PersistentVolumeAccessMode
	// RWO: ReadWriteOnce is among the PV's access modes (for
	// fsGroupPolicy ReadWriteOnceWithFSType).
	RWO bool
	// StageSecret and PublishSecret name Secrets of a namespace.
	StageSecret, PublishSecret *v1.SecretReference
	Mode                       storagev1.VolumeLifecycleMode
	// Block is a PV of volumeMode Block, which nodelet does not support.
	Block bool
	// PodVolume is the pod's name of the volume and Claim its
	// persistentVolumeClaim ("" for none): the names its stats carry.
	PodVolume, Claim string
}

// Inline is the source of a pod's inline csi volume (CSI ephemeral).
func Inline(pod *v1.Pod, name string, src *v1.CSIVolumeSource) Source {
	s := Source{
		PodVolume:  name,
		Driver:     src.Driver,
		ReadOnly:   src.ReadOnly != nil && *src.ReadOnly,
		Attributes: src.VolumeAttributes,
		AccessMode: v1.ReadWriteOnce,
		Mode:       storagev1.VolumeLifecycleEphemeral,
	}
	if src.FSType != nil {
		s.FSType = *src.FSType
	}
	if src.NodePublishSecretRef != nil {
		s.PublishSecret = &v1.SecretReference{Name: src.NodePublishSecretRef.Name, Namespace: pod.Namespace}
	}
	return s
}

// FromPV is the source of a PersistentVolume with spec.csi.
func FromPV(pv *v1.PersistentVolume) (Source, error) {
	c := pv.Spec.CSI
	if c == nil {
		return Source{}, fmt.Errorf("persistent volume %s is not a CSI volume", pv.Name)
	}
	s := Source{
		Driver:        c.Driver,
		VolumeHandle:  c.VolumeHandle,
		ReadOnly:      c.ReadOnly,
		FSType:        c.FSType,
		MountFlags:    pv.Spec.MountOptions,
		Attributes:    c.VolumeAttributes,
		AccessMode:    v1.ReadWriteOnce,
		StageSecret:   c.NodeStageSecretRef,
		PublishSecret: c.NodePublishSecretRef,
		Mode:          storagev1.VolumeLifecyclePersistent,
		Block:         pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock,
	}
	if len(pv.Spec.AccessModes) > 0 {
		s.AccessMode = pv.Spec.AccessModes[0]
	}
	s.RWO = slices.Contains(pv.Spec.AccessModes, v1.ReadWriteOnce)
	if s.VolumeHandle == "" {
		return Source{}, fmt.Errorf("persistent volume %s has no volumeHandle", pv.Name)
	}
	return s, nil
}

// ephemeralHandle is the volume handle of an inline volume, the kubelet's
// makeVolumeHandle: "csi-" and the hex SHA-256 of the pod UID followed by
// the volume's name.
func ephemeralHandle(podUID, volName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+volName)))
}

// accessMode translates an access mode as the kubelet does for a driver
// without the SINGLE_NODE_MULTI_WRITER capability.
func accessMode(m v1.PersistentVolumeAccessMode) csipb.VolumeCapability_AccessMode_Mode {
	switch m {
	case v1.ReadOnlyMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	default: // ReadWriteOnce, ReadWriteOncePod
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
}

// attachmentName is the VolumeAttachment's name the attach/detach
// controller gives a volume on a node (the kubelet's getAttachmentName).
func attachmentName(volumeHandle, driver, nodeName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(volumeHandle+driver+nodeName)))
}

// UniqueName is the name the Node's volumesInUse gives a CSI volume:
// kubernetes.io/csi/<driver>^<volumeHandle>.
func UniqueName(driver, volumeHandle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName("kubernetes.io/csi/" + driver + "^" + volumeHandle)
}
