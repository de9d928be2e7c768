package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files in testdata/")

// now is the fixed "now" of the printer tests.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

// golden compares got with testdata/name, or rewrites it with -rewrite.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test -rewrite to accept):\n%s\nwant:\n%s", path, got, want)
	}
}

func ptr[T any](v T) *T { return &v }

func running(since time.Duration) v1.ContainerState {
	return v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: ago(since)}}
}

func waiting(reason string) v1.ContainerState {
	return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}
}

func terminated(reason string, code int32, started, finished time.Duration) v1.ContainerState {
	return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		Reason: reason, ExitCode: code, StartedAt: ago(started), FinishedAt: ago(finished)}}
}

func newPod(name string, created time.Duration, containers ...string) v1.Pod {
	p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: ktypes.UID("uid-" + name),
		CreationTimestamp: ago(created)}}
	p.Spec.NodeName = "node1"
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "busybox"})
	}
	return p
}

// tablePods covers the STATUS column's cases.
func tablePods() []v1.Pod {
	web := newPod("web", 10*time.Minute, "app")
	web.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.5", PodIPs: []v1.PodIP{{IP: "10.88.0.5"}},
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, State: running(10 * time.Minute)}}}

	crash := newPod("crashy", 2*time.Hour, "app")
	crash.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.6",
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", RestartCount: 5, State: waiting("CrashLoopBackOff"),
			LastTerminationState: terminated("Error", 1, 5*time.Minute+2*time.Second, 5*time.Minute)}}}

	done := newPod("job", 3*24*time.Hour, "app")
	done.Status = v1.PodStatus{Phase: v1.PodSucceeded, PodIP: "10.88.0.7",
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: terminated("Completed", 0, time.Hour, time.Hour)}}}

	initPod := newPod("init", 30*time.Second, "app")
	initPod.Spec.InitContainers = []v1.Container{{Name: "one"}, {Name: "two"}}
	initPod.Status = v1.PodStatus{Phase: v1.PodPending, PodIP: "10.88.0.8",
		InitContainerStatuses: []v1.ContainerStatus{
			{Name: "one", State: terminated("Completed", 0, 20*time.Second, 15*time.Second)},
			{Name: "two", State: running(14 * time.Second)}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: waiting("PodInitializing")}}}

	pull := newPod("pull", 90*time.Second, "app")
	pull.Status = v1.PodStatus{Phase: v1.PodPending, PodIP: "10.88.0.9",
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", State: waiting("ErrImagePull")}}}

	pending := newPod("pending", 3*time.Second, "app", "sidecar")
	pending.Status = v1.PodStatus{Phase: v1.PodPending}

	term := newPod("terminating", 26*time.Hour, "app")
	term.DeletionTimestamp = ptr(ago(time.Second))
	term.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}, {ConditionType: "example.com/dns"}}
	term.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.10",
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: "example.com/lb", Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, State: running(26 * time.Hour)}}}

	return []v1.Pod{web, crash, done, initPod, pull, pending, term}
}

func TestPrintPodsTable(t *testing.T) {
	for _, format := range []string{FormatTable, FormatWide} {
		var b bytes.Buffer
		if err := PrintPods(&b, tablePods(), format, now); err != nil {
			t.Fatal(err)
		}
		golden(t, "pods-"+map[string]string{"": "table", "wide": "wide"}[format]+".golden", b.String())
	}
}

func TestPodStatusColumn(t *testing.T) {
	want := map[string][3]string{ // READY, STATUS, RESTARTS
		"web":         {"1/1", "Running", "0"},
		"crashy":      {"0/1", "CrashLoopBackOff", "5 (5m ago)"},
		"job":         {"0/1", "Completed", "0"},
		"init":        {"0/1", "Init:1/2", "0"},
		"pull":        {"0/1", "ErrImagePull", "0"},
		"pending":     {"0/2", "Pending", "0"},
		"terminating": {"1/1", "Terminating", "0"},
	}
	for _, p := range tablePods() {
		cells := rowOf(&p).cells(now, false, false)
		if got := [3]string{cells[1], cells[2], cells[3]}; got != want[p.Name] {
			t.Errorf("%s: %q, want %q", p.Name, got, want[p.Name])
		}
	}
}

func TestPodStatusEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  func(p *v1.Pod)
		want string
	}{
		{"init failed", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i"}}
			p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "i", State: terminated("Error", 1, 0, 0)}}
		}, "Init:Error"},
		{"init exit code", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i"}}
			p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "i", State: terminated("", 3, 0, 0)}}
		}, "Init:ExitCode:3"},
		{"init crash loop", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i"}}
			p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "i", State: waiting("CrashLoopBackOff")}}
		}, "Init:CrashLoopBackOff"},
		{"pod initializing", func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{Name: "i"}}
			p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "i", State: terminated("Completed", 0, 0, 0)}}
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: waiting("PodInitializing")}}
		}, "PodInitializing"},
		{"evicted", func(p *v1.Pod) { p.Status.Phase, p.Status.Reason = v1.PodFailed, "Evicted" }, "Evicted"},
		{"one of two completed, not ready", func(p *v1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "b"})
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}
			p.Status.ContainerStatuses = []v1.ContainerStatus{
				{Name: "app", Ready: true, State: running(time.Minute)},
				{Name: "b", State: terminated("Completed", 0, 0, 0)}}
		}, "NotReady"},
		{"one of two completed", func(p *v1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "b"})
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
			p.Status.ContainerStatuses = []v1.ContainerStatus{
				{Name: "app", Ready: true, State: running(time.Minute)},
				{Name: "b", State: terminated("Completed", 0, 0, 0)}}
		}, "Running"},
		{"signal", func(p *v1.Pod) {
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{
				Terminated: &v1.ContainerStateTerminated{Signal: 9}}}}
		}, "Signal:9"},
	} {
		p := newPod("p", time.Minute, "app")
		p.Status.Phase = v1.PodPending
		tc.pod(&p)
		if got := rowOf(&p).Status; got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPrintPodsNamespaces(t *testing.T) {
	a, b := newPod("web", time.Minute, "app"), newPod("dns", time.Minute, "app")
	b.Namespace = "kube-system"
	var out bytes.Buffer
	if err := PrintPods(&out, []v1.Pod{b, a}, "", now); err != nil {
		t.Fatal(err)
	}
	want := "NAMESPACE     NAME   READY   STATUS   RESTARTS   AGE   IP\n" +
		"default       web    0/1              0          60s   <none>\n" +
		"kube-system   dns    0/1              0          60s   <none>\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPrintPodsYAMLAndJSONRoundTrip(t *testing.T) {
	pods := tablePods()
	for _, format := range []string{FormatYAML, FormatJSON} {
		var out bytes.Buffer
		if err := PrintPods(&out, pods, format, now); err != nil {
			t.Fatal(err)
		}
		var list v1.PodList
		var err error
		if format == FormatYAML {
			err = yaml.UnmarshalStrict(out.Bytes(), &list)
		} else {
			if !strings.HasPrefix(out.String(), "{\n    \"kind\": \"PodList\"") {
				t.Errorf("json not indented:\n%.100s", out.String())
			}
			err = json.Unmarshal(out.Bytes(), &list)
		}
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != len(pods) {
			t.Fatalf("%s: %s %s with %d items", format, list.Kind, list.APIVersion, len(list.Items))
		}
		byName := map[string]v1.Pod{}
		for _, p := range pods {
			byName[p.Name] = withKind(p)
		}
		for _, got := range list.Items {
			if want := byName[got.Name]; !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s: %s came back different:\n%+v\nwant\n%+v", format, got.Name, got, want)
			}
		}
	}
}

func TestPrintPodsErrors(t *testing.T) {
	if err := PrintPods(&bytes.Buffer{}, nil, "xml", now); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("unknown format: %v", err)
	}
	var out bytes.Buffer
	if err := PrintPods(&out, nil, "", now); err != nil || out.String() != "No resources found.\n" {
		t.Errorf("no pods: %q %v", out.String(), err)
	}
}
