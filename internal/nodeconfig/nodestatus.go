package nodeconfig

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/cluster/nodestatus"
)

// NodeStatusOptions are the settings of the Node's registration, status
// and lease, from cfg by the kubelet's names.
func (cfg Config) NodeStatusOptions() nodestatus.Options {
	var ips []string
	for ip := range strings.SplitSeq(cfg.NodeIP, ",") {
		if ip = strings.TrimSpace(ip); ip != "" {
			ips = append(ips, ip)
		}
	}
	return nodestatus.Options{
		NodeName: cfg.NodeName, NodeIPs: ips, RootDir: cfg.RootDir, Port: int32(cfg.Port),
		LocalStorageCapacityIsolation: ptr.To(cfg.LocalStorageCapacityIsolation),
		Labels:                        cfg.NodeLabels, RegisterWithTaints: cfg.RegisterWithTaints, RegisterNode: ptr.To(cfg.RegisterNode),
		MaxPods:        cfg.MaxPods,
		SystemReserved: quantities(cfg.SystemReserved), KubeReserved: quantities(cfg.KubeReserved),
		EvictionHard:              cfg.EvictionHard,
		NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency, NodeStatusReportFrequency: cfg.NodeStatusReportFrequency,
		NodeLeaseDurationSeconds: cfg.NodeLeaseDurationSeconds,
		Host:                     cfg.Host,
		SwapCapacity:             cfg.SwapCapacity,
	}
}

// quantities writes a resource list as the kubelet's flag values.
func quantities(l v1.ResourceList) map[string]string {
	if l == nil {
		return nil
	}
	out := make(map[string]string, len(l))
	for name, q := range l {
		out[string(name)] = q.String()
	}
	return out
}
