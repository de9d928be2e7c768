//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The control plane of cluster mode, as the tests see it: hack/cluster.sh
// brings up etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// (configured as production clusters are: see the script) into a temporary
// CLUSTER_DIR, once per test binary, on free ports, with NODELET=0: each
// test starts the nodelets it needs with its own flags, joining through
// BootstrapKubeconfig and NodeletConfig. run (main_test.go) stops it at the
// end.
//
// The binaries come from $NODELET_CLUSTER_BIN (make e2e builds them with
// hack/build-upstream.sh and sets it), else the script builds them itself
// (cached by version; minutes the first time). Without them, or without
// etcd, every cluster test fails, saying why: none skips.

// controlPlane is a running control plane.
type controlPlane struct {
	Dir                 string // CLUSTER_DIR: state and logs/NAME.log
	Server              string // https://127.0.0.1:<port>
	AdminKubeconfig     string // O=system:masters
	BootstrapKubeconfig string // the bootstrap token (group system:bootstrappers:nodelet)
	CAFile              string // the cluster CA: serving, client and CSR signing
	NodeletConfig       string // a KubeletConfiguration as kubeadm writes one
	TokenID             string // the bootstrap token's id: its user is system:bootstrap:<id>
	AuditLog            string // the requests of nodes (group system:nodes), one JSON event a line
	AdminConfig         *rest.Config
	Admin               kubernetes.Interface

	env []string // hack/cluster.sh's environment
}

// sharedCluster is the control plane of this test binary, up on first use.
var sharedCluster struct {
	once sync.Once
	cp   *controlPlane
	err  error
}

// startCluster returns the control plane, bringing it up at the first call
// (the time it took goes to the test's log). It fails the test if the
// control plane cannot run.
func startCluster(t testing.TB) *controlPlane {
	t.Helper()
	first := false
	sharedCluster.once.Do(func() {
		first = true
		start := time.Now()
		sharedCluster.cp, sharedCluster.err = clusterUp(filepath.Join(shared.work, "cluster"))
		if sharedCluster.err == nil {
			t.Logf("control plane up in %v (hack/cluster.sh up, NODELET=0)", time.Since(start).Round(100*time.Millisecond))
		}
	})
	if sharedCluster.err != nil {
		if first {
			t.Fatalf("control plane: %v", sharedCluster.err)
		}
		t.Fatalf("control plane: did not come up for an earlier test: %v", firstLine(sharedCluster.err.Error()))
	}
	return sharedCluster.cp
}

// stopCluster stops the control plane if a test brought it up; a later
// startCluster fails.
func stopCluster() {
	if cp := sharedCluster.cp; cp != nil {
		if out, err := cp.script("down"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: hack/cluster.sh down: %v\n%s", err, out)
		}
		sharedCluster.cp, sharedCluster.err = nil, errors.New("stopped")
	}
}

func clusterUp(dir string) (*controlPlane, error) {
	auditLog := filepath.Join(dir, "logs", "audit.log")
	cp, err := scriptUp(dir,
		"NODELET=0",
		// What the nodes ask the API server for, so that a test or a
		// benchmark can count it (a line per request, of nodes only).
		"AUDIT_LOG="+auditLog,
		// The controller manager gives each Node a /24 of it; not
		// hack/cluster.sh's default, so that the tests' bridges never
		// route a range a cluster of the machine's user uses.
		"CLUSTER_CIDR="+clusterCIDR())
	if cp != nil {
		cp.AuditLog = auditLog
	}
	return cp, err
}

