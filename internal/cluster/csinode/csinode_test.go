package csinode

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/node/csi"
)

func TestDriverRegisteredAndGone(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid",
		Labels: map[string]string{"zone": "keep"}}})
	info := New(kube, "n1")
	if err := info.DriverRegistered(ctx, "a.csi", csi.NodeInfo{NodeID: "id-a", MaxVolumesPerNode: 5,
		Topology: map[string]string{"topology.a/node": "n1", "zone": "other"}}); err != nil {
		t.Fatal(err)
	}
	if err := info.DriverRegistered(ctx, "b.csi", csi.NodeInfo{NodeID: "id-b"}); err != nil {
		t.Fatal(err)
	}
	c, err := kube.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].Kind != "Node" || c.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("owner %v", c.OwnerReferences)
	}
	if len(c.Spec.Drivers) != 2 {
		t.Fatalf("drivers %+v", c.Spec.Drivers)
	}
	a := c.Spec.Drivers[0]
	if a.Name != "a.csi" || a.NodeID != "id-a" || len(a.TopologyKeys) != 2 || a.Allocatable == nil || *a.Allocatable.Count != 5 {
		t.Errorf("driver a %+v", a)
	}
	if b := c.Spec.Drivers[1]; b.Allocatable != nil || len(b.TopologyKeys) != 0 {
		t.Errorf("driver b %+v", b)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if n.Labels["topology.a/node"] != "n1" || n.Labels["zone"] != "keep" {
		t.Errorf("labels %v", n.Labels)
	}
	if got := n.Annotations[NodeIDAnnotation]; got != `{"a.csi":"id-a","b.csi":"id-b"}` {
		t.Errorf("annotation %s", got)
	}

	if err := info.DriverDeregistered(ctx, "a.csi"); err != nil {
		t.Fatal(err)
	}
	c, _ = kube.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if len(c.Spec.Drivers) != 1 || c.Spec.Drivers[0].Name != "b.csi" {
		t.Errorf("after deregistration: %+v", c.Spec.Drivers)
	}
	n, _ = kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if got := n.Annotations[NodeIDAnnotation]; got != `{"b.csi":"id-b"}` {
		t.Errorf("annotation %s", got)
	}
}

func TestObjectsNotFound(t *testing.T) {
	o := Objects{Kube: fake.NewClientset()}
	if d, err := o.CSIDriver(context.Background(), "x"); d != nil || err != nil {
		t.Errorf("CSIDriver = %v, %v", d, err)
	}
	if va, err := o.VolumeAttachment(context.Background(), "x"); va != nil || err != nil {
		t.Errorf("VolumeAttachment = %v, %v", va, err)
	}
}
