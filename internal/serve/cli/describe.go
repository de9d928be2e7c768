package cli

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// timeFormat is how describe prints a point in time, as kubectl does.
const timeFormat = time.RFC1123Z

// Describe prints pod in the layout of `kubectl describe pod`, with a
// startup timeline before the events. Of evs only the pod's own are shown
// (same UID, or same namespace and name when the pod has no UID). now is
// what the events' ages are measured from.
func Describe(w io.Writer, pod v1.Pod, evs []events.Event, now time.Time) error {
	evs = podEvents(&pod, evs)
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 8, 2, ' ', 0)
	d := &describer{w: tw}

	d.line(0, "Name", pod.Name)
	d.line(0, "Namespace", pod.Namespace)
	if pod.Spec.Priority != nil {
		d.line(0, "Priority", strconv.Itoa(int(*pod.Spec.Priority)))
	}
	if pod.Spec.PriorityClassName != "" {
		d.line(0, "Priority Class Name", pod.Spec.PriorityClassName)
	}
	if pod.Spec.ServiceAccountName != "" {
		d.line(0, "Service Account", pod.Spec.ServiceAccountName)
	}
	node := "<none>"
	if pod.Spec.NodeName != "" {
		node = pod.Spec.NodeName
		if pod.Status.HostIP != "" {
			node += "/" + pod.Status.HostIP
		}
	}
	d.line(0, "Node", node)
	if pod.Status.StartTime != nil {
		d.line(0, "Start Time", pod.Status.StartTime.Format(timeFormat))
	}
	d.keyValues(0, "Labels", pod.Labels, "=")
	annotations := maps.Clone(pod.Annotations)
	delete(annotations, "kubectl.kubernetes.io/last-applied-configuration")
	d.keyValues(0, "Annotations", annotations, ": ")
	if pod.DeletionTimestamp != nil {
		d.line(0, "Status", "Terminating (lasts "+age(pod.DeletionTimestamp.Time, now)+")")
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			d.line(0, "Termination Grace Period", fmt.Sprintf("%ds", *g))
		}
	} else {
		d.line(0, "Status", string(pod.Status.Phase))
	}
	if pod.Status.Reason != "" {
		d.line(0, "Reason", pod.Status.Reason)
	}
	if pod.Status.Message != "" {
		d.line(0, "Message", pod.Status.Message)
	}
	d.line(0, "IP", pod.Status.PodIP)
	if len(pod.Status.PodIPs) == 0 {
		d.line(0, "IPs", "<none>")
	} else {
		d.title(0, "IPs")
		for _, ip := range pod.Status.PodIPs {
			d.line(1, "IP", ip.IP)
		}
	}
	if ref := controllerOf(&pod); ref != "" {
		d.line(0, "Controlled By", ref)
	}

	if len(pod.Spec.InitContainers) > 0 {
		d.containers("Init Containers", pod.Spec.InitContainers, pod.Status.InitContainerStatuses)
	}
	d.containers("Containers", pod.Spec.Containers, pod.Status.ContainerStatuses)

	if len(pod.Status.Conditions) > 0 {
		d.title(0, "Conditions")
		d.row(1, "Type", "Status")
		for _, c := range pod.Status.Conditions {
			d.row(1, string(c.Type), string(c.Status))
		}
	}
	d.volumes(pod.Spec.Volumes)
	d.line(0, "QoS Class", string(podspec.QOSClass(&pod)))
	d.keyValues(0, "Node-Selectors", pod.Spec.NodeSelector, "=")
	d.tolerations(pod.Spec.Tolerations)
	d.timeline(timeline(&pod, evs))
	d.events(evs, now)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("lay out: %w", err)
	}
	// A label with an empty value leaves the padding at the line's end.
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	_, err := io.WriteString(w, out.String())
	return wrapWrite(err)
}

// podEvents keeps the events of pod, ordered by when they last happened;
// events about the node are not the pod's.
func podEvents(pod *v1.Pod, evs []events.Event) []events.Event {
	var out []events.Event
	for _, e := range evs {
		if e.Node != "" {
			continue
		}
		if pod.UID != "" && e.PodUID != "" {
			if e.PodUID == pod.UID {
				out = append(out, e)
			}
			continue
		}
		if e.Namespace == pod.Namespace && e.Pod == pod.Name {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b events.Event) int { return a.LastTime.Compare(b.LastTime) })
	return out
}

func controllerOf(pod *v1.Pod) string {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			return ref.Kind + "/" + ref.Name
		}
	}
	return ""
}

// describer writes indented "Label:<tab>value" lines to a tab writer,
// which lines up the values of neighbouring lines.
type describer struct {
	w io.Writer
}

