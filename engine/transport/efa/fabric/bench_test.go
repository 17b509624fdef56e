package fabric

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
)

// BenchmarkWrite measures fi_write of 32 blocks of 1 MiB between two
// endpoints of one process over tcp;ofi_rxm, both CQs polled by the
// benchmark: the provider's own cost, without the transport.
func BenchmarkWrite(b *testing.B) {
	_, in := loopbackInfo(b)
	a, err := Open(in, 16, 256, 64)
	assert.NilError(b, err)
	defer a.Close()
	c, err := Open(in, 16, 256, 64)
	assert.NilError(b, err)
	defer c.Close()
	const n, count = 1 << 20, 32
	abuf, err := cmem.Malloc(n * count)
	assert.NilError(b, err)
	defer cmem.Free(abuf)
	cbuf, err := cmem.Malloc(n * count)
	assert.NilError(b, err)
	defer cmem.Free(cbuf)
	am, err := a.RegMR(abuf, n*count, AccessAll, 1, IfaceSystem, 0)
	assert.NilError(b, err)
	defer am.Close()
	cm, err := c.RegMR(cbuf, n*count, AccessAll, 2, IfaceSystem, 0)
	assert.NilError(b, err)
	defer cm.Close()
	peer, err := a.Insert(c.Addr())
	assert.NilError(b, err)
	raddr := uint64(0)
	if in.MRMode&MRVirtAddr != 0 {
		raddr = uint64(cbuf)
	}
	ops := make([]Op, count)
	for i := range ops {
		ops[i] = Op{Local: uint64(abuf) + uint64(i*n), Length: n, Desc: am.Desc(), Remote: raddr + uint64(i*n), Key: cm.Key(), Peer: peer, Slot: uint32(i), Write: 1}
	}
	pollWait = 0
	defer func() { pollWait = 1 }()
	b.SetBytes(n * count)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		waitSlots(b, a, c, ops)
	}
}
