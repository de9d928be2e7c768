package csi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/base/mountinfo"
)

// Paths and keys, as the kubelet's.
const (
	// PluginDir is the CSI plugin's directory in a pod's volumes directory.
	PluginDir        = "kubernetes.io~csi"
	publishDirName   = "mount"
	globalMountName  = "globalmount"
	volDataFileName  = "vol_data.json"
	maxVolData       = 64 << 10
	podInfoName      = "csi.storage.k8s.io/pod.name"
	podInfoNamespace = "csi.storage.k8s.io/pod.namespace"
	podInfoUID       = "csi.storage.k8s.io/pod.uid"
	podInfoSA        = "csi.storage.k8s.io/serviceAccount.name"
	podInfoEphemeral = "csi.storage.k8s.io/ephemeral"
)

// volData is vol_data.json: what TearDown needs once the pod spec is gone,
// with the kubelet's keys.
type volData struct {
	SpecVolID    string `json:"specVolID,omitempty"`
	VolumeHandle string `json:"volumeHandle"`
	DriverName   string `json:"driverName"`
	NodeName     string `json:"nodeName,omitempty"`
	AttachmentID string `json:"attachmentID,omitempty"`
	Mode         string `json:"volumeLifecycleMode,omitempty"`
}

// API is what the mounter asks the API server (cluster mode).
type API interface {
	// CSIDriver returns the CSIDriver object, nil when there is none.
	CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	// VolumeAttachment returns the VolumeAttachment, nil when there is none.
	VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
}

// Secrets gives the Secrets that nodeStageSecretRef and
// nodePublishSecretRef name, as the pod may read them.
type Secrets interface {
	Secret(pod *v1.Pod, name string) (*v1.Secret, error)
}

// Mounter stages, publishes, unpublishes and unstages CSI volumes.
type Mounter struct {
	rootDir  string
	nodeName string
	registry *Registry
	api      API     // nil standalone: no CSIDriver objects
	secrets  Secrets // nil: volumes naming Secrets fail
	log      *slog.Logger
	locks    keyedLocks
	// mounted tells whether a path is a mount point (isMountPoint; unit
	// tests give the fake driver's view).
	mounted func(path string) (bool, error)
	// uses are the volumes published for pods, for their stats.
	uses *useTable
}

// NewMounter returns a mounter for the drivers of registry. api and secrets
// may be nil.
func NewMounter(rootDir, nodeName string, registry *Registry, api API, secrets Secrets, log *slog.Logger) *Mounter {
	return &Mounter{rootDir: rootDir, nodeName: nodeName, registry: registry, api: api, secrets: secrets, log: log,
		locks: keyedLocks{m: map[string]*keyedLock{}}, mounted: isMountPoint, uses: newUseTable()}
}

// TargetPath is the publish target of a volume whose directory is dir
// (<root-dir>/pods/<uid>/volumes/kubernetes.io~csi/<name>): what containers
// mount.
func TargetPath(dir string) string { return filepath.Join(dir, publishDirName) }

// stagingDir is <root-dir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>.
func (m *Mounter) stagingDir(driver, handle string) string {
	return filepath.Join(m.rootDir, "plugins", "kubernetes.io", "csi", driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))))
}

// SetUpResult says what SetUp leaves to its caller.
type SetUpResult struct {
	// ApplyFSGroup: the pod's fsGroup is to be applied to the target by
	// the caller (the CSIDriver's fsGroupPolicy says so and the driver
	// does not apply it itself).
	ApplyFSGroup bool
}

