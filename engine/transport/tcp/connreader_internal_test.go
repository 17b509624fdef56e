package tcp

import (
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestAfterRequest: after a large request a server connection waits for
// the next one yielding its CPU for four budgets, after a small one
// holding it for the configured budget; without polling nothing changes.
func TestAfterRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	assert.NilError(t, err)
	defer c.Close()
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
