//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// BenchmarkMultiNodeRoundTrip measures the pod network of a 3-node cluster
// on this machine, nodelet's nodes against the upstream kubelet's, in one
// run on one control plane (issue 25's "cross-node pod-to-pod and Service
// round trip").
//
// The set-up: startMultiNode's cluster (hack/cluster.sh NODES=3
// CLUSTER_ADDONS=1: three nodelets, each with its own managed containerd,
// bridge and pod CIDR from its Node, kube-proxy in iptables mode per node
// and CoreDNS); then, on the same control plane, three upstream kubelets
// (startKubeletNodes), each with its own managed containerd (the same
// containerd binary and the same bridge network nodelet writes, on the pod
// CIDR the controller manager gives its Node), root dir, ports and
// --cgroup-root. The kubelets' pods go through the same kube-proxy rules:
// every kube-proxy of the machine writes the same host-wide chains for
// every Service, wherever its endpoints run.
//
// For each agent, a server pod on its second node (test/roundtrip serve,
// a static Go program mounted from the host into busybox:1.35 by a
// hostPath volume, the same bytes for both agents) behind a ClusterIP
// Service, and a client pod on its first node that runs test/roundtrip
// client twice: against the server's pod IP (across the two nodes'
// bridges, through the host's routing), then against the Service's
// ClusterIP (kube-proxy's DNAT on the way). A round is a new TCP
// connection, a request line and its response line, timed in the client
// from the dial until the response is read (the close is not timed);
// each run first waits for an answer, makes the warm-up rounds
// uncounted, then the measured ones, and prints p50 and p99 (nearest
// rank) in microseconds. The client's output is read from its
// container log file on disk, so no API-to-node traffic is needed.
//
// The agents take turns, passes times (NODELET_BENCH_RTT_PASSES, default
// 3), the first agent alternating, with a new client pod each time; the
// figure printed per agent is the median over the passes of each pass's
// p50 and p99. Rounds and warm-up: NODELET_BENCH_RTT_ROUNDS (default
// 5000) and NODELET_BENCH_RTT_WARMUP (default 500). It prints the ratio
// nodelet/kubelet; it asserts none of the figures. Each pass's line also
// has the machine's load average: what else ran (other helpers share the
// two cores) shows in the p99 above all.
func BenchmarkMultiNodeRoundTrip(b *testing.B) {
	began := time.Now()
	cfg := rttConfig{
		passes: envInt(b, "NODELET_BENCH_RTT_PASSES", 3),
		rounds: envInt(b, "NODELET_BENCH_RTT_ROUNDS", 5000),
		warmup: envInt(b, "NODELET_BENCH_RTT_WARMUP", 500),
	}
	toolDir := filepath.Join(shared.work, "roundtrip")
	if err := os.MkdirAll(toolDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := goBuild(shared.repoRoot, filepath.Join(toolDir, "roundtrip"), "./test/roundtrip", true); err != nil {
		b.Fatal(err)
	}
	m := startMultiNode(b, 3)
	admin := benchAdmin(b, m.controlPlane)
	kubelets := startKubeletNodes(b, m, 3)
	ctx := clusterContext(b, 20*time.Minute)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rttNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	eventually(b, time.Minute, "service account "+rttNamespace+"/default", func() error {
		_, err := admin.CoreV1().ServiceAccounts(rttNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	agents := []*rttAgent{
		{label: "nodelet", nodes: m.Nodes, podLogs: filepath.Join(shared.work, "mn-pod-logs")},
		{label: "kubelet", nodes: kubelets.names, podLogs: kubelets.podLogs},
	}
	for _, a := range agents {
		if err := a.serve(ctx, admin, toolDir); err != nil {
			b.Fatalf("%s: %v", a.label, err)
		}
		fmt.Printf("roundtrip bench: %s server %s on %s, Service %s; client on %s\n", a.label, a.serverIP, a.nodes[1], a.clusterIP, a.nodes[0])
	}
	for pass := range cfg.passes {
		order := slices.Clone(agents)
		if pass%2 == 1 {
			slices.Reverse(order)
		}
		for _, a := range order {
			res, err := a.measure(ctx, admin, toolDir, cfg, pass)
			if err != nil {
				b.Fatalf("%s, pass %d: %v", a.label, pass+1, err)
			}
			a.passes = append(a.passes, res)
			fmt.Printf("roundtrip bench: pass %d %s: pod IP p50 %.0f µs p99 %.0f µs; Service p50 %.0f µs p99 %.0f µs (load average after: %s)\n",
				pass+1, a.label, res.podIP.p50, res.podIP.p99, res.service.p50, res.service.p99, loadAverage())
		}
	}
	fmt.Println()
	printRoundTrips(os.Stdout, cfg, agents)
	fmt.Printf("roundtrip bench took %v (3+3 nodes, %d passes)\n", time.Since(began).Round(time.Second), cfg.passes)
	for _, a := range agents {
		pod, svc := a.median()
		b.ReportMetric(pod.p50, a.label+"-podip-p50-us")
		b.ReportMetric(pod.p99, a.label+"-podip-p99-us")
		b.ReportMetric(svc.p50, a.label+"-service-p50-us")
		b.ReportMetric(svc.p99, a.label+"-service-p99-us")
	}
}

// loadAverage is the machine's 1, 5 and 15 minute load averages: the
// other work on the machine, which the figures include.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}

// rttNamespace holds the benchmark's pods and Services.
const rttNamespace = "roundtrip"

// rttConfig is how much BenchmarkMultiNodeRoundTrip measures.
type rttConfig struct{ passes, rounds, warmup int }

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// rttAgent is one agent's three nodes and what the benchmark runs there.
type rttAgent struct {
	label     string
	nodes     []string // client on nodes[0], server on nodes[1]
	podLogs   string   // the nodes' pod logs directory
	serverIP  string
	clusterIP string
	passes    []rttPass
}

// rttPass is one client pod's figures.
type rttPass struct{ podIP, service rttStats }

// rttStats is what test/roundtrip client prints, in microseconds.
type rttStats struct {
	rounds   int
	p50, p99 float64
}

func (a *rttAgent) name(what string) string { return "rtt-" + a.label + "-" + what }

// rttPod is a pod on node running the roundtrip program from toolDir,
// mounted read-only at /rtt.
func rttPod(name, node, toolDir string, labels map[string]string, restart v1.RestartPolicy, command string) *v1.Pod {
	grace := int64(1)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rttNamespace, Labels: labels},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{v1.LabelHostname: node},
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: &grace,
			Volumes: []v1.Volume{{Name: "rtt", VolumeSource: v1.VolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: toolDir},
			}}},
			Containers: []v1.Container{{
				Name: "rtt", Image: "busybox:1.35", ImagePullPolicy: v1.PullIfNotPresent,
				Command:      []string{"sh", "-c", command},
				VolumeMounts: []v1.VolumeMount{{Name: "rtt", MountPath: "/rtt", ReadOnly: true}},
			}},
		},
	}
}

