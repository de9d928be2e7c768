// Command hollowkubelet is the upstream arm of make bench-hollow (test/e2e,
// BenchmarkHollow): kubemark's hollow kubelet (k8s.io/kubernetes
// pkg/kubemark, the kubelet of this release with a fake CRI runtime, fake
// cAdvisor, stub container manager and fake mounter inside) joined to a
// cluster as a node, as `kubemark --morph=kubelet` does, with two
// differences that make it do the work a kubelet does:
//
//   - it sends events: kubemark gives the kubelet a FakeRecorder (events go
//     nowhere); here the kubelet makes its own recorder, sending to the API
//     server through a client limited by eventRecordQPS/eventBurst, as
//     cmd/kubelet does;
//   - it keeps the kubelet's defaults where kubemark changes them in ways
//     that cost requests or CPU: syncFrequency (kubemark 10 s, the kubelet
//     1 m), kubeAPIQPS/Burst (kubemark 10/20, the kubelet 50/100); it binds
//     its ports to 127.0.0.1 and reports 127.0.0.1 as its address, rather
//     than every interface.
//
// Everything it writes is under -root-dir: its root directory (the
// kubelet's, with pod directories and logs), the fake runtime's socket and
// the certificates of -cert-dir's default. It runs until killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"
)

type config struct {
	name, rootDir, certDir, kubeconfig, bootstrapKubeconfig string
	port, readOnlyPort, maxPods                             int
	events                                                  bool
}

func main() {
	var c config
	klog.InitFlags(nil)
	flag.StringVar(&c.name, "name", "", "Node name")
	flag.StringVar(&c.rootDir, "root-dir", "", "Directory of all it writes (must exist, not group- or world-writable)")
	flag.StringVar(&c.certDir, "cert-dir", "", "Directory of the client certificate (default: -root-dir/pki)")
	flag.StringVar(&c.kubeconfig, "kubeconfig", "", "Kubeconfig of the node's credentials (written by TLS bootstrapping when -bootstrap-kubeconfig is given)")
	flag.StringVar(&c.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "Kubeconfig whose credentials request the node's client certificate")
	flag.IntVar(&c.port, "port", 0, "Port of the kubelet API, on 127.0.0.1")
	flag.IntVar(&c.readOnlyPort, "read-only-port", 0, "Read-only port, on 127.0.0.1 (0: none)")
	flag.IntVar(&c.maxPods, "max-pods", 110, "Pods the node admits")
	flag.BoolVar(&c.events, "events", true, "Send events to the API server (kubemark does not)")
	flag.Parse()
	if c.name == "" || c.rootDir == "" || c.kubeconfig == "" || c.port == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: hollowkubelet -name NODE -root-dir DIR -kubeconfig FILE [-bootstrap-kubeconfig FILE] -port PORT [-read-only-port PORT]")
		os.Exit(2)
	}
	if c.certDir == "" {
		c.certDir = filepath.Join(c.rootDir, "pki")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "hollowkubelet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	st, err := os.Stat(c.rootDir)
	if err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	if !st.IsDir() || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("root dir %s: not a directory of ours alone (%v)", c.rootDir, st.Mode())
	}
	if c.bootstrapKubeconfig != "" {
		if err := bootstrap.LoadClientCert(ctx, c.kubeconfig, c.bootstrapKubeconfig, c.certDir, types.NodeName(c.name)); err != nil {
			return fmt.Errorf("TLS bootstrapping: %w", err)
		}
	}
	flags, kc := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: c.name, KubeletPort: c.port, KubeletReadOnlyPort: c.readOnlyPort, MaxPods: c.maxPods,
		NodeLabels: map[string]string{},
	})
	if err := relocate(c.rootDir, flags, kc); err != nil {
		return err
	}
	kc.Address = "127.0.0.1"
	flags.NodeIP = "127.0.0.1"
	kc.SyncFrequency.Duration = time.Minute

	restConfig, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// The kubelet's three clients (cmd/kubelet/app.buildKubeletClientConfig
	// and run): the main one, the heartbeat's (no rate limit, a timeout of
	// the shorter of the status update period and the lease duration), and
	// the events'.
	restConfig.UserAgent = "hollow-kubelet"
	restConfig.ContentType = kc.ContentType
	restConfig.QPS, restConfig.Burst = float32(kc.KubeAPIQPS), int(kc.KubeAPIBurst)
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	heartbeatConfig := rest.CopyConfig(restConfig)
	heartbeatConfig.Timeout = min(kc.NodeStatusUpdateFrequency.Duration, time.Duration(kc.NodeLeaseDurationSeconds)*time.Second)
	heartbeatConfig.QPS = -1
	heartbeat, err := clientset.NewForConfig(heartbeatConfig)
	if err != nil {
		return err
	}
	eventConfig := rest.CopyConfig(restConfig)
	eventConfig.QPS, eventConfig.Burst = float32(kc.EventRecordQPS), int(kc.EventBurst)
	events, err := clientset.NewForConfig(eventConfig)
	if err != nil {
		return err
	}

	endpoint := "unix://" + filepath.Join(c.rootDir, "runtime.sock")
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("fake runtime: %w", err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("runtime client: %w", err)
	}

	hk := kubemark.NewHollowKubelet(flags, kc, client, heartbeat, &testing.Fake{NodeName: c.name},
		fakeRuntime.ImageService, runtimeService, cm.NewStubContainerManager())
	if c.events {
		// Nil: RunKubelet makes the kubelet's own recorder, sending
		// through EventClient.
		hk.KubeletDeps.Recorder = nil
		hk.KubeletDeps.EventClient = events.CoreV1()
	}
	go hk.Run(ctx) // it never returns: RunKubelet starts the kubelet's loops and Run waits forever
	<-ctx.Done()
	return nil
}

// relocate moves the kubelet's directories under rootDir. kubemark makes
// them in a directory of its own in /tmp (test/utils.MakeTempDirOrDie
// writes "/tmp" where the base directory is "", whatever $TMPDIR says),
// which outlived the benchmark with the kubelet's state in it: that
// directory is removed (it holds only the two empty directories kubemark
// just made) and the root, static pod and pod log directories are made
// in rootDir/kubelet instead.
func relocate(rootDir string, flags *options.KubeletFlags, kc *kubeletconfig.KubeletConfiguration) error {
	made := flags.RootDirectory
	if !strings.HasPrefix(made, "/tmp/hollow-kubelet.") {
		return fmt.Errorf("kubemark's root dir %q: not the temporary directory it was expected to make", made)
	}
	if err := os.RemoveAll(made); err != nil {
		return err
	}
	root := filepath.Join(rootDir, "kubelet")
	flags.RootDirectory = root
	kc.StaticPodPath = filepath.Join(root, "static-pods")
	kc.PodLogsDir = filepath.Join(root, "pod-logs")
	for _, dir := range []string{kc.StaticPodPath, kc.PodLogsDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	return nil
}