// SetUp makes the volume available at TargetPath(dir) for pod: staged (if
// the driver stages and the volume is persistent) and published. It is
// idempotent: a published volume, found a mount point, costs no call to
// the driver.
func (m *Mounter) SetUp(ctx context.Context, pod *v1.Pod, dir string, src Source) (SetUpResult, error) {
	target := TargetPath(dir)
	published, err := m.mounted(target)
	if err != nil {
		return SetUpResult{}, err
	}
	if src.Mode == storagev1.VolumeLifecycleEphemeral {
		src.VolumeHandle = ephemeralHandle(string(pod.UID), filepath.Base(dir))
	}
	if published {
		m.recordUse(pod, dir, src)
		return SetUpResult{}, nil
	}
	if src.Block {
		return SetUpResult{}, errors.New("CSI volumes of volumeMode Block are not supported by nodelet")
	}
	info, err := m.driverObject(ctx, src.Driver)
	if err != nil {
		return SetUpResult{}, err
	}
	if !slices.Contains(info.modes, src.Mode) {
		return SetUpResult{}, fmt.Errorf("volume mode %q not supported by driver %s (%s)", src.Mode, src.Driver, info.modesWhy)
	}
	drv, err := m.registry.Driver(src.Driver)
	if err != nil {
		return SetUpResult{}, err
	}
	publishContext, attachID, err := m.attachment(ctx, info, src)
	if err != nil {
		return SetUpResult{}, err
	}
	nc, err := newNodeClient(drv.Endpoint)
	if err != nil {
		return SetUpResult{}, err
	}
	defer nc.Close()
	caps, err := nc.capabilities(ctx)
	if err != nil {
		return SetUpResult{}, fmt.Errorf("CSI driver %s: %w", src.Driver, err)
	}
	unlock := m.locks.lock(src.Driver + "^" + src.VolumeHandle)
	defer unlock()

	stagingDir := m.stagingDir(src.Driver, src.VolumeHandle)
	stagingPath := filepath.Join(stagingDir, globalMountName)
	ephemeral := src.Mode == storagev1.VolumeLifecycleEphemeral
	staged := false
	if caps.stageUnstage && !ephemeral {
		if staged, err = m.mounted(stagingPath); err != nil {
			return SetUpResult{}, err
		}
	}
	steps := planSetUp(setUpFacts{StageUnstage: caps.stageUnstage, Ephemeral: ephemeral, Staged: staged})

	capability := volumeCapability(src, caps, pod, info)
	// The pod's vol_data.json comes first: from then on the handle counts
	// as in use, and TearDown finds what to unpublish whatever happens
	// next.
	data := volData{SpecVolID: filepath.Base(dir), VolumeHandle: src.VolumeHandle, DriverName: src.Driver,
		NodeName: m.nodeName, AttachmentID: attachID, Mode: string(src.Mode)}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return SetUpResult{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := writeVolData(dir, data); err != nil {
		return SetUpResult{}, err
	}
	if !ephemeral {
		// Kept for a driver that does not stage too, as the kubelet's.
		if err := os.MkdirAll(stagingPath, 0o750); err != nil {
			return SetUpResult{}, fmt.Errorf("creating %s: %w", stagingPath, err)
		}
		if err := writeVolData(stagingDir, volData{VolumeHandle: src.VolumeHandle, DriverName: src.Driver}); err != nil {
			return SetUpResult{}, err
		}
	}
	if steps.Stage {
		secrets, err := m.secretData(pod, src.StageSecret)
		if err != nil {
			return SetUpResult{}, err
		}
		if err := nc.stage(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: src.VolumeHandle, PublishContext: publishContext, StagingTargetPath: stagingPath,
			VolumeCapability: capability, Secrets: secrets, VolumeContext: src.Attributes,
		}); err != nil {
			return SetUpResult{}, fmt.Errorf("MountVolume.MountDevice failed: rpc error: %w", err)
		}
	}
	secrets, err := m.secretData(pod, src.PublishSecret)
	if err != nil {
		return SetUpResult{}, err
	}
	req := &csipb.NodePublishVolumeRequest{
		VolumeId: src.VolumeHandle, PublishContext: publishContext, TargetPath: target,
		VolumeCapability: capability, Readonly: src.ReadOnly, Secrets: secrets,
		VolumeContext: volumeContext(src, pod, info.podInfoOnMount),
	}
	if caps.stageUnstage && !ephemeral {
		req.StagingTargetPath = stagingPath
	}
	if err := nc.publish(ctx, req); err != nil {
		return SetUpResult{}, fmt.Errorf("rpc error: %w", err)
	}
	m.recordUse(pod, dir, src)
	return SetUpResult{ApplyFSGroup: applyFSGroup(info.fsGroupPolicy, src, caps, pod)}, nil
}

