package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/notify"
	"github.com/nodelet/nodelet/internal/node/eviction"
)

// Defaults, the kubelet's (KubeletConfiguration v1beta1 and kubelet.go).
const (
	DefaultNodeStatusUpdateFrequency = 10 * time.Second
	DefaultNodeStatusReportFrequency = 5 * time.Minute
	DefaultNodeLeaseDurationSeconds  = 40
	DefaultNodeStatusMaxImages       = 50
	DefaultMaxPods                   = 110
	// DefaultKubeletVersion is the release nodelet tracks: what the Node
	// reports as its kubelet version.
	DefaultKubeletVersion = "v1.37.2"
)

// DefaultEvictionHard are the kubelet's hard eviction thresholds on Linux,
// used when Options.EvictionHard is nil.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// leaseRenewFraction of the lease duration is the renew interval (the
// kubelet's nodeLeaseRenewIntervalFraction): 10s of 40s.
const leaseRenewFraction = 0.25

// Options are the node's settings, named as the kubelet's flags and
// KubeletConfiguration fields they come from. Zero values take the
// kubelet's defaults where it has one.
type Options struct {
	// NodeName is the Node's name (--hostname-override, else the
	// hostname). Required.
	NodeName string
	// Hostname is the node's Hostname address and its
	// kubernetes.io/hostname label; empty means NodeName, as the kubelet
	// (whose hostname is the override when one is given).
	Hostname string
	// NodeIPs are the node's InternalIP addresses (--node-ip: one, or two
	// of different families). None: the Node has only its Hostname
	// address.
	NodeIPs []string
	// RootDir is nodelet's root directory (--root-dir): ephemeral-storage
	// capacity and the nodefs eviction signals are its filesystem's.
	RootDir string
	// LocalStorageCapacityIsolation (localStorageCapacityIsolation; nil
	// means true): the Node reports ephemeral-storage capacity, and is
	// not Ready without it. With false, neither, as the kubelet.
	LocalStorageCapacityIsolation *bool
	// Port is the kubelet API's port (port), published as
	// status.daemonEndpoints.kubeletEndpoint.Port.
	Port int32
	// Labels are added to the default ones when the Node is created
	// (--node-labels; they win over the defaults).
	Labels map[string]string
	// RegisterWithTaints are the Node's taints when it is created
	// (registerWithTaints).
	RegisterWithTaints []v1.Taint
	// RegisterNode: create the Node when it is missing (registerNode);
	// nil means true. With false, nodelet only reports the status of a
	// Node someone else created.
	RegisterNode *bool
	// EnableControllerAttachDetach sets the controller-managed
	// attach/detach annotation (enableControllerAttachDetach); nil means
	// true.
	EnableControllerAttachDetach *bool
	// ProviderID is spec.providerID at creation (providerID).
	ProviderID string
	// MaxPods is the pods capacity (maxPods, 110); with PodsPerCore > 0
	// (podsPerCore) at most that many per CPU.
	MaxPods     int
	PodsPerCore int
	// SystemReserved and KubeReserved are taken from allocatable
	// (systemReserved, kubeReserved: cpu, memory, ephemeral-storage,
	// pid).
	SystemReserved map[string]string
	KubeReserved   map[string]string
	// EvictionHard are the hard eviction thresholds (evictionHard; nil:
	// DefaultEvictionHard, empty: none). memory.available and
	// nodefs.available are taken from allocatable. The pressure
	// conditions are the eviction manager's (Deps.Pressure).
	EvictionHard map[string]string
	// NodeStatusUpdateFrequency is how often the status is computed
	// (nodeStatusUpdateFrequency, 10s); NodeStatusReportFrequency how
	// often it is patched when nothing changed (nodeStatusReportFrequency,
	// 5m, or NodeStatusUpdateFrequency when only that is set).
	NodeStatusUpdateFrequency time.Duration
	NodeStatusReportFrequency time.Duration
	// NodeLeaseDurationSeconds is the lease's duration
	// (nodeLeaseDurationSeconds, 40); it is renewed every quarter of it.
	NodeLeaseDurationSeconds int32
	// NodeStatusMaxImages caps the images listed in the status
	// (nodeStatusMaxImages; nil: 50, -1: no cap).
	NodeStatusMaxImages *int32
	// KubeletVersion is status.nodeInfo.kubeletVersion (v1.37.2).
	KubeletVersion string
	// Host are the machine's identity facts (ReadHostInfo).
	Host HostInfo
	// SwapCapacity is the node's swap in bytes (/proc/swaps), reported as
	// status.nodeInfo.swap.capacity; nil: unknown, not reported.
	SwapCapacity *int64
	// DeclaredFeatures are status.declaredFeatures: the node features
	// nodelet implements. Empty by default: declaring a feature nodelet
	// does not implement would let the scheduler place pods that need it
	// here.
	DeclaredFeatures []string
}

