package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// lagger is a Releaser that, while hold is set, completes each slice and
// keeps it held for its "lane" (as tcp's writer does after the reader
// completed the slice): the test reads and writes the slice after the
// batch was freed, and releases it later. Without hold it completes at
// once. It records every slice it was given.
type lagger struct {
	mu   sync.Mutex
	hold bool
	held []*engine.Slice
	seen []*engine.Slice
}

func (l *lagger) Name() string                 { return "cma" }
func (l *lagger) Describe(*descriptor.Segment) {}
func (l *lagger) Reaches(p *engine.Peer) bool  { return p.Local() }
func (l *lagger) SliceSize() uint64            { return 0 }
func (l *lagger) Close() error                 { return nil }
func (l *lagger) ReleasesSlices()              {}
func (l *lagger) Submit(_ *engine.Peer, ss []*engine.Slice) {
	for _, s := range ss {
		l.mu.Lock()
		l.seen = append(l.seen, s)
		hold := l.hold
		if hold {
			s.Hold()
			l.held = append(l.held, s)
		}
		l.mu.Unlock()
		s.Complete(nil)
	}
}

// seenSince returns the slices given to l after the first n.
func (l *lagger) seenSince(n int) []*engine.Slice {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*engine.Slice(nil), l.seen[n:]...)
}

func (l *lagger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

var _ engine.Releaser = (*lagger)(nil)

// nonReleaser completes at once but does not promise to leave slices alone
// afterwards: batches that went to it are never recycled.
// (A field, not embedded: ReleasesSlices must not be promoted.)
type nonReleaser struct{ l lagger }

func (n *nonReleaser) Name() string                              { return n.l.Name() }
func (n *nonReleaser) Describe(*descriptor.Segment)              {}
func (n *nonReleaser) Reaches(p *engine.Peer) bool               { return n.l.Reaches(p) }
func (n *nonReleaser) SliceSize() uint64                         { return 0 }
func (n *nonReleaser) Close() error                              { return nil }
func (n *nonReleaser) Submit(p *engine.Peer, ss []*engine.Slice) { n.l.Submit(p, ss) }

func newPoolEngine(t *testing.T, tr engine.Transport) (*engine.Engine, uintptr) {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{
		LocalServerName: "127.0.0.1", Transports: []string{"cma"}, TransferTimeout: 5 * time.Second,
		NewTransport: func(string, *engine.Engine) (engine.Transport, error) { return tr, nil },
	}})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	m, err := cmem.MapAnon(1 << 16)
	assert.NilError(t, err)
	t.Cleanup(func() { m.Close() })
	assert.NilError(t, e.RegisterMemory(m.Addr(), 1<<16, "cpu:0", true))
	t.Cleanup(func() { e.UnregisterMemory(m.Addr()) })
	return e, m.Addr()
}

// TestFreeBatchWhileHeld frees a batch (FreeBatch, after Wait) whose slice
// the transport still holds, and keeps reading and writing that slice
// from another goroutine while more batches come and go: none of them
// reuses the held batch (the race detector would see the new submission
// write the slice, and its fields would change), until the transport
// releases it; then the next batch is that one, recycled.
func TestFreeBatchWhileHeld(t *testing.T) {
	l := &lagger{hold: true}
	e, base := newPoolEngine(t, l)
	ctx := context.Background()

	id, err := e.AllocateBatch(1)
	assert.NilError(t, err)
	assert.NilError(t, e.Submit(id, []engine.Request{{Op: engine.OpWrite, Source: base, Target: engine.LocalSegment,
		TargetOffset: uint64(base) + 8192, Length: 4096}}))
	bs, err := e.Wait(ctx, id)
	assert.NilError(t, err)
	assert.Equal(t, bs.State, engine.StateCompleted)
	assert.NilError(t, e.FreeBatch(id))
	l.mu.Lock()
	l.hold = false
	held := l.held[0]
	l.mu.Unlock()

	// The "lane" keeps touching the held slice while batches are reused.
	stop, done := make(chan struct{}), make(chan struct{})
	var bad []string
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if held.Length != 4096 || held.Remote != uint64(base)+8192 || held.Op != engine.OpWrite {
				bad = append(bad, "held slice rewritten")
				return
			}
			held.Retries++ // scratch a transport may write
		}
	}()
	n := l.count()
	for range 200 {
		assert.NilError(t, e.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: base + 100, Target: engine.LocalSegment,
			TargetOffset: uint64(base) + 200, Length: 100}}))
	}
	close(stop)
	<-done
	assert.Assert(t, len(bad) == 0, "%v", bad)
	later := l.seenSince(n)
	assert.Equal(t, len(later), 200)
	for _, s := range later {
		assert.Assert(t, s != held, "a batch was reused while its slice was held")
	}
	// The later batches were recycled among themselves: far fewer distinct
	// slices than transfers.
	distinct := map[*engine.Slice]bool{}
	for _, s := range later {
		distinct[s] = true
	}
	assert.Assert(t, len(distinct) < 10, "%d distinct slices in 200 transfers", len(distinct))

	held.Release()
	n = l.count()
	assert.NilError(t, e.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: base, Target: engine.LocalSegment,
		TargetOffset: uint64(base) + 200, Length: 100}}))
	assert.Assert(t, l.seenSince(n)[0] == held, "the released batch is the next one handed out")
}

// TestBatchNotRecycledPastNonReleaser: a batch whose slice went to a
// transport that is not a Releaser is never handed out again.
func TestBatchNotRecycledPastNonReleaser(t *testing.T) {
	nr := &nonReleaser{}
	e, base := newPoolEngine(t, nr)
	ctx := context.Background()
	for range 20 {
		assert.NilError(t, e.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: base, Target: engine.LocalSegment,
			TargetOffset: uint64(base) + 4096, Length: 64}}))
	}
	seen := map[*engine.Slice]bool{}
	for _, s := range nr.l.seenSince(0) {
		assert.Assert(t, !seen[s], "slice %p handed out twice", s)
		seen[s] = true
	}
	assert.Equal(t, len(seen), 20)
}

// TestDoubleFreeBatch: the second FreeBatch of a batch fails and does not
// recycle it twice (two later batches never share storage).
func TestDoubleFreeBatch(t *testing.T) {
	l := &lagger{}
	e, base := newPoolEngine(t, l)
	ctx := context.Background()
	id, err := e.AllocateBatch(1)
	assert.NilError(t, err)
	assert.NilError(t, e.FreeBatch(id))
	assert.ErrorIs(t, e.FreeBatch(id), engine.ErrUnknownBatch)
	a, err := e.AllocateBatch(1)
	assert.NilError(t, err)
	b, err := e.AllocateBatch(1)
	assert.NilError(t, err)
	req := func(off uint64) []engine.Request {
		return []engine.Request{{Op: engine.OpWrite, Source: base, Target: engine.LocalSegment, TargetOffset: uint64(base) + off, Length: 64}}
	}
	assert.NilError(t, e.Submit(a, req(4096)))
	assert.NilError(t, e.Submit(b, req(8192)))
	got := l.seenSince(0)
	assert.Equal(t, len(got), 2)
	assert.Assert(t, got[0] != got[1])
	assert.Equal(t, got[0].Remote, uint64(base)+4096)
	for _, id := range []engine.BatchID{a, b} {
		_, err := e.Wait(ctx, id)
		assert.NilError(t, err)
		assert.NilError(t, e.FreeBatch(id))
	}
}
