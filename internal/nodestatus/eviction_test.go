package nodestatus

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestParseThresholds(t *testing.T) {
	got, err := parseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "0%", "pid.available": "100%"})
	if err != nil {
		t.Fatal(err)
	}
	// 0% and 100% are ignored, as the kubelet does.
	if len(got) != 2 || got[0].signal != "memory.available" || got[0].quantity.String() != "100Mi" ||
		got[1].signal != "nodefs.available" || got[1].percentage != float32(0.1) {
		t.Errorf("thresholds %+v", got)
	}
	for _, bad := range []map[string]string{
		{"memory.free": "1Gi"},
		{"memory.available": "-1Gi"},
		{"memory.available": "0"},
		{"nodefs.available": "101%"},
		{"nodefs.available": "-5%"},
		{"nodefs.available": "ten%"},
		{"memory.available": "lots"},
	} {
		if _, err := parseThresholds(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestConditionsMet(t *testing.T) {
	thresholds, err := parseThresholds(map[string]string{
		"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.inodesFree": "5%", "pid.available": "1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		obs  map[string]observation
		want []v1.NodeConditionType
	}{
		{"nothing observed", nil, nil},
		{"plenty", map[string]observation{
			"memory.available": {available: 1 << 30, capacity: 8 << 30},
			"nodefs.available": {available: 50, capacity: 100},
			"pid.available":    {available: 30000, capacity: 32768},
		}, nil},
		{"memory exactly at the threshold is not below it", map[string]observation{
			"memory.available": {available: 100 << 20, capacity: 8 << 30},
		}, nil},
		{"memory below", map[string]observation{
			"memory.available": {available: 100<<20 - 1, capacity: 8 << 30},
		}, []v1.NodeConditionType{v1.NodeMemoryPressure}},
		{"nodefs below 10%", map[string]observation{
			"nodefs.available": {available: 9, capacity: 100},
		}, []v1.NodeConditionType{v1.NodeDiskPressure}},
		{"imagefs inodes and pids", map[string]observation{
			"imagefs.inodesFree": {available: 4, capacity: 100},
			"pid.available":      {available: 999, capacity: 32768},
		}, []v1.NodeConditionType{v1.NodeDiskPressure, v1.NodePIDPressure}},
	} {
		got := conditionsMet(thresholds, tc.obs)
		if len(got) != len(tc.want) {
			t.Errorf("%s: met %v, want %v", tc.name, got, tc.want)
			continue
		}
		for _, c := range tc.want {
			if !got[c] {
				t.Errorf("%s: met %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

func TestPressureTransitionPeriod(t *testing.T) {
	p := newPressure(5 * time.Minute)
	met := map[v1.NodeConditionType]bool{v1.NodeDiskPressure: true}
	if mem, disk, pid := p.update(met, t0); mem || !disk || pid {
		t.Errorf("at t0: %v %v %v", mem, disk, pid)
	}
	if _, disk, _ := p.update(nil, t0.Add(5*time.Minute-time.Second)); !disk {
		t.Error("disk pressure dropped within the transition period")
	}
	if _, disk, _ := p.update(nil, t0.Add(5*time.Minute)); disk {
		t.Error("disk pressure kept after the transition period")
	}
}

func TestEvictionReservation(t *testing.T) {
	hard, err := parseThresholds(map[string]string{"memory.available": "5%", "nodefs.available": "1Gi", "imagefs.available": "15%"})
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	r := evictionReservation(hard, node.Status.Capacity)
	mem, eph := r[v1.ResourceMemory], r[v1.ResourceEphemeralStorage]
	if len(r) != 2 || mem.Value() != int64(float64(8<<30)*float64(float32(0.05))) || eph.Value() != 1<<30 {
		t.Errorf("reservation %v", r)
	}
}
