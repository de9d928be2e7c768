package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// Claims reads ResourceClaims from the API server (cluster mode).
type Claims interface {
	ResourceClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// Recorder records pod events.
type Recorder interface {
	Event(pod *v1.Pod, eventType, reason, message string)
}

// ErrNoAPIServer is a pod with resource claims on a node without an API
// server to read them from.
var ErrNoAPIServer = errors.New("resource claims need cluster mode (--kubeconfig): there is no API server to read them from")

// Deps are the manager's collaborators.
type Deps struct {
	// Plugins are the registered drivers (required).
	Plugins *Plugins
	// Claims reads ResourceClaims; nil standalone, where a pod with
	// resource claims fails to start.
	Claims   Claims
	Recorder Recorder
	Log      *slog.Logger
	Clock    clock.PassiveClock
	// Metrics registers the kubelet's dra_operations_duration_seconds;
	// nil: not registered.
	Metrics prometheus.Registerer
}

// Manager prepares the ResourceClaims of pods with their DRA drivers and
// hands their CDI devices to the containers that use them. It is the pod
// workers' hook "dynamic resources"; Prepare and Cleanup of different pods
// run one at a time (a claim may be shared between pods), so a driver
// that does not answer holds the others up to its call timeout.
type Manager struct {
	plugins  *Plugins
	claims   Claims // nil: standalone
	recorder Recorder
	log      *slog.Logger
	clock    clock.PassiveClock
	metrics  *opMetrics
	path     string

	// op serialises Prepare and Cleanup; mu guards state for readers
	// (the contributors, ContainerClaims, Holding).
	op    sync.Mutex
	mu    sync.RWMutex
	state map[string]ClaimInfo // by namespace/name
}

// NewManager reads the checkpoint in rootDir back; a checkpoint that
// cannot be read is an error (claims prepared by an earlier run would be
// leaked otherwise), as the kubelet's.
func NewManager(rootDir string, deps Deps) (*Manager, error) {
	path := filepath.Join(rootDir, StateFile)
	st, err := readState(path)
	if err != nil {
		return nil, err
	}
	return &Manager{plugins: deps.Plugins, claims: deps.Claims, recorder: deps.Recorder, log: deps.Log, clock: deps.Clock,
		metrics: newMetrics(deps.Metrics), path: path, state: st}, nil
}

func (*Manager) Name() string { return "dynamic resources" }

// Prepare prepares the pod's claims that are not prepared yet and hands
// back a contributor of every container's CDI devices. A failure is a
// FailedPrepareDynamicResources event and keeps the pod pending.
func (m *Manager) Prepare(ctx context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return podsetup.Setup{}, nil
	}
	claims, err := podClaims(pod)
	// A pod whose claims are all prepared is not an operation: the
	// kubelet prepares (and counts) at a pod's start, not at each sync.
	if err == nil && !m.allPrepared(pod, claims) {
		start := m.clock.Now()
		err = m.prepare(ctx, pod, claims)
		m.observe("PrepareResources", start, err)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.recorder.Event(pod, v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: "+err.Error())
		}
		return podsetup.Setup{}, fmt.Errorf("prepare dynamic resources: %w", err)
	}
	return podsetup.Setup{Containers: []podsetup.Contributor{contributor{m: m, claims: claims}}}, nil
}

// wanted is one claim to prepare: what the API server said of it.
type wanted struct {
	claim   *resourceapi.ResourceClaim
	drivers []string
}

func (m *Manager) prepare(ctx context.Context, pod *v1.Pod, claims []podClaim) error {
	m.op.Lock()
	defer m.op.Unlock()
	if m.allPrepared(pod, claims) {
		return nil
	}
	if m.claims == nil {
		return ErrNoAPIServer
	}
	// Step 1: read and check every claim, and that its drivers are here.
	var want []wanted
	for _, pc := range claims {
		if pc.ClaimName == "" {
			continue
		}
		claim, err := m.claims.ResourceClaim(ctx, pod.Namespace, pc.ClaimName)
		if err != nil {
			return fmt.Errorf("fetch ResourceClaim %s: %w", pc.ClaimName, err)
		}
		if err := checkClaim(pod, pc, claim); err != nil {
			return err
		}
		ds := drivers(claim)
		for _, d := range ds {
			if _, err := m.plugins.endpoint(d); err != nil {
				return err
			}
		}
		want = append(want, wanted{claim: claim, drivers: ds})
	}
	// Step 2: record that the pod uses them, before any driver is asked,
	// so that a crash leaves nothing prepared that nobody unprepares.
	batches, err := m.reference(pod.UID, want)
	if err != nil {
		return err
	}
	// Step 3: one NodePrepareResources per driver.
	for _, d := range slices.Sorted(maps.Keys(batches)) {
		if err := m.prepareWith(ctx, d, batches[d]); err != nil {
			return err
		}
	}
	// Step 4: every claim is prepared once all its drivers answered.
	return m.update(func(st map[string]ClaimInfo) {
		for _, w := range want {
			k := key(w.claim.Namespace, w.claim.Name)
			info := st[k]
			info.Prepared = true
			st[k] = info
		}
	})
}

