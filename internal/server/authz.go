package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Authorization modes (--authorization-mode).
const (
	AuthorizationAlwaysAllow = "AlwaysAllow"
	AuthorizationWebhook     = "Webhook"
)

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

// webhookAuthorizer asks the API server with a SubjectAccessReview.
type webhookAuthorizer struct {
	client kubernetes.Interface
}

func (w webhookAuthorizer) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	sar := &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
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
		},
	}
	resp, err := w.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
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
