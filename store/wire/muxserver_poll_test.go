package wire

import (
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestServerPollLimit: a served connection polls only while the process's
// pollers are under the limit, and reads (blocking) either way; the count
// is given back.
func TestServerPollLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	assert.NilError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	assert.NilError(t, err)
	defer s.Close()

	r := serverReading(s, time.Millisecond)
	p, ok := r.(*serverPoll)
	assert.Assert(t, ok, "a socket is polled")
	assert.Assert(t, p.limit >= 1)
	assert.Equal(t, serverReading(s, 0), net.Conn(s), "budget 0: never polled")
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	assert.Equal(t, serverReading(a, time.Millisecond), net.Conn(a), "no socket: read as it is")

	read := func() string {
		buf := make([]byte, 8)
		n, err := r.Read(buf)
		assert.NilError(t, err)
		return string(buf[:n])
	}
	before := serverSpinners.Load()
	_, err = c.Write([]byte("one"))
	assert.NilError(t, err)
	assert.Equal(t, read(), "one")
	assert.Equal(t, serverSpinners.Load(), before)

	// Every polling slot taken: the read blocks instead, and still reads.
	serverSpinners.Add(p.limit)
	go func() {
		time.Sleep(5 * time.Millisecond)
		_, _ = c.Write([]byte("two"))
	}()
	assert.Equal(t, read(), "two")
	serverSpinners.Add(-p.limit)
	assert.Equal(t, serverSpinners.Load(), before)
}
