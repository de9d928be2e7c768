//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/test/conformance/images"
)

// The upstream conformance suites against nodelet (issue 13): e2e_node.test
// and e2e.test of the release of the control plane, built by
// hack/build-upstream.sh, run through the ginkgo CLI (parallel processes)
// against a control plane of their own (hack/cluster.sh) joined by one
// agent: nodelet, or the upstream kubelet of the same release in its place,
// on the shared containerd, whose registry mirror serves the suites' images
// (test/conformance/images builds them). What runs is the suite's
// NodeConformance selection less test/conformance/skip.txt; for
// e2e-network, e2e.test's test/e2e/network Conformance specs, on a cluster
// with hack/cluster.sh's add-ons (kube-proxy, CoreDNS, the API relay).
//
// TestConformanceSlice (part of make test) runs the specs of
// test/conformance/slice.txt against nodelet. TestConformance (make
// conformance) runs the whole selection of both suites against both agents
// and writes the reports under $NODELET_CONFORMANCE_OUT.

const (
	// conformanceLabels is the NodeConformance selection, as the issue
	// counts it: no serial, slow, flaky or disruptive spec, and no spec of
	// an opt-in feature.
	conformanceLabels = "NodeConformance && !Serial && !Slow && !Flaky && !Disruptive && !/^Feature:/"
	// networkLabels is the selection of test/e2e/network: its Conformance
	// specs (none is NodeConformance), under the same exclusions. They
	// judge a node through Services and DNS, so their cluster runs
	// kube-proxy and CoreDNS.
	networkLabels = "Conformance && !Serial && !Slow && !Flaky && !Disruptive && !/^Feature:/"
	// conformanceProcs is how many specs run at once (ginkgo processes).
	// Upstream's node e2e jobs run 8; most specs wait on containers.
	conformanceProcs = 12
)

// conformanceSuite is one upstream test binary and how it is pointed at a
// cluster.
type conformanceSuite struct {
	name string // e2e_node, e2e, e2e-network
	// binary is the test binary, less .test; empty: name.
	binary string
	// labels is the label filter; empty: conformanceLabels.
	labels string
	// files restricts the specs to source files (ginkgo --focus-file);
	// empty: all.
	files string
	// devicePluginFiles are the source files (a ginkgo --focus-file
	// pattern) whose specs run a device plugin inside the suite's process
	// at upstream's fixed /var/lib/kubelet/device-plugins (the kubelet's
	// whatever its --root-dir): they run apart, where that directory is
	// the agent's (devicePluginDir).
	devicePluginFiles string
	// addons: the cluster runs hack/cluster.sh's add-ons for the agent's
	// node (kube-proxy, CoreDNS, the API relay behind the kubernetes
	// Service).
	addons bool
	args   func(r *conformanceRun) []string
}

func (s conformanceSuite) bin() string {
	if s.binary != "" {
		return s.binary
	}
	return s.name
}

func (s conformanceSuite) labelFilter() string {
	if s.labels != "" {
		return s.labels
	}
	return conformanceLabels
}

var conformanceSuites = []conformanceSuite{
	{
		name:              "e2e_node",
		devicePluginFiles: "/test/e2e_node/device_plugin_failures_test.go",
		args: func(r *conformanceRun) []string {
			return []string{
				"--start-services=false", "--prepull-images=false",
				// The node suite's client is the host with the token.
				"--host=" + r.cp.Server, "--bearer-token=" + r.token,
				// The agents' clusterDomain (hack/cluster.sh's config).
				"--dns-domain=cluster.local",
				"--container-runtime-endpoint=unix://" + shared.endpoint,
				"--report-dir=" + r.out,
			}
		},
	},
	{
		// The test/e2e/common specs, the ones both suites share, through
		// the scheduler.
		name:  "e2e",
		files: "/test/e2e/common/",
		args: func(r *conformanceRun) []string {
			return []string{
				"--kubeconfig=" + r.cp.AdminKubeconfig, "--host=" + r.cp.Server,
				"--provider=skeleton", "--report-dir=" + r.out,
				"--kubelet-root-dir=" + r.agentRoot,
				// No add-on runs in kube-system to wait for.
				"--minStartupPods=0", "--e2e-verify-service-account=false",
			}
		},
	},
	{
		// test/e2e/network's Conformance specs (Services, DNS, HostPort,
		// the API server's proxy...) through the scheduler, on a cluster
		// with kube-proxy and CoreDNS.
		name:   "e2e-network",
		binary: "e2e",
		labels: networkLabels,
		files:  "/test/e2e/network/",
		addons: true,
		args: func(r *conformanceRun) []string {
			return []string{
				"--kubeconfig=" + r.cp.AdminKubeconfig, "--host=" + r.cp.Server,
				"--provider=skeleton", "--report-dir=" + r.out,
				"--kubelet-root-dir=" + r.agentRoot,
				"--dns-domain=cluster.local",
				// CoreDNS is Ready before the suite starts (cluster.sh
				// addons waits for it).
				"--minStartupPods=0", "--e2e-verify-service-account=false",
			}
		},
	},
}

