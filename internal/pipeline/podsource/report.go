package podsource

import (
	"context"
	"errors"
	"log/slog"
	"sort"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// Reasons: the Class of a FileError and the reason label of
// nodelet_manifest_errors_total.
const (
	ReasonDecode            = "decode"              // not YAML/JSON, unknown or duplicated field, no pod in a file
	ReasonValidate          = "validate"            // a pod that Validate refuses
	ReasonTooLarge          = "too_large"           // over MaxManifestSize or MaxManifestURLBody
	ReasonTooManyPods       = "too_many_pods"       // over MaxPodsPerFile or MaxPodsPerURL
	ReasonTooManyContainers = "too_many_containers" // a pod over MaxContainersPerPod
	ReasonTooManyObjects    = "too_many_objects"    // over MaxObjectsPerFile
	ReasonRead              = "read"                // the file, directory or URL could not be read, or is not a regular file
	ReasonNotPod            = "not_pod"             // a document of another kind
	ReasonDuplicate         = "duplicate"           // a pod name already defined elsewhere in the source
	ReasonHTTPStatus        = "http_status"         // the URL answered neither 200 nor 304
	ReasonRedirect          = "redirect"            // the URL redirected from https to http
)

func reasons() []string {
	return []string{ReasonDecode, ReasonValidate, ReasonTooLarge, ReasonTooManyPods, ReasonTooManyContainers,
		ReasonTooManyObjects, ReasonRead, ReasonNotPod, ReasonDuplicate, ReasonHTTPStatus, ReasonRedirect}
}

// Update is the full content of one source at one moment (SET semantics):
// the pods it wants, and the problems met while reading it.
type Update struct {
	// Source is SourceFile or SourceHTTP.
	Source string
	// Pods are the static pods, sorted by namespace and name, unique by
	// namespace and name. Each carries podspec.AnnotationConfigSource = Source and
	// podspec.AnnotationConfigFile. A file (or URL) that fails keeps its last good
	// pods here. The receiver owns them.
	Pods []*v1.Pod
	// Errors are the problems, sorted by path and class. They have already
	// been logged and counted.
	Errors []FileError
	// ConfigMaps and Secrets are the objects of the manifest directory
	// (file source only), which pods of the same namespace refer to from
	// volumes and env. The receiver owns them.
	ConfigMaps []*v1.ConfigMap
	Secrets    []*v1.Secret
}

// ErrorCounter counts manifest problems by reason (a Reason* constant).
type ErrorCounter interface {
	Inc(reason string)
}

type counterVec struct{ vec *prometheus.CounterVec }

func (c counterVec) Inc(reason string) { c.vec.WithLabelValues(reason).Inc() }

// NewManifestErrorsCounter returns the counter nodelet_manifest_errors_total
// (label reason), registered in reg. If reg already holds it, that one is
// used. Every known reason starts at 0, so that rates exist before the
// first error. A nil reg leaves the counter unregistered.
func NewManifestErrorsCounter(reg prometheus.Registerer) ErrorCounter {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_manifest_errors_total",
		Help: "Pod manifests (files or URL bodies) or pods in them that could not be used, by reason.",
	}, []string{"reason"})
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			existing, same := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok || !same {
				// Only a programming error (a clashing metric of another
				// type or labels) gets here.
				panic("register nodelet_manifest_errors_total: " + err.Error())
			}
			vec = existing
		}
	}
	for _, r := range reasons() {
		vec.WithLabelValues(r)
	}
	return counterVec{vec}
}

type nopCounter struct{}

func (nopCounter) Inc(string) {}

// EventReasonFailedToLoadManifest is the reason of the Warning event about
// the node recorded for each manifest problem (a file skipped, a file whose
// last good version is kept, a pod or object name defined twice). Its
// message is "<file or URL>: <reason>"; for a kept file, "; its last good
// version is kept" follows.
const EventReasonFailedToLoadManifest = "FailedToLoadManifest"

// EventSink records an event about the node itself (involved object kind
// Node, named node); *events.Recorder is one.
type EventSink interface {
	NodeEvent(node, eventType, reason, message string)
}

type nopSink struct{}

func (nopSink) NodeEvent(string, string, string, string) {}