func (d *describer) printf(level int, format string, args ...any) {
	fmt.Fprintf(d.w, strings.Repeat("  ", level)+format, args...)
}

// line writes "label:  value".
func (d *describer) line(level int, label, value string) {
	d.printf(level, "%s:\t%s\n", label, value)
}

// title writes "label:" alone, heading the lines below it.
func (d *describer) title(level int, label string) {
	d.printf(level, "%s:\n", label)
}

// row writes cells separated by tabs.
func (d *describer) row(level int, cells ...string) {
	d.printf(level, "%s\n", strings.Join(cells, "\t"))
}

// keyValues writes a sorted map, one entry a line, or <none>.
func (d *describer) keyValues(level int, label string, m map[string]string, sep string) {
	if len(m) == 0 {
		d.line(level, label, "<none>")
		return
	}
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i == 0 {
			d.line(level, label, k+sep+m[k])
			continue
		}
		d.printf(level, "\t%s\n", k+sep+m[k])
	}
}

// list writes label: with the items below it, or label: <none>.
func (d *describer) list(level int, label string, items []string) {
	if len(items) == 0 {
		d.line(level, label, "<none>")
		return
	}
	d.title(level, label)
	for _, it := range items {
		d.printf(level+1, "%s\n", it)
	}
}

func (d *describer) containers(title string, specs []v1.Container, statuses []v1.ContainerStatus) {
	d.title(0, title)
	for _, c := range specs {
		var st *v1.ContainerStatus
		for i := range statuses {
			if statuses[i].Name == c.Name {
				st = &statuses[i]
			}
		}
		d.container(c, st)
	}
}

func (d *describer) container(c v1.Container, st *v1.ContainerStatus) {
	d.title(1, c.Name)
	if st != nil {
		d.line(2, "Container ID", st.ContainerID)
	}
	d.line(2, "Image", c.Image)
	if st != nil {
		d.line(2, "Image ID", st.ImageID)
	}
	d.ports(c.Ports)
	if len(c.Command) > 0 {
		d.list(2, "Command", c.Command)
	}
	if len(c.Args) > 0 {
		d.list(2, "Args", c.Args)
	}
	if st == nil {
		d.line(2, "State", "Waiting")
	} else {
		d.state(2, "State", st.State)
		if s := st.LastTerminationState; s.Running != nil || s.Waiting != nil || s.Terminated != nil {
			d.state(2, "Last State", s)
		}
		d.line(2, "Ready", boolString(st.Ready))
		d.line(2, "Restart Count", strconv.Itoa(int(st.RestartCount)))
	}
	d.resources(2, "Limits", c.Resources.Limits)
	d.resources(2, "Requests", c.Resources.Requests)
	for _, p := range []struct {
		label string
		probe *v1.Probe
	}{{"Liveness", c.LivenessProbe}, {"Readiness", c.ReadinessProbe}, {"Startup", c.StartupProbe}} {
		if p.probe != nil {
			d.line(2, p.label, probeString(p.probe))
		}
	}
	if len(c.EnvFrom) > 0 {
		d.title(2, "Environment Variables from")
		for _, from := range c.EnvFrom {
			d.printf(3, "%s\n", envFromString(from))
		}
	}
	if len(c.Env) == 0 {
		d.line(2, "Environment", "<none>")
	} else {
		d.title(2, "Environment")
		for _, e := range c.Env {
			d.line(3, e.Name, envValueString(e))
		}
	}
	var mounts []string
	for _, m := range c.VolumeMounts {
		flags := "rw"
		if m.ReadOnly {
			flags = "ro"
		}
		if m.SubPath != "" {
			flags += fmt.Sprintf(",path=%q", m.SubPath)
		}
		mounts = append(mounts, fmt.Sprintf("%s from %s (%s)", m.MountPath, m.Name, flags))
	}
	d.list(2, "Mounts", mounts)
}

func (d *describer) ports(ports []v1.ContainerPort) {
	if len(ports) == 0 {
		d.line(2, "Port", "<none>")
		d.line(2, "Host Port", "<none>")
		return
	}
	var cp, hp []string
	for _, p := range ports {
		proto := cmp.Or(p.Protocol, v1.ProtocolTCP)
		cp = append(cp, fmt.Sprintf("%d/%s", p.ContainerPort, proto))
		hp = append(hp, fmt.Sprintf("%d/%s", p.HostPort, proto))
	}
	label := "Port"
	if len(ports) > 1 {
		label = "Ports"
	}
	d.line(2, label, strings.Join(cp, ", "))
	d.line(2, "Host "+label, strings.Join(hp, ", "))
}

