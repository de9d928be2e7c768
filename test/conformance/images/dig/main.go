// Command dig is the part of ISC dig that the upstream e2e suites use, for
// the e2e test images (test/conformance/images): upstream's agnhost and
// glibc-dns-testing images carry dnsutils, and the DNS specs of
// test/e2e/network query the cluster DNS with it; Debian's dig cannot be
// copied in here (the machine has no dnsutils, and no internet).
//
//	dig [@SERVER] [-p PORT] [+tcp|+notcp] [+search] [+short] [+noall] [+answer] NAME [TYPE]
//
// sends one query (TYPE A, AAAA, PTR, SRV, CNAME, TXT or NS; default A)
// to SERVER (port PORT, default 53), else to the first nameserver of
// /etc/resolv.conf, over UDP or TCP, and prints the answer section: the records in zone-file form, or
// with +short only their data. With +search a name of fewer dots than
// resolv.conf's ndots (default 1) is tried with each search domain first,
// then as given, until an answer is not NXDOMAIN, as dig does. +noall and
// +answer are accepted: only the answer section is ever printed. A failed
// exchange exits 9, as dig does when no server answers.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	out, err := run(os.Args[1:], "/etc/resolv.conf")
	fmt.Print(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dig:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(1)
		}
		os.Exit(9)
	}
}

type usageError struct{ error }

// query is what the command line asks.
type query struct {
	server        string
	port          string
	tcp, search   bool
	short         bool
	name          string
	qtype         dnsmessage.Type
	explicitQType bool
}

var types = map[string]dnsmessage.Type{
	"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "PTR": dnsmessage.TypePTR, "SRV": dnsmessage.TypeSRV,
	"CNAME": dnsmessage.TypeCNAME, "TXT": dnsmessage.TypeTXT, "NS": dnsmessage.TypeNS,
}

func parseArgs(args []string) (query, error) {
	q := query{qtype: dnsmessage.TypeA, port: "53"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-p":
			if i+1 == len(args) {
				return q, usageError{errors.New("-p: no port")}
			}
			i++
			if n, err := strconv.Atoi(args[i]); err != nil || n < 1 || n > 65535 {
				return q, usageError{fmt.Errorf("-p %q: not a port", args[i])}
			}
			q.port = args[i]
		case strings.HasPrefix(a, "@"):
			q.server = a[1:]
		case a == "+tcp" || a == "+vc":
			q.tcp = true
		case a == "+notcp" || a == "+novc":
			q.tcp = false
		case a == "+search":
			q.search = true
		case a == "+nosearch":
			q.search = false
		case a == "+short":
			q.short = true
		case a == "+noall" || a == "+answer":
		case strings.HasPrefix(a, "+") || strings.HasPrefix(a, "-"):
			return q, usageError{fmt.Errorf("option %q is not supported", a)}
		case q.name == "":
			q.name = a
		default:
			t, ok := types[strings.ToUpper(a)]
			if !ok || q.explicitQType {
				return q, usageError{fmt.Errorf("unexpected argument %q (types: A, AAAA, PTR, SRV, CNAME, TXT, NS)", a)}
			}
			q.qtype, q.explicitQType = t, true
		}
	}
	if q.name == "" {
		return q, usageError{errors.New("no name to look up")}
	}
	return q, nil
}

// resolvConf is the part of resolv.conf dig reads.
type resolvConf struct {
	nameservers []string
	search      []string
	ndots       int
}

func readResolvConf(r io.Reader) resolvConf {
	c := resolvConf{ndots: 1}
	sc := bufio.NewScanner(io.LimitReader(r, 64<<10))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			c.nameservers = append(c.nameservers, f[1])
		case "search", "domain":
			c.search = f[1:]
		case "options":
			for _, o := range f[1:] {
				if v, ok := strings.CutPrefix(o, "ndots:"); ok {
					if n, err := strconv.Atoi(v); err == nil && n >= 0 {
						c.ndots = n
					}
				}
			}
		}
	}
	return c
}

