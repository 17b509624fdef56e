package samehost

import (
	"net"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestPeerGone: a write to a session whose peer closed its end is a gone
// peer (logged at debug); a write that times out against a live peer that
// does not read is not (logged as a warning).
func TestPeerGone(t *testing.T) {
	a, b := net.Pipe()
	assert.NilError(t, a.SetWriteDeadline(time.Now().Add(10*time.Millisecond)))
	_, err := a.Write([]byte("x"))
	assert.Assert(t, err != nil)
	assert.Assert(t, os.IsTimeout(err))
	assert.Assert(t, !peerGone(err), "timeout: %v", err)
	b.Close()
	a.Close()

	dir := t.TempDir()
	ln, err := net.Listen("unix", dir+"/s")
	assert.NilError(t, err)
	defer ln.Close()
	c, err := net.Dial("unix", dir+"/s")
	assert.NilError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	assert.NilError(t, err)
	s.Close() // the peer exits
	for range 100 {
		if _, err = c.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	assert.Assert(t, peerGone(err), "peer exited: %v", err)
	c.Close() // the session's reader closed it first
	_, err = c.Write([]byte("x"))
	assert.Assert(t, peerGone(err), "closed here: %v", err)
}
