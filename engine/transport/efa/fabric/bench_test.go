package fabric

import (
	"testing"

	"github.com/kvferry/kvferry/internal/cmem"
)

// BenchmarkWrite measures fi_write of 32 blocks of 1 MiB between two
// endpoints of one process over tcp;ofi_rxm, both CQs polled by the
// benchmark: the provider's own cost, without the transport.
func BenchmarkWrite(b *testing.B) {
	t := &testing.T{}
	_, in := loopbackInfo(t)
	a, _ := Open(in, 16, 256, 64)
	defer a.Close()
	c, _ := Open(in, 16, 256, 64)
	defer c.Close()
	const n, count = 1 << 20, 32
	abuf, _ := cmem.Malloc(n * count)
	defer cmem.Free(abuf)
	cbuf, _ := cmem.Malloc(n * count)
	defer cmem.Free(cbuf)
	am, _ := a.RegMR(abuf, n*count, AccessAll, 1, IfaceSystem, 0)
	defer am.Close()
	cm, _ := c.RegMR(cbuf, n*count, AccessAll, 2, IfaceSystem, 0)
	defer cm.Close()
	peer, _ := a.Insert(c.Addr())
	ops := make([]Op, count)
	for i := range ops {
		ops[i] = Op{Local: uint64(abuf) + uint64(i*n), Length: n, Desc: am.Desc(), Remote: uint64(i * n), Key: cm.Key(), Peer: peer, Slot: uint32(i), Write: 1}
	}
	pollWait = 0
	defer func() { pollWait = 1 }()
	b.SetBytes(n * count)
	for i := 0; i < b.N; i++ {
		post(t, a, c, ops)
	}
}
