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
	a := newEngine(t, rdmaConfig("fake_mlx5_0", "fake_mlx5_1"), 10*time.Second)
	b := newEngine(t, rdmaConfig("fake_mlx5_0", "fake_mlx5_1"), 10*time.Second)
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
	assert.Assert(t, per["fake_mlx5_0"] > 0 && per["fake_mlx5_1"] > 0, "%v", per)
	assert.Equal(t, per["fake_mlx5_0"]+per["fake_mlx5_1"], uint64(2*n))
}
