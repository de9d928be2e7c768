package devicemanager

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// maxSocketPath is the longest path a unix socket address holds
// (sun_path, less its terminating NUL).
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// dial makes the client of the plugin socket name in dir (connecting on
// first use). The kubelet's directory is short (/var/lib/kubelet/...);
// nodelet's is under --root-dir, which may be deep, and plugins choose
// their socket's name: a path too long for a socket address is reached
// through the directory's /proc/self/fd link instead.
func dial(dir, name string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+name,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dialIn(ctx, dir, name) }),
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", filepath.Join(dir, name), err)
	}
	return conn, nil
}

// dialIn connects to the unix socket name in dir, by its path when that
// fits a socket address, else through an O_PATH descriptor of dir.
func dialIn(ctx context.Context, dir, name string) (net.Conn, error) {
	var d net.Dialer
	if path := filepath.Join(dir, name); len(path) <= maxSocketPath {
		return d.DialContext(ctx, "unix", path)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir, err)
	}
	defer unix.Close(fd)
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd)+"/"+name)
}