// allPrepared: every claim of the pod is prepared and records the pod.
func (m *Manager) allPrepared(pod *v1.Pod, claims []podClaim) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, pc := range claims {
		if pc.ClaimName == "" {
			continue
		}
		info, ok := m.state[key(pod.Namespace, pc.ClaimName)]
		if _, uses := info.PodUIDs[string(pod.UID)]; !ok || !uses || !info.Prepared {
			return false
		}
	}
	return true
}

// reference records the pod as a user of each wanted claim (a new entry
// for a claim not held yet) and returns, per driver, the claims not
// prepared yet.
func (m *Manager) reference(uid types.UID, want []wanted) (map[string][]*drapb.Claim, error) {
	batches := map[string][]*drapb.Claim{}
	m.mu.RLock()
	next := maps.Clone(m.state)
	m.mu.RUnlock()
	for _, w := range want {
		c := w.claim
		k := key(c.Namespace, c.Name)
		info, ok := next[k]
		if !ok {
			info = ClaimInfo{ClaimUID: c.UID, ClaimName: c.Name, Namespace: c.Namespace,
				PodUIDs: map[string]struct{}{}, DriverState: map[string]DriverState{}}
			for _, d := range w.drivers {
				info.DriverState[d] = DriverState{}
			}
		} else if info.ClaimUID != c.UID {
			return nil, fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", c.Name, info.ClaimUID)
		}
		info = info.clone()
		info.PodUIDs[string(uid)] = struct{}{}
		next[k] = info
		if info.Prepared {
			continue
		}
		for _, d := range w.drivers {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: c.Namespace, Uid: string(c.UID), Name: c.Name})
		}
	}
	if err := m.replace(next); err != nil {
		return nil, fmt.Errorf("checkpoint ResourceClaim cache: %w", err)
	}
	return batches, nil
}

// prepareWith asks one driver to prepare claims and records its devices.
func (m *Manager) prepareWith(ctx context.Context, driver string, claims []*drapb.Claim) error {
	resp, err := m.plugins.prepare(ctx, driver, claims)
	if err != nil {
		return err
	}
	devices := map[string][]Device{}
	for uid, result := range resp.GetClaims() {
		req := findClaim(claims, uid)
		if req == nil {
			return fmt.Errorf("NodePrepareResources returned result for unknown claim UID %s", uid)
		}
		if result.GetError() != "" {
			return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", req.Name, result.GetError())
		}
		for _, d := range result.GetDevices() {
			dev := Device{PoolName: d.GetPoolName(), DeviceName: d.GetDeviceName(),
				RequestNames: d.GetRequestNames(), CDIDeviceIDs: d.GetCdiDeviceIds()}
			if id := d.GetShareId(); id != "" {
				share := types.UID(id)
				dev.ShareID = &share
			}
			devices[key(req.Namespace, req.Name)] = append(devices[key(req.Namespace, req.Name)], dev)
		}
		if devices[key(req.Namespace, req.Name)] == nil {
			devices[key(req.Namespace, req.Name)] = []Device{}
		}
	}
	if err := m.update(func(st map[string]ClaimInfo) {
		for k, devs := range devices {
			info := st[k].clone()
			info.DriverState[driver] = DriverState{Devices: devs}
			st[k] = info
		}
	}); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	if n := len(claims) - len(resp.GetClaims()); n != 0 {
		return fmt.Errorf("NodePrepareResources skipped %d ResourceClaims", n)
	}
	return nil
}

func findClaim(claims []*drapb.Claim, uid string) *drapb.Claim {
	for _, c := range claims {
		if c.Uid == uid {
			return c
		}
	}
	return nil
}

// Cleanup unprepares the claims the pod was the last user of and forgets
// the pod in the others. A driver that is not registered or fails is an
// error, retried until it succeeds: the claim stays in the checkpoint.
func (m *Manager) Cleanup(ctx context.Context, pod *v1.Pod) error {
	m.op.Lock()
	defer m.op.Unlock()
	if !m.holds(pod.UID) {
		return nil
	}
	start := m.clock.Now()
	err := m.unprepare(ctx, pod)
	m.observe("UnprepareResources", start, err)
	return err
}

// holds: a claim records the pod.
func (m *Manager) holds(uid types.UID) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, info := range m.state {
		if _, ok := info.PodUIDs[string(uid)]; ok {
			return true
		}
	}
	return false
}

func (m *Manager) observe(op string, start time.Time, err error) {
	m.metrics.operations.WithLabelValues(op, strconv.FormatBool(err != nil)).Observe(m.clock.Since(start).Seconds())
}

