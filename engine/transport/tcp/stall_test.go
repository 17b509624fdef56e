package tcp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// staticMeta is a metadata backend that knows one remote segment.
type staticMeta struct{ seg *descriptor.Segment }

func (m staticMeta) P2P() bool { return false }
func (m staticMeta) Publish(context.Context, *descriptor.Segment, descriptor.RPCMeta) error {
	return nil
}
func (m staticMeta) Unpublish(context.Context, string) error { return nil }
func (m staticMeta) Fetch(_ context.Context, name string) (*descriptor.Segment, error) {
	if name != m.seg.Name {
		return nil, errors.New("no such segment")
	}
	c := *m.seg
	return &c, nil
}
func (m staticMeta) Endpoint(context.Context, string) (descriptor.RPCMeta, error) {
	return descriptor.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 1}, nil
}
func (m staticMeta) Close() error { return nil }

// TestStalledWriteFailsOnce is the fault suite's "target SIGSTOP" finding
// as a unit test: a peer that answers the first request and then stops
// reading (frozen) makes the writer's deadline expire first, while the
// writev of a large request is stuck. The slices in flight must fail with
// the timeout, once; before the fix the reader saw only "connection
// closed", took it for a dropped idle connection and resent the slices on
// a new connection, so a batch against a frozen peer took two deadlines.
func TestStalledWriteFailsOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	var accepted atomic.Int32
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1) > 1 {
				<-hold // a redial: accept, never read
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				// The first request (4 KiB): read it, answer after a pause
				// so that the writer's deadline is the earlier one.
				b := make([]byte, tcpwire.HeaderSize+4096)
				if _, err := io.ReadFull(c, b); err != nil {
					return
				}
				time.Sleep(150 * time.Millisecond)
				st := make([]byte, tcpwire.StatusSize)
				tcpwire.EncodeStatus(st, tcpwire.StatusOK)
				_, _ = c.Write(st)
				<-hold // frozen
			}()
		}
	}()

	const size = 64 << 20
	const base = 0x10000000
	seg := &descriptor.Segment{Name: "frozen", Protocol: "tcp", TCPDataPort: ln.Addr().(*net.TCPAddr).Port, TCPProtoVersion: 2,
		Buffers: []descriptor.Buffer{{Name: "frozen", Addr: base, Length: size + 4096}}}
	const timeout = 400 * time.Millisecond
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "initiator", Metadata: staticMeta{seg}, Transports: []string{"tcp"}, TransferTimeout: 10 * time.Second},
		TCP:    tcp.Config{Lanes: 1, StatusTimeout: timeout},
	})
	assert.NilError(t, err)
	defer e.Close()
	src, err := cmem.MapAnon(size + 4096)
	assert.NilError(t, err)
	defer src.Close()
	assert.NilError(t, e.RegisterMemory(src.Addr(), size+4096, "cpu:0", true))
	id, err := e.OpenSegment(context.Background(), "frozen")
	assert.NilError(t, err)

	b, err := e.AllocateBatch(2)
	assert.NilError(t, err)
	assert.NilError(t, e.Submit(b, []engine.Request{
		{Op: engine.OpWrite, Source: src.Addr(), Target: id, TargetOffset: base, Length: 4096},
		{Op: engine.OpWrite, Source: src.Addr() + 4096, Target: id, TargetOffset: base + 4096, Length: size},
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs, err := e.Wait(ctx, b)
	assert.NilError(t, err)
	assert.Equal(t, bs.State, engine.StateFailed)
	assert.Assert(t, errors.Is(bs.Err, engine.ErrTimeout), "want a timeout, got %v", bs.Err)
	assert.Equal(t, accepted.Load(), int32(1), "the stalled slices were resent on a new connection")
	first, err := e.TaskStatus(b, 0)
	assert.NilError(t, err)
	assert.Equal(t, first.State, engine.StateCompleted)
}

// TestSlowLinkCompletes is the fault suite's "rate 20Mbit" finding as a
// unit test: a peer that reads steadily but slowly must not make a large
// write fail. The status timeout bounds a stall; before the fix it bounded
// the whole writev of a lane's batch, so a batch that took longer than the
// timeout on a slow but working link ended FAILED.
func TestSlowLinkCompletes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
				hdr := make([]byte, tcpwire.HeaderSize)
				buf := make([]byte, 256<<10)
				st := make([]byte, tcpwire.StatusSize)
				tcpwire.EncodeStatus(st, tcpwire.StatusOK)
				for {
					if _, err := io.ReadFull(c, hdr); err != nil {
						return
					}
					h, err := tcpwire.DecodeHeader(hdr)
					if err != nil {
						return
					}
					for left := h.Size; left > 0; { // about 16 MB/s
						n := min(left, uint64(len(buf)))
						if _, err := io.ReadFull(c, buf[:n]); err != nil {
							return
						}
						left -= n
						time.Sleep(16 * time.Millisecond)
					}
					if _, err := c.Write(st); err != nil {
						return
					}
				}
			}()
		}
	}()

	const size = 32 << 20
	const base = 0x10000000
	seg := &descriptor.Segment{Name: "slow", Protocol: "tcp", TCPDataPort: ln.Addr().(*net.TCPAddr).Port, TCPProtoVersion: 2,
		Buffers: []descriptor.Buffer{{Name: "slow", Addr: base, Length: size}}}
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "initiator", Metadata: staticMeta{seg}, Transports: []string{"tcp"}, TransferTimeout: 30 * time.Second},
		TCP:    tcp.Config{Lanes: 1, StatusTimeout: time.Second},
	})
	assert.NilError(t, err)
	defer e.Close()
	src, err := cmem.MapAnon(size)
	assert.NilError(t, err)
	defer src.Close()
	assert.NilError(t, e.RegisterMemory(src.Addr(), size, "cpu:0", true))
	id, err := e.OpenSegment(context.Background(), "slow")
	assert.NilError(t, err)
	start := time.Now()
	assert.NilError(t, e.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: id, TargetOffset: base, Length: size}}))
	t.Logf("32 MiB over the slow link in %s (status timeout 1 s)", time.Since(start).Round(time.Millisecond))
}

