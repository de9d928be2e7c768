package volume

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Claims gives the PersistentVolumeClaims of persistentVolumeClaim and
// generic ephemeral volumes and the PersistentVolumes they are bound to
// (cluster mode: GETs to the API server, which the Node authorizer allows
// for the claims of pods bound to this node and the volumes bound to those
// claims). Errors are returned as they come; the Manager words them.
type Claims interface {
	PersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	PersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
}

// WithClaims sets where claims and their volumes come from. Without it
// (standalone mode), a persistentVolumeClaim or ephemeral volume fails to
// set up, saying there is no API server.
func WithClaims(c Claims) Option { return func(m *Manager) { m.claims = c } }

// Persistent is a pod volume resolved to the PersistentVolume its claim
// is bound to: the claim checked Bound to PV, PV bound to the claim's UID
// (the kubelet's getPVCExtractPV and getPVSpec).
type Persistent struct {
	Claim *v1.PersistentVolumeClaim
	PV    *v1.PersistentVolume
	// ReadOnly is the pod volume's persistentVolumeClaim.readOnly (false
	// for an ephemeral volume): the volume is mounted read-only, and every
	// container's mount of it is read-only (the kubelet's
	// volume.Spec.ReadOnly).
	ReadOnly bool
}

// claimed is a persistentVolumeClaim or ephemeral volume of a running pod,
// as its last SetUp left it, for Mounts.
type claimed struct {
	// hostPath is what containers mount: the hostPath PV's path, the bind
	// mount of a local PV in the pod directory.
	hostPath string
	// readOnly: every container mounts it read-only.
	readOnly bool
	// inPodDir: hostPath is a mount point the Manager made below the pod
	// directory (it may be made shared for mount propagation).
	inPodDir bool
}

// claimedVolumes are the claimed volumes of each pod by pod volume name,
// set by SetUp, read by Mounts, dropped by TearDown. They live in memory
// only: SetUp runs before every sync, so a restarted nodelet resolves
// them again before any container of the pod is created.
type claimedVolumes struct {
	mu sync.Mutex
	m  map[types.UID]map[string]claimed
}

func (c *claimedVolumes) set(uid types.UID, volume string, v claimed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[types.UID]map[string]claimed{}
	}
	if c.m[uid] == nil {
		c.m[uid] = map[string]claimed{}
	}
	c.m[uid][volume] = v
}

func (c *claimedVolumes) unset(uid types.UID, volume string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m[uid], volume)
	if len(c.m[uid]) == 0 {
		delete(c.m, uid)
	}
}

func (c *claimedVolumes) get(uid types.UID, volume string) (claimed, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[uid][volume]
	return v, ok
}

func (c *claimedVolumes) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// claimRef is the claim a pod volume uses.
type claimRef struct {
	name     string
	readOnly bool
	// ephemeral: a generic ephemeral volume, whose claim
	// (<pod name>-<volume name>, made by the controller manager's
	// ephemeral volume controller) must be controlled by the pod.
	ephemeral bool
}

// claimOf is the claim of a persistentVolumeClaim or generic ephemeral
// volume; false for other volumes.
func claimOf(pod *v1.Pod, vol *v1.Volume) (claimRef, bool) {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return claimRef{name: vol.PersistentVolumeClaim.ClaimName, readOnly: vol.PersistentVolumeClaim.ReadOnly}, true
	case vol.Ephemeral != nil:
		return claimRef{name: ephemeral.VolumeClaimName(pod, vol), ephemeral: true}, true
	}
	return claimRef{}, false
}

// claimError is a claimed volume's failure, in the kubelet's terms.
type claimError struct {
	// pv names the PersistentVolume once the claim is resolved: the
	// kubelet's mount events name the volume by it.
	pv string
	// unprocessed: the claim could not be resolved to a volume (the
	// kubelet's desired state populator failed: "failed to process
	// volumes").
	unprocessed bool
	// step is the kubelet's words for the step that failed.
	step string
	err  error
}

