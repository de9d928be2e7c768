package cri

import "testing"

// A buffer is never more than twice the size asked for, where gRPC's
// default pool gives a 1 MiB buffer for anything above 32 KiB; a size
// above the largest tier is not rounded up at all.
func TestFittedBufferPool(t *testing.T) {
	p := FittedBufferPool()
	for _, n := range []int{1, 255, 256, 257, 4 << 10, 33 << 10, 100 << 10, 150 << 10, 300 << 10, 600 << 10, 1 << 20, 3 << 20} {
		buf := p.Get(n)
		if len(*buf) != n {
			t.Errorf("Get(%d): len %d", n, len(*buf))
		}
		if c := cap(*buf); c > max(2*n, 256) {
			t.Errorf("Get(%d): capacity %d, more than twice the size", n, c)
		}
		p.Put(buf)
	}
}
