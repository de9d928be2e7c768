package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/node/csi"
)

// ErrObjectNotFound is wrapped by Objects when a ConfigMap or Secret does
// not exist.
var ErrObjectNotFound = errors.New("not found")

// Objects gives the ConfigMaps and Secrets volumes and env refer to: those
// of pod's namespace that pod may read (a static pod the manifest
// directory's, a pod of the API server the API's).
type Objects interface {
	// ConfigMap returns the ConfigMap; errors.Is(err, ErrObjectNotFound)
	// when it does not exist.
	ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error)
	// Secret returns the Secret; errors.Is(err, ErrObjectNotFound) when it
	// does not exist.
	Secret(pod *v1.Pod, name string) (*v1.Secret, error)
}

// Tokens issues the service account tokens of serviceAccountToken
// projections (cluster mode: the TokenRequest API).
type Tokens interface {
	// Token returns a token of the pod's service account for audience
	// ("" is the API server's), bound to the pod, valid for
	// expirationSeconds. It is called on every SetUp: it caches, and
	// returns a new token only when the cached one needs refreshing.
	Token(ctx context.Context, pod *v1.Pod, audience string, expirationSeconds int64) (string, error)
	// Forget drops what is cached for the pod: its volumes are gone.
	Forget(podUID types.UID)
}

// Downward resolves downward API fields for a pod (the integrator
// implements it).
type Downward interface {
	// FieldRef resolves metadata.name, metadata.namespace, metadata.uid,
	// metadata.labels (all, as key="value" lines), metadata.annotations,
	// metadata.labels['k'], metadata.annotations['k'] ...
	FieldRef(pod *v1.Pod, fieldPath string) (string, error)
	// ResourceRef resolves limits.cpu, requests.memory ... of a container.
	ResourceRef(pod *v1.Pod, containerName string, ref *v1.ResourceFieldSelector) (string, error)
}

// Plugin directory names, as the kubelet's.
const (
	pluginEmptyDir    = "kubernetes.io~empty-dir"
	pluginConfigMap   = "kubernetes.io~configmap"
	pluginSecret      = "kubernetes.io~secret"
	pluginDownwardAPI = "kubernetes.io~downward-api"
	pluginProjected   = "kubernetes.io~projected"

	podsDirName     = "pods"
	volumesDirName  = "volumes"
	subPathsDirName = "volume-subpaths"
)

// Manager sets up, mounts and tears down the volumes of pods. It keeps no
// state of its own beyond per-pod locks and where the claimed volumes of
// each pod resolved to at its last SetUp: everything else is derived from
// the pod spec and the pod directories, so a restarted nodelet picks up
// where the last one left off. Calls for one pod are serialized; calls for different
// pods run in parallel.
type Manager struct {
	rootDir  string
	objects  Objects
	downward Downward
	tokens   Tokens
	claims   Claims // nil: standalone, no claims
	clock    clock.PassiveClock
	log      *slog.Logger
	locks    podLocks
	// claimed are the pods' claimed volumes as SetUp left them.
	claimed claimedVolumes
	// shareVolumes makes the volumes mounted with propagation shared
	// mounts (see shareVolumes).
	shareVolumes bool
	// csi sets up and tears down csi volumes; nil: they fail.
	csi CSI
}

// CSI stages and publishes CSI volumes (package csi's Mounter).
type CSI interface {
	// SetUp publishes the volume at csi.TargetPath(dir); idempotent.
	SetUp(ctx context.Context, pod *v1.Pod, dir string, src csi.Source) (csi.SetUpResult, error)
	// TearDown unpublishes (and when no pod uses it any more, unstages)
	// the volume of dir and removes dir.
	TearDown(ctx context.Context, dir string) error
}

// WithCSI sets what sets up csi volumes. Without it they fail to set up.
func WithCSI(c CSI) Option { return func(m *Manager) { m.csi = c } }

// Option changes a Manager built by New.
type Option func(*Manager)

// WithClock sets the clock that names the AtomicWriter's timestamped
// directories (the real clock by default).
func WithClock(c clock.PassiveClock) Option { return func(m *Manager) { m.clock = c } }

// WithTokens sets what issues service account tokens. Without it (standalone
// mode), a serviceAccountToken projection fails to set up.
func WithTokens(t Tokens) Option { return func(m *Manager) { m.tokens = t } }

// WithMountPropagation makes each volume that a container mounts with
// HostToContainer or Bidirectional propagation a shared mount point (see
// shareVolumes).
func WithMountPropagation() Option { return func(m *Manager) { m.shareVolumes = true } }