// TestDeadPeerReleasesLanes is the fault suite's "target restarted"
// finding: when a peer dies while our connections to it sit idle, its
// lanes must let go of their connections and goroutines within a few
// health checks, not hold them until the two-minute idle close (peers
// that restart under new names would pile them up).
func TestDeadPeerReleasesLanes(t *testing.T) {
	a, b, seg, src, dst := pairEngines(t, 8<<20)
	reqs := []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 8 << 20}}
	assert.NilError(t, a.Transfer(context.Background(), reqs))
	tr := a.Transport("tcp").(*tcp.Transport)
	assert.Assert(t, tr.Stats().Conns > 0)
	assert.NilError(t, b.Close()) // the peer goes away
	deadline := time.Now().Add(20 * time.Second)
	for tr.Stats().Conns > 0 {
		assert.Assert(t, time.Now().Before(deadline), "lanes still hold %d connections to a dead peer", tr.Stats().Conns)
		time.Sleep(50 * time.Millisecond)
	}
	// The next transfer fails fast (nobody listens), without a hang.
	err := a.Transfer(context.Background(), reqs)
	assert.Assert(t, err != nil)
}

// TestRestartedPeersForgotten: peers that go away (a restart comes back on
// a new port) must not leave their lanes in the transport for good: once
// their lanes retired, the next new endpoint makes the transport forget
// them (the soak's never-restarted peer grew by ~3 MiB an hour of such
// lanes).
func TestRestartedPeersForgotten(t *testing.T) {
	a := newNode(t, tcp.Config{}, 1<<20)
	tr := a.t
	write := func(p *node) error {
		seg, err := a.e.OpenSegment(context.Background(), p.e.SegmentName())
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return a.e.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: a.mem.Addr(), Target: seg, TargetOffset: uint64(p.mem.Addr()), Length: 64 << 10}})
	}
	for i := range 5 {
		p := newNode(t, tcp.Config{}, 1<<20)
		assert.NilError(t, write(p))
		assert.Equal(t, tr.Endpoints(), 1, "peer %d: the endpoints of the peers gone before were not forgotten", i)
		assert.NilError(t, p.e.Close())
		deadline := time.Now().Add(20 * time.Second)
		for tr.Stats().Conns > 0 {
			assert.Assert(t, time.Now().Before(deadline), "lanes still hold %d connections to a dead peer", tr.Stats().Conns)
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A live peer's lanes are kept while in use, and it still works.
	q := newNode(t, tcp.Config{}, 1<<20)
	assert.NilError(t, write(q))
	r := newNode(t, tcp.Config{}, 1<<20)
	assert.NilError(t, write(r))
	assert.NilError(t, write(q))
	assert.Assert(t, tr.Endpoints() >= 1 && tr.Endpoints() <= 2, "%d endpoints", tr.Endpoints())
}
