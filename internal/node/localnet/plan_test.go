package localnet

import (
	"reflect"
	"strings"
	"testing"
)

// The kubelet's rule, as pkg/kubelet/kubelet_network_linux.go makes it
// (syncIPTablesRules), written out here so that a change to Rules that
// would no longer match what a kubelet on the same machine installs fails.
const kubeletRule = "-m comment --comment block incoming localnet connections --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"

func TestRulesAreTheKubelets(t *testing.T) {
	want := []string{
		"-w 5 -t filter -I OUTPUT -j KUBE-FIREWALL",
		"-w 5 -t filter -I INPUT -j KUBE-FIREWALL",
		"-w 5 -t filter -A KUBE-FIREWALL " + kubeletRule,
	}
	var got []string
	for _, r := range Rules() {
		got = append(got, strings.Join(r.Add(), " "))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rules:\n%s\nwant the kubelet's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPlan(t *testing.T) {
	const (
		newChain = "-w 5 -t filter -N KUBE-FIREWALL"
		output   = "-w 5 -t filter -I OUTPUT -j KUBE-FIREWALL"
		input    = "-w 5 -t filter -I INPUT -j KUBE-FIREWALL"
		drop     = "-w 5 -t filter -A KUBE-FIREWALL " + kubeletRule
	)
	for _, tc := range []struct {
		name string
		o    Observed
		want []string
	}{
		{"nothing there: the chain first, then the jumps and the rule", Observed{}, []string{newChain, output, input, drop}},
		{"all there (a kubelet's, another nodelet's): nothing", Observed{ChainExists: true, Present: []bool{true, true, true}}, nil},
		{"the rule removed", Observed{ChainExists: true, Present: []bool{true, true, false}}, []string{drop}},
		{"the jumps removed", Observed{ChainExists: true, Present: []bool{false, false, true}}, []string{output, input}},
		{"an empty chain someone else made", Observed{ChainExists: true, Present: []bool{false, false, false}}, []string{output, input, drop}},
		{"the chain gone: whatever Present says", Observed{Present: []bool{true, true, true}}, []string{newChain, output, input, drop}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range Plan(tc.o) {
				got = append(got, strings.Join(c, " "))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Plan(%+v):\n%s\nwant:\n%s", tc.o, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, c := range got { // never undoes anything, whoever made it
				for _, op := range []string{" -D ", " -F", " -X", " -R ", " -Z"} {
					if strings.Contains(c, op) {
						t.Errorf("plan changes what exists: %s", c)
					}
				}
			}
		})
	}
}
