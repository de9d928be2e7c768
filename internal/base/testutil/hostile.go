package testutil

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// HeaderBomb is an HTTP handler that answers with a status line and then
// headers that do not end within total bytes: one endless header line
// (List false) or an endless list of short headers (List true). It stops
// when the client hangs up, which is what a bounded reader does.
type HeaderBomb struct {
	List  bool
	Total int
}

func (b HeaderBomb) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	head := "HTTP/1.1 200 OK\r\nX-Endless: "
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	if b.List {
		head = "HTTP/1.1 200 OK\r\n"
		var buf bytes.Buffer
		for i := 0; buf.Len() < 32<<10; i++ {
			buf.WriteString("X-H" + strconv.Itoa(i) + ": v\r\n")
		}
		chunk = buf.Bytes()
	}
	if _, err := conn.Write([]byte(head)); err != nil {
		return
	}
	for sent := 0; sent < b.Total; sent += len(chunk) {
		if _, err := conn.Write(chunk); err != nil {
			return
		}
	}
}

// CountingConn counts in N the bytes read from the connection.
type CountingConn struct {
	net.Conn
	N *atomic.Int64
}

func (c CountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.N.Add(int64(n))
	return n, err
}

// CountingDial wraps dial so that every byte read is counted in n.
func CountingDial(n *atomic.Int64, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return CountingConn{Conn: c, N: n}, nil
	}
}