func (d *describer) state(level int, label string, s v1.ContainerState) {
	switch {
	case s.Running != nil:
		d.line(level, label, "Running")
		d.line(level+1, "Started", s.Running.StartedAt.Format(timeFormat))
	case s.Terminated != nil:
		t := s.Terminated
		d.line(level, label, "Terminated")
		if t.Reason != "" {
			d.line(level+1, "Reason", t.Reason)
		}
		if t.Message != "" {
			d.line(level+1, "Message", t.Message)
		}
		d.line(level+1, "Exit Code", strconv.Itoa(int(t.ExitCode)))
		if t.Signal != 0 {
			d.line(level+1, "Signal", strconv.Itoa(int(t.Signal)))
		}
		d.line(level+1, "Started", t.StartedAt.Format(timeFormat))
		d.line(level+1, "Finished", t.FinishedAt.Format(timeFormat))
	case s.Waiting != nil:
		d.line(level, label, "Waiting")
		if s.Waiting.Reason != "" {
			d.line(level+1, "Reason", s.Waiting.Reason)
		}
		if s.Waiting.Message != "" {
			d.line(level+1, "Message", s.Waiting.Message)
		}
	default:
		d.line(level, label, "Waiting")
	}
}

func (d *describer) resources(level int, label string, rl v1.ResourceList) {
	if len(rl) == 0 {
		return
	}
	d.title(level, label)
	for _, name := range slices.Sorted(maps.Keys(rl)) {
		q := rl[name]
		d.line(level+1, string(name), q.String())
	}
}

