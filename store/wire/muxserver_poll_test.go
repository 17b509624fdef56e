package wire

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/spin"
	"github.com/kvferry/kvferry/internal/testutil"
)

// TestServerPollLimit: a served connection polls only while the process's
// pollers are under the limit, and reads (blocking) either way; the count
// is given back.
func TestServerPollLimit(t *testing.T) {
	c, s := testutil.TCPPair(t)
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
	_, err := c.Write([]byte("one"))
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

// TestMuxPollsShareCPU: both ends of a master connection poll offering
// their CPU to other threads between reads (sched_yield), never holding
// it: on a small machine the scheduler may put a client and its master on
// one CPU, and a poll holding it keeps the very thread whose answer (or
// next request) it waits for from running until its budget runs out (a
// round trip of 150-200 us instead of about 20; docs/reports/benchmarks.md,
// "Store single operations").
// What is checked is that the polls offered the CPU while they waited, not
// how long anything took.
func TestMuxPollsShareCPU(t *testing.T) {
	// The server's poll for the next request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	assert.NilError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	assert.NilError(t, err)
	defer s.Close()
	r := serverReading(s, spin.Max)
	p, ok := r.(*serverPoll)
	assert.Assert(t, ok, "a socket is polled")
	assert.Assert(t, p.r.Shared)
	go func() {
		time.Sleep(2 * time.Millisecond) // the request comes while the server polls
		_, _ = c.Write([]byte("req"))
	}()
	buf := make([]byte, 8)
	n, err := r.Read(buf)
	assert.NilError(t, err)
	assert.Equal(t, string(buf[:n]), "req")
	assert.Assert(t, p.r.Yields() > 0, "the server's poll offered its CPU")

	// The client's poll for its answer: the master answers a call late.
	srv := startMuxServer(t, "127.0.0.1:0")
	mcl := NewMuxClient(MuxClientConfig{Addr: srv.addr(), SpinWait: spin.Max})
	defer mcl.Close()
	ctx := ctxFor(t, 10*time.Second)
	assert.NilError(t, mcl.Connect(ctx))
	mcl.mu.Lock()
	mc := mcl.mu.conn
	mcl.mu.Unlock()
	assert.Assert(t, mc != nil)
	before := spin.Yields(mc.poll)
	go func() {
		<-srv.f.started
		time.Sleep(2 * time.Millisecond) // the answer comes while the client polls
		close(srv.f.block)
	}()
	_, err = mcl.ExistKey(context.WithoutCancel(ctx), &KeyRequest{Key: "block"})
	assert.NilError(t, err)
	assert.Assert(t, spin.Yields(mc.poll) > before, "the client's poll offered its CPU")
}

// TestServerPollAfterLargePut: after a put of a large object the wait for
// the next request lasts as long as moving it at 1 GB/s, within 8 and 20
// budgets; after anything else one budget.
func TestServerPollAfterLargePut(t *testing.T) {
	c, _ := testutil.TCPPair(t)
	const budget = 50 * time.Microsecond
	p := serverReading(c, budget).(*serverPoll)
	for _, tc := range []struct {
		req  proto.Message
		want time.Duration
	}{
		{&PutCommitRequest{Size: 1 << 20}, 20 * budget},
		{&PutCommitRequest{Size: 600 << 10}, time.Duration(600 << 10)}, // 1 byte a nanosecond
		{&KeyRequest{Key: "k"}, budget},
		{&PutStartRequest{Size: largePutBytes}, 8 * budget},
		{&PutStartRequest{Size: largePutBytes - 1}, budget},
		{&BatchPutStartRequest{Sizes: []uint64{32 << 10, 32 << 10}}, 8 * budget},
		{&PutCommitRequest{Size: 4096}, budget},
	} {
		p.after(putBytes(tc.req))
		assert.Equal(t, p.budget, tc.want, "%T", tc.req)
	}
	var none *serverPoll
	none.after(1 << 20) // a connection that does not poll
}
