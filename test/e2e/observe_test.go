//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// The tests judge what a user of the kubelet API can observe: the pods'
// status (/pods), the events (/events), the metrics (/metrics...) and the
// runtime's state over CRI; never nodelet's log lines.

// nodeAPI is a nodelet's HTTPS API as the local admin sees it.
type nodeAPI struct {
	base   string
	client *http.Client
}

// api is the HTTPS API of the nodelet p, found from its flags (--port,
// --address, --root-dir; the last of each counts, as for nodelet); it
// waits for the admin credentials nodelet writes when the API starts.
func (p *nodeletProc) api(t testing.TB) *nodeAPI {
	t.Helper()
	port, addr, root := lastFlag(p.args, "--port"), lastFlag(p.args, "--address"), lastFlag(p.args, "--root-dir")
	if port == "" || port == "0" || root == "" {
		t.Fatalf("nodelet runs without its HTTPS API (--port %q, --root-dir %q)", port, root)
	}
	if addr == "" || addr == "0.0.0.0" {
		addr = "127.0.0.1"
	}
	eventually(t, 60*time.Second, "admin credentials under "+root, func() error {
		for _, f := range []string{"admin.crt", "admin.key"} {
			if _, err := os.Stat(filepath.Join(root, "pki", f)); err != nil {
				return err
			}
		}
		return nil
	})
	return &nodeAPI{base: "https://" + net.JoinHostPort(addr, port), client: adminClientTB(t, root)}
}

func lastFlag(args []string, name string) string {
	v := ""
	for i, a := range args {
		if a == name && i+1 < len(args) {
			v = args[i+1]
		} else if val, ok := strings.CutPrefix(a, name+"="); ok {
			v = val
		}
	}
	return v
}

// get returns the body of a 200 answer to GET path.
func (a *nodeAPI) get(path string) ([]byte, error) {
	resp, err := a.client.Get(a.base + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %.200s", path, resp.StatusCode, body)
	}
	return body, nil
}

// pod returns the pod named name (namespace default) as /pods shows it.
func (a *nodeAPI) pod(name string) (*v1.Pod, error) {
	body, err := a.get("/pods")
	if err != nil {
		return nil, err
	}
	var list v1.PodList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("/pods: %w", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Namespace == "default" && p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no pod %s in /pods", name)
}

// events returns /events, oldest first.
func (a *nodeAPI) events() ([]server.EventItem, error) {
	body, err := a.get("/events")
	if err != nil {
		return nil, err
	}
	var evs []server.EventItem
	if err := json.Unmarshal(body, &evs); err != nil {
		return nil, fmt.Errorf("/events: %w", err)
	}
	return evs, nil
}

// metric returns the sum of the series of the metric name at path
// (/metrics, /metrics/probes, ...) that carry all of labels.
func (a *nodeAPI) metric(path, name string, labels map[string]string) (float64, error) {
	body, err := a.get(path)
	if err != nil {
		return 0, err
	}
	return sumSeries(string(body), name, labels)
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// sumSeries adds up the samples of metric name in Prometheus text that
// carry all of labels; it fails when there is none.
func sumSeries(text, name string, labels map[string]string) (float64, error) {
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		have := map[string]string{}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			for _, m := range labelRE.FindAllStringSubmatch(rest[1:end], -1) {
				have[m[1]] = m[2]
			}
			rest = rest[end+1:]
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no series %s%v", name, labels)
	}
	return sum, nil
}

// waitPod waits until cond accepts the pod named name as /pods shows it,
// and returns that pod.
func waitPod(t testing.TB, a *nodeAPI, name string, timeout time.Duration, what string, cond func(*v1.Pod) error) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	eventually(t, timeout, name+": "+what, func() (err error) {
		if pod, err = a.pod(name); err != nil {
			return err
		}
		return cond(pod)
	})
	return pod
}

