package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Authorization modes (--authorization-mode). AlwaysAllow and Webhook are
// the kubelet's; NodeletGroups is nodelet's own, for nodes without an API
// server to ask (see groupAuthorizer). Its name starts with "Nodelet" so
// that it cannot be taken for one of the API server's modes (AlwaysAllow,
// AlwaysDeny, ABAC, RBAC, Node, Webhook), and a kubelet given it refuses
// it instead of reading something else into it.
const (
	AuthorizationAlwaysAllow   = "AlwaysAllow"
	AuthorizationWebhook       = "Webhook"
	AuthorizationNodeletGroups = "NodeletGroups"
)

// CheckAuthorization refuses a mode nodelet does not know, and anonymous
// requests with AlwaysAllow: anyone who can reach the port could then run
// commands in every pod.
func CheckAuthorization(mode string, anonymous bool) error {
	switch mode {
	case AuthorizationAlwaysAllow:
		if anonymous {
			return errors.New("--anonymous-auth with --authorization-mode=AlwaysAllow would let anyone who reaches the port exec into every pod: " +
				"use --authorization-mode=" + AuthorizationNodeletGroups + " (or Webhook), or drop --anonymous-auth")
		}
		return nil
	case AuthorizationWebhook, AuthorizationNodeletGroups:
		return nil
	}
	return fmt.Errorf("--authorization-mode %q: want %s, %s or %s", mode, AuthorizationNodeletGroups, AuthorizationWebhook, AuthorizationAlwaysAllow)
}

// Attributes describe a request to the kubelet API as the API server's
// authorizer sees it: a verb on a subresource of this node.
type Attributes struct {
	User UserInfo
	// Verb is get, create, update, patch or delete.
	Verb string
	// Resource is always "nodes", Name the node's name.
	Resource    string
	Name        string
	Subresource string
	Path        string
}

// Authorizer decides whether a request may proceed. reason explains a
// denial; err means no decision could be made.
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (allowed bool, reason string, err error)
}

type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, Attributes) (bool, string, error) {
	return true, "", nil
}

// groupAuthorizer is the NodeletGroups mode: members of the admin group
// (system:masters, which the local admin certificate carries) may do
// anything; members of the read group (system:authenticated unless
// configured) may only get the read-only paths; everyone else, anonymous
// requests included, nothing.
type groupAuthorizer struct {
	adminGroup, readGroup string
}

// readOnlyPaths answer a GET without changing the node or running
// anything on it, and cost little to serve:
//
//   - /healthz: whether nodelet is healthy.
//   - /pods, /runningpods/: the pods' specs and status, as the manifests
//     (which the reader could be given anyway) and the runtime have them.
//   - /stats/: resource usage of the node, pods and containers.
//   - /metrics, /metrics/*: Prometheus metrics.
//   - /containerLogs/: what containers printed (kubectl's "pods/log" is a
//     read permission too).
//   - /events: the pod events nodelet recorded.
//   - /configz: the configuration, with its secrets redacted.
//
// Not read-only: /exec, /attach, /portForward and /run run commands in
// or connect to pods (whatever the method: WebSocket upgrades are GETs,
// and requestAuthorization makes them "create"), and /debug/pprof/ shows
// the command line and can keep the CPU busy for a profile or a trace.
var readOnlyPaths = []string{healthzPath, podsPath, runningPodsPath, statsPath, metricsPath, containerLogsPath, eventsPath, configzPath}

func (g groupAuthorizer) Authorize(_ context.Context, a Attributes) (bool, string, error) {
	if slices.Contains(a.User.Groups, g.adminGroup) {
		return true, "", nil
	}
	if !slices.Contains(a.User.Groups, g.readGroup) {
		return false, fmt.Sprintf("%s is in neither %s nor %s", a.User.Name, g.adminGroup, g.readGroup), nil
	}
	if a.Verb != "get" {
		return false, fmt.Sprintf("%s may only read (%s): %s is for %s", a.User.Name, g.readGroup, a.Verb, g.adminGroup), nil
	}
	for _, p := range readOnlyPaths {
		if isSubpath(a.Path, p) {
			return true, "", nil
		}
	}
	return false, fmt.Sprintf("%s is not a read-only path: it is for %s", a.Path, g.adminGroup), nil
}

// sarCreator is the one call of the SubjectAccessReview API the webhook
// authorizer makes.
type sarCreator interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// webhookAuthorizer asks the API server with a SubjectAccessReview, each
// within timeout.
type webhookAuthorizer struct {
	reviews sarCreator
	timeout time.Duration
}

func newWebhookAuthorizer(client kubernetes.Interface) webhookAuthorizer {
	return webhookAuthorizer{reviews: client.AuthorizationV1().SubjectAccessReviews(), timeout: webhookTimeout}
}

// sarSpec is the question the API server is asked about a: the user, with
// the extra fields a token review gave (a certificate's user has none), and
// the verb on the subresource of nodes/<name>, as the kubelet asks it.
func sarSpec(a Attributes) authorizationv1.SubjectAccessReviewSpec {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:   a.User.Name,
		UID:    a.User.UID,
		Groups: a.User.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb:        a.Verb,
			Group:       "",
			Version:     "v1",
			Resource:    a.Resource,
			Subresource: a.Subresource,
			Name:        a.Name,
		},
	}
	if len(a.User.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(a.User.Extra))
		for k, v := range a.User.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	return spec
}