// serve starts the agent's server pod and its Service, and waits until
// the pod is Ready.
func (a *rttAgent) serve(ctx context.Context, c kubernetes.Interface, toolDir string) error {
	labels := map[string]string{"app": a.name("server")}
	pod := rttPod(a.name("server"), a.nodes[1], toolDir, labels, v1.RestartPolicyAlways, "exec /rtt/roundtrip serve -listen :8080")
	pod.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080}}
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	if _, err := c.CoreV1().Pods(rttNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	svc, err := c.CoreV1().Services(rttNamespace).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: a.name("server"), Namespace: rttNamespace},
		Spec:       v1.ServiceSpec{Selector: labels, Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	a.clusterIP = svc.Spec.ClusterIP
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		p, err := c.CoreV1().Pods(rttNamespace).Get(wait, pod.Name, metav1.GetOptions{})
		if err == nil && podReady(p) && p.Status.PodIP != "" {
			a.serverIP = p.Status.PodIP
			return nil
		}
		if err := sleepCtx(wait, 500*time.Millisecond); err != nil {
			return fmt.Errorf("server pod %s not Ready: %w (last: %v)", pod.Name, err, podState(p))
		}
	}
}

func podState(p *v1.Pod) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
}

// measure runs one client pod on the agent's first node, against the pod
// IP and then the Service, and reads its figures from its log file.
func (a *rttAgent) measure(ctx context.Context, c kubernetes.Interface, toolDir string, cfg rttConfig, pass int) (rttPass, error) {
	run := func(label, addr string) string {
		return fmt.Sprintf("/rtt/roundtrip client -addr %s -rounds %d -warmup %d -wait 60s -label %s", addr, cfg.rounds, cfg.warmup, label)
	}
	command := run("podIP", a.serverIP+":8080") + " && " + run("service", a.clusterIP+":80")
	name := a.name("client-" + strconv.Itoa(pass+1))
	pod := rttPod(name, a.nodes[0], toolDir, map[string]string{"app": a.name("client")}, v1.RestartPolicyNever, command)
	created, err := c.CoreV1().Pods(rttNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return rttPass{}, err
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var p *v1.Pod
	for {
		p, err = c.CoreV1().Pods(rttNamespace).Get(wait, name, metav1.GetOptions{})
		if err == nil && (p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed) {
			break
		}
		if err := sleepCtx(wait, 500*time.Millisecond); err != nil {
			return rttPass{}, fmt.Errorf("client pod %s did not finish: %w (last: %v)", name, err, podState(p))
		}
	}
	// The runtime copies the container's output into the log file apart
	// from the exit the agent reports: the last line may land a moment
	// after the pod has Succeeded.
	var res rttPass
	var lines []string
	for {
		var seen int
		lines, err = containerLog(a.podLogs, created, "rtt")
		for _, l := range lines {
			label, st, ok := parseRoundTrip(l)
			switch {
			case !ok:
				continue
			case label == "podIP":
				res.podIP, seen = st, seen|1
			case label == "service":
				res.service, seen = st, seen|2
			}
		}
		if seen == 3 {
			break
		}
		if p.Status.Phase == v1.PodFailed || sleepCtx(wait, 500*time.Millisecond) != nil {
			return rttPass{}, errors.Join(fmt.Errorf("client pod %s %s without the figures of both targets; its output: %q", name, p.Status.Phase, lines), err)
		}
	}
	zero := int64(0)
	if err := c.CoreV1().Pods(rttNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return rttPass{}, err
	}
	return res, nil
}

// containerLog is the messages of a container's log files (the CRI log
// format: time, stream, tag, message) under the pod's log directory.
func containerLog(dir string, pod *v1.Pod, container string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container, "*.log"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no log file of %s/%s in %s (%v)", pod.Name, container, dir, err)
	}
	var out []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return out, err
		}
		sc := bufio.NewScanner(io.LimitReader(fh, 1<<20))
		for sc.Scan() {
			if parts := strings.SplitN(sc.Text(), " ", 4); len(parts) == 4 {
				out = append(out, parts[3])
			}
		}
		fh.Close()
	}
	return out, nil
}