// candidates are the names a query tries, in order.
func candidates(name string, search bool, c resolvConf) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	if !search {
		return []string{name + "."}
	}
	var out []string
	for _, d := range c.search {
		out = append(out, name+"."+strings.TrimSuffix(d, ".")+".")
	}
	if strings.Count(name, ".") >= c.ndots {
		return append([]string{name + "."}, out...)
	}
	return append(out, name+".")
}

func run(args []string, resolvPath string) (string, error) {
	q, err := parseArgs(args)
	if err != nil {
		return "", err
	}
	var conf resolvConf
	if f, err := os.Open(resolvPath); err == nil {
		conf = readResolvConf(f)
		f.Close()
	} else {
		conf = resolvConf{ndots: 1}
	}
	server := q.server
	if server == "" {
		if len(conf.nameservers) == 0 {
			return "", fmt.Errorf("no nameserver in %s", resolvPath)
		}
		server = conf.nameservers[0]
	}
	addr := net.JoinHostPort(server, q.port)
	var answers []dnsmessage.Resource
	for _, name := range candidates(q.name, q.search, conf) {
		msg, err := exchange(addr, name, q.qtype, q.tcp)
		if err != nil {
			return "", err
		}
		answers = msg.Answers
		if msg.RCode != dnsmessage.RCodeNameError {
			break
		}
	}
	var b strings.Builder
	for _, rr := range answers {
		data := rdata(rr.Body)
		if q.short {
			fmt.Fprintln(&b, data)
			continue
		}
		fmt.Fprintf(&b, "%s\t%d\tIN\t%s\t%s\n", rr.Header.Name, rr.Header.TTL, strings.TrimPrefix(rr.Header.Type.String(), "Type"), data)
	}
	return b.String(), nil
}

func exchange(addr, name string, qtype dnsmessage.Type, tcp bool) (*dnsmessage.Message, error) {
	n, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, fmt.Errorf("name %q: %w", name, err)
	}
	id := uint16(time.Now().UnixNano())
	req := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: n, Type: qtype, Class: dnsmessage.ClassINET}},
	}
	packed, err := req.Pack()
	if err != nil {
		return nil, err
	}
	network := "udp"
	if tcp {
		network = "tcp"
	}
	conn, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connection to %s (%s) failed: %w", addr, network, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	var reply []byte
	if tcp {
		frame := binary.BigEndian.AppendUint16(nil, uint16(len(packed)))
		if _, err := conn.Write(append(frame, packed...)); err != nil {
			return nil, err
		}
		var size [2]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return nil, fmt.Errorf("reading from %s: %w", addr, err)
		}
		reply = make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(conn, reply); err != nil {
			return nil, fmt.Errorf("reading from %s: %w", addr, err)
		}
	} else {
		if _, err := conn.Write(packed); err != nil {
			return nil, err
		}
		buf := make([]byte, 65535)
		n, err := conn.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("reading from %s: %w", addr, err)
		}
		reply = buf[:n]
	}
	var msg dnsmessage.Message
	if err := msg.Unpack(reply); err != nil {
		return nil, fmt.Errorf("reply from %s: %w", addr, err)
	}
	if msg.ID != id {
		return nil, fmt.Errorf("reply from %s: id %d, want %d", addr, msg.ID, id)
	}
	return &msg, nil
}

// rdata is a record's data as dig prints it.
func rdata(body dnsmessage.ResourceBody) string {
	switch r := body.(type) {
	case *dnsmessage.AResource:
		return net.IP(r.A[:]).String()
	case *dnsmessage.AAAAResource:
		return net.IP(r.AAAA[:]).String()
	case *dnsmessage.CNAMEResource:
		return r.CNAME.String()
	case *dnsmessage.PTRResource:
		return r.PTR.String()
	case *dnsmessage.NSResource:
		return r.NS.String()
	case *dnsmessage.SRVResource:
		return fmt.Sprintf("%d %d %d %s", r.Priority, r.Weight, r.Port, r.Target.String())
	case *dnsmessage.TXTResource:
		quoted := make([]string, len(r.TXT))
		for i, s := range r.TXT {
			quoted[i] = strconv.Quote(s)
		}
		return strings.Join(quoted, " ")
	default:
		return fmt.Sprintf("%v", body)
	}
}
