package nodestatus

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The node lease: kube-node-lease/<node>, held by the node, renewed every
// quarter of its duration (10 s of 40 s) with up to 4% jitter. It is what
// the node lifecycle controller watches to know the node is alive, so it
// runs in its own goroutine, beside status computations that may wait for
// a slow runtime.
//
// It behaves as component-helpers' lease controller, which the kubelet
// uses: a renewal updates the lease last written, without a GET; only a
// conflict or a missing lease costs a GET (and a create); a failure is
// retried with back-off (100 ms doubling to 7 s). The controller is not
// used itself because it schedules its renewals on the real clock
// (wait.JitterUntil, time.After), which a test cannot step. The lease is
// owned by the Node (an owner reference with the Node's UID, set when
// the UID is known and replaced when the Node was registered again), so
// that it goes when the Node goes; it is created only once the Node
// exists, as the kubelet's.

// runLease renews the lease until ctx ends.
func (m *Manager) runLease(ctx context.Context) {
	for {
		t := m.clk.NewTimer(m.renewLease(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-m.leaseWake:
			t.Stop()
			m.leaseWakes.Add(-1)
		}
	}
}

// renewLease renews (or creates) the lease once and says when to renew it
// next.
func (m *Manager) renewLease(ctx context.Context) time.Duration {
	uid := m.nodeUID()
	if m.lease == nil && uid == "" {
		// No Node to own a lease yet: registration wakes us.
		return m.cfg.leaseRenewalEvery
	}
	leases := m.heartbeat.CoordinationV1().Leases(nodeLeaseNamespace)
	if m.lease != nil {
		updated, err := leases.Update(ctx, m.newLease(m.lease, uid), metav1.UpdateOptions{})
		if err == nil {
			return m.renewed(updated)
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return m.leaseFailed(ctx, fmt.Errorf("renew lease: %w", err))
		}
		m.lease = nil
	}
	got, err := leases.Get(ctx, m.cfg.nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if uid == "" {
			// No Node to own it yet: registration wakes us.
			return m.cfg.leaseRenewalEvery
		}
		created, err := leases.Create(ctx, m.newLease(nil, uid), metav1.CreateOptions{})
		if err != nil {
			return m.leaseFailed(ctx, fmt.Errorf("create lease: %w", err))
		}
		m.log.Info("node status: created the node lease")
		return m.renewed(created)
	case err != nil:
		return m.leaseFailed(ctx, fmt.Errorf("get lease: %w", err))
	}
	updated, err := leases.Update(ctx, m.newLease(got, uid), metav1.UpdateOptions{})
	if err != nil {
		m.lease = got
		return m.leaseFailed(ctx, fmt.Errorf("renew lease: %w", err))
	}
	return m.renewed(updated)
}

func (m *Manager) renewed(l *coordinationv1.Lease) time.Duration {
	m.lease = l
	m.leaseFailures = 0
	m.leaseBackoff.reset()
	return m.jitter(m.cfg.leaseRenewalEvery)
}

func (m *Manager) leaseFailed(ctx context.Context, err error) time.Duration {
	if ctx.Err() == nil {
		m.log.Warn("node status: lease renewal failed; retrying", "err", err)
	}
	m.heartbeatFailed(&m.leaseFailures)
	m.apiUnreachable.Store(true)
	if m.onLease != nil {
		m.onLease()
	}
	return m.leaseBackoff.next()
}

// newLease is base (or a new lease) renewed now: holder, duration, renew
// time and the Node as owner.
func (m *Manager) newLease(base *coordinationv1.Lease, uid types.UID) *coordinationv1.Lease {
	var l *coordinationv1.Lease
	if base == nil {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.cfg.nodeName, Namespace: nodeLeaseNamespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(m.cfg.nodeName)},
		}
	} else {
		l = base.DeepCopy()
	}
	l.Spec.LeaseDurationSeconds = ptr.To(m.cfg.leaseDuration)
	l.Spec.RenewTime = &metav1.MicroTime{Time: m.clk.Now()}
	if uid != "" && (len(l.OwnerReferences) == 0 || ownedByOtherNode(l, m.cfg.nodeName, uid)) {
		l.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1.SchemeGroupVersion.Version,
			Kind:       "Node",
			Name:       m.cfg.nodeName,
			UID:        uid,
		}}
	}
	return l
}

// ownedByOtherNode: the lease's owner is a Node of this name but another
// UID (the Node was deleted and registered again).
func ownedByOtherNode(l *coordinationv1.Lease, name string, uid types.UID) bool {
	for _, o := range l.OwnerReferences {
		if o.Kind == "Node" && o.Name == name && o.UID != uid {
			return true
		}
	}
	return false
}
