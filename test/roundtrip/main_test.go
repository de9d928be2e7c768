package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      int
		want   time.Duration
	}{
		{"one value", ms(7), 50, 7 * time.Millisecond},
		{"one value p99", ms(7), 99, 7 * time.Millisecond},
		{"even count p50 is the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"odd count p50 is the middle", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"p99 of 100 is the 99th", hundred, 99, 99 * time.Millisecond},
		{"p50 of 100 is the 50th", hundred, 50, 50 * time.Millisecond},
		{"p99 of 4 is the largest", ms(1, 2, 3, 4), 99, 4 * time.Millisecond},
	} {
		if got := percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: percentile(%v, %d) = %v, want %v", tc.name, tc.sorted, tc.p, got, tc.want)
		}
	}
}

func TestSummary(t *testing.T) {
	took := []time.Duration{300 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond}
	got := summary("x", took).line()
	want := "roundtrip label=x rounds=3 p50_us=200.0 p99_us=300.0 min_us=100.0 max_us=300.0 mean_us=200.0"
	if got != want {
		t.Errorf("summary line\n got %s\nwant %s", got, want)
	}
	if took[0] != 300*time.Microsecond {
		t.Error("summary sorted its caller's slice")
	}
}

// A client against a server on loopback: it prints one line with the
// rounds asked for.
func TestClientAgainstServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go answer(c)
		}
	}()
	var out bytes.Buffer
	if err := client([]string{"-addr", l.Addr().String(), "-rounds", "20", "-warmup", "3", "-label", "lo"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "roundtrip label=lo rounds=20 p50_us=") {
		t.Errorf("output %q", out.String())
	}
}

// A server that answers something else fails the client.
func TestClientWrongAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("nope\n"))
			c.Close()
		}
	}()
	err = client([]string{"-addr", l.Addr().String(), "-rounds", "1", "-warmup", "0", "-wait", "300ms"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("error %v, want one naming the wrong answer", err)
	}
}
