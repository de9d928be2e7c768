// Package csinode is beside the pipeline (volumes, cluster mode): what the
// API server learns about the node's CSI drivers and what the CSI mounter
// asks it, as the kubelet's nodeinfomanager and CSI plugin do.
//
// When a driver registers, Info (a csi.Listener) records it in the CSINode
// object named after the node (created with the Node as its owner): the
// driver's node ID, its topology keys and allocatable.count from
// max_volumes_per_node; the Node gets the driver's topology segments as
// labels and its node ID in the csi.volume.kubernetes.io/nodeid
// annotation. When it deregisters, its entry and annotation go (the
// labels stay, as the kubelet leaves them). Objects gives the mounter the
// CSIDriver and VolumeAttachment objects.
package csinode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodelet/nodelet/internal/node/csi"
)

// NodeIDAnnotation is the Node annotation of the drivers' node IDs, a JSON
// object by driver name.
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// Info keeps the CSINode object and the Node's CSI labels and annotation.
type Info struct {
	kube     kubernetes.Interface
	nodeName string
}

// New returns the node's CSI information keeper. It starts nothing.
func New(kube kubernetes.Interface, nodeName string) *Info {
	return &Info{kube: kube, nodeName: nodeName}
}

// DriverRegistered records the driver on the Node and in the CSINode.
func (i *Info) DriverRegistered(ctx context.Context, name string, info csi.NodeInfo) error {
	node, err := i.updateNode(ctx, func(n *v1.Node) bool { return addDriverToNode(n, name, info) })
	if err != nil {
		return fmt.Errorf("updating Node %s: %w", i.nodeName, err)
	}
	if err := i.updateCSINode(ctx, node, func(c *storagev1.CSINode) bool { return setDriver(c, name, info) }); err != nil {
		return fmt.Errorf("updating CSINode %s: %w", i.nodeName, err)
	}
	return nil
}

// DriverDeregistered removes the driver from the CSINode and the Node's
// annotation.
func (i *Info) DriverDeregistered(ctx context.Context, name string) error {
	node, err := i.updateNode(ctx, func(n *v1.Node) bool { return removeDriverFromNode(n, name) })
	if err != nil {
		return fmt.Errorf("updating Node %s: %w", i.nodeName, err)
	}
	if err := i.updateCSINode(ctx, node, func(c *storagev1.CSINode) bool { return removeDriver(c, name) }); err != nil {
		return fmt.Errorf("updating CSINode %s: %w", i.nodeName, err)
	}
	return nil
}

// updateNode applies change to the Node and updates it when it changed
// something, retrying on conflicts.
func (i *Info) updateNode(ctx context.Context, change func(*v1.Node) bool) (*v1.Node, error) {
	var out *v1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := i.kube.CoreV1().Nodes().Get(ctx, i.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = n.DeepCopy()
		if !change(n) {
			out = n
			return nil
		}
		out, err = i.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

// updateCSINode applies change to the CSINode, creating it first.
func (i *Info) updateCSINode(ctx context.Context, node *v1.Node, change func(*storagev1.CSINode) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := i.kube.StorageV1().CSINodes().Get(ctx, i.nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			c = newCSINode(node)
			if !change(c) && len(c.Spec.Drivers) == 0 {
				return nil
			}
			_, err = i.kube.StorageV1().CSINodes().Create(ctx, c, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(storagev1.Resource("csinodes"), i.nodeName, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		c = c.DeepCopy()
		if !change(c) {
			return nil
		}
		_, err = i.kube.StorageV1().CSINodes().Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
}

// newCSINode is an empty CSINode owned by the Node, as the kubelet creates
// it.
func newCSINode(node *v1.Node) *storagev1.CSINode {
	c := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	c.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: types.UID(node.UID),
	}}
	c.Spec.Drivers = []storagev1.CSINodeDriver{}
	return c
}

// setDriver puts the driver's entry in the CSINode; whether it changed.
func setDriver(c *storagev1.CSINode, name string, info csi.NodeInfo) bool {
	want := storagev1.CSINodeDriver{Name: name, NodeID: info.NodeID, TopologyKeys: slices.Sorted(maps.Keys(info.Topology))}
	if info.MaxVolumesPerNode > 0 {
		n := int32(min(info.MaxVolumesPerNode, 1<<31-1))
		want.Allocatable = &storagev1.VolumeNodeResources{Count: &n}
	}
	for k, d := range c.Spec.Drivers {
		if d.Name != name {
			continue
		}
		if d.NodeID == want.NodeID && slices.Equal(d.TopologyKeys, want.TopologyKeys) && sameCount(d.Allocatable, want.Allocatable) {
			return false
		}
		c.Spec.Drivers[k] = want
		return true
	}
	c.Spec.Drivers = append(c.Spec.Drivers, want)
	return true
}

func sameCount(a, b *storagev1.VolumeNodeResources) bool {
	ac, bc := a != nil && a.Count != nil, b != nil && b.Count != nil
	return ac == bc && (!ac || *a.Count == *b.Count)
}

// removeDriver drops the driver's entry; whether there was one.
func removeDriver(c *storagev1.CSINode, name string) bool {
	n := len(c.Spec.Drivers)
	c.Spec.Drivers = slices.DeleteFunc(c.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
	return len(c.Spec.Drivers) != n
}

// addDriverToNode sets the topology labels and the node ID annotation.
// A topology label that the Node already has with another value is left
// as it is (the kubelet fails the registration; nodelet keeps the Node's).
func addDriverToNode(n *v1.Node, name string, info csi.NodeInfo) bool {
	changed := false
	for k, v := range info.Topology {
		if _, ok := n.Labels[k]; ok {
			continue
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[k] = v
		changed = true
	}
	ids := nodeIDs(n)
	if ids[name] != info.NodeID {
		ids[name] = info.NodeID
		setNodeIDs(n, ids)
		changed = true
	}
	return changed
}

func removeDriverFromNode(n *v1.Node, name string) bool {
	ids := nodeIDs(n)
	if _, ok := ids[name]; !ok {
		return false
	}
	delete(ids, name)
	setNodeIDs(n, ids)
	return true
}

func nodeIDs(n *v1.Node) map[string]string {
	ids := map[string]string{}
	if s := n.Annotations[NodeIDAnnotation]; s != "" {
		_ = json.Unmarshal([]byte(s), &ids) // a malformed annotation is replaced
	}
	return ids
}

func setNodeIDs(n *v1.Node, ids map[string]string) {
	if len(ids) == 0 {
		delete(n.Annotations, NodeIDAnnotation)
		return
	}
	b, _ := json.Marshal(ids)
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[NodeIDAnnotation] = string(b)
}

// Objects reads the CSIDriver and VolumeAttachment objects (csi.API).
type Objects struct{ Kube kubernetes.Interface }

// CSIDriver returns the CSIDriver, nil when there is none.
func (o Objects) CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	d, err := o.Kube.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return d, err
}

// VolumeAttachment returns the VolumeAttachment, nil when there is none.
func (o Objects) VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	va, err := o.Kube.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return va, err
}
