package podhooks

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// SecretGetter gives the Secrets of a pod's namespace from the pod's side
// (objects.Router: a static pod's from its manifest directory, an API
// pod's from the API server).
type SecretGetter interface {
	Secret(pod *v1.Pod, name string) (*v1.Secret, error)
}

// PullSecrets gives the runtime manager the credentials the pod's images
// are pulled with (the setup's PullCredentials): those of the Secrets its
// imagePullSecrets name, then the node's, then the credential provider
// plugins' (asked for this pod: a token of its service account), as the kubelet's
// getPullSecretsForPod and MakeDockerKeyring do before every sync. A
// Secret that cannot be read is passed over with the kubelet's
// FailedToRetrieveImagePullSecret event and the pull goes on with the
// rest; a Secret that cannot be parsed fails the pod's pulls with an
// error naming it. It comes after Objects, so that in cluster mode the
// pod's Secrets are watched before they are read. It holds nothing.
type PullSecrets struct {
	Secrets SecretGetter
	// Node is the node's credentials (nodecreds.Keyring); nil: none.
	Node pullcreds.Lookup
	// Providers gives the pod's credentials from the credential provider
	// plugins (credprovider.Manager), asked after the node's, as the
	// kubelet's union; nil, or a nil Lookup for the pod: none.
	Providers PodLookups
	Recorder  Recorder
}

// PodLookups gives a pod its own lookup: the credential provider plugins
// need the pod (its service account's token, its events).
type PodLookups interface {
	ForPod(pod *v1.Pod) pullcreds.Lookup
}

func (PullSecrets) Name() string { return "image pull secrets" }

func (h PullSecrets) Prepare(_ context.Context, pod *v1.Pod) (podsetup.Setup, error) {
	var secrets []*v1.Secret
	var failed []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue // API validation lets these through; the kubelet ignores them
		}
		s, err := h.Secrets.Secret(pod, ref.Name)
		if err != nil {
			failed = append(failed, ref.Name)
			continue
		}
		secrets = append(secrets, s)
	}
	if len(failed) > 0 {
		h.Recorder.Event(pod, v1.EventTypeWarning, "FailedToRetrieveImagePullSecret",
			fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(failed, ", ")))
	}
	keyring, err := pullcreds.FromSecrets(secrets)
	if err != nil {
		return podsetup.Setup{PullCredentials: pullcreds.Failed(err)}, nil
	}
	union := pullcreds.Union{h.Node}
	if keyring != nil {
		union = pullcreds.Union{keyring, h.Node}
	}
	if h.Providers != nil {
		union = append(union, h.Providers.ForPod(pod))
	}
	return podsetup.Setup{PullCredentials: union}, nil
}

func (PullSecrets) Cleanup(context.Context, *v1.Pod) error { return nil }
