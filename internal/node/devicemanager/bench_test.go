package devicemanager

import (
	"context"
	"fmt"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// BenchmarkAllocate is the cost of a pod start's device allocation: one
// container, one device, the plugin's Allocate over its unix socket and
// the checkpoint written, then the pod's release (checkpoint again).
func BenchmarkAllocate(b *testing.B) {
	dir := b.TempDir()
	h := startManager(b, dir, newClock())
	p := servePlugin(b, dir, res, "fake.sock")
	p.devices <- devices(map[string]string{"d0": pluginapi.Healthy, "d1": pluginapi.Healthy})
	if err := register(dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "fake.sock", ResourceName: res}); err != nil {
		b.Fatal(err)
	}
	for {
		if _, a := h.m.Capacity(); a.Name(res, "").Value() == 2 {
			break
		}
		<-h.changed
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		pod := podWith(fmt.Sprint("uid-", i), map[string]int64{res: 1})
		if err := h.m.Allocate(ctx, pod); err != nil {
			b.Fatal(err)
		}
		if err := h.m.Release(string(pod.UID)); err != nil {
			b.Fatal(err)
		}
	}
}
