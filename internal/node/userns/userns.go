// Package userns is beside the pod workers (stage 4): the user namespaces
// of pods with hostUsers: false, as the kubelet's user namespace manager.
//
// The node's range of host IDs is the "kubelet" user's one entry in
// /etc/subuid and /etc/subgid, or, without such a user, every ID from
// idsPerPod up (DefaultRange). It is cut into blocks of idsPerPod IDs
// (KubeletConfiguration userNamespaces.idsPerPod, 65536 by default); each
// pod gets one block, mapping its IDs 0 to idsPerPod-1 to the block's,
// for UIDs and GIDs alike.
//
// A pod's block is written to <pods-dir>/<uid>/userns (the kubelet's
// file and format) before the pod may use it, so that a restarted nodelet
// keeps every pod's mapping and never gives one block to two pods: the
// files are read back before the first allocation. A file that cannot be
// read or makes no sense stops all new allocations (its pod's block is
// unknown, and any block could be it) until its pod is cleaned up; the
// error names the file. A block is free again once its pod is cleaned up
// (Release), after its containers stopped.
//
// A pod gets a block only when the runtime says, in its CRI status, that
// its handler supports user namespaces; the runtime manager asks again
// before it creates the pod's sandbox (CheckRuntime).
package userns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// FileName is the file in a pod's directory that holds its mapping.
const FileName = "userns"

// maxFile bounds what is read of a mapping file; nodelet writes about 120
// bytes.
const maxFile = 4096

// RuntimeStatus is what the manager needs of the CRI client.
type RuntimeStatus interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// Options configure a Manager.
type Options struct {
	// PodsDir holds the pods' directories (<root-dir>/pods).
	PodsDir string
	// IDsPerPod is the length of each pod's block; 0 means
	// DefaultIDsPerPod. It must be a multiple of 65536.
	IDsPerPod int64
	// MaxPods is how many pods the range must hold.
	MaxPods int
	// Kubelet is the node's "kubelet" user; nil: there is none, and the
	// range is DefaultRange.
	Kubelet *KubeletUser
}

// Deps are the manager's collaborators; Log may be nil.
type Deps struct {
	Runtime RuntimeStatus
	Log     *slog.Logger
}

// Manager hands out and takes back the pods' blocks. It is safe for
// concurrent use.
type Manager struct {
	opts    Options
	runtime RuntimeStatus
	log     *slog.Logger

	mu     sync.Mutex
	loaded bool
	// off is the node range's first block (First/idsPerPod), blocks how
	// many it has, idsPerPod their length.
	off, blocks, idsPerPod uint32
	// unavailable is why no pod gets a user namespace (a bad range).
	unavailable error
	byPod       map[types.UID]uint32 // pod → its block's index in the range
	byBlock     map[uint32]types.UID // the reverse
	// broken are the pods whose file could not be read back; while there
	// is one, nothing is allocated.
	broken map[types.UID]error
}

// New returns a Manager. It reads nothing yet: the range is checked and
// the pods' files are read on first use. A range that breaks the
// kubelet's rules does not stop the node: every pod with hostUsers: false
// is refused with the reason.
func New(opts Options, deps Deps) *Manager {
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts, runtime: deps.Runtime, log: log}
}

// Mapping is one pod's block: host IDs HostID to HostID+Length-1 seen as
// 0 to Length-1 inside, for UIDs and GIDs.
type Mapping struct {
	HostID, Length uint32
}

// CRI is the mapping as the CRI's user namespace option for the sandbox
// and the containers.
func (m Mapping) CRI() *runtimeapi.UserNamespace {
	ids := func() []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: m.HostID, ContainerId: 0, Length: m.Length}}
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids(), Gids: ids()}
}

// Wants tells whether pod asks for its own user namespace (hostUsers:
// false).
func Wants(pod *v1.Pod) bool { return pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers }

