// Package pullcreds is beside stage 4: the credentials the runtime
// manager pulls a pod's images with, and where each came from. The pod's
// imagePullSecrets, the node's docker config files and the kubelet's
// credential provider plugins each give Credentials for an image; the
// runtime manager tries them in order (as the kubelet's keyring) and sends
// the one that works as the CRI AuthConfig; the ensure-secret-pulled-images
// records keep the Source of the one that pulled an image, never the
// secret itself.
//
// The package is pure: data, no I/O.
package pullcreds

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Credential is one set of credentials for one registry.
type Credential struct {
	// Auth is what the runtime is sent (username/password, or an
	// identity or registry token). Its ServerAddress, when set, is the
	// only registry host the runtime sends it to; docker config
	// credentials (Secrets, node files) leave it empty, as the kubelet
	// does, and go to whichever host the runtime pulls from.
	Auth *runtimeapi.AuthConfig
	// Source is where the credential came from.
	Source Source
}

// SourceKind says what kind of place a credential came from.
type SourceKind string

const (
	// FromSecret: a kubernetes.io/dockerconfigjson or dockercfg Secret
	// named by the pod's imagePullSecrets (in cluster mode from the API,
	// for a static pod from the manifest directory).
	FromSecret SourceKind = "Secret"
	// FromNode: the node's docker config files (<root-dir>/config.json,
	// ~/.docker/config.json, ...): every pod of the node may use them.
	FromNode SourceKind = "Node"
	// FromProvider: a credential provider plugin. Without a service
	// account token every pod of the node may use its credentials; with
	// one (KEP-4412) only pods of that service account.
	FromProvider SourceKind = "Provider"
)

// Source is where a credential came from: enough to tell, later, whether
// another pod has access to the same credential, and to name it in an
// event or log line. It never holds the secret.
type Source struct {
	Kind SourceKind
	// Namespace, Name and UID identify the Secret (FromSecret), or the
	// service account (FromProvider with a service account token). For
	// FromNode, Name is the path of the node's file.
	Namespace, Name, UID string
	// Provider is the plugin's name (FromProvider).
	Provider string
}

// Lookup gives the credentials to try for an image, in the order to try
// them; none: pull anonymously.
type Lookup interface {
	Credentials(ctx context.Context, image string) ([]Credential, error)
}
