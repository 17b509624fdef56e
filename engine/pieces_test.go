package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestCutPieces: the slices of a request with pieces cover its local
// pieces and its remote range exactly, in order, with Mooncake's slice
// lengths (sliceCount), for gathering transports (pieces per slice, cut
// at slice ends) and others (one slice per piece, cut by the slice size).
func TestCutPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var ps []Piece
		var total uint64
		for range 1 + rng.IntN(40) {
			n := uint64(rng.IntN(5000))
			if rng.IntN(5) == 0 {
				n = 0
			}
			ps = append(ps, Piece{Addr: uintptr(0x100000 + rng.IntN(1<<30)), Length: n})
			total += n
		}
		if total == 0 {
			continue
		}
		r := &Request{Op: OpWrite, TargetOffset: 1 << 40, Length: total, Pieces: ps}
		assert.NilError(t, checkPieces(0, r))
		ss := uint64(1 + rng.IntN(20000))
		for _, gather := range []bool{true, false} {
			cnt, npieces := pieceSlices(r, ss, gather)
			out := make([]Slice, cnt)
			arena := make([]Piece, npieces)
			n, used := cutPieces(r, nil, nil, ss, gather, time.Time{}, out, arena)
			assert.Equal(t, n, cnt, "round %d gather %v", round, gather)
			assert.Assert(t, used <= len(arena))
			// Walk the request's bytes and the slices' together.
			var local []Piece // the local side as the slices cover it, merged
			at := r.TargetOffset
			for _, s := range out {
				assert.Equal(t, s.Remote, at)
				at += s.Length
				sp := s.Pieces
				if !gather {
					assert.Assert(t, s.Pieces == nil)
					assert.Assert(t, s.Length <= ss+ss/4)
					sp = []Piece{{Addr: s.Local, Length: s.Length}}
				} else {
					var sum uint64
					for _, p := range sp {
						assert.Assert(t, p.Length > 0)
						sum += p.Length
					}
					assert.Equal(t, sum, s.Length)
					assert.Equal(t, s.Local, sp[0].Addr)
				}
				for _, p := range sp {
					if k := len(local) - 1; k >= 0 && local[k].Addr+uintptr(local[k].Length) == p.Addr && !pieceEnds(ps, local[k]) {
						local[k].Length += p.Length
						continue
					}
					local = append(local, p)
				}
			}
			assert.Equal(t, at, r.TargetOffset+total)
			var want []Piece
			for _, p := range ps {
				if p.Length > 0 {
					want = append(want, p)
				}
			}
			assert.DeepEqual(t, local, want)
		}
	}
	// A request of one slice with no empty piece: the slice shares its
	// pieces (no arena); with an empty piece it gets its own list.
	ps := []Piece{{Addr: 0x1000, Length: 10}, {Addr: 0x9000, Length: 20}}
	r := &Request{Op: OpRead, TargetOffset: 1 << 40, Length: 30, Pieces: ps}
	cnt, npieces := pieceSlices(r, 30, true)
	assert.Equal(t, cnt, 1)
	assert.Equal(t, npieces, 0)
	out := make([]Slice, 1)
	n, used := cutPieces(r, nil, nil, 30, true, time.Time{}, out, nil)
	assert.Assert(t, n == 1 && used == 0)
	assert.Assert(t, &out[0].Pieces[0] == &ps[0] && len(out[0].Pieces) == 2 && out[0].Local == 0x1000 && out[0].Length == 30)
	r.Pieces = []Piece{{Addr: 0x1000, Length: 10}, {}, {Addr: 0x9000, Length: 20}}
	cnt, npieces = pieceSlices(r, 30, true)
	assert.Assert(t, cnt == 1 && npieces > 0)
	arena := make([]Piece, npieces)
	n, used = cutPieces(r, nil, nil, 30, true, time.Time{}, out, arena)
	assert.Assert(t, n == 1 && used == 2)
	assert.DeepEqual(t, out[0].Pieces, ps)
	// Bad pieces.
	assert.ErrorIs(t, checkPieces(0, &Request{Length: 5, Pieces: []Piece{{Addr: 1, Length: 4}}}), ErrInvalidArgument)
	assert.ErrorIs(t, checkPieces(0, &Request{Length: 4, Pieces: []Piece{{Addr: 0, Length: 4}}}), ErrInvalidArgument)
	assert.ErrorIs(t, checkPieces(0, &Request{Length: 4, Pieces: []Piece{{Addr: ^uintptr(0), Length: 4}}}), ErrInvalidArgument)
}

// pieceEnds reports whether p ends where one of ps ends (a merge of the
// slices' pieces stops there, so pieces that happen to be adjacent stay
// apart as in ps).
func pieceEnds(ps []Piece, p Piece) bool {
	for _, q := range ps {
		if q.Length > 0 && q.Addr+uintptr(q.Length) == p.Addr+uintptr(p.Length) {
			return true
		}
	}
	return false
}
