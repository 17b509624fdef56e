package engine_test

import (
	"context"
	"errors"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// TestFailedTaskHasReason: a task that fails after Submit returned (the
// peer's server refuses it) reports why through TaskStatus and
// BatchStatus, which is what the C API turns into the engine's last error
// (a FAILED status with no reason was the 1-hour soak's dead end); a
// completed task reports none.
func TestFailedTaskHasReason(t *testing.T) {
	a, b := newEngine(t, "tcp"), newEngine(t, "tcp")
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	id, err := a.AllocateBatch(2)
	assert.NilError(t, err)
	assert.NilError(t, a.Submit(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}))
	bs := pollDone(t, a, id)
	assert.Equal(t, bs.State, engine.StateCompleted)
	st, err := a.TaskStatus(id, 0)
	assert.NilError(t, err)
	assert.Equal(t, st.State, engine.StateCompleted)
	assert.NilError(t, st.Err)
	// The cached descriptor still lists dst: Submit accepts the request,
	// b's server refuses it.
	assert.NilError(t, b.UnregisterMemory(dst.Addr()))
	assert.NilError(t, a.Submit(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}))
	bs = pollDone(t, a, id)
	assert.Equal(t, bs.State, engine.StateFailed)
	assert.Assert(t, errors.Is(bs.Err, engine.ErrRejected), "%v", bs.Err)
	st, err = a.TaskStatus(id, 1)
	assert.NilError(t, err)
	assert.Equal(t, st.State, engine.StateFailed)
	assert.Assert(t, errors.Is(st.Err, engine.ErrRejected), "%v", st.Err)
	assert.NilError(t, a.FreeBatch(id))
}
