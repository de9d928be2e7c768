package claims

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestGetter(t *testing.T) {
	client := fake.NewClientset(
		&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv"}},
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}},
	)
	g := New(client.CoreV1())
	pvc, err := g.PersistentVolumeClaim(t.Context(), "ns", "c")
	if err != nil || pvc.Spec.VolumeName != "pv" {
		t.Fatalf("PersistentVolumeClaim = %v, %v", pvc, err)
	}
	pv, err := g.PersistentVolume(t.Context(), "pv")
	if err != nil || pv.Name != "pv" {
		t.Fatalf("PersistentVolume = %v, %v", pv, err)
	}
	// Errors come as the API gives them, for the volume manager to word.
	if _, err := g.PersistentVolumeClaim(t.Context(), "other", "c"); !apierrors.IsNotFound(err) || err.Error() != `persistentvolumeclaims "c" not found` {
		t.Fatalf("missing claim: %v", err)
	}
	if _, err := g.PersistentVolume(t.Context(), "nope"); !apierrors.IsNotFound(err) || err.Error() != `persistentvolumes "nope" not found` {
		t.Fatalf("missing volume: %v", err)
	}
}

func TestResourceClaims(t *testing.T) {
	client := fake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gpu", UID: "u1"}})
	r := NewResourceClaims(client.ResourceV1())
	c, err := r.ResourceClaim(t.Context(), "ns", "gpu")
	if err != nil || c.UID != "u1" {
		t.Fatalf("ResourceClaim = %v, %v", c, err)
	}
	if _, err := r.ResourceClaim(t.Context(), "other", "gpu"); !apierrors.IsNotFound(err) || err.Error() != `resourceclaims.resource.k8s.io "gpu" not found` {
		t.Fatalf("missing claim: %v", err)
	}
}
