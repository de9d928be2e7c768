package podnet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ParsePodCIDRs checks pod CIDRs as a node's network takes them: one or
// two prefixes, each in its canonical form (no host bits, as the
// controller manager allocates them), two of different IP families
// (dual-stack, the primary first).
func ParsePodCIDRs(cidrs []string) ([]netip.Prefix, error) {
	if len(cidrs) == 0 || len(cidrs) > 2 {
		return nil, fmt.Errorf("pod CIDRs %q: want one, or two of different IP families", cidrs)
	}
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("pod CIDR %q is not an IP prefix: %w", s, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("pod CIDR %q has host bits set (the prefix is %s)", s, p.Masked())
		}
		out = append(out, p)
	}
	if len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, fmt.Errorf("pod CIDRs %q: two of the same IP family", cidrs)
	}
	return out, nil
}

// CIDRAction is what to do with the pod CIDRs a Node (or --pod-cidr)
// names.
type CIDRAction int

const (
	// CIDRKeep: nothing to do, the runtime has them (or none is named).
	CIDRKeep CIDRAction = iota
	// CIDRPush: hand them to the runtime (CRI UpdateRuntimeConfig) and to
	// the managed network.
	CIDRPush
	// CIDRRefuse: they differ from the ones pods use now, and pods on the
	// pod network are running: keep the current ones, report it.
	CIDRRefuse
	// CIDRInvalid: they cannot be used; report it, keep the current ones.
	CIDRInvalid
)

func (a CIDRAction) String() string {
	switch a {
	case CIDRKeep:
		return "keep"
	case CIDRPush:
		return "push"
	case CIDRRefuse:
		return "refuse"
	case CIDRInvalid:
		return "invalid"
	}
	return fmt.Sprintf("CIDRAction(%d)", int(a))
}

// CIDRInput is what DecidePodCIDRs decides from.
type CIDRInput struct {
	// Wanted are the Node's spec.podCIDRs in its order (standalone:
	// --pod-cidr); none: nothing to do, as the kubelet.
	Wanted []string
	// Current are the pod CIDRs the node's pod network has: the last
	// pushed, else what the managed network was last written with
	// (across restarts); none: never set.
	Current []string
	// Pushed: the runtime was told Current by this nodelet (the kubelet's
	// runtimeState.podCIDR, which starts empty at every start).
	Pushed bool
	// PodsOnNetwork counts the running sandboxes that are not on the
	// host's network: their IPs are from Current.
	PodsOnNetwork int
}

// CIDRDecision is DecidePodCIDRs' answer.
type CIDRDecision struct {
	Action CIDRAction
	// CIDRs are the CIDRs to push (CIDRPush), joined with "," for the
	// CRI's NetworkConfig.PodCidr as the kubelet joins them.
	CIDRs []string
	// Reason says why, in words for a log line or an event.
	Reason string
}

// Joined is the CIDRs as CRI's NetworkConfig.PodCidr takes them.
func (d CIDRDecision) Joined() string { return strings.Join(d.CIDRs, ",") }

// DecidePodCIDRs decides whether the wanted pod CIDRs go to the runtime:
// the kubelet's updatePodCIDR (push when they differ from what it pushed
// last; the order counts: the first is the primary), with one rule more:
// CIDRs that change while pods on the pod network run are refused, not
// applied under them (their addresses would leave the node's range and
// the bridge's gateway).
func DecidePodCIDRs(in CIDRInput) CIDRDecision {
	if len(in.Wanted) == 0 {
		return CIDRDecision{Action: CIDRKeep, Reason: "no pod CIDR is named"}
	}
	if _, err := ParsePodCIDRs(in.Wanted); err != nil {
		return CIDRDecision{Action: CIDRInvalid, Reason: err.Error()}
	}
	wanted := strings.Join(in.Wanted, ",")
	switch current := strings.Join(in.Current, ","); {
	case current == wanted && in.Pushed:
		return CIDRDecision{Action: CIDRKeep, Reason: "the runtime has " + wanted}
	case current == wanted:
		return CIDRDecision{Action: CIDRPush, CIDRs: slices.Clone(in.Wanted), Reason: "tell the runtime " + wanted}
	case current == "":
		return CIDRDecision{Action: CIDRPush, CIDRs: slices.Clone(in.Wanted), Reason: "first pod CIDR " + wanted}
	case in.PodsOnNetwork > 0:
		return CIDRDecision{Action: CIDRRefuse, Reason: fmt.Sprintf(
			"pod CIDR changed from %s to %s while %d pod(s) on the pod network run; keeping %s until none runs",
			current, wanted, in.PodsOnNetwork, current)}
	default:
		return CIDRDecision{Action: CIDRPush, CIDRs: slices.Clone(in.Wanted), Reason: fmt.Sprintf(
			"pod CIDR changed from %s to %s; no pod on the pod network runs", current, wanted)}
	}
}