func (w webhookAuthorizer) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	sar := &authorizationv1.SubjectAccessReview{Spec: sarSpec(a)}
	resp, err := w.reviews.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	st := resp.Status
	if st.Allowed && !st.Denied {
		return true, st.Reason, nil
	}
	if !st.Denied && st.EvaluationError != "" {
		return false, st.Reason, fmt.Errorf("subject access review: %s", st.EvaluationError)
	}
	return false, st.Reason, nil
}

// Paths whose subresource is not the default "proxy". Fine-grained
// subresources (pods, healthz, configz) fall back to proxy, as the
// kubelet's KubeletFineGrainedAuthz does.
const (
	podsPath        = "/pods"
	runningPodsPath = "/runningpods/"
	healthzPath     = "/healthz"
	configzPath     = "/configz"
	statsPath       = "/stats/"
	metricsPath     = "/metrics"
	logsPath        = "/logs/"
	checkpointPath  = "/checkpoint/"
	// Subresource proxy, named for the read-only paths.
	containerLogsPath = "/containerLogs/"
	eventsPath        = "/events"
)

// streamingPaths run or attach to processes in containers: they need
// "create" whatever the HTTP method, since WebSocket upgrades are GETs.
var streamingPaths = []string{"/exec/", "/attach/", "/portForward/", "/run/"}

// requestAuthorization returns the verb and, in the order to try them, the
// subresources of nodes/<name> that allow a request: any one suffices.
// ok is false for a method with no verb.
func requestAuthorization(method, path string) (verb string, subresources []string, ok bool) {
	switch method {
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	default:
		return "", nil, false
	}
	for _, p := range streamingPaths {
		if isSubpath(path, p) {
			verb = "create"
		}
	}
	switch {
	case isSubpath(path, podsPath), isSubpath(path, runningPodsPath):
		subresources = append(subresources, "pods")
	case isSubpath(path, healthzPath):
		subresources = append(subresources, "healthz")
	case isSubpath(path, configzPath):
		subresources = append(subresources, "configz")
	}
	switch {
	case isSubpath(path, statsPath):
		subresources = append(subresources, "stats")
	case isSubpath(path, metricsPath):
		subresources = append(subresources, "metrics")
	case isSubpath(path, logsPath):
		subresources = append(subresources, "log")
	case isSubpath(path, checkpointPath):
		subresources = append(subresources, "checkpoint")
	default:
		subresources = append(subresources, "proxy")
	}
	return verb, subresources, true
}

// isSubpath reports whether p is base or below it ("/stats" and
// "/stats/summary" are under "/stats/"; "/statsfoo" is not).
func isSubpath(p, base string) bool {
	base = strings.TrimSuffix(base, "/")
	return p == base || strings.HasPrefix(p, base+"/")
}

// InsecureAuthorizationReason is the reason of the Node Warning event
// that ClusterAuthorizationWarning's message goes with.
const InsecureAuthorizationReason = "InsecureAuthorization"

// ClusterAuthorizationWarning says, for a node of a cluster, what any
// identity of that cluster can do on the node's API when a's mode is not
// Webhook (chosen on purpose: Webhook is cluster mode's default); "" for
// Webhook. tokenWebhook tells whether bearer tokens are TokenReviewed, so
// that every service-account token of the cluster, pods' own included,
// authenticates.
func ClusterAuthorizationWarning(a Auth, tokenWebhook bool) string {
	who := "every client certificate of the client CA (other nodes' included)"
	if tokenWebhook {
		who += " and every service-account token of the cluster (pods' own included)"
	}
	switch a.AuthorizationMode {
	case AuthorizationAlwaysAllow:
		return fmt.Sprintf("authorization mode %s in cluster mode: %s may do anything on this node's API, "+
			"including exec into every pod and reading every container's logs; "+
			"--authorization-mode=%s (the kubelet's default) lets the API server's RBAC decide",
			AuthorizationAlwaysAllow, who, AuthorizationWebhook)
	case AuthorizationNodeletGroups:
		group := a.AuthorizationReadGroup
		if group == "" {
			group = AuthenticatedGroup
		}
		readers := "members of group " + group
		if group == AuthenticatedGroup {
			readers = who + " (group " + AuthenticatedGroup + ")"
		}
		return fmt.Sprintf("authorization mode %s in cluster mode: %s may read this node's %s: every pod's spec and status, "+
			"every container's logs, the node's events, stats, metrics and configuration; %s may do anything, exec into every pod included; "+
			"--authorization-mode=%s (the kubelet's default) lets the API server's RBAC decide",
			AuthorizationNodeletGroups, readers, strings.Join(readOnlyPaths, ", "), AdminGroup, AuthorizationWebhook)
	}
	return ""
}

// NodeEventRecorder records events about the node (events.Recorder).
type NodeEventRecorder interface {
	NodeEvent(node, eventType, reason, message string)
}

// WarnClusterAuthorization records ClusterAuthorizationWarning, for the
// kubelet API s serves, as a warning event about node; nothing when s
// serves nothing (no Addr) or authorization is Webhook.
func WarnClusterAuthorization(rec NodeEventRecorder, node string, s Settings) {
	msg := ClusterAuthorizationWarning(s.Auth, s.WebhookAuthn)
	if msg == "" || s.Addr == "" {
		return
	}
	rec.NodeEvent(node, v1.EventTypeWarning, InsecureAuthorizationReason, msg)
}