// scriptUp runs hack/cluster.sh up in dir, on free ports, with the
// environment variables extra besides, and returns the control plane.
// When up fails, it runs down and returns the script's output.
func scriptUp(dir string, extra ...string) (*controlPlane, error) {
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	env := []string{}
	for _, kv := range os.Environ() {
		// The user's own cluster settings are not the tests'.
		if !strings.HasPrefix(kv, "CLUSTER_") && !strings.HasPrefix(kv, "NODELET") && !strings.HasPrefix(kv, "ETCD=") &&
			!strings.HasPrefix(kv, "AUDIT_LOG=") && !strings.HasPrefix(kv, "NODES=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"CLUSTER_DIR="+dir,
		"CLUSTER_ETCD_PORT="+ports[0],
		"CLUSTER_ETCD_PEER_PORT="+ports[1],
		"CLUSTER_APISERVER_PORT="+ports[2],
		"CLUSTER_CONTROLLER_MANAGER_PORT="+ports[3],
		"CLUSTER_SCHEDULER_PORT="+ports[4],
	)
	env = append(env, extra...)
	from := "hack/build-upstream.sh (NODELET_CLUSTER_BIN is not set)"
	if bin := os.Getenv("NODELET_CLUSTER_BIN"); bin != "" {
		env = append(env, "CLUSTER_BIN_DIR="+bin)
		from = "NODELET_CLUSTER_BIN=" + bin
	}
	cp := &controlPlane{
		Dir:                 dir,
		Server:              "https://127.0.0.1:" + ports[2],
		AdminKubeconfig:     filepath.Join(dir, "admin.kubeconfig"),
		BootstrapKubeconfig: filepath.Join(dir, "bootstrap.kubeconfig"),
		CAFile:              filepath.Join(dir, "pki", "ca.crt"),
		NodeletConfig:       filepath.Join(dir, "nodelet-config.yaml"),
		env:                 env,
	}
	if out, err := cp.script("up"); err != nil {
		// The script's output ends with the failing component's log.
		// Purged: a later cluster in the same directory (the three-node
		// tests share one) must not find this one's nodes' kubeconfigs,
		// which name this API server.
		cp.script("down", "--purge")
		return nil, fmt.Errorf("hack/cluster.sh up, binaries from %s: %v\n%s", from, err, out)
	}
	if err := cp.readToken(); err != nil {
		return nil, err
	}
	if cp.AdminConfig, err = clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig); err != nil {
		return nil, err
	}
	if cp.Admin, err = kubernetes.NewForConfig(cp.AdminConfig); err != nil {
		return nil, err
	}
	return cp, nil
}

// readToken reads the bootstrap token's id from pki/bootstrap-token (up
// makes a new token when the last one expires).
func (cp *controlPlane) readToken() error {
	token, err := os.ReadFile(filepath.Join(cp.Dir, "pki", "bootstrap-token"))
	if err != nil {
		return err
	}
	cp.TokenID, _, _ = strings.Cut(strings.TrimSpace(string(token)), ".")
	return nil
}

// script runs hack/cluster.sh with the control plane's environment.
func (cp *controlPlane) script(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(shared.repoRoot, "hack", "cluster.sh"), args...)
	cmd.Env = cp.env
	return cmd.CombinedOutput()
}

// client is a clientset with the credentials of a kubeconfig.
func (cp *controlPlane) client(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return clientFor(t, cfg)
}

func clientFor(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roots is a pool of the cluster CA, which signs the API server's, the
// users' and the nodes' certificates.
func (cp *controlPlane) roots() (*x509.CertPool, error) {
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", cp.CAFile)
	}
	return roots, nil
}

// logsOnFailure puts the end of each control-plane log into the test's log
// if the test fails (for diagnosis: tests judge what the API shows).
func (cp *controlPlane) logsOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "csrapprover"} {
			b, err := os.ReadFile(filepath.Join(cp.Dir, "logs", name+".log"))
			if err != nil {
				t.Logf("%s log: %v", name, err)
				continue
			}
			lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
			t.Logf("the end of %s's log:\n%s", name, bytes.Join(lines[max(0, len(lines)-30):], []byte("\n")))
		}
	})
}

// freePorts finds n free loopback ports, held together so that they differ.
func freePorts(n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// clusterContext is a context for a test's API calls.
func clusterContext(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}