// The conformance clusters' add-ons (hack/cluster.sh's, for a node the
// harness joins itself): the API relay's namespace, link and /30 are these
// runs' own. kube-proxy's iptables chains are the host's, shared by every
// kube-proxy of the machine, so a run with add-ons refuses to start beside
// another cluster with them (make cluster-run's, TestMultiNode's).
const (
	conformanceRelayNetns = "nodelet-cf-api"
	conformanceRelayLink  = "nlcfapi0"
	conformanceRelayNet   = "10.243.253"
	// serviceCIDR is hack/cluster.sh's --service-cluster-ip-range.
	serviceCIDR = "10.96.0.0/12"
)

// rejectUnservedServiceIPs makes the host refuse to forward what pods send
// to a Service IP that kube-proxy did not translate (a port the Service
// does not have): kube-proxy's iptables mode leaves such packets to the
// host's routes, which here lead out of the machine, where a connection
// may even succeed. In upstream's CI the node's gateway drops them; a spec
// (Services should serve endpoints on same port and different protocols)
// counts on that. Translated packets reach FORWARD with a pod's address,
// so only the untranslated ones match. The rule is removed at the end.
func rejectUnservedServiceIPs(t *testing.T) func() {
	t.Helper()
	rule := []string{"FORWARD", "-d", serviceCIDR, "-m", "comment", "--comment", "nodelet conformance: Service IPs kube-proxy did not translate", "-j", "REJECT"}
	if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables -I %s: %v: %s", strings.Join(rule, " "), err, out)
	}
	return func() {
		if out, err := exec.Command("iptables", append([]string{"-w", "-D"}, rule...)...).CombinedOutput(); err != nil {
			t.Errorf("iptables -D %s: %v: %s", strings.Join(rule, " "), err, out)
		}
	}
}

// conformanceRun is one suite against one agent.
type conformanceRun struct {
	suite     conformanceSuite
	agent     string // nodelet, kubelet
	cp        *controlPlane
	token     string // a cluster admin's bearer token
	agentRoot string // the agent's --root-dir
	out       string // reports of this run
}

// conformanceBinaries are the suites' binaries and the ginkgo CLI.
type conformanceBinaries struct{ ginkgo, kubelet string }

func (b conformanceBinaries) suite(name string) string {
	return filepath.Join(filepath.Dir(b.ginkgo), name+".test")
}

// buildConformance builds (or finds cached) the ginkgo CLI, the kubelet,
// the images' upstream programs and the test binaries of the suites.
func buildConformance(t testing.TB, suites ...string) conformanceBinaries {
	t.Helper()
	names := []string{"ginkgo", "kubelet", "agnhost"}
	for _, name := range suites {
		bin := name
		for _, s := range conformanceSuites {
			if s.name == name {
				bin = s.bin()
			}
		}
		if !contains(names, bin+".test") {
			names = append(names, bin+".test")
		}
	}
	cmd := exec.Command(filepath.Join(shared.repoRoot, "hack", "build-upstream.sh"), names...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/build-upstream.sh: %v", err)
	}
	paths := strings.Fields(string(out))
	if len(paths) != len(names) {
		t.Fatalf("hack/build-upstream.sh printed %q", out)
	}
	return conformanceBinaries{ginkgo: paths[0], kubelet: paths[1]}
}

var conformanceImagesOnce struct {
	done bool
	err  error
}