// Runtime is the part of the CRI client node status reads (*cri.Client).
type Runtime interface {
	Version(ctx context.Context) (*runtimeapi.VersionResponse, error)
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// Machine is what node status reads of the machine at each computation
// (*stats.HostMachine).
type Machine interface {
	// NumCPU is the number of online CPUs.
	NumCPU() (int, error)
	// MemoryCapacity is the machine's memory in bytes.
	MemoryCapacity() (uint64, error)
	// HugePages maps a huge page size in bytes to its pool's pages.
	HugePages() (map[uint64]uint64, error)
	// FsStats is statfs of the filesystem holding path.
	FsStats(path string) (capacity, available, used, inodes, inodesFree uint64, err error)
}

// EventRecorder records events about the node (*events.Recorder).
type EventRecorder interface {
	NodeEvent(node, eventType, reason, message string)
}

// PodCIDRs takes the Node's pod CIDRs to the runtime (*podcidr.Manager).
type PodCIDRs interface {
	Apply(ctx context.Context, cidrs []string) error
}

// Deps are what the Manager works with.
type Deps struct {
	// HeartbeatClient patches the status and renews the lease; nil: the
	// client given to New. The kubelet gives heartbeats their own client:
	// no client-side rate limit (QPS -1), so that they never queue behind
	// pod status patches, and a timeout of the update frequency (at most
	// the lease duration), so that a dead connection costs one
	// heartbeat. Registration and the Node's watch use New's client: a
	// watch outlives such a timeout.
	HeartbeatClient kubernetes.Interface
	Runtime         Runtime
	Machine         Machine
	// PLEGHealthy is the PLEG's health check ((*pleg.Generic).Healthy);
	// nil: no check.
	PLEGHealthy func() (bool, error)
	// Pressure is the eviction manager's view of the pressure conditions
	// ((*eviction.Manager).Pressure), the one admission and eviction act
	// on; nil: no pressure.
	Pressure func() (memory, disk, pid bool)
	// ShutdownStatus is the graceful node shutdown's error while the node
	// shuts down (shutdown.Manager.Status): Ready is then false with it;
	// nil: none.
	ShutdownStatus func() error
	// Changed, when set, is kicked by others when what the status says
	// may have changed (shutdown.Deps.NodeChanged): the status is then
	// computed and reported at once, as on Trigger. nil: only Trigger.
	Changed *notify.Kick
	// PodCIDRs is given the Node's spec.podCIDRs before each computation
	// of the status, as the kubelet's updateNode calls updatePodCIDR (and
	// its fast status update before the first); nil: they go nowhere.
	PodCIDRs PodCIDRs
	// VolumesInUse are the attachable volumes mounted on the node
	// (csi.Mounter.VolumesInUse), reported in status.volumesInUse so that
	// the attach/detach controller does not detach them; nil: the field
	// is left as it is.
	VolumesInUse func() []v1.UniqueVolumeName
	// Devices are the device plugins' resources (devicemanager.Manager.
	// Capacity): every device in capacity, the healthy ones in
	// allocatable, zero for a resource whose plugin is gone; nil: none.
	Devices func() (capacity, allocatable v1.ResourceList)
	// Events receives the kubelet's node events (NodeReady,
	// NodeHasSufficientMemory, Rebooted, ...); nil: none.
	Events EventRecorder
	// Registerer gets kubelet_node_name; nil: no metrics.
	Registerer prometheus.Registerer
	// OnRepeatedHeartbeatFailure is called when status patches or lease
	// renewals fail twice in a row: the kubelet closes the heartbeat
	// client's connections there, so that a dead TCP connection is not
	// reused. It is called from two goroutines. Optional.
	OnRepeatedHeartbeatFailure func()
	// OnLeaseFailure is called when a lease renewal fails: the API server
	// may be away, and informers miss what others write meanwhile until
	// their watch is back, which may be long after the API server
	// (statussync.Syncer.Stale). Optional.
	OnLeaseFailure func()
	Clock          clock.Clock
	Log            *slog.Logger
	// Rand returns numbers in [0, 1) for jitter, from two goroutines;
	// nil: math/rand/v2.
	Rand func() float64
}

// config is Options checked, parsed and defaulted: what the pure setters
// read.
type config struct {
	nodeName, hostname string
	nodeIPs            []netip.Addr
	rootDir            string
	localStorage       bool
	port               int32
	labels             map[string]string
	taints             []v1.Taint
	register           bool
	attachDetach       bool
	providerID         string
	maxPods            int
	podsPerCore        int
	// reserved is systemReserved plus kubeReserved.
	reserved v1.ResourceList
	// hard are the hard thresholds (allocatable).
	hard              []eviction.Threshold
	updateFrequency   time.Duration
	reportFrequency   time.Duration
	leaseDuration     int32
	maxImages         int32
	version           string
	host              HostInfo
	swapCapacity      *int64
	declaredFeatures  []string
	leaseRenewalEvery time.Duration
	// goos and goarch are the node's OS and architecture (runtime.GOOS
	// and GOARCH; tests fix them).
	goos, goarch string
}

func newConfig(o Options) (*config, error) {
	c := &config{
		nodeName:         o.NodeName,
		hostname:         o.Hostname,
		rootDir:          o.RootDir,
		localStorage:     o.LocalStorageCapacityIsolation == nil || *o.LocalStorageCapacityIsolation,
		port:             o.Port,
		labels:           o.Labels,
		taints:           o.RegisterWithTaints,
		register:         o.RegisterNode == nil || *o.RegisterNode,
		attachDetach:     o.EnableControllerAttachDetach == nil || *o.EnableControllerAttachDetach,
		providerID:       o.ProviderID,
		maxPods:          o.MaxPods,
		podsPerCore:      o.PodsPerCore,
		updateFrequency:  o.NodeStatusUpdateFrequency,
		reportFrequency:  o.NodeStatusReportFrequency,
		leaseDuration:    o.NodeLeaseDurationSeconds,
		maxImages:        DefaultNodeStatusMaxImages,
		version:          o.KubeletVersion,
		host:             o.Host,
		swapCapacity:     o.SwapCapacity,
		declaredFeatures: o.DeclaredFeatures,
		goos:             goruntime.GOOS,
		goarch:           goruntime.GOARCH,
	}
	if c.nodeName == "" {
		return nil, errors.New("node status: no node name")
	}
	if c.hostname == "" {
		c.hostname = c.nodeName
	}
	if err := checkLabels(c.labels); err != nil {
		return nil, err
	}
	if c.rootDir == "" || !filepath.IsAbs(c.rootDir) {
		return nil, fmt.Errorf("node status: root directory %q is not an absolute path", c.rootDir)
	}
	for _, s := range o.NodeIPs {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("node status: node IP: %w", err)
		}
		c.nodeIPs = append(c.nodeIPs, ip.Unmap())
	}
	if len(c.nodeIPs) > 2 || len(c.nodeIPs) == 2 && c.nodeIPs[0].Is4() == c.nodeIPs[1].Is4() {
		return nil, fmt.Errorf("node status: node IPs %v: at most one per family", o.NodeIPs)
	}
	if c.maxPods == 0 {
		c.maxPods = DefaultMaxPods
	}
	if c.maxPods < 0 || c.podsPerCore < 0 {
		return nil, fmt.Errorf("node status: maxPods %d and podsPerCore %d must not be negative", c.maxPods, c.podsPerCore)
	}
	if c.reportFrequency == 0 {
		// The kubelet's backward-compatible default: the update frequency
		// when only that is set.
		c.reportFrequency = DefaultNodeStatusReportFrequency
		if c.updateFrequency != 0 {
			c.reportFrequency = c.updateFrequency
		}
	}
	if c.updateFrequency == 0 {
		c.updateFrequency = DefaultNodeStatusUpdateFrequency
	}
	if c.leaseDuration == 0 {
		c.leaseDuration = DefaultNodeLeaseDurationSeconds
	}
	if c.updateFrequency < 0 || c.reportFrequency < 0 || c.leaseDuration < 0 {
		return nil, errors.New("node status: frequencies and durations must not be negative")
	}
	c.leaseRenewalEvery = time.Duration(float64(time.Duration(c.leaseDuration)*time.Second) * leaseRenewFraction)
	if o.NodeStatusMaxImages != nil {
		c.maxImages = *o.NodeStatusMaxImages
	}
	if c.version == "" {
		c.version = DefaultKubeletVersion
	}
	var err error
	if c.reserved, err = reservations(o.SystemReserved, o.KubeReserved); err != nil {
		return nil, err
	}
	hard := o.EvictionHard
	if hard == nil {
		hard = DefaultEvictionHard()
	}
	if c.hard, err = eviction.ParseThresholds(eviction.Config{EvictionHard: hard}); err != nil {
		return nil, fmt.Errorf("node status: %w", err)
	}
	return c, nil
}