// reporter logs each problem once per distinct reason, and counts it and
// records it as an event about the node at the same time: a problem seen in
// the previous report is not logged (nor counted, nor recorded) again; one
// that went away and came back is.
type reporter struct {
	log     *slog.Logger
	metrics ErrorCounter
	events  EventSink
	node    string
	last    map[string]bool // path, class and reason of the last report
}

// newReporter returns a reporter; metrics and events may be nil. node is
// the node's name, the object of the events.
func newReporter(log *slog.Logger, metrics ErrorCounter, events EventSink, node string) *reporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = nopCounter{}
	}
	if events == nil {
		events = nopSink{}
	}
	return &reporter{log: log, metrics: metrics, events: events, node: node, last: map[string]bool{}}
}

func (r *reporter) report(errs []FileError) {
	current := make(map[string]bool, len(errs))
	for _, fe := range errs {
		key := fe.Path + "\x00" + fe.Class + "\x00" + fe.Reason()
		current[key] = true
		if r.last[key] {
			continue
		}
		r.metrics.Inc(fe.Class)
		r.events.NodeEvent(r.node, v1.EventTypeWarning, EventReasonFailedToLoadManifest, eventMessage(fe))
		switch {
		case fe.Class == ReasonDuplicate:
			r.log.Warn("duplicate pod name; the pod of the other manifest is used", "file", fe.Path, "reason", fe.Reason())
		case fe.Kept:
			r.log.Warn("keeping the last good version of the manifest", "file", fe.Path, "class", fe.Class, "reason", fe.Reason())
		default:
			r.log.Error("manifest skipped", "file", fe.Path, "class", fe.Class, "reason", fe.Reason())
		}
	}
	r.last = current
}

// eventMessage is the message of the event about fe: the file (or the
// redacted URL) and the reason.
func eventMessage(fe FileError) string {
	msg := fe.Path + ": " + fe.Reason()
	if fe.Kept && fe.Class != ReasonDuplicate {
		msg += "; its last good version is kept"
	}
	return msg
}

// sortErrors orders errs by path, then class, then reason.
func sortErrors(errs []FileError) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i], errs[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Class != b.Class {
			return a.Class < b.Class
		}
		return a.Reason() < b.Reason()
	})
}

// sortPods orders pods by namespace and name.
func sortPods(pods []*v1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// copyPods deep-copies pods, so that the receiver of an Update owns them.
func copyPods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	return out
}

// sameUpdate tells whether two snapshots of a source are equal: the same
// pods (the UID is a hash of the content) from the same files, and the
// same problems.
func sameUpdate(a, b Update) bool {
	if len(a.Pods) != len(b.Pods) || len(a.Errors) != len(b.Errors) ||
		!apiequality.Semantic.DeepEqual(a.ConfigMaps, b.ConfigMaps) || !apiequality.Semantic.DeepEqual(a.Secrets, b.Secrets) {
		return false
	}
	for i := range a.Pods {
		pa, pb := a.Pods[i], b.Pods[i]
		if pa.UID != pb.UID || pa.Namespace != pb.Namespace || pa.Name != pb.Name ||
			pa.Annotations[podspec.AnnotationConfigFile] != pb.Annotations[podspec.AnnotationConfigFile] {
			return false
		}
	}
	for i := range a.Errors {
		ea, eb := a.Errors[i], b.Errors[i]
		if ea.Path != eb.Path || ea.Class != eb.Class || ea.Kept != eb.Kept || ea.Reason() != eb.Reason() {
			return false
		}
	}
	return true
}

// sendUpdate records u as the last update a source sent and sends a copy
// the receiver owns. It returns false if ctx ended first.
func sendUpdate(ctx context.Context, out chan<- Update, sent **Update, u Update) bool {
	*sent = &u
	send := Update{Source: u.Source, Pods: copyPods(u.Pods), Errors: append([]FileError(nil), u.Errors...)}
	for _, cm := range u.ConfigMaps {
		send.ConfigMaps = append(send.ConfigMaps, cm.DeepCopy())
	}
	for _, secret := range u.Secrets {
		send.Secrets = append(send.Secrets, secret.DeepCopy())
	}
	select {
	case out <- send:
		return true
	case <-ctx.Done():
		return false
	}
}