// storeConformanceImages puts the suites' images into the shared registry.
func storeConformanceImages(t testing.TB) {
	t.Helper()
	if !conformanceImagesOnce.done {
		conformanceImagesOnce.done = true
		conformanceImagesOnce.err = func() error {
			cmd := exec.Command(filepath.Join(shared.repoRoot, "hack", "build-upstream.sh"), "agnhost", "nonewprivs")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("hack/build-upstream.sh agnhost nonewprivs: %w", err)
			}
			bins := strings.Fields(string(out))
			if len(bins) != 2 {
				return fmt.Errorf("hack/build-upstream.sh printed %q", out)
			}
			// The upstream source (porter's certificates for agnhost).
			cmd = exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
			cmd.Dir = filepath.Join(shared.repoRoot, "test", "cluster")
			dir, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("the k8s.io/kubernetes module: %w", err)
			}
			nmeter := filepath.Join(shared.work, "bin", "nmeter")
			if err := goBuild(shared.repoRoot, nmeter, "./test/conformance/images/nmeter", true); err != nil {
				return err
			}
			dig := filepath.Join(shared.work, "bin", "dig")
			if err := goBuild(shared.repoRoot, dig, "./test/conformance/images/dig", true); err != nil {
				return err
			}
			refs, err := images.Build(shared.store, images.HostSources(bins[0], bins[1], nmeter, dig, shared.pause, strings.TrimSpace(string(dir))),
				slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
			t.Logf("conformance images: %d references stored", len(refs))
			return err
		}()
	}
	if conformanceImagesOnce.err != nil {
		t.Fatalf("conformance images: %v", conformanceImagesOnce.err)
	}
}

