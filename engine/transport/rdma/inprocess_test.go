package rdma_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

func TestInProcessTwoNICs(t *testing.T) {
	devs := nics(t, 2)
	a := newEngine(t, rdmaConfig(devs...), 10*time.Second)
	b := newEngine(t, rdmaConfig(devs...), 10*time.Second)
	const n = 8 << 20
	src, dst := newBuf(t, a, n), newBuf(t, b, n)
	pattern(src.Bytes(), 1)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	assert.Equal(t, a.ChooseTransport(seg), "rdma")
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: n}})
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()))
	pattern(dst.Bytes(), 2)
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpRead, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: n}})
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()))
	per := nicBytes(a)
	t.Logf("per-NIC bytes: %v", per)
	assert.Assert(t, per[devs[0]] > 0 && per[devs[1]] > 0, "%v", per)
	assert.Equal(t, per[devs[0]]+per[devs[1]], uint64(2*n))
}