func (e *claimError) Error() string { return e.err.Error() }
func (e *claimError) Unwrap() error { return e.err }

// The kubelet's words for the mount steps that fail.
const (
	stepSetUp      = "MountVolume.SetUp failed"
	stepNewMounter = "MountVolume.NewMounter initialization failed"
)

// setUpClaimed sets up a persistentVolumeClaim or ephemeral volume: the
// claim resolved to its PersistentVolume, then the volume set up by its
// source. A volume no container mounts is skipped, as the kubelet skips
// it: its claim need not even be bound.
func (m *Manager) setUpClaimed(ctx context.Context, pod *v1.Pod, vol *v1.Volume, ref claimRef) error {
	mounted, devices := volumeUses(pod)
	if !mounted[vol.Name] && !devices[vol.Name] {
		m.claimed.unset(pod.UID, vol.Name)
		return nil
	}
	p, err := m.resolve(ctx, pod, ref)
	if err != nil {
		m.claimed.unset(pod.UID, vol.Name)
		return &claimError{unprocessed: true, err: err}
	}
	if err := checkVolumeMode(vol.Name, p.PV, mounted[vol.Name], devices[vol.Name]); err != nil {
		m.claimed.unset(pod.UID, vol.Name)
		return &claimError{unprocessed: true, err: err}
	}
	c, err := m.setUpPersistent(ctx, pod, vol.Name, p)
	if err != nil {
		m.claimed.unset(pod.UID, vol.Name)
		return err
	}
	m.claimed.set(pod.UID, vol.Name, c)
	return nil
}

// resolve fetches the claim and its volume and checks them as the
// kubelet's desired state populator does, with its messages.
func (m *Manager) resolve(ctx context.Context, pod *v1.Pod, ref claimRef) (Persistent, error) {
	processing := func(err error) error {
		return fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, ref.name, err)
	}
	switch {
	case m.claims == nil:
		return Persistent{}, processing(errors.New("persistent volume claims are not supported by nodelet in standalone mode: there is no API server to resolve them"))
	case podspec.IsStatic(pod):
		return Persistent{}, processing(errors.New("static pods may not reference persistentvolumeclaims"))
	}
	pvc, err := m.claims.PersistentVolumeClaim(ctx, pod.Namespace, ref.name)
	if err == nil && pvc == nil {
		err = errors.New("no claim")
	}
	if err != nil {
		return Persistent{}, processing(fmt.Errorf("failed to fetch PVC from API server: %w", err))
	}
	if err := checkClaim(pvc); err != nil {
		return Persistent{}, processing(err)
	}
	if ref.ephemeral {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return Persistent{}, err
		}
	}
	pv, err := m.claims.PersistentVolume(ctx, pvc.Spec.VolumeName)
	if err == nil && pv == nil {
		err = errors.New("no volume")
	}
	if err != nil {
		return Persistent{}, processing(fmt.Errorf("failed to fetch PV %s from API server: %w", pvc.Spec.VolumeName, err))
	}
	if err := checkPersistentVolume(pv, pvc.UID); err != nil {
		return Persistent{}, processing(err)
	}
	return Persistent{Claim: pvc, PV: pv, ReadOnly: ref.readOnly}, nil
}

// pvcProtectionFinalizer keeps a claim a pod uses from going away.
const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

// checkClaim is the kubelet's verdict on a claim: bound, to a named
// volume, and not being deleted without the protection finalizer (then a
// pod must not start on it).
func checkClaim(pvc *v1.PersistentVolumeClaim) error {
	switch {
	case pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer):
		return errors.New("PVC is being deleted")
	case pvc.Status.Phase != v1.ClaimBound:
		return errors.New("PVC is not bound")
	case pvc.Spec.VolumeName == "":
		return errors.New("PVC has empty pvc.Spec.VolumeName")
	}
	return nil
}