func boolString(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// probeString is kubectl's one-line probe summary, e.g.
// "exec [cat /tmp/healthy] delay=0s timeout=1s period=1s #success=1 #failure=3".
func probeString(p *v1.Probe) string {
	var action string
	switch h := p.ProbeHandler; {
	case h.Exec != nil:
		action = fmt.Sprintf("exec [%s]", strings.Join(h.Exec.Command, " "))
	case h.HTTPGet != nil:
		u := url.URL{
			Scheme: strings.ToLower(string(cmp.Or(h.HTTPGet.Scheme, v1.URISchemeHTTP))),
			Host:   net.JoinHostPort(h.HTTPGet.Host, h.HTTPGet.Port.String()),
			Path:   h.HTTPGet.Path,
		}
		action = "http-get " + u.String()
	case h.TCPSocket != nil:
		action = fmt.Sprintf("tcp-socket %s:%s", h.TCPSocket.Host, h.TCPSocket.Port.String())
	case h.GRPC != nil:
		service := ""
		if h.GRPC.Service != nil {
			service = *h.GRPC.Service
		}
		action = strings.TrimSpace(fmt.Sprintf("grpc <pod>:%d %s", h.GRPC.Port, service))
	default:
		action = "unknown"
	}
	return fmt.Sprintf("%s delay=%ds timeout=%ds period=%ds #success=%d #failure=%d", action,
		p.InitialDelaySeconds, p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold)
}

func optional(b *bool) string {
	return "Optional: " + strconv.FormatBool(b != nil && *b)
}

func envFromString(from v1.EnvFromSource) string {
	prefix := ""
	if from.Prefix != "" {
		prefix = fmt.Sprintf(" with prefix '%s'", from.Prefix)
	}
	switch {
	case from.ConfigMapRef != nil:
		return fmt.Sprintf("%s ConfigMap%s  %s", from.ConfigMapRef.Name, prefix, optional(from.ConfigMapRef.Optional))
	case from.SecretRef != nil:
		return fmt.Sprintf("%s Secret%s  %s", from.SecretRef.Name, prefix, optional(from.SecretRef.Optional))
	}
	return "<unknown source>"
}

func envValueString(e v1.EnvVar) string {
	src := e.ValueFrom
	switch {
	case src == nil:
		return e.Value
	case src.FieldRef != nil:
		return fmt.Sprintf("(%s:%s)", cmp.Or(src.FieldRef.APIVersion, "v1"), src.FieldRef.FieldPath)
	case src.ResourceFieldRef != nil:
		ref := src.ResourceFieldRef
		if ref.ContainerName != "" {
			return fmt.Sprintf("%s of container %s", ref.Resource, ref.ContainerName)
		}
		return ref.Resource
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		return fmt.Sprintf("<set to the key '%s' of config map '%s'>  %s", r.Key, r.Name, optional(r.Optional))
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		return fmt.Sprintf("<set to the key '%s' in secret '%s'>  %s", r.Key, r.Name, optional(r.Optional))
	case src.FileKeyRef != nil:
		r := src.FileKeyRef
		return fmt.Sprintf("<set to the key '%s' in file '%s' of volume '%s'>", r.Key, r.Path, r.VolumeName)
	}
	return "<unknown source>"
}

func (d *describer) volumes(vols []v1.Volume) {
	if len(vols) == 0 {
		d.line(0, "Volumes", "<none>")
		return
	}
	d.title(0, "Volumes")
	for _, v := range vols {
		d.title(1, v.Name)
		s := v.VolumeSource
		switch {
		case s.EmptyDir != nil:
			d.line(2, "Type", "EmptyDir (a temporary directory that shares a pod's lifetime)")
			d.line(2, "Medium", string(s.EmptyDir.Medium))
			limit := "<unset>"
			if s.EmptyDir.SizeLimit != nil {
				limit = s.EmptyDir.SizeLimit.String()
			}
			d.line(2, "SizeLimit", limit)
		case s.HostPath != nil:
			d.line(2, "Type", "HostPath (bare host directory volume)")
			d.line(2, "Path", s.HostPath.Path)
			hpType := ""
			if s.HostPath.Type != nil {
				hpType = string(*s.HostPath.Type)
			}
			d.line(2, "HostPathType", hpType)
		case s.ConfigMap != nil:
			d.line(2, "Type", "ConfigMap (a volume populated by a ConfigMap)")
			d.line(2, "Name", s.ConfigMap.Name)
			d.line(2, "Optional", strconv.FormatBool(s.ConfigMap.Optional != nil && *s.ConfigMap.Optional))
		case s.Secret != nil:
			d.line(2, "Type", "Secret (a volume populated by a Secret)")
			d.line(2, "SecretName", s.Secret.SecretName)
			d.line(2, "Optional", strconv.FormatBool(s.Secret.Optional != nil && *s.Secret.Optional))
		case s.DownwardAPI != nil:
			d.line(2, "Type", "DownwardAPI (a volume populated by information about the pod)")
			d.downwardItems(s.DownwardAPI.Items)
		case s.Projected != nil:
			d.line(2, "Type", "Projected (a volume that contains injected data from multiple sources)")
			for _, p := range s.Projected.Sources {
				switch {
				case p.ConfigMap != nil:
					d.line(2, "ConfigMapName", p.ConfigMap.Name)
				case p.Secret != nil:
					d.line(2, "SecretName", p.Secret.Name)
				case p.ServiceAccountToken != nil:
					var secs int64
					if p.ServiceAccountToken.ExpirationSeconds != nil {
						secs = *p.ServiceAccountToken.ExpirationSeconds
					}
					d.line(2, "TokenExpirationSeconds", strconv.FormatInt(secs, 10))
				case p.DownwardAPI != nil:
					d.line(2, "DownwardAPI", "true")
				}
			}
		default:
			d.line(2, "Type", "<unknown>")
		}
	}
}

func (d *describer) downwardItems(items []v1.DownwardAPIVolumeFile) {
	var lines []string
	for _, it := range items {
		switch {
		case it.FieldRef != nil:
			lines = append(lines, it.FieldRef.FieldPath+" -> "+it.Path)
		case it.ResourceFieldRef != nil:
			lines = append(lines, it.ResourceFieldRef.Resource+" -> "+it.Path)
		}
	}
	d.list(2, "Items", lines)
}

func (d *describer) tolerations(ts []v1.Toleration) {
	var lines []string
	for _, t := range ts {
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		if t.Effect != "" {
			s += ":" + string(t.Effect)
		}
		if t.Operator == v1.TolerationOpExists && t.Value == "" {
			s += " op=Exists"
		}
		if t.TolerationSeconds != nil {
			s += fmt.Sprintf(" for %ds", *t.TolerationSeconds)
		}
		lines = append(lines, strings.TrimSpace(s))
	}
	if len(lines) == 0 {
		d.line(0, "Tolerations", "<none>")
		return
	}
	d.line(0, "Tolerations", lines[0])
	for _, l := range lines[1:] {
		d.printf(0, "\t%s\n", l)
	}
}

func (d *describer) events(evs []events.Event, now time.Time) {
	if len(evs) == 0 {
		d.line(0, "Events", "<none>")
		return
	}
	d.title(0, "Events")
	d.row(1, "Type", "Reason", "Age", "From", "Message")
	d.row(1, "----", "------", "----", "----", "-------")
	for _, e := range evs {
		when := age(e.FirstTime, now)
		if e.Count > 1 {
			when = fmt.Sprintf("%s (x%d over %s)", age(e.LastTime, now), e.Count, age(e.FirstTime, now))
		}
		d.row(1, e.Type, e.Reason, when, "nodelet", strings.TrimSpace(e.Message))
	}
}
