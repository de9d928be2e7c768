//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/serve/server"
)

// A runtime whose CNI configuration directory is empty reports its pod
// network not ready. A standalone nodelet on it then creates no sandbox
// for a pod on the pod network: the pod is Pending with the kubelet's
// NetworkNotReady event, again at each retry, while a pod on the host
// network runs. Once a network configuration is written the first pod
// starts with an IP from it. When the configuration goes away again, the
// running pod is not stopped: its container keeps running.
func TestNetworkNotReadyHoldsPodsBack(t *testing.T) {
	const name = "netready"
	bridge, cidrText := laneNetwork("nlnetready0", "10.247.9.0/24")
	cidr := netip.MustParsePrefix(cidrText)
	ctx := context.Background()
	confDir := filepath.Join(shared.work, "cni-"+name)
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rt := startEmptyNetworkRuntime(t, name, bridge, confDir)

	// A short --sync-frequency: the event after the network went away comes
	// at the running pod's next periodic sync.
	n, manifests, _ := lifecycleNodelet(t, name, "--container-runtime-endpoint", rt.endpoint, "--sync-frequency", "10s")
	sleeper := `
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`
	writeManifest(t, manifests, "held.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: held}\nspec:"+sleeper)
	writeManifest(t, manifests, "hostnet.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: hostnet}\nspec:\n  hostNetwork: true"+sleeper)
	api := n.api(t)

	waitPod(t, api, "hostnet-e2e", 2*time.Minute, "Running on the host network", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodRunning {
			return errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	const want = "network is not ready: container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:"
	notReady := podEvent("held-e2e", v1.EventTypeWarning, "NetworkNotReady", want)
	// Count 2: the pod worker tried again after its back-off.
	waitEvent(t, api, 2*time.Minute, "NetworkNotReady for held-e2e, twice", func(e server.EventItem) bool {
		return notReady(e) && e.Count >= 2
	})
	if p, err := api.pod("held-e2e"); err != nil || p.Status.Phase != v1.PodPending || p.Status.PodIP != "" {
		t.Errorf("held-e2e while the network is not ready: %v %+v, want Pending without an IP", err, p)
	}
	if sbs := sandboxesOf(t, rt.Client, "held-e2e"); len(sbs) != 0 {
		t.Errorf("held-e2e has %d sandboxes while the network is not ready", len(sbs))
	}

	conf := writeNetwork(t, confDir, bridge, cidr, filepath.Join(shared.work, "ipam-"+name))
	held := waitPod(t, api, "held-e2e", 2*time.Minute, "Running once the network is ready", func(p *v1.Pod) error {
		if p.Status.Phase != v1.PodRunning || p.Status.PodIP == "" {
			return errorf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
	if ip, err := netip.ParseAddr(held.Status.PodIP); err != nil || !cidr.Contains(ip) {
		t.Errorf("held-e2e's IP %q is not from the network's %s", held.Status.PodIP, cidr)
	}
	running, err := runningContainer(ctx, rt.Client, "held-e2e", "main")
	if err != nil {
		t.Fatal(err)
	}

	// The network goes away under the running pod: nodelet says so at its
	// syncs and stops nothing.
	removed := time.Now()
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, api, 2*time.Minute, "NetworkNotReady for the running held-e2e", func(e server.EventItem) bool {
		return notReady(e) && e.LastTimestamp.After(removed)
	})
	if now, err := runningContainer(ctx, rt.Client, "held-e2e", "main"); err != nil || now.Id != running.Id {
		t.Errorf("held-e2e's container after the network went away: %v %v, want %s still running", err, now, running.Id)
	}
	if sbs := sandboxesOf(t, rt.Client, "held-e2e"); len(sbs) != 1 || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("held-e2e's sandboxes after the network went away: %+v, want one ready", sbs)
	}
	// Back, so that the pod's network can be torn down at the end.
	writeNetwork(t, confDir, bridge, cidr, filepath.Join(shared.work, "ipam-"+name))
}

// netRuntime is a managed containerd of a test's own.
type netRuntime struct {
	*cri.Client
	endpoint string
}

// startEmptyNetworkRuntime starts a containerd reading confDir, which
// nodelet's bridge network is not written into (no pod CIDR), pulling
// through the shared registry. When the test ends its pods are removed,
// it is stopped and the bridge deleted.
func startEmptyNetworkRuntime(t *testing.T, name, bridge, confDir string) netRuntime {
	t.Helper()
	cfg := containerd.DefaultConfig(filepath.Join(shared.work, "rt-"+name))
	cfg.BridgeName, cfg.PodCIDR, cfg.CNIConfDir, cfg.Mirror = bridge, "", confDir, shared.registry.Addr()
	cfg.Env, cfg.Binary = os.Environ(), shared.containerdBin
	ctx, cancel := context.WithCancel(context.Background())
	m := containerd.New(cfg, containerd.Deps{})
	if err := m.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	rt, err := cri.Dial(ctx, cfg.Endpoint(), cri.DefaultTimeouts(), nil)
	if err != nil {
		cancel()
		<-m.Done()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		removeAllPods(rt)
		rt.Close()
		cancel()
		<-m.Done()
		exec.Command("ip", "link", "del", bridge).Run()
	})
	return netRuntime{Client: rt, endpoint: cfg.Endpoint()}
}

// writeNetwork writes a bridge network on cidr into confDir, whole (a
// rename), and returns its path.
func writeNetwork(t *testing.T, confDir, bridge string, cidr netip.Prefix, ipamDir string) string {
	t.Helper()
	conf := []byte(`{
  "cniVersion": "1.0.0",
  "name": "netready",
  "plugins": [
    {"type": "bridge", "bridge": "` + bridge + `", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + cidr.String() + `"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "` + ipamDir + `"}}
  ]
}
`)
	path := filepath.Join(confDir, "05-netready.conflist")
	tmp := filepath.Join(confDir, ".05-netready.tmp")
	if err := os.WriteFile(tmp, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// sandboxesOf are the runtime's sandboxes of the pod named pod.
func sandboxesOf(t *testing.T, rt *cri.Client, pod string) []*runtimeapi.PodSandbox {
	t.Helper()
	sbs, err := rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{podspec.LabelPodName: pod}})
	if err != nil {
		t.Fatal(err)
	}
	return sbs
}
