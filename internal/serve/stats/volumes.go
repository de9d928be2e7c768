package stats

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Volumes gives the stats of the volumes the provider does not measure
// itself: those a driver reports (CSI's NodeGetVolumeStats).
type Volumes interface {
	// PodVolumeStats are the stats of a pod's volumes.
	PodVolumeStats(podUID string) []v1alpha1.VolumeStats
	// ClaimVolumeStats are the stats of the volumes of
	// persistentVolumeClaims, one per claim.
	ClaimVolumeStats() []v1alpha1.VolumeStats
}

// WithVolumes adds the volumes v reports to each pod's volume stats.
func WithVolumes(v Volumes) Option { return func(p *Provider) { p.volumes = v } }

// VolumeMetrics is the kubelet's volume stats collector: the
// kubelet_volume_stats_* gauges of each persistentVolumeClaim's volume,
// labelled namespace and persistentvolumeclaim.
type VolumeMetrics struct {
	volumes                                                  Volumes
	capacity, available, used, inodes, inodesFree, inodesUse *prometheus.Desc
}

// NewVolumeMetrics returns the collector over v.
func NewVolumeMetrics(v Volumes) *VolumeMetrics {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("kubelet_volume_stats_"+name, help, []string{"namespace", "persistentvolumeclaim"}, nil)
	}
	return &VolumeMetrics{
		volumes:    v,
		capacity:   desc("capacity_bytes", "[ALPHA] Capacity in bytes of the volume"),
		available:  desc("available_bytes", "[ALPHA] Number of available bytes in the volume"),
		used:       desc("used_bytes", "[ALPHA] Number of used bytes in the volume"),
		inodes:     desc("inodes", "[ALPHA] Maximum number of inodes in the volume"),
		inodesFree: desc("inodes_free", "[ALPHA] Number of free inodes in the volume"),
		inodesUse:  desc("inodes_used", "[ALPHA] Number of used inodes in the volume"),
	}
}

func (m *VolumeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.capacity, m.available, m.used, m.inodes, m.inodesFree, m.inodesUse} {
		ch <- d
	}
}

func (m *VolumeMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, v := range m.volumes.ClaimVolumeStats() {
		if v.PVCRef == nil {
			continue
		}
		for _, g := range []struct {
			desc  *prometheus.Desc
			value *uint64
		}{
			{m.capacity, v.CapacityBytes}, {m.available, v.AvailableBytes}, {m.used, v.UsedBytes},
			{m.inodes, v.Inodes}, {m.inodesFree, v.InodesFree}, {m.inodesUse, v.InodesUsed},
		} {
			if g.value != nil {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(*g.value), v.PVCRef.Namespace, v.PVCRef.Name)
			}
		}
	}
}