// checkPersistentVolume is the kubelet's verdict on the volume a claim
// names: it must be bound back to that claim.
func checkPersistentVolume(pv *v1.PersistentVolume, claimUID types.UID) error {
	switch ref := pv.Spec.ClaimRef; {
	case ref == nil:
		return fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pv.Name)
	case ref.UID != claimUID:
		return fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pv.Name, ref.UID, claimUID)
	}
	return nil
}

// checkVolumeMode is the kubelet's check of the volume's mode against
// how the containers use it; nodelet has no raw block devices at all.
func checkVolumeMode(name string, pv *v1.PersistentVolume, mounted, device bool) error {
	mode := v1.PersistentVolumeFilesystem
	if pv.Spec.VolumeMode != nil {
		mode = *pv.Spec.VolumeMode
	}
	switch {
	case mounted && mode != v1.PersistentVolumeFilesystem:
		return fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", name, mode)
	case device && mode != v1.PersistentVolumeBlock:
		return fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", name, mode)
	case device:
		return fmt.Errorf("volume %s: raw block volumes (volumeDevices) are not supported by nodelet", name)
	}
	return nil
}

// volumeUses are the volumes some container (init, app or ephemeral)
// mounts, and those some container uses as a raw block device.
func volumeUses(pod *v1.Pod) (mounted, devices map[string]bool) {
	mounted, devices = map[string]bool{}, map[string]bool{}
	use := func(mounts []v1.VolumeMount, devs []v1.VolumeDevice) {
		for _, vm := range mounts {
			mounted[vm.Name] = true
		}
		for _, d := range devs {
			devices[d.Name] = true
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			use(list[i].VolumeMounts, list[i].VolumeDevices)
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i]
		use(c.VolumeMounts, c.VolumeDevices)
	}
	return mounted, devices
}

// setUpPersistent sets up a resolved volume by its source: hostPath (the
// host path as it is, after its type check; no fsGroup, no mount
// options), local (a bind mount in the pod directory, fsGroup applied),
// csi (below). This is where the PersistentVolume's source is dispatched on: a CSI
// volume is published by its driver through the CSI mounter given WithCSI
// (under kubernetes.io~csi/<pv name>, as the kubelet's); any other source
// is refused, saying so.
func (m *Manager) setUpPersistent(ctx context.Context, pod *v1.Pod, volName string, p Persistent) (claimed, error) {
	fail := func(step string, err error) (claimed, error) {
		return claimed{}, &claimError{pv: p.PV.Name, step: step, err: err}
	}
	src := &p.PV.Spec.PersistentVolumeSource
	switch {
	case src.HostPath != nil:
		if err := checkNoBacksteps(src.HostPath.Path); err != nil {
			return fail(stepSetUp, fmt.Errorf("invalid HostPath `%s`: %w", src.HostPath.Path, err))
		}
		if err := checkHostPathType(src.HostPath); err != nil {
			return fail(stepSetUp, err)
		}
		return claimed{hostPath: filepath.Clean(src.HostPath.Path), readOnly: p.ReadOnly}, nil
	case src.Local != nil:
		return m.setUpLocal(pod, p)
	case src.CSI != nil && m.csi == nil:
		return claimed{}, &claimError{pv: p.PV.Name, unprocessed: true,
			err: fmt.Errorf("PersistentVolume %s: CSI volumes (driver %s) are not supported without CSI drivers", p.PV.Name, src.CSI.Driver)}
	case src.CSI != nil:
		c, err := m.setUpCSIPersistent(ctx, pod, volName, p)
		if err != nil {
			return fail(stepSetUp, err)
		}
		return c, nil
	default:
		return claimed{}, &claimError{pv: p.PV.Name, unprocessed: true,
			err: fmt.Errorf("PersistentVolume %s: type %s is not supported by nodelet", p.PV.Name, volumeType(src))}
	}
}

// checkNoBacksteps refuses a path with a ".." element (the kubelet's
// ValidatePathNoBacksteps).
func checkNoBacksteps(path string) error {
	if slices.Contains(strings.Split(path, "/"), "..") {
		return errors.New("must not contain '..'")
	}
	return nil
}
