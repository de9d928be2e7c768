package podnet

import (
	"slices"
	"strings"
	"testing"
	"testing/quick"
)

func TestDecidePodCIDRs(t *testing.T) {
	v4, v4b, v6 := "10.244.1.0/24", "10.244.2.0/24", "fd00:10:244:1::/64"
	for _, tc := range []struct {
		name   string
		in     CIDRInput
		action CIDRAction
		cidrs  string
		reason string
	}{
		{"nothing named", CIDRInput{}, CIDRKeep, "", "no pod CIDR"},
		{"nothing named, pods running", CIDRInput{Current: []string{v4}, Pushed: true, PodsOnNetwork: 3}, CIDRKeep, "", ""},
		{"first push", CIDRInput{Wanted: []string{v4}}, CIDRPush, v4, "first"},
		{"first push with pods running (none set before)", CIDRInput{Wanted: []string{v4}, PodsOnNetwork: 2}, CIDRPush, v4, "first"},
		{"same, pushed", CIDRInput{Wanted: []string{v4}, Current: []string{v4}, Pushed: true, PodsOnNetwork: 5}, CIDRKeep, "", ""},
		{"same as the network's after a restart: the runtime is told", CIDRInput{Wanted: []string{v4}, Current: []string{v4}, PodsOnNetwork: 5}, CIDRPush, v4, "tell"},
		{"changed with pods running", CIDRInput{Wanted: []string{v4b}, Current: []string{v4}, Pushed: true, PodsOnNetwork: 1}, CIDRRefuse, "", "while 1 pod"},
		{"changed with pods running after a restart", CIDRInput{Wanted: []string{v4b}, Current: []string{v4}, PodsOnNetwork: 1}, CIDRRefuse, "", "keeping " + v4},
		{"changed, no pods", CIDRInput{Wanted: []string{v4b}, Current: []string{v4}, Pushed: true}, CIDRPush, v4b, "changed"},
		{"dual-stack first push keeps the Node's order", CIDRInput{Wanted: []string{v6, v4}}, CIDRPush, v6 + "," + v4, ""},
		{"dual-stack order swapped is a change", CIDRInput{Wanted: []string{v6, v4}, Current: []string{v4, v6}, Pushed: true, PodsOnNetwork: 1}, CIDRRefuse, "", ""},
		{"single to dual-stack with pods running", CIDRInput{Wanted: []string{v4, v6}, Current: []string{v4}, Pushed: true, PodsOnNetwork: 1}, CIDRRefuse, "", ""},
		{"single to dual-stack, no pods", CIDRInput{Wanted: []string{v4, v6}, Current: []string{v4}, Pushed: true}, CIDRPush, v4 + "," + v6, ""},
		{"invalid: not a prefix", CIDRInput{Wanted: []string{"10.244.1.0"}, Current: []string{v4}, Pushed: true}, CIDRInvalid, "", "not an IP prefix"},
		{"invalid: host bits", CIDRInput{Wanted: []string{"10.244.1.9/24"}}, CIDRInvalid, "", "host bits"},
		{"invalid: same family twice", CIDRInput{Wanted: []string{v4, v4b}}, CIDRInvalid, "", "same IP family"},
		{"invalid: three", CIDRInput{Wanted: []string{v4, v6, v4b}}, CIDRInvalid, "", "want one"},
		{"invalid: spaces", CIDRInput{Wanted: []string{" " + v4}}, CIDRInvalid, "", ""},
		// The property test below found this: a current CIDR list of one
		// empty string is none set.
		{"current empty string is none", CIDRInput{Wanted: []string{v6}, Current: []string{""}, Pushed: true, PodsOnNetwork: 1}, CIDRPush, v6, "first pod CIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecidePodCIDRs(tc.in)
			if d.Action != tc.action || d.Joined() != tc.cidrs || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("DecidePodCIDRs(%+v) = %v %q (%s); want %v %q (reason with %q)",
					tc.in, d.Action, d.Joined(), d.Reason, tc.action, tc.cidrs, tc.reason)
			}
		})
	}
}

// TestDecidePodCIDRsNeverMovesRunningPods: whatever the input, CIDRs that
// differ from the current ones are never pushed while pods run on the pod
// network.
func TestDecidePodCIDRsNeverMovesRunningPods(t *testing.T) {
	pool := []string{"10.244.1.0/24", "10.244.2.0/24", "fd00::/64", "fd01::/64", "10.0.0.1/8", ""}
	pick := func(idx []uint8) []string {
		var out []string
		for _, i := range idx[:min(len(idx), 3)] {
			out = append(out, pool[int(i)%len(pool)])
		}
		return out
	}
	f := func(wanted, current []uint8, pushed bool, pods uint8) bool {
		in := CIDRInput{Wanted: pick(wanted), Current: pick(current), Pushed: pushed, PodsOnNetwork: int(pods % 3)}
		d := DecidePodCIDRs(in)
		if d.Action != CIDRPush {
			return true
		}
		// Current as the runtime's state gives it: the pool's "" picked
		// alone is none set, as no CIDR at all.
		cur := strings.Join(in.Current, ",")
		changed := cur != "" && cur != strings.Join(in.Wanted, ",")
		return !(changed && in.PodsOnNetwork > 0) && slices.Equal(d.CIDRs, in.Wanted)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}
