package main

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func TestParseArgs(t *testing.T) {
	q, err := parseArgs([]string{"+tcp", "+noall", "+answer", "+search", "_http._tcp.svc.ns.svc", "SRV"})
	if err != nil {
		t.Fatal(err)
	}
	if !q.tcp || !q.search || q.short || q.name != "_http._tcp.svc.ns.svc" || q.qtype != dnsmessage.TypeSRV {
		t.Errorf("got %+v", q)
	}
	q, err = parseArgs([]string{"+notcp", "+short", "@10.96.0.10", "a.b"})
	if err != nil || q.tcp || !q.short || q.server != "10.96.0.10" || q.qtype != dnsmessage.TypeA {
		t.Errorf("got %+v, %v", q, err)
	}
	for _, bad := range [][]string{{}, {"+trace", "a"}, {"a", "MX"}, {"a", "A", "PTR"}} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCandidates(t *testing.T) {
	conf := readResolvConf(strings.NewReader("search ns.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"))
	if !slices.Equal(conf.nameservers, []string{"10.96.0.10"}) || conf.ndots != 5 {
		t.Fatalf("resolv.conf read as %+v", conf)
	}
	for _, tt := range []struct {
		name   string
		search bool
		want   []string
	}{
		{"kubernetes.default", true, []string{"kubernetes.default.ns.svc.cluster.local.", "kubernetes.default.svc.cluster.local.", "kubernetes.default.cluster.local.", "kubernetes.default."}},
		{"kubernetes.default", false, []string{"kubernetes.default."}},
		{"a.b.c.d.e.f", true, []string{"a.b.c.d.e.f.", "a.b.c.d.e.f.ns.svc.cluster.local.", "a.b.c.d.e.f.svc.cluster.local.", "a.b.c.d.e.f.cluster.local."}},
		{"x.cluster.local.", true, []string{"x.cluster.local."}},
	} {
		if got := candidates(tt.name, tt.search, conf); !slices.Equal(got, tt.want) {
			t.Errorf("%s search=%v: got %q, want %q", tt.name, tt.search, got, tt.want)
		}
	}
}

func TestRdata(t *testing.T) {
	target := dnsmessage.MustNewName("foo.example.com.")
	for _, tt := range []struct {
		body dnsmessage.ResourceBody
		want string
	}{
		{&dnsmessage.AResource{A: [4]byte{10, 96, 0, 1}}, "10.96.0.1"},
		{&dnsmessage.CNAMEResource{CNAME: target}, "foo.example.com."},
		{&dnsmessage.SRVResource{Priority: 0, Weight: 100, Port: 80, Target: target}, "0 100 80 foo.example.com."},
		{&dnsmessage.TXTResource{TXT: []string{"a b"}}, `"a b"`},
	} {
		if got := rdata(tt.body); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
