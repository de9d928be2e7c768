package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Output formats of PrintPods and WatchPods.
const (
	FormatTable = ""
	FormatWide  = "wide"
	FormatYAML  = "yaml"
	FormatJSON  = "json"
)

// checkFormat rejects an output format PrintPods does not know.
func checkFormat(format string) error {
	switch format {
	case FormatTable, FormatWide, FormatYAML, FormatJSON:
		return nil
	}
	return fmt.Errorf("unknown output format %q (want wide, yaml or json)", format)
}

// PrintPods prints pods as `kubectl get pods` does: a table (format ""),
// the wide table ("wide"), or the v1.PodList as YAML ("yaml") or indented
// JSON ("json"). now is what AGE and the restart times are measured from.
// Pods are sorted by namespace and name; a NAMESPACE column comes first
// when they are from more than one namespace.
func PrintPods(w io.Writer, pods []v1.Pod, format string, now time.Time) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, func(a, b v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	switch format {
	case FormatYAML, FormatJSON:
		return printList(w, sorted, format)
	}
	t := newPodTable(format == FormatWide, manyNamespaces(sorted))
	for i := range sorted {
		t.add(rowOf(&sorted[i]), now)
	}
	if len(sorted) == 0 {
		_, err := fmt.Fprintln(w, "No resources found.")
		return wrapWrite(err)
	}
	return wrapWrite(t.flush(w, true))
}

func manyNamespaces(pods []v1.Pod) bool {
	for _, p := range pods {
		if p.Namespace != pods[0].Namespace {
			return true
		}
	}
	return false
}