// Allocate gives the pod its block, the one it already has if any. A new
// block is only given when the runtime supports user namespaces
// (CheckRuntime), and only once its file is written. It fails for a pod
// that does not want a user namespace.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod) (Mapping, error) {
	if !Wants(pod) {
		return Mapping{}, fmt.Errorf("pod %s/%s does not ask for a user namespace", pod.Namespace, pod.Name)
	}
	if err := checkUID(pod.UID); err != nil {
		return Mapping{}, err
	}
	if mp, ok, err := m.lookup(pod.UID); ok || err != nil {
		return mp, err
	}
	// The runtime is asked outside the lock: one pod's slow call does not
	// hold back the others. A pod naming a RuntimeClass runs with its
	// class's handler, which the runtime manager resolves: the check
	// before its sandbox (CheckRuntime with that handler) decides, as the
	// kubelet asks about the pod's own handler.
	if !namesRuntimeClass(pod) {
		if err := m.CheckRuntime(ctx, ""); err != nil {
			return Mapping{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usableLocked(pod.UID); err != nil {
		return Mapping{}, err
	}
	if idx, ok := m.byPod[pod.UID]; ok { // allocated meanwhile
		return m.mapping(idx), nil
	}
	idx, ok := m.freeLocked()
	if !ok {
		return Mapping{}, fmt.Errorf("user namespace: all %d blocks of %d IDs are in use", m.blocks, m.idsPerPod)
	}
	mp := m.mapping(idx)
	if err := m.write(pod.UID, mp); err != nil {
		return Mapping{}, fmt.Errorf("user namespace: %w", err)
	}
	m.byPod[pod.UID], m.byBlock[idx] = idx, pod.UID
	m.log.Info("user namespace allocated", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "hostID", mp.HostID, "length", mp.Length)
	return mp, nil
}

// lookup is the pod's block if it has one; an error when the manager
// cannot give blocks at all or the pod's file is broken.
func (m *Manager) lookup(uid types.UID) (Mapping, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loadLocked()
	if m.unavailable != nil {
		return Mapping{}, false, m.unavailable
	}
	if err := m.broken[uid]; err != nil {
		return Mapping{}, false, err
	}
	if idx, ok := m.byPod[uid]; ok {
		return m.mapping(idx), true, nil
	}
	return Mapping{}, false, nil
}

// PodUserNamespace is the CRI user namespace option of pod: nil for a pod
// on the host's user namespace, its block for one with hostUsers: false,
// which must have been allocated (Allocate, by the user namespaces hook).
func (m *Manager) PodUserNamespace(pod *v1.Pod) (*runtimeapi.UserNamespace, error) {
	if !Wants(pod) {
		return nil, nil
	}
	mp, ok, err := m.lookup(pod.UID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("user namespace: pod %s/%s has no block allocated", pod.Namespace, pod.Name)
	}
	return mp.CRI(), nil
}

// Release frees the pod's block and removes its file; a pod without one
// is already released. Call it once no container of the pod runs.
func (m *Manager) Release(uid types.UID) error {
	if err := checkUID(uid); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loadLocked()
	if err := os.Remove(m.path(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release user namespace of pod %s: %w", uid, err)
	}
	if idx, ok := m.byPod[uid]; ok {
		delete(m.byPod, uid)
		delete(m.byBlock, idx)
		m.log.Info("user namespace released", "podUID", uid, "hostID", m.mapping(idx).HostID)
	}
	delete(m.broken, uid)
	return nil
}

// Pods are the pods holding a block, or whose file could not be read.
func (m *Manager) Pods() ([]types.UID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loadLocked()
	out := make([]types.UID, 0, len(m.byPod)+len(m.broken))
	for uid := range m.byPod {
		out = append(out, uid)
	}
	for uid := range m.broken {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out, nil
}

// namesRuntimeClass is whether pod runs with its RuntimeClass's handler
// rather than the runtime's default.
func namesRuntimeClass(pod *v1.Pod) bool {
	return pod.Spec.RuntimeClassName != nil && *pod.Spec.RuntimeClassName != ""
}

// CheckRuntime fails, with the kubelet's message, unless the runtime's
// status lists handler ("": the runtime's default) with user namespace
// support.
func (m *Manager) CheckRuntime(ctx context.Context, handler string) error {
	what := "runtime does not support user namespaces"
	if h := handler; h != "" {
		what = fmt.Sprintf("RuntimeClass handler %q does not support user namespaces", h)
	}
	if m.runtime == nil {
		return fmt.Errorf("can't set `spec.hostUsers: false`, %s: no runtime to ask", what)
	}
	resp, err := m.runtime.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("can't set `spec.hostUsers: false`, %s: runtime status: %w", what, err)
	}
	handlers := resp.GetRuntimeHandlers()
	if len(handlers) == 0 {
		// An older runtime (containerd 1.x) lists no handlers.
		return fmt.Errorf("can't set `spec.hostUsers: false`, %s (it reports no runtime handler features; containerd 2.0 or newer does)", what)
	}
	for _, h := range handlers {
		if h.GetName() == handler {
			if h.GetFeatures().GetUserNamespaces() {
				return nil
			}
			// containerd 2 reports them when its OCI runtime lists the user
			// namespace and idmapped mounts among its features.
			return fmt.Errorf("can't set `spec.hostUsers: false`, %s (containerd 2 supports them with runc 1.2 or newer, which has idmapped mounts)", what)
		}
	}
	return fmt.Errorf("can't set `spec.hostUsers: false`, %s: the handler %q is not known", what, handler)
}

// usableLocked is why uid may not get a new block: no range, a broken
// file (the pod's, or any other's).
func (m *Manager) usableLocked(uid types.UID) error {
	if m.unavailable != nil {
		return m.unavailable
	}
	if err := m.broken[uid]; err != nil {
		return err
	}
	if len(m.broken) > 0 {
		other := slices.Min(slices.Collect(maps.Keys(m.broken)))
		return fmt.Errorf("user namespace: no block is given while the mapping of pod %s cannot be read (%w); "+
			"its block is unknown and may be in use", other, m.broken[other])
	}
	return nil
}

// checkUID refuses a pod UID that is not one path element.
func checkUID(uid types.UID) error {
	if err := podspec.CheckUIDPathElement(uid); err != nil {
		return fmt.Errorf("user namespace: %w", err)
	}
	return nil
}

// freeLocked is the lowest free block.
func (m *Manager) freeLocked() (uint32, bool) {
	for i := range m.blocks {
		if _, used := m.byBlock[i]; !used {
			return i, true
		}
	}
	return 0, false
}

func (m *Manager) mapping(idx uint32) Mapping {
	return Mapping{HostID: (m.off + idx) * m.idsPerPod, Length: m.idsPerPod}
}

func (m *Manager) path(uid types.UID) string {
	return filepath.Join(m.opts.PodsDir, string(uid), FileName)
}

// loadLocked checks the range and reads the pods' files back, once.
func (m *Manager) loadLocked() {
	if m.loaded {
		return
	}
	m.loaded = true
	m.byPod, m.byBlock, m.broken = map[types.UID]uint32{}, map[uint32]types.UID{}, map[types.UID]error{}
	if err := m.setRange(); err != nil {
		m.unavailable = fmt.Errorf("user namespaces are not available on this node: %w", err)
		m.log.Warn("pods with hostUsers: false will not run", "err", m.unavailable)
		return
	}
	entries, err := os.ReadDir(m.opts.PodsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Without the list, any block may be in use.
		m.unavailable = fmt.Errorf("user namespaces: cannot read back the pods' mappings: %w", err)
		m.log.Error("pods with hostUsers: false will not run", "err", m.unavailable)
		return
	}
	for _, e := range entries {
		uid := types.UID(e.Name())
		if err := m.recover(uid); err != nil {
			m.broken[uid] = err
			m.log.Error("user namespace of a pod cannot be read back; no block is given until it is cleaned up", "podUID", uid, "err", err)
		}
	}
}

// setRange computes the node's range from the options.
func (m *Manager) setRange() error {
	ids := m.opts.IDsPerPod
	if ids == 0 {
		ids = DefaultIDsPerPod
	}
	if ids < 0 || ids >= 1<<32 || ids%unit != 0 {
		return fmt.Errorf("userNamespaces.idsPerPod %d is not a positive multiple of %d below 2^32", ids, unit)
	}
	r := DefaultRange(uint32(ids))
	if u := m.opts.Kubelet; u != nil {
		var err error
		if r, err = u.rangeOf(); err != nil {
			return fmt.Errorf("the subordinate IDs of user %q: %w", u.Name, err)
		}
	}
	if err := checkRange(r, uint32(ids), m.opts.MaxPods); err != nil {
		return err
	}
	m.idsPerPod, m.off, m.blocks = uint32(ids), r.First/uint32(ids), r.Length/uint32(ids)
	return nil
}

// recover records the block in uid's file, if it has one.
func (m *Manager) recover(uid types.UID) error {
	mp, ok, err := m.read(uid)
	if err != nil || !ok {
		return err
	}
	if mp.Length != m.idsPerPod || mp.HostID%m.idsPerPod != 0 {
		return fmt.Errorf("%s: block %d+%d is not one of %d IDs", m.path(uid), mp.HostID, mp.Length, m.idsPerPod)
	}
	idx := mp.HostID/m.idsPerPod - m.off
	if mp.HostID/m.idsPerPod < m.off || idx >= m.blocks {
		return fmt.Errorf("%s: block %d+%d is outside the node's range", m.path(uid), mp.HostID, mp.Length)
	}
	if other, used := m.byBlock[idx]; used {
		return fmt.Errorf("%s: block %d+%d is pod %s's too", m.path(uid), mp.HostID, mp.Length, other)
	}
	m.byPod[uid], m.byBlock[idx] = idx, uid
	return nil
}

// fileMapping is one ID mapping in the kubelet's file format.
type fileMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// file is the kubelet's userns file.
type file struct {
	UIDMappings []fileMapping `json:"uidMappings"`
	GIDMappings []fileMapping `json:"gidMappings"`
}

// read reads uid's file: ok is false when there is none. It opens no
// symlink and reads at most maxFile bytes.
func (m *Manager) read(uid types.UID) (Mapping, bool, error) {
	path := m.path(uid)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return Mapping{}, false, nil
	}
	if err != nil {
		return Mapping{}, false, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return Mapping{}, false, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := bounded.ReadAll(f, maxFile, path)
	if err != nil {
		return Mapping{}, false, err
	}
	mp, err := parseFile(data)
	if err != nil {
		return Mapping{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return mp, true, nil
}

// parseFile checks a file is what nodelet (or the kubelet) writes: one
// UID mapping, the same GID mapping, from container ID 0.
func parseFile(data []byte) (Mapping, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return Mapping{}, fmt.Errorf("invalid user namespace mappings file: %w", err)
	}
	if len(f.UIDMappings) != 1 || len(f.GIDMappings) != 1 {
		return Mapping{}, errors.New("invalid user namespace mappings file: want one UID and one GID mapping")
	}
	if f.UIDMappings[0] != f.GIDMappings[0] {
		return Mapping{}, errors.New("invalid user namespace mappings file: the UID and GID mappings differ")
	}
	u := f.UIDMappings[0]
	if u.ContainerID != 0 {
		return Mapping{}, errors.New("invalid user namespace mappings file: ID 0 is not mapped")
	}
	return Mapping{HostID: u.HostID, Length: u.Length}, nil
}

// write persists uid's mapping, 0600, in its directory (created 0750, as
// the pod's other files make it).
func (m *Manager) write(uid types.UID, mp Mapping) error {
	one := []fileMapping{{HostID: mp.HostID, ContainerID: 0, Length: mp.Length}}
	data, err := json.Marshal(file{UIDMappings: one, GIDMappings: one})
	if err != nil {
		return err
	}
	dir := filepath.Dir(m.path(uid))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := atomicfile.Write(m.path(uid), data, 0o600); err != nil {
		return err
	}
	return atomicfile.SyncDir(m.opts.PodsDir)
}
