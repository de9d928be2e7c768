// Package claims is beside the pipeline (volumes, cluster mode): the
// PersistentVolumeClaims of a pod's persistentVolumeClaim and generic
// ephemeral volumes, and the PersistentVolumes bound to them, read from
// the API server for the volume manager (volume.Claims); and the
// ResourceClaims of pods for the DRA manager (dra.Claims). As the kubelet's
// desired state populator, it GETs both on every sync of such a pod: no
// watch, no cache, so a claim bound meanwhile is seen at the next try.
// The Node authorizer allows a node these reads for the pods bound to it
// only.
package claims

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
)

// requestTimeout bounds one GET, so that an API server that does not
// answer holds up the pod's sync for no longer.
const requestTimeout = 30 * time.Second

// Getter reads claims and volumes from the API server. It starts nothing
// and keeps nothing. Its errors are client-go's, unwrapped: the volume
// manager words them as the kubelet does ("failed to fetch PVC from API
// server: ...").
type Getter struct {
	client Client
}

// Client is what Getter needs of client-go's CoreV1 client.
type Client interface {
	corev1client.PersistentVolumeClaimsGetter
	corev1client.PersistentVolumesGetter
}

// New returns a Getter on client.
func New(client Client) *Getter { return &Getter{client: client} }

// PersistentVolumeClaim GETs the claim namespace/name.
func (g *Getter) PersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return g.client.PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// PersistentVolume GETs the volume name.
func (g *Getter) PersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return g.client.PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

// ResourceClaims reads the ResourceClaims (resource.k8s.io/v1) of a pod's
// spec.resourceClaims for the DRA manager (dra.Claims): a GET each time
// the manager prepares a pod's claims, as the kubelet's DRA manager does.
// The Node authorizer allows a node these reads for the pods bound to it
// only.
type ResourceClaims struct {
	client resourcev1client.ResourceClaimsGetter
}

// NewResourceClaims returns a reader of ResourceClaims on client.
func NewResourceClaims(client resourcev1client.ResourceClaimsGetter) *ResourceClaims {
	return &ResourceClaims{client: client}
}

// ResourceClaim GETs the claim namespace/name.
func (r *ResourceClaims) ResourceClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return r.client.ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}
