package nodestatus

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsDefaults(t *testing.T) {
	c := testConfig(t, Options{NodeName: "n", RootDir: "/r"})
	if c.hostname != "n" || c.maxPods != 110 || c.updateFrequency != 10*time.Second || c.reportFrequency != 5*time.Minute ||
		c.leaseDuration != 40 || c.leaseRenewalEvery != 10*time.Second || c.maxImages != 50 || c.version != "v1.37.2" ||
		!c.register || !c.attachDetach || len(c.hard) != 5 {
		t.Errorf("defaults %+v", c)
	}
	// Only the update frequency set: reports follow it (the kubelet's
	// backward-compatible default).
	c = testConfig(t, Options{NodeName: "n", RootDir: "/r", NodeStatusUpdateFrequency: time.Minute})
	if c.reportFrequency != time.Minute {
		t.Errorf("report frequency %v", c.reportFrequency)
	}
	c = testConfig(t, Options{NodeName: "n", RootDir: "/r", EvictionHard: map[string]string{}})
	if len(c.hard) != 0 {
		t.Errorf("empty evictionHard: %v", c.hard)
	}
	c = testConfig(t, Options{NodeName: "n", RootDir: "/r", SystemReserved: map[string]string{"cpu": "0.0005", "memory": "1Gi"},
		KubeReserved: map[string]string{"memory": "1Gi", "pid": "100"}})
	cpu, mem := c.reserved["cpu"], c.reserved["memory"]
	if cpu.MilliValue() != 1 || mem.Value() != 2<<30 {
		t.Errorf("reserved %v", c.reserved)
	}
}

func TestOptionsRefused(t *testing.T) {
	for name, o := range map[string]Options{
		"no name":           {RootDir: "/r"},
		"relative root":     {NodeName: "n", RootDir: "r"},
		"bad IP":            {NodeName: "n", RootDir: "/r", NodeIPs: []string{"10.0.0.300"}},
		"two IPv4":          {NodeName: "n", RootDir: "/r", NodeIPs: []string{"10.0.0.1", "10.0.0.2"}},
		"reserved gpu":      {NodeName: "n", RootDir: "/r", SystemReserved: map[string]string{"nvidia.com/gpu": "1"}},
		"negative reserved": {NodeName: "n", RootDir: "/r", KubeReserved: map[string]string{"memory": "-1Gi"}},
		"bad threshold":     {NodeName: "n", RootDir: "/r", EvictionHard: map[string]string{"memory.available": "x"}},
		"node-role label":   {NodeName: "n", RootDir: "/r", Labels: map[string]string{"node-role.kubernetes.io/worker": ""}},
		"bad label value":   {NodeName: "n", RootDir: "/r", Labels: map[string]string{"a": "b c"}},
		"negative max pods": {NodeName: "n", RootDir: "/r", MaxPods: -1},
	} {
		if _, err := newConfig(o); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "node status: ") {
			t.Errorf("%s: error %q", name, err)
		}
	}
	// Labels a node may set on itself are fine.
	if _, err := newConfig(Options{NodeName: "n", RootDir: "/r", Labels: map[string]string{
		"node.kubernetes.io/instance-type": "x", "example.kubelet.kubernetes.io/a": "b", "node-restriction.kubernetes.io/c": "d",
	}}); err == nil {
		t.Error("node-restriction.kubernetes.io accepted: only the API's own clients may set it")
	}
	if _, err := newConfig(Options{NodeName: "n", RootDir: "/r", Labels: map[string]string{
		"node.kubernetes.io/instance-type": "x", "example.kubelet.kubernetes.io/a": "b", "topology.kubernetes.io/zone": "z",
	}}); err != nil {
		t.Error(err)
	}
}
