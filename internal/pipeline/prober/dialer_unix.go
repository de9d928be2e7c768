//go:build unix

package prober

import (
	"fmt"
	"net"
	"syscall"
)

// probeDialer returns a dialer whose sockets linger at most one second on
// close, so that frequent probes leave no pile of sockets in TIME_WAIT (the
// kubelet's ProbeDialer; 1 s rather than 0 so that a close still sends FIN,
// not RST).
func probeDialer() *net.Dialer {
	return &net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER,
					&syscall.Linger{Onoff: 1, Linger: 1})
			}); err != nil {
				return fmt.Errorf("probe socket: %w", err)
			}
			if serr != nil {
				return fmt.Errorf("probe socket: set SO_LINGER: %w", serr)
			}
			return nil
		},
	}
}