// waitEvent waits until /events has an event that match accepts, and
// returns it.
func waitEvent(t testing.TB, a *nodeAPI, timeout time.Duration, what string, match func(server.EventItem) bool) server.EventItem {
	t.Helper()
	var found server.EventItem
	eventually(t, timeout, "event: "+what, func() error {
		evs, err := a.events()
		if err != nil {
			return err
		}
		for _, e := range evs {
			if match(e) {
				found = e
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(evs))
	})
	return found
}

// podEvent matches an event of pod (namespace default) with the type and
// reason whose message contains message.
func podEvent(pod, eventType, reason, message string) func(server.EventItem) bool {
	return func(e server.EventItem) bool {
		return e.Kind == "" && e.Namespace == "default" && e.Pod == pod && e.Type == eventType && e.Reason == reason &&
			strings.Contains(e.Message, message)
	}
}

// manifestEvent matches the Warning FailedToLoadManifest event about the
// node ("e2e", as every test's --hostname-override) for file, whose
// reason text matches reason.
func manifestEvent(file, reason string) func(server.EventItem) bool {
	re := regexp.MustCompile(reason)
	return func(e server.EventItem) bool {
		text, ok := strings.CutPrefix(e.Message, file+": ")
		return ok && e.Kind == "Node" && e.Node == "e2e" && e.Pod == "" && e.Type == v1.EventTypeWarning &&
			e.Reason == "FailedToLoadManifest" && re.MatchString(text)
	}
}

// roundsMetric counts nodelet's housekeeping rounds (every 2 s once the
// sources have reported; each looks at the runtime's pods through the
// PLEG's current view, or lists them).
const roundsMetric = "nodelet_housekeeping_duration_seconds_count"

// waitRuntimeLists waits until nodelet has run n more housekeeping rounds
// than when it was called: proof that time has passed and that nodelet has
// looked at the runtime's pods again and had its sync loop run meanwhile
// (a round every 2 s; the PLEG relists at every container event, or every
// second on a runtime without an event stream). Every "nothing happened"
// check waits for this first, then looks at the state.
func waitRuntimeLists(t testing.TB, a *nodeAPI, n int) {
	t.Helper()
	var start float64
	eventually(t, 30*time.Second, "housekeeping round count", func() (err error) {
		start, err = a.metric("/metrics", roundsMetric, nil)
		return err
	})
	eventually(t, time.Duration(n)*10*time.Second, fmt.Sprintf("%d more housekeeping rounds", n), func() error {
		now, err := a.metric("/metrics", roundsMetric, nil)
		if err != nil {
			return err
		}
		if now < start+float64(n) {
			return fmt.Errorf("%s went from %v to %v", roundsMetric, start, now)
		}
		return nil
	})
}

// adoptLists is how many housekeeping rounds a restarted nodelet gets
// before the tests check that it left the pods it found alone: its first
// housekeeping (which would stop pods it wrongly took for orphans) comes
// within 2 s, and such a pod takes up to its grace period (2 s in these
// tests) to stop and be seen stopped.
const adoptLists = 5

// containerStatus is the status of the pod's container name (regular,
// init or ephemeral); zero if the status has none.
func containerStatus(pod *v1.Pod, name string) v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, c := range list {
			if c.Name == name {
				return c
			}
		}
	}
	return v1.ContainerStatus{}
}

// podCondition is the status of the pod's condition of type ct, "" if
// it has none.
func podCondition(pod *v1.Pod, ct v1.PodConditionType) v1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == ct {
			return c.Status
		}
	}
	return ""
}

// hasPhase accepts a pod in phase with the given status reason.
func hasPhase(phase v1.PodPhase, reason string) func(*v1.Pod) error {
	return func(p *v1.Pod) error {
		if p.Status.Phase != phase || p.Status.Reason != reason {
			return fmt.Errorf("phase %q reason %q, want %q %q", p.Status.Phase, p.Status.Reason, phase, reason)
		}
		return nil
	}
}

// waitingWith accepts a pod whose container waits with reason and a
// message containing message.
func waitingWith(container, reason, message string) func(*v1.Pod) error {
	return func(p *v1.Pod) error {
		w := containerStatus(p, container).State.Waiting
		if w == nil || w.Reason != reason || !strings.Contains(w.Message, message) {
			return fmt.Errorf("%s state %+v, want waiting %s with %q", container, containerStatus(p, container).State, reason, message)
		}
		return nil
	}
}

// readyIs accepts a running pod whose Ready condition is status.
func readyIs(status v1.ConditionStatus) func(*v1.Pod) error {
	return func(p *v1.Pod) error {
		if got := podCondition(p, v1.PodReady); p.Status.Phase != v1.PodRunning || got != status {
			return fmt.Errorf("phase %s Ready %q, want Running and Ready %q", p.Status.Phase, got, status)
		}
		return nil
	}
}

// runsContainer accepts a pod whose container name is running as the
// runtime's container id.
func runsContainer(name, id string) func(*v1.Pod) error {
	return func(p *v1.Pod) error {
		c := containerStatus(p, name)
		if c.State.Running == nil || !strings.HasSuffix(c.ContainerID, "://"+id) {
			return fmt.Errorf("%s is %q in state %+v, want %s running", name, c.ContainerID, c.State, id)
		}
		return nil
	}
}