// recordUse remembers a published volume for its stats.
func (m *Mounter) recordUse(pod *v1.Pod, dir string, src Source) {
	use := volumeUse{PodUID: string(pod.UID), PodVolume: src.PodVolume, Claim: src.Claim, Namespace: pod.Namespace,
		Driver: src.Driver, Handle: src.VolumeHandle, Target: TargetPath(dir)}
	if use.PodVolume == "" {
		use.PodVolume = filepath.Base(dir)
	}
	if data, err := readVolData(dir); err == nil {
		use.Attached = data.AttachmentID != ""
	}
	if src.Mode != storagev1.VolumeLifecycleEphemeral {
		staging := filepath.Join(m.stagingDir(src.Driver, src.VolumeHandle), globalMountName)
		if ok, _ := m.mounted(staging); ok {
			use.Staging = staging
		}
	}
	m.uses.add(dir, use)
}

// driverInfo is what a CSIDriver object says, with the API's defaults
// when there is none.
type driverInfo struct {
	attachRequired bool
	podInfoOnMount bool
	fsGroupPolicy  storagev1.FSGroupPolicy
	modes          []storagev1.VolumeLifecycleMode
	modesWhy       string
}

// driverObject reads the CSIDriver object. Without one (or standalone)
// the kubelet assumes attachment is required and only persistent volumes
// are supported.
func (m *Mounter) driverObject(ctx context.Context, name string) (driverInfo, error) {
	info := driverInfo{
		attachRequired: true,
		fsGroupPolicy:  storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy,
		modes:          []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		modesWhy:       "no CSIDriver object",
	}
	if m.api == nil {
		return info, nil
	}
	d, err := m.api.CSIDriver(ctx, name)
	if err != nil {
		return info, fmt.Errorf("getting CSIDriver %s: %w", name, err)
	}
	if d == nil {
		return info, nil
	}
	if d.Spec.AttachRequired != nil {
		info.attachRequired = *d.Spec.AttachRequired
	}
	if d.Spec.PodInfoOnMount != nil {
		info.podInfoOnMount = *d.Spec.PodInfoOnMount
	}
	if d.Spec.FSGroupPolicy != nil {
		info.fsGroupPolicy = *d.Spec.FSGroupPolicy
	}
	if len(d.Spec.VolumeLifecycleModes) > 0 {
		info.modes = d.Spec.VolumeLifecycleModes
	}
	info.modesWhy = fmt.Sprintf("only %v", info.modes)
	return info, nil
}

// attachment is the publish context of an attached volume: a persistent
// volume of a driver that needs attaching is published only once its
// VolumeAttachment says attached (the kubelet's WaitForAttach; the pod
// workers retry until then).
func (m *Mounter) attachment(ctx context.Context, info driverInfo, src Source) (map[string]string, string, error) {
	if !info.attachRequired || src.Mode == storagev1.VolumeLifecycleEphemeral {
		return nil, "", nil
	}
	name := attachmentName(src.VolumeHandle, src.Driver, m.nodeName)
	if m.api == nil {
		return nil, "", fmt.Errorf("volume %s of driver %s must be attached (VolumeAttachment %s), and there is no API server", src.VolumeHandle, src.Driver, name)
	}
	va, err := m.api.VolumeAttachment(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("getting VolumeAttachment %s: %w", name, err)
	}
	if va == nil || !va.Status.Attached {
		return nil, "", fmt.Errorf("volume %s is not attached yet (VolumeAttachment %s)", src.VolumeHandle, name)
	}
	return va.Status.AttachmentMetadata, name, nil
}

// volumeCapability is a mount capability with the volume's access mode,
// file system type and mount flags; the pod's fsGroup goes to a driver
// that applies it itself (VOLUME_MOUNT_GROUP) when it applies at all.
func volumeCapability(src Source, caps nodeCaps, pod *v1.Pod, info driverInfo) *csipb.VolumeCapability {
	mount := &csipb.VolumeCapability_MountVolume{FsType: src.FSType, MountFlags: src.MountFlags}
	if caps.mountGroup && fsGroupSupported(info.fsGroupPolicy, src, pod) {
		mount.VolumeMountGroup = fmt.Sprint(*podFSGroup(pod))
	}
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: mount},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessMode(src.AccessMode)},
	}
}