func wrapWrite(err error) error {
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// printList prints pods as a v1.PodList, with the kinds filled in so that
// the output reads back as one.
func printList(w io.Writer, pods []v1.Pod, format string) error {
	list := v1.PodList{Items: make([]v1.Pod, len(pods))}
	list.Kind, list.APIVersion = "PodList", "v1"
	for i, p := range pods {
		list.Items[i] = withKind(p)
	}
	return printObject(w, &list, format)
}

func withKind(p v1.Pod) v1.Pod {
	if p.Kind == "" {
		p.Kind = "Pod"
	}
	if p.APIVersion == "" {
		p.APIVersion = "v1"
	}
	return p
}

// printObject prints obj as YAML or as JSON indented like kubectl's.
func printObject(w io.Writer, obj any, format string) error {
	var out []byte
	var err error
	if format == FormatYAML {
		out, err = yaml.Marshal(obj)
	} else {
		out, err = json.MarshalIndent(obj, "", "    ")
		out = append(out, '\n')
	}
	if err != nil {
		return fmt.Errorf("encode %s: %w", format, err)
	}
	_, err = w.Write(out)
	return wrapWrite(err)
}

// podRow is one pod's line in the table, before the times in it are
// turned into ages. Two rows are equal when the pod looks the same.
type podRow struct {
	Namespace, Name string
	Ready           string
	Status          string
	Restarts        int
	LastRestart     time.Time
	Created         time.Time
	IP              string
	Node            string
	Nominated       string
	ReadinessGates  string
}

// cells renders the row; wide adds the NODE, NOMINATED NODE and
// READINESS GATES columns.
func (r podRow) cells(now time.Time, wide, namespace bool) []string {
	restarts := strconv.Itoa(r.Restarts)
	if r.Restarts != 0 && !r.LastRestart.IsZero() {
		restarts += " (" + age(r.LastRestart, now) + " ago)"
	}
	var out []string
	if namespace {
		out = append(out, r.Namespace)
	}
	out = append(out, r.Name, r.Ready, r.Status, restarts, age(r.Created, now), r.IP)
	if wide {
		out = append(out, r.Node, r.Nominated, r.ReadinessGates)
	}
	return out
}

// age is kubectl's AGE: a short human duration, <unknown> for no time.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// rowOf works out a pod's line the way kubectl's pod printer does: the
// STATUS column is the phase, overridden by the pod's reason, then by the
// first init container that is not done, then by the containers' waiting
// or terminated reasons, then by Terminating.
func rowOf(pod *v1.Pod) podRow {
	row := podRow{
		Namespace: pod.Namespace,
		Name:      pod.Name,
		Created:   pod.CreationTimestamp.Time,
		IP:        none(pod.Status.PodIP),
		Node:      none(pod.Spec.NodeName),
		Nominated: none(pod.Status.NominatedNodeName),
	}
	if len(pod.Status.PodIPs) > 0 && pod.Status.PodIPs[0].IP != "" {
		row.IP = pod.Status.PodIPs[0].IP
	}

	status := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		status = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Reason == v1.PodReasonSchedulingGated {
			status = v1.PodReasonSchedulingGated
		}
	}

	sidecars := map[string]bool{}
	total := len(pod.Spec.Containers)
	for _, c := range pod.Spec.InitContainers {
		if podspec.IsSidecar(&c) {
			sidecars[c.Name] = true
			total++
		}
	}
	ready := 0
	restarts, sidecarRestarts := 0, 0
	var lastRestart, lastSidecarRestart time.Time
	later := func(t *time.Time, s v1.ContainerStatus) {
		if term := s.LastTerminationState.Terminated; term != nil && term.FinishedAt.After(*t) {
			*t = term.FinishedAt.Time
		}
	}

	initializing := false
	for i, s := range pod.Status.InitContainerStatuses {
		restarts += int(s.RestartCount)
		later(&lastRestart, s)
		if sidecars[s.Name] {
			sidecarRestarts += int(s.RestartCount)
			later(&lastSidecarRestart, s)
		}
		term, wait := s.State.Terminated, s.State.Waiting
		if term != nil && term.ExitCode == 0 {
			continue // done
		}
		if sidecars[s.Name] && s.Started != nil && *s.Started {
			if s.Ready {
				ready++
			}
			continue
		}
		initializing = true
		switch {
		case term != nil && term.Reason != "":
			status = "Init:" + term.Reason
		case term != nil && term.Signal != 0:
			status = fmt.Sprintf("Init:Signal:%d", term.Signal)
		case term != nil:
			status = fmt.Sprintf("Init:ExitCode:%d", term.ExitCode)
		case wait != nil && wait.Reason != "" && wait.Reason != "PodInitializing":
			status = "Init:" + wait.Reason
		default:
			status = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		break
	}

	if !initializing || conditionTrue(pod, v1.PodInitialized) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		running := false
		// Backwards, so that the first container's reason wins.
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			s := pod.Status.ContainerStatuses[i]
			restarts += int(s.RestartCount)
			later(&lastRestart, s)
			term, wait := s.State.Terminated, s.State.Waiting
			switch {
			case wait != nil && wait.Reason != "":
				status = wait.Reason
			case term != nil && term.Reason != "":
				status = term.Reason
			case term != nil && term.Signal != 0:
				status = fmt.Sprintf("Signal:%d", term.Signal)
			case term != nil:
				status = fmt.Sprintf("ExitCode:%d", term.ExitCode)
			case s.Ready && s.State.Running != nil:
				running = true
				ready++
			}
		}
		// A container still running keeps a pod with a completed one
		// from reading as Completed.
		if status == "Completed" && running {
			status = "NotReady"
			if conditionTrue(pod, v1.PodReady) {
				status = "Running"
			}
		}
	}

	if pod.DeletionTimestamp != nil {
		switch {
		case pod.Status.Reason == "NodeLost":
			status = "Unknown"
		case pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed:
			status = "Terminating"
		}
	}

	row.Ready = fmt.Sprintf("%d/%d", ready, total)
	row.Status = status
	row.Restarts, row.LastRestart = restarts, lastRestart
	row.ReadinessGates = "<none>"
	if gates := pod.Spec.ReadinessGates; len(gates) > 0 {
		met := 0
		for _, g := range gates {
			if conditionTrue(pod, g.ConditionType) {
				met++
			}
		}
		row.ReadinessGates = fmt.Sprintf("%d/%d", met, len(gates))
	}
	return row
}

func none(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func condition(pod *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func conditionTrue(pod *v1.Pod, t v1.PodConditionType) bool {
	c := condition(pod, t)
	return c != nil && c.Status == v1.ConditionTrue
}

// podTable lays rows out in columns separated by three spaces, like
// kubectl's tab writer. Its column widths only grow, so that the rows a
// watch prints later line up with the earlier ones.
type podTable struct {
	wide, namespace bool
	widths          []int
	pending         [][]string
}

func newPodTable(wide, namespace bool) *podTable {
	return &podTable{wide: wide, namespace: namespace}
}

func (t *podTable) header() []string {
	var h []string
	if t.namespace {
		h = append(h, "NAMESPACE")
	}
	h = append(h, "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP")
	if t.wide {
		h = append(h, "NODE", "NOMINATED NODE", "READINESS GATES")
	}
	return h
}

func (t *podTable) add(r podRow, now time.Time) {
	t.addCells(r.cells(now, t.wide, t.namespace))
}

func (t *podTable) addCells(cells []string) {
	t.pending = append(t.pending, cells)
}

// flush writes the pending rows, the header first if asked.
func (t *podTable) flush(w io.Writer, header bool) error {
	rows := t.pending
	t.pending = nil
	if header {
		rows = append([][]string{t.header()}, rows...)
	}
	for _, cells := range rows {
		for i, c := range cells {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], len(c))
		}
	}
	var b strings.Builder
	for _, cells := range rows {
		for i, c := range cells {
			if i == len(cells)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", t.widths[i]-len(c)+3))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