// New returns a Manager keeping pod directories under rootDir/pods. It
// starts nothing. objects and downward may be nil, in which case volumes
// that need them fail to set up.
func New(rootDir string, objects Objects, downward Downward, log *slog.Logger, opts ...Option) *Manager {
	if abs, err := filepath.Abs(rootDir); err == nil {
		rootDir = abs
	}
	m := &Manager{
		rootDir:  filepath.Clean(rootDir),
		objects:  objects,
		downward: downward,
		clock:    clock.RealClock{},
		log:      log,
		locks:    podLocks{m: map[types.UID]*podLock{}},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// SetUp prepares every volume of the pod. It is idempotent and meant to be
// called on every sync: it also refreshes configMap, secret, downwardAPI and
// projected contents, atomically, when they changed. A volume that cannot be
// set up yields an error naming the volume and the reason; the other
// volumes are still set up, and all errors are returned joined.
//
// When pod.Spec.SecurityContext.FSGroup is set, SetUp applies it itself
// (the kubelet's SetVolumeOwnership): to an emptyDir when it is created, to
// configMap, secret, downwardAPI and projected content on every write;
// never to a hostPath; to a local PersistentVolume when it mounts it
// read-write, by the pod's fsGroupChangePolicy.
//
// A persistentVolumeClaim or generic ephemeral volume that some container
// mounts is resolved through Claims (the claim Bound, the volume bound to
// the claim; an ephemeral volume's claim controlled by the pod) on every
// SetUp, as the kubelet resolves it on every sync, and then set up by its
// PersistentVolume's source (setUpPersistent: hostPath and local).
func (m *Manager) SetUp(ctx context.Context, pod *v1.Pod) error {
	if err := checkPathElement("pod UID", string(pod.UID)); err != nil {
		return err
	}
	unlock := m.locks.lock(pod.UID)
	defer unlock()

	var errs []error
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("set up volumes: %w", err))
			break
		}
		err := m.setUpVolume(ctx, pod, vol)
		if err == nil && m.shareVolumes && propagated(pod, vol.Name) {
			err = m.shareVolume(pod.UID, vol)
		}
		if err != nil {
			errs = append(errs, newSetUpError(vol.Name, err))
		}
	}
	return errors.Join(errs...)
}

// SetUpError is the failure to set up one volume of a pod; SetUp joins one
// per failed volume.
type SetUpError struct {
	// Volume is the pod's name of the volume.
	Volume string
	// PersistentVolume is the PersistentVolume the volume's claim is bound
	// to, once resolved ("" for other volumes): the kubelet's mount events
	// name such a volume by it.
	PersistentVolume string
	// Unprocessed: the volume's claim could not be resolved to a set-up
	// step (not bound, not found, a type nodelet does not mount): the
	// kubelet's "failed to process volumes", reported as "Unable to attach
	// or mount volumes".
	Unprocessed bool
	// Step is the kubelet's words for the step that failed ("MountVolume.SetUp
	// failed", "MountVolume.NewMounter initialization failed").
	Step string
	Err  error
}

// newSetUpError is the SetUpError of volume for what setUpVolume returned.
func newSetUpError(volume string, err error) *SetUpError {
	se := &SetUpError{Volume: volume, Step: stepSetUp, Err: err}
	var ce *claimError
	if errors.As(err, &ce) {
		se.PersistentVolume, se.Unprocessed, se.Err = ce.pv, ce.unprocessed, ce.err
		if ce.step != "" {
			se.Step = ce.step
		}
	}
	return se
}

// EventVolume is the name the kubelet's mount events give the volume: its
// PersistentVolume's, or the pod's.
func (e *SetUpError) EventVolume() string {
	if e.PersistentVolume != "" {
		return e.PersistentVolume
	}
	return e.Volume
}

func (e *SetUpError) Error() string { return fmt.Sprintf("volume %q: %v", e.Volume, e.Err) }
func (e *SetUpError) Unwrap() error { return e.Err }

// SetUpErrors are the volumes SetUp's error says failed, in order.
func SetUpErrors(err error) []*SetUpError {
	var out []*SetUpError
	var walk func(error)
	walk = func(err error) {
		var one *SetUpError
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		default:
			if errors.As(err, &one) {
				out = append(out, one)
			}
		}
	}
	walk(err)
	return out
}