// volumeContext is the volume's attributes, with the pod's identity when
// the CSIDriver asks for it (podInfoOnMount).
func volumeContext(src Source, pod *v1.Pod, podInfo bool) map[string]string {
	if !podInfo {
		return src.Attributes
	}
	out := make(map[string]string, len(src.Attributes)+5)
	for k, v := range src.Attributes {
		out[k] = v
	}
	out[podInfoName] = pod.Name
	out[podInfoNamespace] = pod.Namespace
	out[podInfoUID] = string(pod.UID)
	out[podInfoSA] = pod.Spec.ServiceAccountName
	out[podInfoEphemeral] = fmt.Sprint(src.Mode == storagev1.VolumeLifecycleEphemeral)
	return out
}

// fsGroupSupported is the kubelet's supportsFSGroup: whether the pod's
// fsGroup applies to the volume at all, by the CSIDriver's fsGroupPolicy:
// File always; ReadWriteOnceWithFSType (the default) only with a file
// system type and, for a PV, ReadWriteOnce among its access modes (an
// inline volume is ReadWriteOnce); None never. Never to a read-only
// volume or without an fsGroup.
func fsGroupSupported(policy storagev1.FSGroupPolicy, src Source, pod *v1.Pod) bool {
	switch {
	case podFSGroup(pod) == nil, src.ReadOnly, policy == storagev1.NoneFSGroupPolicy:
		return false
	case policy == storagev1.FileFSGroupPolicy:
		return true
	case src.FSType == "":
		return false
	}
	return src.Mode == storagev1.VolumeLifecycleEphemeral || src.RWO
}

// applyFSGroup: nodelet applies a supported fsGroup after publishing,
// unless the driver applied it (VOLUME_MOUNT_GROUP).
func applyFSGroup(policy storagev1.FSGroupPolicy, src Source, caps nodeCaps, pod *v1.Pod) bool {
	return fsGroupSupported(policy, src, pod) && !caps.mountGroup
}