// conformanceNodeIP is the agents' node IP: the pods' gateway on the
// shared runtime's bridge, made now if no pod made it yet. Not loopback:
// the API server does not proxy to a node at a loopback address, and the
// node suite reads the agent's /configz through that proxy.
func conformanceNodeIP(t testing.TB) string {
	t.Helper()
	cfg := shared.containerd.Config()
	_, cidr, err := net.ParseCIDR(cfg.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	gw := cidr.IP.To4()
	gw[3]++
	ones, _ := cidr.Mask.Size()
	if _, err := net.InterfaceByName(cfg.BridgeName); err != nil {
		for _, args := range [][]string{
			{"link", "add", cfg.BridgeName, "type", "bridge"},
			{"addr", "add", fmt.Sprintf("%s/%d", gw, ones), "dev", cfg.BridgeName},
			{"link", "set", cfg.BridgeName, "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	return gw.String()
}

// TestConformanceSlice runs a few specs of each area of e2e_node.test's
// NodeConformance selection against nodelet, so that make test catches a
// regression the full run (make conformance) would.
func TestConformanceSlice(t *testing.T) {
	if err := checkNoHostPods(); err != nil {
		t.Skipf("not run: %v", err)
	}
	bins := buildConformance(t, "e2e_node")
	storeConformanceImages(t)
	slice, err := readSpecList(filepath.Join(shared.repoRoot, "test", "conformance", "slice.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(shared.work, "conformance-slice")
	res := runConformance(t, bins, conformanceSuites[0], "nodelet", out, slice)
	t.Logf("%s", res.line())
	if res.failed > 0 || res.selected != len(slice) || res.passed != len(slice) {
		t.Errorf("NodeConformance slice: %s; failures:\n%s", res.line(), strings.Join(res.failures, "\n"))
	}
}

// checkNoHostPods refuses the conformance runs while the host's own node
// agent has pods in the default cgroup root: the suites' agents need that
// root (the cgroup specs look for /kubepods/burstable/pod<uid>), and an
// agent on it takes pods it did not start for orphans and kills them, as
// two kubelets on one root do.
func checkNoHostPods() error {
	if hp := foreignPodProcesses(); len(hp) > 0 {
		return fmt.Errorf("the host's own pods are running in the default cgroup root (%d processes, e.g. pid %d %s in %s), "+
			"and the suites' agent, on that root too, would kill them as orphans: stop them first (make run's nodelet leaves its pods running)",
			len(hp), hp[0].pid, hp[0].name, hp[0].cgroup)
	}
	return nil
}

// TestConformance is make conformance: both suites, both agents, reports
// under $NODELET_CONFORMANCE_OUT. NODELET_CONFORMANCE_SUITES and
// NODELET_CONFORMANCE_AGENTS (comma lists) narrow it;
// NODELET_CONFORMANCE_FOCUS (a regexp) runs only the specs it matches.
func TestConformance(t *testing.T) {
	outDir := os.Getenv("NODELET_CONFORMANCE_OUT")
	if outDir == "" {
		t.Skip("the full upstream suites run with make conformance (NODELET_CONFORMANCE_OUT is not set)")
	}
	if err := checkNoHostPods(); err != nil {
		t.Fatal(err)
	}
	suites := listEnv("NODELET_CONFORMANCE_SUITES", "e2e_node,e2e,e2e-network")
	bins := buildConformance(t, suites...)
	storeConformanceImages(t)
	var focus []string
	if f := os.Getenv("NODELET_CONFORMANCE_FOCUS"); f != "" {
		focus = []string{f}
	}
	agents := listEnv("NODELET_CONFORMANCE_AGENTS", "nodelet,kubelet")
	var results []conformanceResult
	begin := time.Now()
	// In the order asked for.
	for _, name := range suites {
		var s conformanceSuite
		for _, cs := range conformanceSuites {
			if cs.name == name {
				s = cs
			}
		}
		if s.name == "" {
			t.Fatalf("NODELET_CONFORMANCE_SUITES: no suite %q (e2e_node, e2e, e2e-network)", name)
		}
		for _, agent := range agents {
			res := runConformance(t, bins, s, agent, filepath.Join(outDir, s.name+"-"+agent), focusSpecs(focus))
			t.Logf("%s", res.line())
			results = append(results, res)
			if err := writeConformanceSummary(outDir, results, time.Since(begin)); err != nil {
				t.Error(err)
			}
		}
	}
}

// focusSpecs marks a regexp focus (not a list of exact spec texts).
type focusSpecs []string

// conformanceResult is what one run did with its selection.
type conformanceResult struct {
	suite, agent                      string
	selected, passed, failed, skipped int
	byArea                            map[string]*[4]int // selected, passed, failed, skipped
	failures                          []string
	wall                              time.Duration
	specs                             map[string]string // spec text → state
}

func (r conformanceResult) line() string {
	return fmt.Sprintf("%s %s selected=%d passed=%d failed=%d skipped=%d", r.suite, r.agent, r.selected, r.passed, r.failed, r.skipped)
}

// runConformance brings up a control plane of its own, joins the agent,
// runs the suite's selection (restricted to the exact spec texts of only,
// or to a focusSpecs regexp) and tears it all down.
func runConformance(t *testing.T, bins conformanceBinaries, s conformanceSuite, agent, out string, only any) conformanceResult {
	t.Helper()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	res := conformanceResult{suite: s.name, agent: agent, byArea: map[string]*[4]int{}, specs: map[string]string{}}
	begin := time.Now()

	skips, err := readSkipList(filepath.Join(shared.repoRoot, "test", "conformance", "skip.txt"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp(shared.work, "cf-")
	if err != nil {
		t.Fatal(err)
	}
	var cp *controlPlane
	if s.addons {
		cp, err = conformanceAddonsUp(t, filepath.Join(work, "cluster"))
	} else {
		cp, err = clusterUp(filepath.Join(work, "cluster"))
	}
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	defer func() {
		if out, err := cp.script("down"); err != nil {
			t.Errorf("hack/cluster.sh down: %v\n%s", err, out)
		}
	}()
	r := &conformanceRun{suite: s, agent: agent, cp: cp, out: out}
	r.token = adminToken(t, cp)
	a := newConformanceAgent(t, bins, cp, agent, filepath.Join(work, agent))
	r.agentRoot = filepath.Join(a.work, "root")
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.stop(); err != nil {
			t.Error(err)
		}
		removeAllPods(shared.rt)
		if err := unmountBelow(work); err != nil {
			t.Error(err)
		}
		copyFile(a.logPath, filepath.Join(out, agent+".log"))
		for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "apirelay", "addons-apply"} {
			copyFile(filepath.Join(cp.Dir, "logs", name+".log"), filepath.Join(out, name+".log"))
		}
	}()
	ctx := clusterContext(t, 3*time.Minute)
	if err := waitNodeSchedulable(ctx, cp.Admin, a.node); err != nil {
		t.Fatalf("node %s not Ready: %v", a.node, a.why(err))
	}
	// The suites reach the agent through the API server, which verifies
	// its serving certificate: issued through its kubelet-serving CSR.
	waitServing(t, cp, net.JoinHostPort(conformanceNodeIP(t), "10250"), time.Minute)
	if s.addons {
		// CoreDNS's image, which up packaged, from the harness's registry
		// mirror; then kube-proxy for the node, and CoreDNS on it.
		refs, err := registry.Import(shared.store, filepath.Join(cp.Dir, "coredns-image.tar"), registry.DefaultImportLimits())
		if err != nil {
			t.Fatalf("importing CoreDNS's image: %v", err)
		}
		t.Logf("CoreDNS image: %s", strings.Join(refs, " "))
		if b, err := cp.script("addons", a.node); err != nil {
			t.Fatalf("hack/cluster.sh addons %s: %v\n%s", a.node, err, b)
		}
		defer rejectUnservedServiceIPs(t)()
	}

	features, err := readSpecList(filepath.Join(shared.repoRoot, "test", "conformance", "features.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var skipArgs []string
	for spec := range skips {
		skipArgs = append(skipArgs, "--skip="+specPattern(spec))
	}
	sort.Strings(skipArgs)
	suiteBin := bins.suite(s.bin())
	// pass runs ginkgo over one selection (its filters: filter) and counts
	// what it selected (a dry run with the filters alone) and how each
	// spec ended; its files' names start with prefix. With plugins set,
	// the run sees that directory at upstream's fixed device plugin
	// directory (inDevicePluginDir).
	pass := func(prefix string, filter []string, plugins string) (selectedTexts map[string]bool) {
		if s.files != "" {
			filter = append(filter, "--focus-file="+s.files)
		}
		ginkgo := func(extra ...string) *exec.Cmd {
			// Reports go to out, named by ginkgo <suite path>_<name>
			// (ginkgoReport finds them).
			args := append([]string{"run", "--no-color", "--timeout=3h", "--output-dir=" + out}, filter...)
			args = append(args, extra...)
			args = append(args, suiteBin, "--")
			args = append(args, s.args(r)...)
			cmd := exec.Command(bins.ginkgo, args...)
			if plugins != "" {
				cmd = inDevicePluginDir(plugins, append([]string{bins.ginkgo}, args...)...)
			}
			cmd.Dir = out // e2e_node.test writes its kubelet config files to its working directory
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.AdminKubeconfig)
			return cmd
		}
		if b, err := ginkgo("--dry-run", "--json-report="+prefix+"selection.json").CombinedOutput(); err != nil {
			t.Fatalf("dry run of %s: %v\n%s", s.name, err, tailString(string(b), 40))
		}
		selected, err := readGinkgoReport(ginkgoReport(out, prefix+"selection.json"))
		if err != nil {
			t.Fatal(err)
		}
		selectedTexts = map[string]bool{}
		if len(ranSpecs(selected)) == 0 {
			return selectedTexts
		}
		log, err := os.Create(filepath.Join(out, prefix+"ginkgo.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		cmd := ginkgo(append([]string{"--procs=" + strconv.Itoa(conformanceProcs), "--json-report=" + prefix + "report.json", "--junit-report=" + prefix + "junit.xml"}, skipArgs...)...)
		cmd.Stdout, cmd.Stderr = log, log
		t.Logf("%s: %d specs selected, %s against %s; log %s", s.name, len(ranSpecs(selected)), s.name, agent, log.Name())
		runErr := cmd.Run() // fails when a spec fails: the report says which
		ran, err := readGinkgoReport(ginkgoReport(out, prefix+"report.json"))
		if err != nil {
			t.Fatalf("%s: %v (ginkgo: %v; the end of its log:\n%s)", s.name, err, runErr, tail(log.Name(), 40))
		}
		states := map[string]ginkgoSpec{}
		for _, sp := range ran {
			states[sp.text()] = sp
		}
		for _, sp := range ranSpecs(selected) {
			text := sp.text()
			selectedTexts[text] = true
			area := sp.area()
			if res.byArea[area] == nil {
				res.byArea[area] = &[4]int{}
			}
			counts := res.byArea[area]
			res.selected++
			counts[0]++
			got, ok := states[text]
			state := "skipped"
			if ok {
				state = got.State
			}
			res.specs[text] = state
			switch state {
			case "passed":
				res.passed++
				counts[1]++
			case "skipped", "pending":
				res.skipped++
				counts[3]++
			default:
				res.failed++
				counts[2]++
				res.failures = append(res.failures, fmt.Sprintf("%s: %s\n    %s", state, text, firstLine(got.Failure.Message)))
			}
		}
		return selectedTexts
	}
	// The selection: the labels (and what only narrows them to).
	var focus []string
	switch o := only.(type) {
	case []string:
		for _, spec := range o {
			focus = append(focus, "--focus="+specPattern(spec))
		}
	case focusSpecs:
		for _, f := range o {
			focus = append(focus, "--focus="+f)
		}
	}
	selection := slices.Clip(append([]string{"--label-filter=" + s.labelFilter()}, focus...))
	first := selection
	if s.devicePluginFiles != "" {
		first = append(selection, "--skip-file="+s.devicePluginFiles)
	}
	inSelection := pass("", first, "")
	if s.devicePluginFiles != "" {
		// Those specs apart, where the agent's registration socket is at
		// the fixed path their plugin dials.
		for text := range pass("devices-", append(selection, "--focus-file="+s.devicePluginFiles), devicePluginDir(agent, r.agentRoot)) {
			inSelection[text] = true
		}
	}
	// Beside it, test/conformance/features.txt's specs whatever their
	// labels (those only asks for), but for those the selection ran.
	var extra []string
	for _, spec := range featureSpecs(features, only) {
		if !inSelection[spec] {
			extra = append(extra, "--focus="+specPattern(spec))
		}
	}
	if len(extra) > 0 {
		pass("features-", extra, "")
	}
	res.wall = time.Since(begin)
	if err := writeConformanceRun(out, res); err != nil {
		t.Error(err)
	}
	return res
}

// devicePluginDir is where the specs of a suite's devicePluginFiles find
// the agent's device plugin registration socket: nodelet's is in its
// --root-dir, so they run where /var/lib/kubelet/device-plugins is
// <root-dir>/device-plugins; the kubelet's is at that fixed path of the
// host whatever its --root-dir (its device manager knows no other), so
// they run beside it ("": no mount namespace).
func devicePluginDir(agent, root string) string {
	if agent == "kubelet" {
		return ""
	}
	return filepath.Join(root, "device-plugins")
}

// conformanceAddonsUp brings up a control plane with hack/cluster.sh's
// add-ons (CLUSTER_ADDONS=1, no node of its own): the API relay runs, the
// agents' configuration names the cluster DNS, and kube-proxy and CoreDNS
// follow once the agent's node is Ready (hack/cluster.sh addons).
func conformanceAddonsUp(t *testing.T, dir string) (*controlPlane, error) {
	t.Helper()
	for _, ns := range []string{userRelayNetns, multiNodeRelayNetns} {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			t.Fatalf("a cluster with add-ons runs on this machine (/run/netns/%s): its kube-proxies and this run's "+
				"would share the host's iptables chains; take it down first", ns)
		}
	}
	return scriptUp(dir,
		"NODELET=0",
		"CLUSTER_ADDONS=1",
		"CLUSTER_CIDR="+clusterCIDR(),
		"CLUSTER_NODE_PORTS="+strconv.Itoa(freeNodePortBlock(t, 1)),
		"CLUSTER_RELAY_NETNS="+conformanceRelayNetns,
		"CLUSTER_RELAY_LINK="+conformanceRelayLink,
		"CLUSTER_RELAY_NET="+conformanceRelayNet,
		// NodePorts on loopback and on the node IP (the address of the
		// harness's own bridge), where the Services specs reach them.
		"CLUSTER_NODEPORT_ADDRESSES=127.0.0.1/32,"+conformanceNodeIP(t)+"/32",
	)
}

// newConformanceAgent is nodelet or the upstream kubelet, joining cp as
// hack/cluster.sh joins nodelet (its KubeletConfiguration, as kubeadm
// writes one), with a static pod directory (the mirror pod specs write
// there) and its API on the node IP.
func newConformanceAgent(t *testing.T, bins conformanceBinaries, cp *controlPlane, agent, work string) *clusterAgent {
	t.Helper()
	// Pod logs go to the default /var/log/pods: a node spec reads them
	// there by that path.
	// On the default cgroup root, which the suites need (checkNoHostPods).
	claimCgroupTops("kubepods", "kubepods.slice")
	root, manifests := filepath.Join(work, "root"), filepath.Join(work, "manifests")
	for _, d := range []string{root, manifests} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet's default ports: the suites reach some of them by number
	// (the read-only port's /metrics on localhost:10255, the kubelet API on
	// 10250 through the API server's node proxy).
	healthzPort, roPort, apiPort := "10248", "10255", "10250"
	// and on every address, as the kubelet's default: the suites reach
	// the read-only port at localhost and the API at the node IP.
	const conformanceAddress = "0.0.0.0"
	ip := conformanceNodeIP(t)
	a := &clusterAgent{label: agent, node: "conformance-" + agent, work: work, logPath: filepath.Join(work, agent+".log")}
	switch agent {
	case "nodelet":
		a.command = func() *exec.Cmd {
			return exec.Command(shared.nodelet, "--config", cp.NodeletConfig, "--root-dir", root,
				"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(root, "kubelet.kubeconfig"),
				"--hostname-override", a.node, "--node-ip", ip, "--container-runtime-endpoint", shared.endpoint,
				"--pod-manifest-path", manifests, "--address", conformanceAddress, "--port", apiPort,
				"--healthz-port", healthzPort, "--read-only-port", roPort,
				// As the kubelet's configuration below (kubeletMachineConfig):
				// the test machine's disk is not the suites' business, and
				// the default imagefs.available<15% is met on a well-used
				// build machine (a DiskPressure taint, the node never
				// schedulable).
				"--eviction-hard", "memory.available<1Mi", "--image-gc-high-threshold", "100", "--image-gc-low-threshold", "99")
		}
	case "kubelet":
		base, err := os.ReadFile(cp.NodeletConfig)
		if err != nil {
			t.Fatal(err)
		}
		config := filepath.Join(work, "config.yaml")
		machine := strings.Replace(kubeletMachineConfig(shared.endpoint, "/var/log/pods", healthzPort, roPort, apiPort, ""),
			"address: 127.0.0.1\n", "address: "+conformanceAddress+"\n", 1) + "staticPodPath: " + manifests + "\n"
		if err := os.WriteFile(config, append(base, machine...), 0o600); err != nil {
			t.Fatal(err)
		}
		a.command = func() *exec.Cmd {
			return exec.Command(bins.kubelet, "--config", config, "--root-dir", root, "--cert-dir", filepath.Join(root, "pki"),
				"--bootstrap-kubeconfig", cp.BootstrapKubeconfig, "--kubeconfig", filepath.Join(root, "kubelet.kubeconfig"),
				"--hostname-override", a.node, "--node-ip", ip, "--v", kubeletVerbosity())
		}
	default:
		t.Fatalf("unknown agent %q (nodelet, kubelet)", agent)
	}
	return a
}

// adminToken is a bearer token of a cluster admin service account: the
// node suite sends it to the API server's node proxy (/configz).
func adminToken(t *testing.T, cp *controlPlane) string {
	t.Helper()
	ctx := clusterContext(t, time.Minute)
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "conformance", Namespace: "kube-system"}}
	if _, err := cp.Admin.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "conformance-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "conformance", Namespace: "kube-system"}},
	}
	if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hours := int64(6 * 3600)
	tr, err := cp.Admin.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "conformance",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hours}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// ginkgoSpec is the part of a spec report (ginkgo's JSON report) the
// harness reads.
type ginkgoSpec struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	LeafNodeLocation        struct{ FileName string }
	State                   string
	Failure                 struct{ Message string }
}

func (s ginkgoSpec) text() string {
	return strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
}

// area is the spec's source file below test/, such as
// e2e/common/node/container_probe.
func (s ginkgoSpec) area() string {
	f := s.LeafNodeLocation.FileName
	if i := strings.LastIndex(f, "/test/"); i >= 0 {
		f = f[i+len("/test/"):]
	}
	return strings.TrimSuffix(f, ".go")
}

// specPattern is the regexp ginkgo's --focus and --skip match a spec's
// full text with: the text itself, any run of spaces as \s+ (ginkgo does
// not match a container text's trailing space as the JSON report joins it).
func specPattern(text string) string {
	words := strings.Fields(text)
	for i, w := range words {
		words[i] = regexp.QuoteMeta(w)
	}
	return strings.Join(words, `\s+`)
}

// ginkgoReport is the path of the report ginkgo --output-dir=out wrote as
// name: ginkgo prefixes the names with the suite's path.
func ginkgoReport(out, name string) string {
	if m, _ := filepath.Glob(filepath.Join(out, "*_"+name)); len(m) == 1 {
		return m[0]
	}
	return filepath.Join(out, name)
}

// readGinkgoReport reads the specs of a ginkgo JSON report.
func readGinkgoReport(path string) ([]ginkgoSpec, error) {
	data, err := bounded.ReadFile(path, 256<<20)
	if err != nil {
		return nil, err
	}
	var reports []struct{ SpecReports []ginkgoSpec }
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var specs []ginkgoSpec
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType == "It" {
				specs = append(specs, s)
			}
		}
	}
	return specs, nil
}

// ranSpecs are the specs of a dry run that the filters selected (a dry run
// reports them passed; what the filters leave out, skipped).
func ranSpecs(specs []ginkgoSpec) []ginkgoSpec {
	var out []ginkgoSpec
	for _, s := range specs {
		if s.State == "passed" {
			out = append(out, s)
		}
	}
	return out
}

// featureSpecs are the specs of features (test/conformance/features.txt)
// that only asks for: all of them for nil, those among only's exact spec
// texts, or those a focusSpecs regexp matches (all for none), as ginkgo
// --focus would.
func featureSpecs(features []string, only any) []string {
	var out []string
	for _, spec := range features {
		switch o := only.(type) {
		case []string:
			if !contains(o, spec) {
				continue
			}
		case focusSpecs:
			if len(o) > 0 && !slices.ContainsFunc(o, func(f string) bool { return regexp.MustCompile(f).MatchString(spec) }) {
				continue
			}
		}
		out = append(out, spec)
	}
	return out
}

// readSkipList reads test/conformance/skip.txt: "reason: ..." lines, each
// followed by the full texts of the specs it is the reason for, one a line.
func readSkipList(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	skips := map[string]string{}
	reason := ""
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "reason:"):
			reason = strings.TrimSpace(strings.TrimPrefix(line, "reason:"))
		case reason == "":
			return nil, fmt.Errorf("%s:%d: a spec before any reason: line", path, n)
		default:
			skips[line] = reason
		}
	}
	return skips, sc.Err()
}

