package samehost_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// TestPieces: requests whose local side is many pieces (engine.Request.Pieces:
// mixed sizes, empty ones, from two registrations, in reverse order)
// gathered into one remote range per request and scattered back. cma
// takes them as one slice's iovecs (with a slice size that cuts pieces too);
// shm and tcp get one slice per piece from the engine. Bad pieces fail
// their request and move nothing.
func TestPieces(t *testing.T) {
	for _, tc := range []struct {
		name, tr string
		cfg      samehost.Config
	}{
		{"cma", samehost.NameCMA, samehost.Config{}},
		{"cma-sliced-workers", samehost.NameCMA, samehost.Config{CMASliceSize: 10000, CMAInlineBytes: -1}},
		{"shm", samehost.NameShm, samehost.Config{}},
		{"tcp", "tcp", samehost.Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newEngineWith(t, tc.cfg, tc.tr), newEngineWith(t, tc.cfg, tc.tr)
			src, src2 := newBuf(t, a, 1<<20), newBuf(t, a, 1<<20)
			back, back2 := newBuf(t, a, 1<<20), newBuf(t, a, 1<<20)
			dst := newBuf(t, b, 4<<20)
			unreg := newBuf(t, b, 4096) // registered with b, not with a
			pattern(src.Bytes(), 21)
			pattern(src2.Bytes(), 22)
			ctx := context.Background()
			seg, err := a.OpenSegment(ctx, b.SegmentName())
			assert.NilError(t, err)
			assert.Equal(t, a.ChooseTransport(seg), tc.tr)

			// Request k gathers pieces of sizes 1..3001 bytes (every
			// seventh empty), alternating between the two buffers, in
			// reverse order.
			const reqs, perReq = 3, 60
			var rs []engine.Request
			var want [][]byte
			at := uint64(dst.Addr()) + 3
			for k := range reqs {
				var ps []engine.Piece
				var w []byte
				var total uint64
				for j := perReq - 1; j >= 0; j-- {
					n := uint64((j*977+k*31)%3001 + 1)
					if j%7 == 0 {
						n = 0
					}
					m, off := src, (j*5000+k*1700)%(1<<20-3001)
					if j%2 == 1 {
						m = src2
					}
					ps = append(ps, engine.Piece{Addr: m.Addr() + uintptr(off), Length: n})
					w = append(w, m.Bytes()[off:off+int(n)]...)
					total += n
				}
				rs = append(rs, engine.Request{Op: engine.OpWrite, Target: seg, TargetOffset: at, Length: total, Pieces: ps})
				want = append(want, w)
				at += total + 11
			}
			clear(dst.Bytes())
			assert.NilError(t, a.Transfer(ctx, rs))
			for k, r := range rs {
				off := r.TargetOffset - uint64(dst.Addr())
				assert.Assert(t, bytes.Equal(dst.Bytes()[off:off+r.Length], want[k]), "gathered request %d", k)
			}
			// Scatter each back into pieces of other sizes over two buffers.
			for k := range rs {
				var ps []engine.Piece
				left, j := rs[k].Length, 0
				for left > 0 {
					n := min(left, uint64(j*1311%4093+1))
					m := back
					if j%2 == 1 {
						m = back2
					}
					off := j*4100 + k*300000
					assert.Assert(t, off+int(n) <= int(m.Len()))
					ps = append(ps, engine.Piece{Addr: m.Addr() + uintptr(off), Length: n}, engine.Piece{})
					left -= n
					j++
				}
				rs[k].Op, rs[k].Pieces = engine.OpRead, ps
			}
			clear(back.Bytes())
			clear(back2.Bytes())
			assert.NilError(t, a.Transfer(ctx, rs))
			for k, r := range rs {
				var got []byte
				for _, p := range r.Pieces {
					if p.Length == 0 {
						continue
					}
					m := back
					if p.Addr >= back2.Addr() && p.Addr < back2.Addr()+uintptr(back2.Len()) {
						m = back2
					}
					off := int(p.Addr - m.Addr())
					got = append(got, m.Bytes()[off:off+int(p.Length)]...)
				}
				assert.Assert(t, bytes.Equal(got, want[k]), "scattered request %d", k)
			}

			// A piece outside a's registered memory: that request fails,
			// the other is done; a total that is not Length is refused.
			clear(dst.Bytes())
			bad := []engine.Request{
				{Op: engine.OpWrite, Target: seg, TargetOffset: uint64(dst.Addr()), Length: 200,
					Pieces: []engine.Piece{{Addr: src.Addr(), Length: 100}, {Addr: unreg.Addr(), Length: 100}}},
				{Op: engine.OpWrite, Target: seg, TargetOffset: uint64(dst.Addr()) + 4096, Length: 200,
					Pieces: []engine.Piece{{Addr: src.Addr(), Length: 100}, {Addr: src2.Addr(), Length: 100}}},
			}
			err = a.Transfer(ctx, bad)
			assert.Assert(t, errors.Is(err, engine.ErrAddressNotRegistered), "%v", err)
			assert.Assert(t, bytes.Equal(dst.Bytes()[:200], make([]byte, 200)))
			assert.Assert(t, bytes.Equal(dst.Bytes()[4096:4196], src.Bytes()[:100]))
			assert.Assert(t, bytes.Equal(dst.Bytes()[4196:4296], src2.Bytes()[:100]))
			bad[1].Length = 199
			err = a.Transfer(ctx, bad[1:])
			assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
		})
	}
}
