package samehost_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/internal/cmem"
)

// newEngine starts an engine with the same-host and TCP transports (no
// local: two engines of this process then talk over cma or shm).
func newEngine(t *testing.T, force string, transports ...string) *engine.Engine {
	t.Helper()
	return newBenchEngine(t, force, transports...)
}

func newBenchEngine(t testing.TB, force string, transports ...string) *engine.Engine {
	t.Helper()
	return newEngineWith(t, samehost.Config{}, force, transports...)
}

// newEngineWith starts an engine with cfg (small shm chunks unless cfg
// names others).
func newEngineWith(t testing.TB, cfg samehost.Config, force string, transports ...string) *engine.Engine {
	t.Helper()
	if len(transports) == 0 {
		transports = []string{samehost.NameCMA, samehost.NameShm, "tcp"}
	}
	if cfg.ShmChunkBytes == 0 {
		cfg.ShmChunkBytes, cfg.ShmChunks = 256<<10, 4
	}
	e, err := stack.New(context.Background(), stack.Config{
		Engine:   engine.Config{LocalServerName: "127.0.0.1", Transports: transports, ForceTransport: force, TransferTimeout: 5 * time.Second},
		SameHost: cfg,
	})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func newBuf(t *testing.T, e *engine.Engine, n uint64) *cmem.Map {
	t.Helper()
	return newBenchBuf(t, e, n)
}

func newBenchBuf(t testing.TB, e *engine.Engine, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	// Unregistering first waits for copies still using the memory (a
	// failed or timed-out transfer's slices may still run) before unmapping.
	t.Cleanup(func() {
		if e != nil {
			_ = e.UnregisterMemory(m.Addr())
		}
		m.Close()
	})
	if e != nil {
		assert.NilError(t, e.RegisterMemory(m.Addr(), n, "cpu:0", true))
	}
	return m
}

// TestInProcess runs both transports between two engines of this process
// (process_vm_* to one's own pid is allowed), with sizes around the staging
// chunk size and batches of many small requests; cma both with its inline
// path and with workers only.
func TestInProcess(t *testing.T) {
	for _, tc := range []struct {
		name, tr string
		cfg      samehost.Config
	}{
		{"cma", samehost.NameCMA, samehost.Config{}},
		{"cma-workers", samehost.NameCMA, samehost.Config{CMAInlineBytes: -1}},
		{"shm", samehost.NameShm, samehost.Config{}},
		{"auto", "", samehost.Config{}},
	} {
		tr := tc.tr
		t.Run(tc.name, func(t *testing.T) {
			a, b := newEngineWith(t, tc.cfg, tr), newEngineWith(t, tc.cfg, tr)
			src := newBuf(t, a, 8<<20)
			back := newBuf(t, a, 8<<20)
			dst := newBuf(t, b, 8<<20)
			pattern(src.Bytes(), 11)
			ctx := context.Background()
			seg, err := a.OpenSegment(ctx, b.SegmentName())
			assert.NilError(t, err)
			want := tr
			if want == "" {
				want = samehost.NameCMA
			}
			assert.Equal(t, a.ChooseTransport(seg), want)
			for _, size := range []uint64{1, 4096, 256 << 10, 300<<10 + 3, 1 << 20, 5<<20 + 77} {
				clear(dst.Bytes())
				assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr() + 5, Target: seg, TargetOffset: uint64(dst.Addr()) + 9, Length: size}}))
				assert.Assert(t, bytes.Equal(src.Bytes()[5:5+size], dst.Bytes()[9:9+size]), "write %d", size)
				clear(back.Bytes())
				assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: back.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()) + 9, Length: size}}))
				assert.Assert(t, bytes.Equal(src.Bytes()[5:5+size], back.Bytes()[:size]), "read %d", size)
			}
			// Many small requests of both directions in one batch.
			var reqs []engine.Request
			for i := range 600 {
				off := uint64(i) * 8192
				op := engine.OpWrite
				if i%2 == 1 {
					op = engine.OpRead
				}
				reqs = append(reqs, engine.Request{Op: op, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: 4096 + uint64(i)})
			}
			pattern(dst.Bytes(), 12)
			want2 := append([]byte(nil), dst.Bytes()...)
			assert.NilError(t, a.Transfer(ctx, reqs))
			for i, r := range reqs {
				off := uint64(i) * 8192
				if r.Op == engine.OpWrite {
					assert.Assert(t, bytes.Equal(src.Bytes()[off:off+r.Length], dst.Bytes()[off:off+r.Length]), "write %d", i)
				} else {
					assert.Assert(t, bytes.Equal(want2[off:off+r.Length], src.Bytes()[off:off+r.Length]), "read %d", i)
				}
			}
			// Gather and scatter: 700 pieces taken from local memory in
			// reverse order fill one remote range (cma hands the kernel
			// one remote iovec for adjacent remote ranges), and come back.
			const pieces, piece = 700, 3000
			reqs = reqs[:0]
			for i := range pieces {
				reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr((pieces-1-i)*piece),
					Target: seg, TargetOffset: uint64(dst.Addr()) + uint64(i*piece), Length: piece})
			}
			clear(dst.Bytes())
			assert.NilError(t, a.Transfer(ctx, reqs))
			for i := range pieces {
				assert.Assert(t, bytes.Equal(dst.Bytes()[i*piece:(i+1)*piece], src.Bytes()[(pieces-1-i)*piece:(pieces-i)*piece]),
					"gathered piece %d", i)
			}
			clear(back.Bytes())
			for i := range reqs {
				reqs[i].Op, reqs[i].Source = engine.OpRead, back.Addr()+uintptr((pieces-1-i)*piece)
			}
			assert.NilError(t, a.Transfer(ctx, reqs))
			assert.Assert(t, bytes.Equal(back.Bytes()[:pieces*piece], src.Bytes()[:pieces*piece]))
		})
	}
}

// TestStaleDescriptorRefused: the owner unregistered a region the
// initiator's cached descriptor still lists; both transports refuse and
// leave the memory untouched.
func TestStaleDescriptorRefused(t *testing.T) {
	for _, tr := range []string{samehost.NameCMA, samehost.NameShm} {
		t.Run(tr, func(t *testing.T) {
			a, b := newEngine(t, tr), newEngine(t, tr)
			src := newBuf(t, a, 1<<20)
			pattern(src.Bytes(), 3)
			keep := newBuf(t, b, 1<<20)
			gone := newBuf(t, b, 1<<20)
			ctx := context.Background()
			seg, err := a.OpenSegment(ctx, b.SegmentName())
			assert.NilError(t, err)
			assert.Equal(t, a.ChooseTransport(seg), tr)
			assert.NilError(t, b.UnregisterMemory(gone.Addr()))
			for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
				err := a.Transfer(ctx, []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: uint64(gone.Addr()), Length: 4096}})
				assert.Assert(t, errors.Is(err, engine.ErrRejected), "%s: %v", op, err)
			}
			assert.Assert(t, bytes.Equal(gone.Bytes(), make([]byte, len(gone.Bytes()))))
			assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(keep.Addr()), Length: 1 << 20}}))
			assert.Assert(t, bytes.Equal(src.Bytes(), keep.Bytes()))
		})
	}
}