// setUpVolume sets up one volume according to its type.
func (m *Manager) setUpVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	if err := checkPathElement("volume name", vol.Name); err != nil {
		return err
	}
	src := &vol.VolumeSource
	if ref, ok := claimOf(pod, vol); ok {
		return m.setUpClaimed(ctx, pod, vol, ref)
	}
	switch {
	case src.EmptyDir != nil:
		return m.setUpEmptyDir(pod, vol)
	case src.HostPath != nil:
		return checkHostPathType(src.HostPath)
	case src.ConfigMap != nil:
		payload, err := m.configMapVolumePayload(pod, src.ConfigMap)
		if err != nil {
			return err
		}
		return m.writeAtomicVolume(pod, vol.Name, pluginConfigMap, false, payload)
	case src.Secret != nil:
		payload, err := m.secretVolumePayload(pod, src.Secret)
		if err != nil {
			return err
		}
		return m.writeAtomicVolume(pod, vol.Name, pluginSecret, true, payload)
	case src.DownwardAPI != nil:
		payload, err := m.downwardAPIPayload(pod, src.DownwardAPI.Items, modeOrDefault(src.DownwardAPI.DefaultMode))
		if err != nil {
			return err
		}
		return m.writeAtomicVolume(pod, vol.Name, pluginDownwardAPI, false, payload)
	case src.Projected != nil:
		payload, err := m.projectedPayload(ctx, pod, src.Projected)
		if err != nil {
			return err
		}
		return m.writeAtomicVolume(pod, vol.Name, pluginProjected, true, payload)
	case src.CSI != nil:
		return m.setUpCSI(ctx, pod, vol.Name, csi.Inline(pod, vol.Name, src.CSI))
	case src.Image != nil:
		// Nothing on the node: the runtime manager pulls the image and the
		// runtime mounts it (Mounts).
		return nil
	default:
		return fmt.Errorf("type %s is not supported by nodelet", volumeType(src))
	}
}

// pluginDir is the plugin directory of an inline volume kept in the pod
// directory, "" for a hostPath or an image (nothing of theirs is in the
// pod directory), and an error for a type nodelet does not support
// (claimed volumes are found through Manager.claimed).
func pluginDir(src *v1.VolumeSource) (string, error) {
	switch {
	case src.EmptyDir != nil:
		return pluginEmptyDir, nil
	case src.HostPath != nil, src.Image != nil:
		return "", nil
	case src.ConfigMap != nil:
		return pluginConfigMap, nil
	case src.Secret != nil:
		return pluginSecret, nil
	case src.DownwardAPI != nil:
		return pluginDownwardAPI, nil
	case src.Projected != nil:
		return pluginProjected, nil
	case src.CSI != nil:
		return csi.PluginDir, nil
	default:
		return "", fmt.Errorf("type %s is not supported by nodelet", volumeType(src))
	}
}

// volumeType names the type of a volume source (a *v1.VolumeSource or a
// *v1.PersistentVolumeSource) by its field in the API
// ("persistentVolumeClaim", "nfs", ...).
func volumeType(src any) string {
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "(none)"
}

func (m *Manager) podsDir() string { return filepath.Join(m.rootDir, podsDirName) }

func (m *Manager) podDir(uid types.UID) string { return filepath.Join(m.podsDir(), string(uid)) }

func (m *Manager) volumeDir(uid types.UID, plugin, name string) string {
	return filepath.Join(m.podDir(uid), volumesDirName, plugin, name)
}

func (m *Manager) subPathTarget(uid types.UID, volName, container string, index int) string {
	return filepath.Join(m.podDir(uid), subPathsDirName, volName, container, fmt.Sprint(index))
}

// checkPathElement rejects a name that cannot be used as one path element
// (pod UIDs, volume and container names become directory names).
func checkPathElement(what, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%s %q cannot be used as a directory name", what, name)
	}
	return nil
}

// podLocks serializes the calls for one pod.
type podLocks struct {
	mu sync.Mutex
	m  map[types.UID]*podLock
}

type podLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks the pod's mutex and returns its unlock.
func (l *podLocks) lock(uid types.UID) func() {
	l.mu.Lock()
	pl := l.m[uid]
	if pl == nil {
		pl = &podLock{}
		l.m[uid] = pl
	}
	pl.refs++
	l.mu.Unlock()

	pl.mu.Lock()
	return func() {
		pl.mu.Unlock()
		l.mu.Lock()
		if pl.refs--; pl.refs == 0 {
			delete(l.m, uid)
		}
		l.mu.Unlock()
	}
}

// propagated tells whether a container of the pod mounts the volume with
// HostToContainer or Bidirectional propagation.
func propagated(pod *v1.Pod, volume string) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, vm := range list[i].VolumeMounts {
				if vm.Name == volume && vm.MountPropagation != nil && *vm.MountPropagation != v1.MountPropagationNone {
					return true
				}
			}
		}
	}
	return false
}
