package main

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	for _, bad := range [][]string{{}, {"+trace", "a"}, {"a", "MX"}, {"a", "A", "PTR"}, {"-p"}, {"-p", "x", "a"}} {
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

// TestRun asks a DNS server on loopback (UDP and TCP) that knows one name
// and says NXDOMAIN for every other: +search tries the search domains in
// order until one is not NXDOMAIN.
func TestRun(t *testing.T) {
	const known = "svc.ns.svc.cluster.local."
	answer := func(req []byte) []byte {
		var m dnsmessage.Message
		if err := m.Unpack(req); err != nil || len(m.Questions) != 1 {
			t.Errorf("bad query: %v", err)
			return nil
		}
		q := m.Questions[0]
		m.Header.Response = true
		if q.Name.String() == known && q.Type == dnsmessage.TypeA {
			m.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 30},
				Body:   &dnsmessage.AResource{A: [4]byte{10, 96, 0, 20}},
			}}
		} else {
			m.RCode = dnsmessage.RCodeNameError
		}
		b, err := m.Pack()
		if err != nil {
			t.Error(err)
		}
		return b
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	port := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Skipf("TCP port %s taken: %v", port, err)
	}
	defer ln.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(answer(buf[:n]), from)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var size [2]byte
			if _, err := io.ReadFull(c, size[:]); err == nil {
				req := make([]byte, binary.BigEndian.Uint16(size[:]))
				if _, err := io.ReadFull(c, req); err == nil {
					reply := answer(req)
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...))
				}
			}
			c.Close()
		}
	}()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\nsearch ns.svc.cluster.local svc.cluster.local\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", port, "+notcp", "+noall", "+answer", "+search", "svc"}, known + "\t30\tIN\tA\t10.96.0.20\n"},
		{[]string{"-p", port, "+tcp", "+short", "+search", "svc.ns"}, "10.96.0.20\n"},
		{[]string{"-p", port, "+short", "svc"}, ""},
		{[]string{"-p", port, "+search", "svc", "PTR"}, ""},
	} {
		got, err := run(tt.args, resolv)
		if err != nil || got != tt.want {
			t.Errorf("dig %q: got %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
	if _, err := run([]string{"-p", "1", "@127.0.0.1", "+tcp", "x"}, resolv); err == nil {
		t.Error("no server on port 1: no error")
	}
}
