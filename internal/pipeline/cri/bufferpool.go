package cri

import (
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// fittedPoolExponents are the buffer sizes of FittedBufferPool, as powers
// of two: 256 B to 1 MiB, every one. gRPC's default pool has 256 B, 4, 16
// and 32 KiB and then 1 MiB, so that a message of 33 KiB to 1 MiB is read
// into a 1 MiB buffer, and the pool keeps it until two collections have
// passed. At 100 pods the runtime's list answers (ListContainers,
// ListPodSandbox, ListPodSandboxStats: 100 to 300 KiB each, several at once
// every 10 s) held 2.2 MiB of nodelet's 10.9 MiB live heap that way, and the
// heap's target grows by twice what is live.
var fittedPoolExponents = []uint8{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}

// FittedBufferPool is a gRPC buffer pool whose buffers are at most twice
// the size asked for (up to 1 MiB; larger ones are not pooled).
func FittedBufferPool() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(fittedPoolExponents...)
	if err != nil {
		panic("cri: buffer pool: " + err.Error()) // the exponents are constant
	}
	return p
}

// SetProcessBufferPool makes FittedBufferPool the process's default gRPC
// buffer pool: every gRPC client and server of the process reads messages
// into it, and the protobuf codec, which has no other setting, decodes
// from it. gRPC allows it only before any gRPC use (it is not safe
// concurrently), so only main calls it, first.
func SetProcessBufferPool() { experimental.SetDefaultBufferPool(FittedBufferPool()) }
