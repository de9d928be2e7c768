package podruntime

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podnet"
)

// A ClusterFirst pod on a node without cluster DNS gets the kubelet's
// MissingClusterDNS events when its sandbox is made: one on the node, with
// the kubelet's node message, then one on the pod, which names the pod.
// A sync that makes no sandbox (the next one starts the next sidecar)
// records none; with cluster DNS there is none at all.
func TestMissingClusterDNSEvents(t *testing.T) {
	for _, tc := range []struct {
		clusterDNS []string
		want       []string
	}{
		{nil, []string{
			"node node-1: Warning MissingClusterDNS: " + podnet.MissingClusterDNSMessage,
			`Warning MissingClusterDNS: pod: "p_default(uid-p)". ` + podnet.MissingClusterDNSMessage,
		}},
		{[]string{"10.96.0.10"}, nil},
	} {
		m, _, _, events, _ := newHookFixture(t)
		m.opts.NodeName, m.opts.ClusterDNS = "node-1", tc.clusterDNS
		pod := hookPod()
		for range 2 {
			if _, err := m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod}); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		events.mu.Lock()
		for _, e := range events.events {
			if strings.Contains(e, podnet.ReasonMissingClusterDNS) {
				got = append(got, e)
			}
		}
		events.mu.Unlock()
		if !slices.Equal(got, tc.want) {
			t.Errorf("cluster DNS %v: events\n%q\nwant\n%q", tc.clusterDNS, got, tc.want)
		}
	}
}
