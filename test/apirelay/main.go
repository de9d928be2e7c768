// Command apirelay lets pods reach the API server of hack/cluster.sh's test
// control plane, which listens on 127.0.0.1 only. It listens on an address
// inside a network namespace the script creates (reached from the pods'
// bridges through the host's routing, as any pod IP is) and relays each
// connection, byte for byte, to the API server on the host's 127.0.0.1:
// the listening socket is made inside that namespace, every connection to
// the API server is dialled from the host's. TLS passes through untouched;
// the API server's certificate names the kubernetes Service's IP, which
// the pods dial, and the script points that Service's endpoints at the
// relay. So in-cluster clients (CoreDNS, kube-proxy-less tests) work
// without the API server listening on any of the machine's interface
// addresses.
//
// It is part of the test machine's control plane, not of nodelet.
//
// Usage: apirelay --netns /run/netns/NAME --listen IP:PORT --target 127.0.0.1:6443
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxConns bounds the relayed connections open at once; more wait in the
// listen backlog.
const maxConns = 256

func main() {
	netns := flag.String("netns", "", "network namespace file (e.g. /run/netns/NAME) to listen in")
	listen := flag.String("listen", "", "IP:PORT to listen on inside --netns")
	target := flag.String("target", "127.0.0.1:6443", "address to relay to, in this process's own network namespace")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*netns, *listen, *target, log); err != nil {
		log.Error("apirelay", "err", err)
		os.Exit(1)
	}
}

func run(netns, listen, target string, log *slog.Logger) error {
	if netns == "" || listen == "" || target == "" {
		return errors.New("--netns, --listen and --target are required")
	}
	ln, err := listenIn(netns, listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	log.Info("relaying", "netns", netns, "listen", listen, "target", target)
	slots := make(chan struct{}, maxConns)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting on %s: %w", listen, err)
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			relay(ctx, conn, target, log)
		}()
	}
}

// listenIn makes the listening socket inside the network namespace file
// netns. It does so on a thread of its own that it never unlocks: Go then
// ends that thread instead of running other goroutines on it, so no later
// work (the dials to target) happens in the pods' namespace.
func listenIn(netns, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		f, err := os.Open(netns)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening network namespace: %w", err)}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering network namespace %s: %w", netns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			err = fmt.Errorf("listening on %s in %s: %w", addr, netns, err)
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

// relay copies both ways between conn and a new connection to target
// until either side closes, passing half-closes on.
func relay(ctx context.Context, conn net.Conn, target string, log *slog.Logger) {
	defer conn.Close()
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		log.Warn("dialling the target", "from", conn.RemoteAddr().String(), "err", err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	select {
	case <-done:
		<-done
	case <-ctx.Done():
	}
}
