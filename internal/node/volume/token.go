package volume

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/securitycontext"
)

// defaultTokenExpirationSeconds is the API's default expirationSeconds of
// a serviceAccountToken projection.
const defaultTokenExpirationSeconds = 3600

// projectedToken is a serviceAccountToken projection: the token of the
// pod's service account from Tokens, in one file. Its mode is the
// projection's default mode, or 0600 when the file gets an owner (every
// container runs as one user) or the pod has an fsGroup (which then adds
// g+r), as the kubelet's projected volume does.
func (m *Manager) projectedToken(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, defaultMode int32) (map[string]fileProjection, error) {
	if m.tokens == nil {
		return nil, errors.New("serviceAccountToken projection is not supported by nodelet: there is no API server to issue tokens in standalone mode")
	}
	if podspec.IsStatic(pod) {
		return nil, errors.New("serviceAccountToken projection: static pods may not reference serviceaccounts")
	}
	expiration := int64(defaultTokenExpirationSeconds)
	if src.ExpirationSeconds != nil {
		expiration = *src.ExpirationSeconds
	}
	token, err := m.tokens.Token(ctx, pod, src.Audience, expiration)
	if err != nil {
		return nil, fmt.Errorf("serviceAccountToken: %w", err)
	}
	owner := fsUser(pod)
	mode := defaultMode
	if owner != nil || fsGroup(pod) != nil {
		mode = 0o600
	}
	return map[string]fileProjection{src.Path: {data: []byte(token), mode: mode, uid: owner}}, nil
}

// fsUser is the user every container of the pod runs as (the kubelet's
// FsUserFrom): nil when one of them has no runAsUser, pod-level or its
// own, or two differ.
func fsUser(pod *v1.Pod) *int64 {
	var user *int64
	same := func(c *v1.Container) bool {
		uid := securitycontext.Effective(pod, c).RunAsUser
		if uid == nil || (user != nil && *user != *uid) {
			return false
		}
		user = uid
		return true
	}
	for i := range pod.Spec.InitContainers {
		if !same(&pod.Spec.InitContainers[i]) {
			return nil
		}
	}
	for i := range pod.Spec.Containers {
		if !same(&pod.Spec.Containers[i]) {
			return nil
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		if !same(&c) {
			return nil
		}
	}
	if user == nil {
		return nil
	}
	uid := *user
	return &uid
}