// readSpecList reads a list of full spec texts, one a line (# comments).
func readSpecList(path string) ([]string, error) {
	data, err := bounded.ReadFile(path, 1<<20)
	if err != nil {
		return nil, err
	}
	var specs []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			specs = append(specs, line)
		}
	}
	return specs, nil
}

// writeConformanceRun writes a run's table by area and its failures.
func writeConformanceRun(out string, r conformanceResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s against %s: selected=%d passed=%d failed=%d skipped=%d in %v\n\n", r.suite, r.agent, r.selected, r.passed, r.failed, r.skipped, r.wall.Round(time.Second))
	fmt.Fprintf(&b, "%-55s %8s %6s %6s %7s\n", "area (source file)", "selected", "passed", "failed", "skipped")
	areas := make([]string, 0, len(r.byArea))
	for a := range r.byArea {
		areas = append(areas, a)
	}
	sort.Strings(areas)
	for _, a := range areas {
		c := r.byArea[a]
		fmt.Fprintf(&b, "%-55s %8d %6d %6d %7d\n", a, c[0], c[1], c[2], c[3])
	}
	if len(r.failures) > 0 {
		fmt.Fprintf(&b, "\nfailed:\n%s\n", strings.Join(r.failures, "\n"))
	}
	var states strings.Builder
	texts := make([]string, 0, len(r.specs))
	for s := range r.specs {
		texts = append(texts, s)
	}
	sort.Strings(texts)
	for _, s := range texts {
		fmt.Fprintf(&states, "%s\t%s\n", r.specs[s], s)
	}
	if err := os.WriteFile(filepath.Join(out, "specs.tsv"), []byte(states.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "summary.txt"), []byte(b.String()), 0o644)
}

