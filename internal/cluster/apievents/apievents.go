// Package apievents is beside the pipeline, in cluster mode: it sends the
// events the recorder (package events) gets to the API server, as the
// kubelet does: core/v1 Events from source component "kubelet" on this
// host, through client-go's event broadcaster, whose correlator folds
// repeats into one Event with a count and whose spam filter bounds what
// one object can send. `kubectl describe pod` and `kubectl get events`
// then show why a pod does not start, as with the kubelet.
//
// What the API gets: every event the kubelet sends, Warnings (Failed,
// BackOff, FailedMount, Unhealthy, ...) and Normal ones (Pulled, Created,
// Started, Killing, the node's own events, ...): tools and the upstream
// conformance suites wait for them (a container's Started event, say).
// The steps only nodelet records (Admitted, SandboxReady, PodReady,
// InitContainerCompleted) stay on the node, where `nodelet describe pod`
// and the kubelet API's /events show them.
package apievents

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Component is the events' source component, the kubelet's.
const Component = "kubelet"

// LocalReasons are the Normal events kept on the node only: the ones the
// kubelet does not record.
var LocalReasons = []string{"Admitted", "SandboxReady", "PodReady", "InitContainerCompleted"}

// Sink sends events to the API server; it is an events.Forwarder.
type Sink struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// New returns a Sink for node nodeName that sends through client (its own
// rate limit: the kubelet's eventRecordQPS and eventBurst); Run starts
// it.
func New(client kubernetes.Interface, nodeName string) *Sink {
	b := record.NewBroadcaster(record.WithContext(context.Background()))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Sink{
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, v1.EventSource{Component: Component, Host: nodeName}),
	}
}

// Run sends events until ctx ends, then drops what is still queued.
func (s *Sink) Run(ctx context.Context) {
	<-ctx.Done()
	s.broadcaster.Shutdown()
}

// PodEvent sends an event about pod, unless it is one of LocalReasons.
func (s *Sink) PodEvent(pod *v1.Pod, eventType, reason, message string) {
	if eventType == v1.EventTypeNormal && slices.Contains(LocalReasons, reason) {
		return
	}
	s.recorder.Event(PodRef(pod), eventType, reason, message)
}

// NodeEvent sends an event about the node, as the kubelet refers to its
// node: kind Node, its name as both name and UID.
func (s *Sink) NodeEvent(node, eventType, reason, message string) {
	s.recorder.Event(NodeRef(node), eventType, reason, message)
}

// PodRef is the involved object of a pod's events.
func PodRef(pod *v1.Pod) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion}
}

// NodeRef is the involved object of the node's events.
func NodeRef(node string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
}