// unprepare is Cleanup of a pod that a claim records.
func (m *Manager) unprepare(ctx context.Context, pod *v1.Pod) error {
	uid := string(pod.UID)
	m.mu.RLock()
	next := maps.Clone(m.state)
	m.mu.RUnlock()
	batches := map[string][]*drapb.Claim{}
	var last []string
	used := false
	for _, k := range slices.Sorted(maps.Keys(next)) {
		info := next[k]
		if _, ok := info.PodUIDs[uid]; !ok {
			continue
		}
		used = true
		if len(info.PodUIDs) > 1 {
			info = info.clone()
			delete(info.PodUIDs, uid)
			next[k] = info
			continue
		}
		last = append(last, k)
		for _, d := range slices.Sorted(maps.Keys(info.DriverState)) {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: info.Namespace, Uid: string(info.ClaimUID), Name: info.ClaimName})
		}
	}
	if !used {
		return nil
	}
	for _, d := range slices.Sorted(maps.Keys(batches)) {
		if err := m.unprepareWith(ctx, d, batches[d]); err != nil {
			return fmt.Errorf("unprepare dynamic resources: %w", err)
		}
	}
	for _, k := range last {
		delete(next, k)
	}
	if err := m.replace(next); err != nil {
		return fmt.Errorf("unprepare dynamic resources: checkpoint ResourceClaim state: %w", err)
	}
	return nil
}

func (m *Manager) unprepareWith(ctx context.Context, driver string, claims []*drapb.Claim) error {
	resp, err := m.plugins.unprepare(ctx, driver, claims)
	if err != nil {
		return err
	}
	for uid, result := range resp.GetClaims() {
		req := findClaim(claims, uid)
		if req == nil {
			return fmt.Errorf("NodeUnprepareResources returned result for unknown claim UID %s", uid)
		}
		if result.GetError() != "" {
			return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", req.Name, result.GetError())
		}
	}
	if n := len(claims) - len(resp.GetClaims()); n != 0 {
		return fmt.Errorf("NodeUnprepareResources skipped %d ResourceClaims", n)
	}
	return nil
}

// Holding lists the pods that use a claim this node holds prepared (or
// being prepared), for housekeeping.
func (m *Manager) Holding() ([]types.UID, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	seen := map[types.UID]bool{}
	for _, info := range m.state {
		for uid := range info.PodUIDs {
			seen[types.UID(uid)] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// update changes a copy of the state with f and commits it.
func (m *Manager) update(f func(map[string]ClaimInfo)) error {
	m.mu.RLock()
	next := maps.Clone(m.state)
	m.mu.RUnlock()
	f(next)
	return m.replace(next)
}

// replace writes next as the checkpoint, then makes it the state: what
// is not on disk is not believed.
func (m *Manager) replace(next map[string]ClaimInfo) error {
	if err := writeState(m.path, next); err != nil {
		return err
	}
	m.mu.Lock()
	m.state = next
	m.mu.Unlock()
	return nil
}

// ClaimDevice is one device prepared for a claim a container uses, as
// the pod-resources API lists it (DynamicResource, ClaimResource).
type ClaimDevice struct {
	ClaimName, ClaimNamespace string
	Driver, Pool, Device      string
	ShareID                   *types.UID // for a device shared by several allocations
	CDIDeviceIDs              []string
}

// ContainerClaims lists the prepared devices the container uses, by claim
// then driver: what the pod-resources API reports of it.
func (m *Manager) ContainerClaims(pod *v1.Pod, c *v1.Container) ([]ClaimDevice, error) {
	claims, err := podClaims(pod)
	if err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []ClaimDevice
	reqs := containerRequests(claims, c)
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		info, ok := m.state[key(pod.Namespace, name)]
		if !ok {
			continue
		}
		for _, d := range slices.Sorted(maps.Keys(info.DriverState)) {
			for _, dev := range info.DriverState[d].Devices {
				if !servesAny(dev, reqs[name]) {
					continue
				}
				out = append(out, ClaimDevice{ClaimName: name, ClaimNamespace: pod.Namespace, Driver: d,
					Pool: dev.PoolName, Device: dev.DeviceName, ShareID: dev.ShareID, CDIDeviceIDs: slices.Clone(dev.CDIDeviceIDs)})
			}
		}
	}
	return out, nil
}

func servesAny(dev Device, requests []string) bool {
	if len(dev.RequestNames) == 0 {
		return true
	}
	for _, r := range requests {
		if r == "" || slices.Contains(dev.RequestNames, r) {
			return true
		}
	}
	return false
}

// contributor gives each container the CDI devices of the claims it
// names, as the kubelet's GetResources.
type contributor struct {
	m      *Manager
	claims []podClaim
}

func (k contributor) ContributeContainer(c podsetup.Container) (podsetup.Additions, error) {
	reqs := containerRequests(k.claims, c.Container)
	if len(reqs) == 0 {
		return podsetup.Additions{}, nil
	}
	k.m.mu.RLock()
	defer k.m.mu.RUnlock()
	var out podsetup.Additions
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		info, ok := k.m.state[key(c.Pod.Namespace, name)]
		if !ok || !info.Prepared {
			return podsetup.Additions{}, fmt.Errorf("ResourceClaim %s/%s is not prepared", c.Pod.Namespace, name)
		}
		for _, r := range reqs[name] {
			for _, id := range cdiDeviceIDs(info, r) {
				out.CDIDevices = append(out.CDIDevices, &runtimeapi.CDIDevice{Name: id})
			}
		}
	}
	return out, nil
}