// writeConformanceSummary writes summary.txt (one line per suite and
// agent) and compare.txt (nodelet beside the kubelet, and the specs the
// kubelet passes that nodelet does not).
func writeConformanceSummary(outDir string, results []conformanceResult, wall time.Duration) error {
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintln(&b, r.line())
	}
	if err := os.WriteFile(filepath.Join(outDir, "summary.txt"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	var c strings.Builder
	fmt.Fprintf(&c, "%-11s %-8s %8s %6s %6s %7s %9s\n", "suite", "agent", "selected", "passed", "failed", "skipped", "wall")
	for _, r := range results {
		fmt.Fprintf(&c, "%-11s %-8s %8d %6d %6d %7d %9s\n", r.suite, r.agent, r.selected, r.passed, r.failed, r.skipped, r.wall.Round(time.Second))
	}
	fmt.Fprintf(&c, "total wall time %v\n", wall.Round(time.Second))
	for _, k := range results {
		if k.agent != "kubelet" {
			continue
		}
		for _, n := range results {
			if n.agent != "nodelet" || n.suite != k.suite {
				continue
			}
			var gaps []string
			for spec, state := range k.specs {
				if state == "passed" && n.specs[spec] != "passed" {
					gaps = append(gaps, n.specs[spec]+"\t"+spec)
				}
			}
			sort.Strings(gaps)
			fmt.Fprintf(&c, "\n%s: the kubelet passes, nodelet does not (%d):\n%s\n", k.suite, len(gaps), strings.Join(gaps, "\n"))
		}
	}
	return os.WriteFile(filepath.Join(outDir, "compare.txt"), []byte(c.String()), 0o644)
}

func listEnv(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func copyFile(from, to string) {
	data, err := os.ReadFile(from)
	if err == nil {
		os.WriteFile(to, data, 0o644)
	}
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var _ = context.Background
