//go:build !unix

package prober

import "net"

// probeDialer returns a plain dialer where SO_LINGER is not set.
func probeDialer() *net.Dialer { return &net.Dialer{} }
