package samehost_test

import (
	"bytes"
	"context"
	"net"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// TestSilentConnectionsDisplaced: 150 local connections to an owner's
// same-host socket that never send their hello hold every slot of its
// connection cap (MaxSessions+64), as any local process could; an
// initiator still opens a cma session and moves correct bytes, since its
// connection displaces the oldest silent one (issue 35).
func TestSilentConnectionsDisplaced(t *testing.T) {
	cfg := samehost.Config{MaxSessions: 2}
	a, b := newEngineWith(t, cfg, samehost.NameCMA), newEngineWith(t, cfg, samehost.NameCMA)
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	pattern(src.Bytes(), 3)
	sock := samehost.OwnerSock(b.Transport(samehost.NameCMA).(*samehost.CMA))
	for range 150 {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close() })
	}
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	assert.Equal(t, a.ChooseTransport(seg), samehost.NameCMA)
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 1 << 20}}))
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()))
}
