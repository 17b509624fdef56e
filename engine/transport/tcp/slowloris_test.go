package tcp_test

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/testutil"
)

// TestSlowlorisSameAddress: 300 connections from 127.0.0.1 that send 4
// bytes of a frame header and stall, reconnecting when cut, against the
// target's RPC port and as many against its data port, while an honest
// initiator, also from 127.0.0.1, opens the target's segment and moves 4
// MiB each way with correct bytes. The per-address caps (32 RPC, 256
// data) are reached at once; new connections displace the stalled ones
// that never completed a frame instead of being refused (issue 35).
func TestSlowlorisSameAddress(t *testing.T) {
	const size = 4 << 20
	target := newNode(t, tcp.Config{}, size)
	honest := newNode(t, tcp.Config{}, 2*size)
	src := honest.mem.Bytes()[:size]
	for i := range src {
		src[i] = byte(i*31 + 7)
	}
	rpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(target.e.RPCPort()))
	header := []byte{0, 0, 0, 8} // 4 bytes of a frame header
	rpcAttack := testutil.StartSlowloris(rpcAddr, 300, header)
	defer rpcAttack.Stop()
	dataAttack := testutil.StartSlowloris(target.dataAddr(), 300, header)
	defer dataAttack.Stop()
	// The attack is on: both ports' caps are full of stalled connections.
	deadline := time.Now().Add(30 * time.Second)
	for rpcAttack.Dials() < 300 || dataAttack.Dials() < 300 || target.t.Stats().ServerConns < tcp.DefaultMaxConnsPerIP {
		if time.Now().After(deadline) {
			t.Fatalf("attack did not build up: %d rpc and %d data connections made, %d held", rpcAttack.Dials(), dataAttack.Dials(), target.t.Stats().ServerConns)
		}
		time.Sleep(10 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seg, err := honest.e.OpenSegment(ctx, target.e.SegmentName())
	assert.NilError(t, err)
	var reqs []engine.Request
	for k := range 4 { // one request per lane
		off := uint64(k) * size / 4
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: honest.mem.Addr() + uintptr(off), Target: seg,
			TargetOffset: uint64(target.mem.Addr()) + off, Length: size / 4})
	}
	assert.NilError(t, honest.e.Transfer(ctx, reqs))
	assert.Assert(t, bytes.Equal(target.mem.Bytes()[:size], src), "written bytes differ")
	for k := range reqs {
		reqs[k].Op = engine.OpRead
		reqs[k].Source += size
	}
	assert.NilError(t, honest.e.Transfer(ctx, reqs))
	assert.Assert(t, bytes.Equal(honest.mem.Bytes()[size:2*size], src), "read bytes differ")
	st := target.t.Stats()
	t.Logf("data port: %d connections displaced, %d refused; %d rpc and %d data attack connections made",
		st.ConnsDisplaced, st.ConnsRefused, rpcAttack.Dials(), dataAttack.Dials())
	assert.Assert(t, st.ConnsDisplaced > 0)
}
