package abi

import (
	"errors"
	"fmt"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/asyncq"
	"github.com/kvferry/kvferry/store/wire"
)

// The completion queue's logic is tested in store/asyncq; here are the
// header's values and the code tables of kvferry_store_queue_*.

// TestQueueLayout: the header's op and flag values are asyncq's (the C ints
// are converted as they are), and the submit codes are the header's.
func TestQueueLayout(t *testing.T) {
	c := queueCLayout()
	for k, v := range map[string]int{
		"KVFERRY_QOP_PUT": int(asyncq.OpPut), "KVFERRY_QOP_GET_INTO": int(asyncq.OpGetInto),
		"KVFERRY_QOP_GET_ALLOC": int(asyncq.OpGetAlloc), "KVFERRY_QOP_IS_EXIST": int(asyncq.OpIsExist),
		"KVFERRY_QOP_GET_SIZE": int(asyncq.OpGetSize), "KVFERRY_QOP_REMOVE": int(asyncq.OpRemove),
		"KVFERRY_QFLAG_UPSERT": int(asyncq.FlagUpsert), "KVFERRY_QFLAG_FORCE": int(asyncq.FlagForce),
		"KVFERRY_ERR_TOO_MANY_REQUESTS": errTooManyRequests, "KVFERRY_ERR_CLOSED": errClosed,
	} {
		assert.Equal(t, c[k], v, k)
	}
}

// queueCodeCases is kvferry_store_queue_submit's table as known answers.
var queueCodeCases = []struct {
	err  error
	want int
}{
	{nil, 0},
	{asyncq.ErrClosed, errClosed},
	{asyncq.ErrFull, errTooManyRequests},
	{asyncq.ErrInvalid, storeErr},
	{errors.New("something else"), storeErr},
}

func TestQueueCodes(t *testing.T) {
	for _, c := range queueCodeCases {
		assert.Equal(t, queueCode(c.err), c.want, "%v", c.err)
		if c.err != nil {
			assert.Equal(t, queueCode(fmt.Errorf("submit: %w", c.err)), c.want, "%v", c.err)
		}
	}
	// Both ways: every code the header documents for submit is the answer
	// for some error, and each sentinel has one.
	produced := map[int]bool{}
	for _, c := range queueCodeCases {
		produced[queueCode(c.err)] = true
	}
	for _, code := range []int{0, errTooManyRequests, errClosed, -1} {
		assert.Assert(t, produced[code], "no error maps to %d", code)
	}
	assert.Equal(t, storeErr, -1)
}

// TestQueueResult: a completion's result is its value, or its error's
// store code; a destroyed store handle is -1.
func TestQueueResult(t *testing.T) {
	assert.Equal(t, queueResult(asyncq.Completion{Value: 1 << 20}), int64(1<<20))
	assert.Equal(t, queueResult(asyncq.Completion{Value: 7, Err: fmt.Errorf("get: %w", wire.ErrObjectNotFound)}), int64(wire.ErrObjectNotFound))
	assert.Equal(t, queueResult(asyncq.Completion{Err: errStoreGone}), int64(-1))
	assert.Equal(t, queueResult(asyncq.Completion{Err: errors.New("unknown")}), int64(wire.ErrInternal))
}