// checkLabels refuses the labels the Node authorizer would refuse nodelet
// to set on its own Node (the kubelet's check of --node-labels): with
// them, registration would fail forever.
func checkLabels(labels map[string]string) error {
	var unknown []string
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("node status: invalid node label %q: %s", k, strings.Join(errs, ", "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("node status: invalid value of node label %q: %s", k, strings.Join(errs, ", "))
		}
		ns, _, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		kube := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
		if kube && !kubeletapis.IsKubeletLabel(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("node status: node labels %v in the kubernetes.io or k8s.io namespaces that a node may not set on itself (allowed: %s, and the prefixes %s)",
			unknown, strings.Join(kubeletapis.KubeletLabels(), ", "), strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "))
	}
	return nil
}

// reservations parses systemReserved and kubeReserved as the kubelet
// does and adds them up.
func reservations(lists ...map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, m := range lists {
		for k, v := range m {
			switch v1.ResourceName(k) {
			case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid":
			default:
				return nil, fmt.Errorf("node status: cannot reserve %q resource", k)
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("node status: parse quantity %q for %q resource: %w", v, k, err)
			}
			if q.Sign() < 0 {
				return nil, fmt.Errorf("node status: resource quantity for %q cannot be negative: %v", k, v)
			}
			if k == string(v1.ResourceCPU) {
				q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
			}
			sum := out[v1.ResourceName(k)]
			sum.Add(q)
			out[v1.ResourceName(k)] = sum
		}
	}
	return out, nil
}