// parseRoundTrip reads a line test/roundtrip client prints.
func parseRoundTrip(line string) (label string, st rttStats, ok bool) {
	rest, ok := strings.CutPrefix(line, "roundtrip ")
	if !ok {
		return "", st, false
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(rest) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	var err1, err2, err3 error
	st.rounds, err1 = strconv.Atoi(kv["rounds"])
	st.p50, err2 = strconv.ParseFloat(kv["p50_us"], 64)
	st.p99, err3 = strconv.ParseFloat(kv["p99_us"], 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", st, false
	}
	return kv["label"], st, true
}

// median is the median over the passes of each pass's p50 and p99 (the
// lower middle of an even count), per target.
func (a *rttAgent) median() (podIP, service rttStats) {
	pick := func(get func(rttPass) float64) float64 {
		var v []float64
		for _, p := range a.passes {
			v = append(v, get(p))
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[(len(v)-1)/2]
	}
	podIP = rttStats{p50: pick(func(p rttPass) float64 { return p.podIP.p50 }), p99: pick(func(p rttPass) float64 { return p.podIP.p99 })}
	service = rttStats{p50: pick(func(p rttPass) float64 { return p.service.p50 }), p99: pick(func(p rttPass) float64 { return p.service.p99 })}
	return podIP, service
}

func printRoundTrips(w io.Writer, cfg rttConfig, agents []*rttAgent) {
	fmt.Fprintf(w, "cluster mode, one control plane (hack/cluster.sh): 3 nodes of each agent, each node its own managed containerd %d.x + runc\n", shared.containerd.Config().Major)
	fmt.Fprintf(w, "and CNI bridge on its Node's pod CIDR; Services through kube-proxy (iptables mode); the agents take turns, the first alternating\n")
	fmt.Fprintf(w, "cross-node TCP round trip (connect, request line, response line; the close untimed), client pod on node 1, server pod on node 2;\n")
	fmt.Fprintf(w, "%d measured rounds after %d warm-up rounds per run, median over %d passes of each pass's percentile, microseconds\n",
		cfg.rounds, cfg.warmup, cfg.passes)
	fmt.Fprintf(w, "%-22s %12s %12s %9s\n", "", agents[0].label, agents[1].label, "ratio")
	n0, s0 := agents[0].median()
	n1, s1 := agents[1].median()
	row := func(what string, x, y float64) {
		ratio := "-"
		if y > 0 {
			ratio = fmt.Sprintf("%.2f×", x/y)
		}
		fmt.Fprintf(w, "%-22s %12.0f %12.0f %9s\n", what, x, y, ratio)
	}
	row("pod IP p50", n0.p50, n1.p50)
	row("pod IP p99", n0.p99, n1.p99)
	row("Service p50", s0.p50, s1.p50)
	row("Service p99", s0.p99, s1.p99)
}

// kubeletNodes are upstream kubelets joined to a multiNode's control plane
// as nodes of their own, each beside its own managed containerd.
type kubeletNodes struct {
	names    []string
	podLogs  string
	agents   []*clusterAgent
	runtimes []*containerd.Manager
	stop     context.CancelFunc // stops the runtimes
}

// multiNodeKubeletBridgePrefix names the kubelet nodes' bridges.
const multiNodeKubeletBridgePrefix = "nlmnke2e"

// startKubeletNodes starts n upstream kubelets (nle2e-mn-kl-1..n) on m's
// control plane, each as hack/cluster.sh starts a nodelet node: the
// cluster's KubeletConfiguration (as kubeadm writes it, clusterDNS
// included) plus kubeletMachineConfig, joined through the bootstrap
// token, its own root dir, ports and --cgroup-root (cgroupRoot), and its
// own managed containerd (the tests' containerd binary, mirroring the
// shared registry, which holds busybox and pause). Its network is the
// bridge network nodelet writes (containerd.Manager.SetPodCIDRs), for the
// pod CIDR the controller manager gives its Node, written once the Node
// has one, as a CNI installer would. Its node IP is the gateway of the
// shared runtime's bridge (conformanceNodeIP): the kubelet takes no
// loopback node IP. The nodes are torn down when the benchmark ends:
// their pods deleted through the API while the kubelets run, then the
// kubelets, runtimes, Nodes, bridges and cgroups.
func startKubeletNodes(b *testing.B, m *multiNode, n int) *kubeletNodes {
	bin := upstreamKubelet(b)
	base, err := os.ReadFile(m.NodeletConfig)
	if err != nil {
		b.Fatal(err)
	}
	work := filepath.Join(shared.work, "mnkl")
	k := &kubeletNodes{podLogs: filepath.Join(work, "pod-logs")}
	if err := os.MkdirAll(k.podLogs, 0o755); err != nil {
		b.Fatal(err)
	}
	nodeIP := conformanceNodeIP(b)
	for i := 1; i <= n; i++ {
		name := multiNodeName + "-kl-" + strconv.Itoa(i)
		k.names = append(k.names, name)
		makeCgroupRoot(b, "/"+name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	b.Cleanup(func() { k.down(b, m.Admin) })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i, name := range k.names {
		root := filepath.Join(work, strconv.Itoa(i+1))
		cfg := containerd.DefaultConfig(root)
		cfg.BridgeName = multiNodeKubeletBridgePrefix + strconv.Itoa(i)
		cfg.PodCIDR = "" // the Node's, once it has one
		cfg.Mirror = shared.registry.Addr()
		cfg.Env, cfg.Binary = os.Environ(), shared.containerdBin
		rt := containerd.New(cfg, containerd.Deps{Log: log})
		if err := rt.Start(ctx); err != nil {
			b.Fatalf("%s's containerd: %v", name, err)
		}
		k.runtimes = append(k.runtimes, rt)
		ports, err := freePorts(3)
		if err != nil {
			b.Fatal(err)
		}
		config := filepath.Join(root, "kubelet-config.yaml")
		machine := kubeletMachineConfig(cfg.Endpoint(), k.podLogs, ports[0], ports[1], ports[2], "/"+name)
		if err := os.WriteFile(config, append(slices.Clone(base), machine...), 0o600); err != nil {
			b.Fatal(err)
		}
		kroot := filepath.Join(root, "kubelet")
		a := &clusterAgent{label: "kubelet", node: name, work: root, logPath: benchLogPath("multinode-" + name)}
		a.command = func() *exec.Cmd {
			return exec.Command(bin, "--config", config, "--root-dir", kroot, "--cert-dir", filepath.Join(kroot, "pki"),
				"--bootstrap-kubeconfig", m.BootstrapKubeconfig, "--kubeconfig", filepath.Join(kroot, "kubelet.kubeconfig"),
				"--hostname-override", name, "--node-ip", nodeIP, "--v", kubeletVerbosity())
		}
		if err := a.start(); err != nil {
			b.Fatal(err)
		}
		k.agents = append(k.agents, a)
		fmt.Printf("roundtrip bench: kubelet node %s (log %s, containerd %s)\n", name, a.logPath, cfg.Dir)
	}
	wait, cancelWait := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelWait()
	for i, name := range k.names {
		var cidr string
		for cidr == "" {
			node, err := m.Admin.CoreV1().Nodes().Get(wait, name, metav1.GetOptions{})
			if err == nil {
				cidr = node.Spec.PodCIDR
			}
			if cidr == "" {
				if err := sleepCtx(wait, 500*time.Millisecond); err != nil {
					b.Fatal(k.agents[i].why(fmt.Errorf("node %s has no pod CIDR: %w", name, err)))
				}
			}
		}
		if _, err := k.runtimes[i].SetPodCIDRs([]string{cidr}); err != nil {
			b.Fatalf("%s's network on %s: %v", name, cidr, err)
		}
		if err := waitNodeSchedulable(wait, m.Admin, name); err != nil {
			b.Fatal(k.agents[i].why(fmt.Errorf("node %s not Ready: %w", name, err)))
		}
		fmt.Printf("roundtrip bench: kubelet node %s Ready, pod CIDR %s\n", name, cidr)
	}
	return k
}

// down deletes the kubelet nodes' pods through the API while the kubelets
// run (they stop them and confirm), then stops the kubelets, removes what
// is left in their runtimes, stops the runtimes, deletes the Nodes and
// removes the mounts below the nodes' directories and their bridges.
func (k *kubeletNodes) down(t testing.TB, admin kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	one := int64(1)
	for _, name := range k.names {
		sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + name}
		pods, err := admin.CoreV1().Pods("").List(ctx, sel)
		if err != nil {
			t.Logf("pods of %s: %v", name, err)
			continue
		}
		for _, p := range pods.Items {
			_ = admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &one})
		}
	}
	for _, name := range k.names {
		for ctx.Err() == nil {
			pods, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
			if err == nil && len(pods.Items) == 0 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	for _, a := range k.agents {
		if err := a.stop(); err != nil {
			t.Errorf("%s: %v", a.node, err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	for _, rt := range k.runtimes {
		c, err := cri.Dial(ctx, rt.Config().Endpoint(), cri.DefaultTimeouts(), log)
		if err != nil {
			t.Logf("runtime %s: %v", rt.Config().Dir, err)
			continue
		}
		removeAllPods(c)
		c.Close()
	}
	k.stop()
	for _, rt := range k.runtimes {
		<-rt.Done()
	}
	for _, name := range k.names {
		zero := int64(0)
		pods, _ := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if pods != nil {
			for _, p := range pods.Items {
				_ = admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
		}
		if err := admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete node %s: %v", name, err)
		}
	}
	for i, a := range k.agents {
		if err := unmountBelow(a.work); err != nil {
			t.Errorf("unmount below %s: %v", a.work, err)
		}
		exec.Command("ip", "link", "del", multiNodeKubeletBridgePrefix+strconv.Itoa(i)).Run()
	}
}