func podFSGroup(pod *v1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// secretData reads a Secret a volume names; only the pod's own namespace.
func (m *Mounter) secretData(pod *v1.Pod, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	if ref.Namespace != "" && ref.Namespace != pod.Namespace {
		return nil, fmt.Errorf("secret %s/%s: secrets of another namespace than the pod's are not supported by nodelet", ref.Namespace, ref.Name)
	}
	if m.secrets == nil {
		return nil, fmt.Errorf("secret %s: no Secrets can be read", ref.Name)
	}
	s, err := m.secrets.Secret(pod, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("fetching secret %s: %w", ref.Name, err)
	}
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out, nil
}

// TearDown unpublishes the volume whose directory is dir, unstages it when
// no other pod's volume names its handle, and removes dir. A directory
// without vol_data.json and without a mount holds nothing of a driver and
// is removed; one that is mounted without it is an error (nothing would
// say which driver to ask).
func (m *Mounter) TearDown(ctx context.Context, dir string) error {
	target := TargetPath(dir)
	data, err := readVolData(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if mounted, merr := m.mounted(target); merr != nil || mounted {
			return errors.Join(merr, fmt.Errorf("%s is mounted and has no %s", target, volDataFileName))
		}
		return removeVolumeDir(dir)
	}
	if err != nil {
		return err
	}
	drv, err := m.registry.Driver(data.DriverName)
	if err != nil {
		return fmt.Errorf("UnmountVolume.TearDown failed for volume %s: %w", data.VolumeHandle, err)
	}
	nc, err := newNodeClient(drv.Endpoint)
	if err != nil {
		return err
	}
	defer nc.Close()
	caps, err := nc.capabilities(ctx)
	if err != nil {
		return fmt.Errorf("CSI driver %s: %w", data.DriverName, err)
	}
	unlock := m.locks.lock(data.DriverName + "^" + data.VolumeHandle)
	defer unlock()

	stagingDir := m.stagingDir(data.DriverName, data.VolumeHandle)
	_, serr := os.Lstat(filepath.Join(stagingDir, volDataFileName))
	others, err := m.otherUsers(dir, data)
	if err != nil {
		return err
	}
	steps := planTearDown(tearDownFacts{
		Ephemeral:    data.Mode == string(storagev1.VolumeLifecycleEphemeral),
		StageUnstage: caps.stageUnstage,
		OtherUsers:   others,
		StagingData:  serr == nil,
	})
	if steps.Unpublish {
		if err := nc.unpublish(ctx, data.VolumeHandle, target); err != nil {
			return fmt.Errorf("UnmountVolume.TearDown failed for volume %s: rpc error: %w", data.VolumeHandle, err)
		}
		if mounted, err := m.mounted(target); err != nil || mounted {
			return errors.Join(err, fmt.Errorf("%s is still mounted after NodeUnpublishVolume", target))
		}
		m.uses.remove(dir)
		if err := removeVolumeDir(dir); err != nil {
			return err
		}
	}
	stagingPath := filepath.Join(stagingDir, globalMountName)
	if steps.Unstage {
		if err := nc.unstage(ctx, data.VolumeHandle, stagingPath); err != nil {
			return fmt.Errorf("UnmountDevice failed for volume %s: rpc error: %w", data.VolumeHandle, err)
		}
	}
	if steps.RemoveStaging {
		if mounted, err := m.mounted(stagingPath); err != nil || mounted {
			return errors.Join(err, fmt.Errorf("%s is still mounted after NodeUnstageVolume", stagingPath))
		}
		if err := removeVolumeDir(stagingDir); err != nil {
			return err
		}
	}
	return nil
}

// otherUsers tells whether another pod's CSI volume directory names the
// same driver and handle.
func (m *Mounter) otherUsers(dir string, data volData) (bool, error) {
	dirs, err := filepath.Glob(filepath.Join(m.rootDir, "pods", "*", "volumes", PluginDir, "*"))
	if err != nil {
		return false, err
	}
	for _, d := range dirs {
		if d == filepath.Clean(dir) {
			continue
		}
		other, err := readVolData(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			// Unreadable: count it as a user rather than unstage under it.
			m.log.Warn("Unreadable CSI volume data", "dir", d, "err", err)
			return true, nil
		}
		if other.DriverName == data.DriverName && other.VolumeHandle == data.VolumeHandle {
			return true, nil
		}
	}
	return false, nil
}

// Volume is a published CSI volume of a pod, found on disk.
type Volume struct {
	Dir          string // the volume's directory in the pod directory
	Driver       string
	VolumeHandle string
	Ephemeral    bool
}

// PodVolumes lists the CSI volumes in a pod's volumes directory.
func (m *Mounter) PodVolumes(podDir string) ([]Volume, error) {
	dirs, err := filepath.Glob(filepath.Join(podDir, "volumes", PluginDir, "*"))
	if err != nil {
		return nil, err
	}
	var out []Volume
	for _, d := range dirs {
		data, err := readVolData(d)
		if err != nil {
			continue
		}
		out = append(out, Volume{Dir: d, Driver: data.DriverName, VolumeHandle: data.VolumeHandle,
			Ephemeral: data.Mode == string(storagev1.VolumeLifecycleEphemeral)})
	}
	return out, nil
}

func writeVolData(dir string, data volData) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, volDataFileName), b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", volDataFileName, err)
	}
	return nil
}

func readVolData(dir string) (volData, error) {
	path := filepath.Join(dir, volDataFileName)
	if fi, err := os.Lstat(path); err != nil {
		return volData{}, err
	} else if !fi.Mode().IsRegular() {
		return volData{}, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := bounded.ReadFile(path, maxVolData)
	if err != nil {
		return volData{}, err
	}
	var d volData
	if err := json.Unmarshal(b, &d); err != nil {
		return volData{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	if d.DriverName == "" || d.VolumeHandle == "" {
		return volData{}, fmt.Errorf("%s names no driver or volume handle", path)
	}
	return d, nil
}

// removeVolumeDir removes what nodelet created in a volume's directory
// and the directory: vol_data.json and empty directories, never anything
// else (a driver that left files in its target keeps them, and the error
// says so).
func removeVolumeDir(dir string) error {
	for _, p := range []string{filepath.Join(dir, publishDirName), filepath.Join(dir, globalMountName),
		filepath.Join(dir, volDataFileName), dir} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", p, err)
		}
	}
	return nil
}

// keyedLocks serializes the operations on one volume handle.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

func (l *keyedLocks) lock(key string) func() {
	l.mu.Lock()
	k := l.m[key]
	if k == nil {
		k = &keyedLock{}
		l.m[key] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}

// isMountPoint reports whether path (not followed if a symlink) is the
// root of a mount; a missing path is not.
func isMountPoint(path string) (bool, error) {
	ok, err := mountinfo.IsMountPoint(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking mount point %s: %w", path, err)
	}
	return ok, nil
}
