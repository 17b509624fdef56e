package engine

import (
	"fmt"
	"time"
)

// Piece is Length bytes of local memory at Addr: one part of the local
// side of a request that gathers from (writes) or scatters into (reads)
// several local buffers (Request.Pieces).
type Piece struct {
	Addr   uintptr
	Length uint64
}

// Gatherer is implemented by transports that move a slice whose local
// side is several pieces (Slice.Pieces) in one operation: cma hands them
// to the kernel as one process_vm_* call's local iovecs. The engine gives
// slices with pieces only to transports whose GathersPieces is true, and
// only of memory other than GPU device memory (transports stage that by
// slice); otherwise it cuts a request with pieces into one slice per piece
// (still one task).
type Gatherer interface {
	GathersPieces() bool
}

func gathers(t Transport) bool {
	g, ok := t.(Gatherer)
	return ok && g.GathersPieces()
}

// checkPieces validates the pieces of request i: their total is its
// Length, and none wraps around the address space.
func checkPieces(i int, r *Request) error {
	var total uint64
	for _, p := range r.Pieces {
		if uint64(p.Addr)+p.Length < uint64(p.Addr) || total+p.Length < total {
			return fmt.Errorf("submit: request %d: piece %#x+%d wraps around: %w", i, p.Addr, p.Length, ErrInvalidArgument)
		}
		if p.Addr == 0 && p.Length > 0 {
			return fmt.Errorf("submit: request %d: piece at NULL: %w", i, ErrInvalidArgument)
		}
		total += p.Length
	}
	if total != r.Length {
		return fmt.Errorf("submit: request %d: pieces of %d bytes for a length of %d: %w", i, total, r.Length, ErrInvalidArgument)
	}
	return nil
}

// piecesKind returns the memory kind of the pieces of request i, which
// must all be of one kind (a request takes one route).
func (e *Engine) piecesKind(i int, r *Request) (MemoryKind, error) {
	kind, first := MemoryHost, true
	for _, p := range r.Pieces {
		if p.Length == 0 {
			continue
		}
		k := e.localKind(uint64(p.Addr), p.Length)
		if first {
			kind, first = k, false
		} else if k != kind {
			return 0, fmt.Errorf("submit: request %d: pieces in %s and %s memory: %w", i, kind, k, ErrInvalidArgument)
		}
	}
	return kind, nil
}

// pieceSlices returns how many slices request r with pieces makes for a
// transport with slice size ss, and how many pieces those slices hold.
func pieceSlices(r *Request, ss uint64, gather bool) (slices, pieces int) {
	if gather {
		cnt := sliceCount(r.Length, ss)
		if cnt == 1 && !hasEmpty(r.Pieces) {
			return 1, 0 // the slice takes the request's pieces (cutPieces)
		}
		return cnt, len(r.Pieces) + cnt // a cut piece counts twice
	}
	for _, p := range r.Pieces {
		slices += sliceCount(p.Length, ss)
	}
	return slices, 0
}

// pinPieces pins the regions holding the pieces (one pin per region, the
// pieces in one region mostly): the first, and the others.
func (e *Engine) pinPieces(i int, r *Request) (*Region, []*Region, error) {
	var first *Region
	var more []*Region
	last := (*Region)(nil)
	for _, p := range r.Pieces {
		if p.Length == 0 {
			continue
		}
		if last != nil && last.contains(uint64(p.Addr), p.Length) {
			continue
		}
		found := false
		for _, g := range more {
			if g.contains(uint64(p.Addr), p.Length) {
				last, found = g, true
				break
			}
		}
		if first != nil && first.contains(uint64(p.Addr), p.Length) {
			last, found = first, true
		}
		if found {
			continue
		}
		pin := e.reg.pin(uint64(p.Addr), p.Length)
		if pin == nil {
			if first != nil {
				first.Release()
			}
			for _, g := range more {
				g.Release()
			}
			return nil, nil, fmt.Errorf("request %d: source piece %#x+%d: %w", i, p.Addr, p.Length, ErrAddressNotRegistered)
		}
		if first == nil {
			first = pin
		} else {
			more = append(more, pin)
		}
		last = pin
	}
	return first, more, nil
}

