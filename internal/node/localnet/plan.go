// Package localnet is beside the pipeline (node-level, every mode): it
// keeps the kubelet's "block incoming localnet connections" firewall rule
// in place, so that no pod reaches the node's loopback services (the local
// image registry, /healthz, any localhost-only host service) once the CNI
// portmap plugin has set route_localnet on the pod bridge
// (CVE-2020-8558, kubernetes#90259).
//
// The rules are the kubelet's own (pkg/kubelet/kubelet_network_linux.go,
// syncIPTablesRules), made with the same iptables commands, so a kubelet,
// kube-proxy or another nodelet on the same machine finds them present
// and adds nothing, and nodelet never deletes or flushes anything: what it
// installs may be another's, and it is harmless to leave. Plan is pure:
// what is missing, in what order to add it; Keeper observes, plans and
// runs the commands through a small Iptables interface, now and then every
// Period.
package localnet

import "slices"

// Chain is the kubelet's firewall chain in the filter table.
const Chain = "KUBE-FIREWALL"

// Comment is the kubelet's comment on the rule; kube-proxy makes the
// same rule with the same comment.
const Comment = "block incoming localnet connections"

// Rule is one rule of the filter table: Spec in Chain, inserted first
// (Prepend, iptables -I) or appended (-A) when missing.
type Rule struct {
	Chain   string
	Prepend bool
	Spec    []string
}

// Rules are the rules nodelet keeps, in the order the kubelet ensures
// them: the jumps to Chain from OUTPUT and INPUT, first in those chains,
// then the drop of packets to 127.0.0.0/8 that did not come from
// 127.0.0.0/8 and are no reply and no DNAT (portmap's hostPort on
// 127.0.0.1 is DNAT and still works). IPv4 only: IPv6 has no such hole.
func Rules() []Rule {
	return []Rule{
		{Chain: "OUTPUT", Prepend: true, Spec: []string{"-j", Chain}},
		{Chain: "INPUT", Prepend: true, Spec: []string{"-j", Chain}},
		{Chain: Chain, Spec: []string{
			"-m", "comment", "--comment", Comment,
			"--dst", "127.0.0.0/8",
			"!", "--src", "127.0.0.0/8",
			"-m", "conntrack",
			"!", "--ctstate", "RELATED,ESTABLISHED,DNAT",
			"-j", "DROP",
		}},
	}
}

// Observed is what iptables showed: whether Chain exists, and for each of
// Rules whether it is present (same index; absent when Chain is missing).
type Observed struct {
	ChainExists bool
	Present     []bool
}

// table starts every command: the filter table, waiting up to 5 s for the
// xtables lock another iptables user (a kubelet, kube-proxy, a CNI
// plugin) holds.
var table = []string{"-w", "5", "-t", "filter"}

// CreateChain is the command that creates Chain.
func CreateChain() []string { return append(slices.Clone(table), "-N", Chain) }

// CheckChain is the command that succeeds only when Chain exists.
func CheckChain() []string { return append(slices.Clone(table), "-S", Chain) }

// Check is the command that succeeds only when r is present.
func (r Rule) Check() []string {
	return append(append(slices.Clone(table), "-C", r.Chain), r.Spec...)
}

// Add is the command that adds r where the kubelet would.
func (r Rule) Add() []string {
	op := "-A"
	if r.Prepend {
		op = "-I"
	}
	return append(append(slices.Clone(table), op, r.Chain), r.Spec...)
}

// Plan returns the iptables commands (arguments only) that add what o
// lacks, in order: the chain before the rules in it and the jumps to it.
// It returns nothing when all is present: it never deletes, moves or
// re-orders a rule, so nothing another owner made is changed.
func Plan(o Observed) [][]string {
	var cmds [][]string
	if !o.ChainExists {
		cmds = append(cmds, CreateChain())
	}
	for i, r := range Rules() {
		if !o.ChainExists || i >= len(o.Present) || !o.Present[i] {
			cmds = append(cmds, r.Add())
		}
	}
	return cmds
}
