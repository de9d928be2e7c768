// Command fakecri serves fake CRI runtimes, one per socket, from one
// process, for make bench-hollow (test/e2e, BenchmarkHollow): many node
// agents on one machine, each talking to its own runtime, where the runtime
// costs next to nothing, so that what is measured is the agents and the
// control plane.
//
//	fakecri -socket DIR/a.sock -socket DIR/b.sock ...
//
// Each socket is an independent runtime: the runtime and image services of
// k8s.io/cri-client/pkg/fake over k8s.io/cri-api/pkg/apis/testing (the
// runtime kubemark's hollow kubelet has inside it), so an image "pulls" at
// once and a container is running as soon as it is started, and runs until
// it is stopped. Two things differ from that fake:
//
//   - GetContainerEvents answers Unimplemented, as a runtime without the
//     event stream does: the fake's stream ends at once with no error,
//     which an agent takes for a broken stream and opens again. With
//     Unimplemented nodelet relists every second, as the kubelet (whose
//     EventedPLEG gate is off) does against any runtime.
//   - an image has a size (the fake's is 0, which a CRI client refuses);
//   - the call log of the fakes (their Called fields, kept for unit tests'
//     assertions) is emptied every -trim, so that the process's memory does
//     not grow with the length of the run.
//
// It serves until SIGINT or SIGTERM, then removes its sockets. It refuses a
// socket path where something other than a socket is, and a directory of
// sockets that others may write to. It is part of the test machine, not of
// nodelet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// imageSize is the size every image "pulled" reports: the pause image's,
// about.
const imageSize = 300 << 10

// sockets is the repeatable -socket flag.
type sockets []string

func (s *sockets) String() string     { return strings.Join(*s, ",") }
func (s *sockets) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var paths sockets
	flag.Var(&paths, "socket", "Unix socket path of one runtime (repeatable)")
	trim := flag.Duration("trim", 30*time.Second, "How often the fakes' call logs are emptied")
	flag.Parse()
	if len(paths) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: fakecri -socket PATH [-socket PATH]... [-trim DURATION]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, paths, *trim); err != nil {
		fmt.Fprintln(os.Stderr, "fakecri:", err)
		os.Exit(1)
	}
}

// serve serves a runtime on each of paths until ctx ends.
func serve(ctx context.Context, paths []string, trim time.Duration) error {
	var runtimes []*runtime
	defer func() {
		for _, rt := range runtimes {
			rt.stop()
		}
	}()
	for _, p := range paths {
		rt, err := listen(p)
		if err != nil {
			return err
		}
		runtimes = append(runtimes, rt)
	}
	fmt.Printf("fakecri: serving %d runtimes\n", len(runtimes))
	tick := time.NewTicker(trim)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, rt := range runtimes {
				rt.trimCalls()
			}
		}
	}
}

// runtime is one fake runtime on its socket.
type runtime struct {
	*fake.RemoteRuntime
	path   string
	server *grpc.Server
	wg     sync.WaitGroup
}

// GetContainerEvents answers as a runtime without the event stream does.
func (r *runtime) GetContainerEvents(*runtimeapi.GetEventsRequest, runtimeapi.RuntimeService_GetContainerEventsServer) error {
	return status.Error(codes.Unimplemented, "fakecri has no container event stream")
}

// listen makes the runtime of path and serves it.
func listen(path string) (*runtime, error) {
	if err := checkDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	rt := &runtime{RemoteRuntime: fake.NewFakeRemoteRuntime(), path: path, server: grpc.NewServer()}
	// An image of size 0 is one a CRI client refuses (cri-client's
	// ImageStatus: "Id or size of image is not set"); the hollow kubelet
	// calls the fake in its process, past that check.
	rt.ImageService.FakeImageSize = imageSize
	rt.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	runtimeapi.RegisterRuntimeServiceServer(rt.server, rt)
	runtimeapi.RegisterImageServiceServer(rt.server, rt)
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := rt.server.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			fmt.Fprintf(os.Stderr, "fakecri: %s: %v\n", path, err)
		}
	}()
	return rt, nil
}

// stop ends the runtime's calls and removes its socket.
func (r *runtime) stop() {
	r.server.Stop()
	r.wg.Wait()
	os.Remove(r.path)
}

// trimCalls empties the fakes' call logs.
func (r *runtime) trimCalls() {
	r.RuntimeService.Lock()
	r.RuntimeService.Called = r.RuntimeService.Called[:0]
	r.RuntimeService.Unlock()
	r.ImageService.Lock()
	r.ImageService.Called = r.ImageService.Called[:0]
	r.ImageService.Unlock()
}

// checkDir refuses a socket directory that is not a directory or that
// others may write to (they could put their own socket in our place).
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("socket directory %s is not a directory", dir)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("socket directory %s is writable by group or others (%v)", dir, st.Mode().Perm())
	}
	return nil
}

// removeStaleSocket removes a socket left at path by an earlier run, and
// refuses anything else there.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("socket %s: something else is there (%v)", path, st.Mode().Type())
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("stale socket %s: %w", path, err)
	}
	return nil
}
