package podruntime

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/podnet"
)

// A ClusterFirst pod on a node without cluster DNS gets the kubelet's
// MissingClusterDNS events when its sandbox is made: one on the node, with
// the kubelet's node message, then one on the pod, which names the pod.
// A sync that makes no sandbox records none; with cluster DNS there is
// none at all.
func TestMissingClusterDNSEvents(t *testing.T) {
	for _, tc := range []struct {
		clusterDNS []string
		want       []string
	}{
		{nil, []string{
			"node node-1: Warning MissingClusterDNS: " + podnet.MissingClusterDNSMessage,
			`Warning MissingClusterDNS: pod: "web-node_default(uid-1)". ` + podnet.MissingClusterDNSMessage,
		}},
		{[]string{"10.96.0.10"}, nil},
	} {
		rs, is := critest.NewFakeRuntimeService(), critest.NewFakeImageService()
		is.SetFakeImageSize(1)
		log := slog.New(slog.DiscardHandler)
		events := &eventLog{}
		clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
		m := New(cri.New(rs, is, "fake", cri.DefaultTimeouts(), log), Options{NodeName: "node-1", ClusterDNS: tc.clusterDNS},
			Deps{Clock: clk, Log: log, Recorder: events, Status: statusmanager.New(nil)})
		pod := testPod()
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