// hasEmpty reports whether any piece is empty.
func hasEmpty(ps []Piece) bool {
	for _, p := range ps {
		if p.Length == 0 {
			return true
		}
	}
	return false
}

// cutPieces fills out with the slices of request r (which has pieces)
// for a transport with slice size ss, taking the slices' pieces from arena
// when the transport gathers; it returns how much of out and arena it used.
func cutPieces(r *Request, tk *task, region *Region, ss uint64, gather bool, now time.Time, out []Slice, arena []Piece) (int, int) {
	if !gather {
		n := 0
		at := r.TargetOffset
		for _, p := range r.Pieces {
			cnt := sliceCount(p.Length, ss)
			var off uint64
			for k := 0; k < cnt; k++ {
				l := p.Length - off
				if k < cnt-1 {
					l = ss
				}
				out[n] = Slice{Op: r.Op, Local: p.Addr + uintptr(off), Remote: at + off, Length: l, Posted: now, task: tk, region: region}
				n++
				off += l
			}
			at += p.Length
		}
		return n, 0
	}
	cnt := sliceCount(r.Length, ss)
	if cnt == 1 && !hasEmpty(r.Pieces) {
		// One slice of every piece: it shares the request's list (the
		// caller keeps it unchanged until the request completes), with no
		// copy to make and no memory to touch per piece.
		ps := r.Pieces[:len(r.Pieces):len(r.Pieces)]
		out[0] = Slice{Op: r.Op, Local: ps[0].Addr, Remote: r.TargetOffset, Length: r.Length, Posted: now, Pieces: ps, task: tk, region: region}
		return 1, 0
	}
	used := 0
	idx, in := 0, uint64(0) // the next piece, and the bytes of it already taken
	var off uint64
	for k := 0; k < cnt; k++ {
		l := r.Length - off
		if k < cnt-1 {
			l = ss
		}
		start := used
		for need := l; need > 0; {
			p := r.Pieces[idx]
			if p.Length == in {
				idx, in = idx+1, 0
				continue
			}
			take := min(p.Length-in, need)
			arena[used] = Piece{Addr: p.Addr + uintptr(in), Length: take}
			used++
			in += take
			need -= take
		}
		ps := arena[start:used:used]
		out[k] = Slice{Op: r.Op, Local: ps[0].Addr, Remote: r.TargetOffset + off, Length: l, Posted: now, Pieces: ps, task: tk, region: region}
		off += l
	}
	return cnt, used
}

// slicePieces prepares request i, which has pieces, as submit does a
// plain request: it pins the pieces' regions, checks the remote range and
// appends the request's slices (from slices[*next], their pieces from
// *arena; pieces in one slice when gather) to g. A failure fails the task
// and is returned.
func (e *Engine) slicePieces(i int, r *Request, tk *task, g *group, gather, localGPU bool, now time.Time, refreshed *[]*Peer,
	slices []Slice, next *int, arena *[]Piece) error {
	var region *Region
	if !e.cfg.AllowUnregisteredSource {
		first, more, err := e.pinPieces(i, r)
		if err != nil {
			tk.setErr(err)
			tk.finish()
			return ErrAddressNotRegistered
		}
		tk.pin, tk.pins, region = first, more, first
	} else if localGPU {
		for _, p := range r.Pieces {
			if p.Length > 0 {
				region = e.reg.find(uint64(p.Addr), p.Length)
				break
			}
		}
	}
	if err := e.checkRemoteOnce(g.p, r.TargetOffset, r.Length, refreshed); err != nil {
		tk.setErr(&TransferError{Op: r.Op, Peer: g.p.Name, Transport: g.t.Name(), Addr: r.TargetOffset, Length: r.Length, Err: err})
		tk.finish()
		return err
	}
	n, used := cutPieces(r, tk, region, g.t.SliceSize(), gather, now, slices[*next:], *arena)
	*arena = (*arena)[used:]
	tk.pending.Store(int32(n))
	for k := range n {
		slices[*next+k].via = g.t
		g.slices = append(g.slices, &slices[*next+k])
	}
	*next += n
	return nil
}
