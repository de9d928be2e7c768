package dra

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/clock"
)

// BenchmarkPrepareCleanup is one pod's claim prepared (an API read, one
// NodePrepareResources over a unix socket, two checkpoint writes) and
// unprepared (one NodeUnprepareResources, one checkpoint write), as a pod
// start and its end cost.
func BenchmarkPrepareCleanup(b *testing.B) {
	root := b.TempDir()
	plugins := NewPlugins(clock.RealClock{}, nil)
	drv := startFakeDriver(b, shortDir(b), "gpu.example.com")
	if err := plugins.RegisterPlugin(context.Background(), drv.name, drv.socket, []string{drapb.DRAPluginService}); err != nil {
		b.Fatal(err)
	}
	api := &fakeClaims{claims: map[string]*resourceapi.ResourceClaim{}}
	m, err := NewManager(root, Deps{Plugins: plugins, Claims: api, Recorder: &fakeRecorder{}, Log: slog.New(slog.DiscardHandler), Clock: clock.RealClock{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		pod := podUsing(fmt.Sprint("p", i), "c")
		pod.Spec.ResourceClaims[0].ResourceClaimName = ptrTo(fmt.Sprint("c", i))
		pod.Spec.Containers[0].Resources.Claims[0].Name = "rc-c"
		claim := allocated(fmt.Sprint("c", i), drv.name, pod)
		claim.UID = types.UID(fmt.Sprint("uid", i))
		api.add(claim)
		if _, err := m.Prepare(ctx, pod); err != nil {
			b.Fatal(err)
		}
		if err := m.Cleanup(ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
}

func ptrTo(s string) *string { return &s }
