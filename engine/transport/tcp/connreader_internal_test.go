package tcp

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
)

// TestAfterRequest: after a large request a server connection waits for
// the next one yielding its CPU for four budgets, after a small one
// holding it for the configured budget; without polling nothing changes.
func TestAfterRequest(t *testing.T) {
	c, _ := testutil.TCPPair(t)
	const budget = 50 * time.Microsecond
	cr, err := newConnReader(c, budget)
	assert.NilError(t, err)
	defer cr.close()
	cr.afterRequest(largeRequestBytes)
	assert.Equal(t, cr.budget, 4*budget)
	assert.Assert(t, cr.poll.Shared)
	cr.afterRequest(4096)
	assert.Equal(t, cr.budget, budget)
	assert.Assert(t, !cr.poll.Shared)

	off, err := newConnReader(c, 0)
	assert.NilError(t, err)
	defer off.close()
	off.afterRequest(1 << 20)
	assert.Equal(t, off.budget, time.Duration(0))
	assert.Assert(t, off.poll == nil)
}
