//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Restarting nodelet (managed mode, with pods running) works every time:
// after each of 10 SIGTERM-and-start cycles nodelet answers /healthz, runs
// a new pod and stops a deleted one, and the pods that were running all
// along keep their containers. A hung agent would restart nothing, so
// "nothing was restarted" alone proves nothing; each cycle proves work.
func TestRestartTenTimesKeepsWorking(t *testing.T) {
	const (
		restarts   = 10
		healthPort = "10258"
	)
	m := startManaged(t, "restart", "nle2e2", "10.45.0.0/24", "--file-check-frequency", "2s",
		"--healthz-port", healthPort, "--port", "0")
	n, manifests, rt := m.n, m.manifests, m.rt
	for i := range 5 {
		writeManifest(t, manifests, fmt.Sprintf("keep%d.yaml", i), fmt.Sprintf(sleeperPod, fmt.Sprintf("keep%d", i)))
	}
	ctx := context.Background()
	kept := map[string]string{}
	eventually(t, 120*time.Second, "5 pods running", func() error {
		for i := range 5 {
			pod := fmt.Sprintf("keep%d-e2e", i)
			c, err := runningContainer(ctx, rt, pod, "main")
			if err != nil {
				return err
			}
			kept[pod] = c.Id
		}
		return nil
	})

	previous := ""
	for i := 1; i <= restarts; i++ {
		if err := n.signalAndWait(t, syscall.SIGTERM, 60*time.Second); err != nil {
			t.Fatalf("restart %d: nodelet exit after SIGTERM: %v\n%s", i, err, n.stderr.String())
		}
		n = startNodelet(t, m.args...)
		eventually(t, 60*time.Second, fmt.Sprintf("restart %d: /healthz answers", i), func() error {
			return healthz("http://127.0.0.1:" + healthPort + "/healthz")
		})
		pod := fmt.Sprintf("new%d", i)
		writeManifest(t, manifests, pod+".yaml", fmt.Sprintf(sleeperPod, pod))
		eventually(t, 60*time.Second, fmt.Sprintf("restart %d: new pod runs", i), func() error {
			_, err := runningContainer(ctx, rt, pod+"-e2e", "main")
			return err
		})
		if previous != "" {
			if err := os.Remove(filepath.Join(manifests, previous+".yaml")); err != nil {
				t.Fatal(err)
			}
			eventually(t, 60*time.Second, fmt.Sprintf("restart %d: deleted pod stops", i), func() error {
				return noRunningContainers(ctx, rt, previous+"-e2e")
			})
		}
		previous = pod
		for name, id := range kept {
			c, err := runningContainer(ctx, rt, name, "main")
			if err != nil || c.Id != id {
				t.Fatalf("restart %d: %s runs %v (err %v), want its container %s untouched", i, name, c, err, id)
			}
		}
		if t.Failed() {
			t.Fatalf("restart %d failed; nodelet output:\n%s", i, n.stderr.String())
		}
	}
}

// signalAndWait sends sig and waits up to timeout for nodelet to exit.
func (p *nodeletProc) signalAndWait(t testing.TB, sig os.Signal, timeout time.Duration) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit within %v of %v", timeout, sig)
	}
}

// healthz returns nil when url answers 200 "ok".
func healthz(url string) error {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("healthz: %d %q", resp.StatusCode, body)
	}
	return nil
}

// noRunningContainers returns nil once nothing of pod runs.
func noRunningContainers(ctx context.Context, rt *cri.Client, pod string) error {
	cs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{podspec.LabelPodName: pod},
	})
	if err != nil {
		return err
	}
	if len(cs) > 0 {
		return fmt.Errorf("%d containers of %s still run", len(cs), pod)
	}
	return nil
}
