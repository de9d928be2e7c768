// Command roundtrip measures TCP round trips across the pod network for the
// multi-node benchmark (test/e2e, BenchmarkMultiNodeRoundTrip). It runs
// inside the pods, mounted from the host, as a static program:
//
//	roundtrip serve -listen :8080
//	roundtrip client -addr IP:PORT -rounds N -warmup W -wait D -label L
//
// serve answers each connection: it reads one request line and writes one
// response line, then closes. client first waits (at most -wait) until a
// connection is answered, then makes W rounds it does not count and N it
// does; a round is a new TCP connection (the handshake), one request and
// its response, timed from the dial until the response is read (the close
// that follows is not timed). It prints one line:
//
//	roundtrip label=L rounds=N p50_us=… p99_us=… min_us=… max_us=… mean_us=…
//
// timed inside the pod, so that the figure is the network path (bridges,
// host routing, kube-proxy's rules for a Service) and not a process start
// or an exec. It is part of the test machine, not of nodelet.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// The request and the response: one short line each.
const (
	request  = "ping\n"
	response = "pong\n"
	// maxLine bounds what either side reads of a line.
	maxLine = 64
	// ioTimeout bounds each connection's exchange.
	ioTimeout = 5 * time.Second
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: roundtrip serve|client [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "client":
		err = client(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown mode %q (serve, client)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "roundtrip:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go answer(c)
	}
}

// answer serves one connection: a request line in, a response line out.
func answer(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := readLine(c); err != nil {
		return
	}
	io.WriteString(c, response)
}

// readLine reads one line of at most maxLine bytes.
func readLine(r io.Reader) (string, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, maxLine), maxLine).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	return line, nil
}

func client(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "", "server address, IP:PORT")
	rounds := fs.Int("rounds", 2000, "rounds measured")
	warmup := fs.Int("warmup", 200, "rounds made first and not measured")
	wait := fs.Duration("wait", time.Minute, "how long to wait for the first answer")
	label := fs.String("label", "", "label of the printed line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *rounds < 1 || *warmup < 0 {
		return errors.New("-addr and -rounds >= 1 are required, -warmup >= 0")
	}
	deadline := time.Now().Add(*wait)
	for {
		_, err := round(*addr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no answer within %v: %w", *addr, *wait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range *warmup {
		if _, err := round(*addr); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	took := make([]time.Duration, 0, *rounds)
	for range *rounds {
		d, err := round(*addr)
		if err != nil {
			return fmt.Errorf("round %d: %w", len(took)+1, err)
		}
		took = append(took, d)
	}
	fmt.Fprintln(out, summary(*label, took).line())
	return nil
}

// round is one connect, request and response, and how long that took;
// the connection is closed after the clock stops.
func round(addr string) (time.Duration, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(start.Add(ioTimeout))
	if _, err := io.WriteString(c, request); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	line, err := readLine(c)
	if err != nil {
		return 0, err
	}
	if line != response {
		return 0, fmt.Errorf("answer %q, want %q", line, response)
	}
	took := time.Since(start)
	return took, nil
}

// stats are the figures of a run, in microseconds.
type stats struct {
	label                    string
	rounds                   int
	p50, p99, min, max, mean float64
}

// summary computes the figures of the round trips took (at least one).
// Percentiles are nearest-rank: the smallest value with at least p% of
// the rounds at or below it.
func summary(label string, took []time.Duration) stats {
	s := slices.Clone(took)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return stats{
		label: label, rounds: len(s),
		p50: us(percentile(s, 50)), p99: us(percentile(s, 99)),
		min: us(s[0]), max: us(s[len(s)-1]), mean: us(sum / time.Duration(len(s))),
	}
}

// percentile is the nearest-rank p-th percentile of sorted (not empty).
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

func (s stats) line() string {
	return fmt.Sprintf("roundtrip label=%s rounds=%d p50_us=%.1f p99_us=%.1f min_us=%.1f max_us=%.1f mean_us=%.1f",
		s.label, s.rounds, s.p50, s.p99, s.min, s.max, s.mean)
}
