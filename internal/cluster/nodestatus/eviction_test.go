package nodestatus

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/node/eviction"
)

func TestEvictionReservation(t *testing.T) {
	hard, err := eviction.ParseThresholds(eviction.Config{EvictionHard: map[string]string{"memory.available": "5%", "nodefs.available": "1Gi", "imagefs.available": "15%"}})
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig(t, testOptions())
	node, _ := c.initialNode(testFacts(t0))
	r := eviction.Reservation(hard, node.Status.Capacity)
	mem, eph := r[v1.ResourceMemory], r[v1.ResourceEphemeralStorage]
	if len(r) != 2 || mem.Value() != int64(float64(8<<30)*float64(float32(0.05))) || eph.Value() != 1<<30 {
		t.Errorf("reservation %v", r)
	}
}
