package cuda

import (
	"fmt"

	"github.com/kvferry/kvferry/internal/cmem"
)

// Stager defaults.
const (
	// DefaultPieceBytes is the size of one pinned bounce buffer.
	DefaultPieceBytes = 256 << 10
	// DefaultDepth is the number of bounce buffers of a Stager.
	DefaultDepth = 4
)

// Stager moves device memory to and from a host-side byte stream (a
// socket, a shared staging chunk) through a ring of pinned bounce buffers,
// pipelined: while the caller consumes or fills one buffer, the device
// copies of the next ones run. One goroutine uses a Stager at a time.
type Stager struct {
	d     *Driver
	piece uint64
	bufs  []uintptr // pinned host memory, piece bytes each
	devs  map[int]*stageDev
}

// stageDev is a Stager's stream and events on one device.
type stageDev struct {
	ctx, s uintptr
	evs    []uintptr // one per buffer
}

// NewStager allocates depth pinned bounce buffers of piece bytes
// (defaults when <= 0).
func (d *Driver) NewStager(piece uint64, depth int) (*Stager, error) {
	if piece == 0 {
		piece = DefaultPieceBytes
	}
	if depth <= 0 {
		depth = DefaultDepth
	}
	st := &Stager{d: d, piece: piece, devs: make(map[int]*stageDev)}
	for range depth {
		p, err := d.HostAlloc(piece)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("stager: %w", err)
		}
		st.bufs = append(st.bufs, p)
	}
	return st, nil
}

// PieceBytes returns the size of one bounce buffer.
func (st *Stager) PieceBytes() uint64 { return st.piece }

func (st *Stager) dev(dev int) (*stageDev, error) {
	if sd := st.devs[dev]; sd != nil {
		return sd, nil
	}
	ctx, err := st.d.primary(dev)
	if err != nil {
		return nil, err
	}
	s, err := st.d.newStream(dev)
	if err != nil {
		return nil, err
	}
	sd := &stageDev{ctx: ctx, s: s}
	for range st.bufs {
		ev, err := st.d.newEvent(dev)
		if err != nil {
			for _, e := range sd.evs {
				st.d.destroyEvent(dev, e)
			}
			st.d.destroyStream(dev, s)
			return nil, err
		}
		sd.evs = append(sd.evs, ev)
	}
	st.devs[dev] = sd
	return sd, nil
}

func (st *Stager) buf(i int, n uint64) []byte {
	return cmem.Bytes(st.bufs[i], n)
}

// issue queues one copy and records buffer i's event after it.
func (st *Stager) issue(sd *stageDev, i int, dst, src, n uint64) error {
	ops := [1]Copy{{Dst: dst, Src: src, N: n}}
	if _, r := st.d.submit(sd.ctx, sd.s, ops[:], sd.evs[i]); r != Success {
		return st.d.err("cuMemcpyAsync", r)
	}
	return nil
}

func (st *Stager) wait(sd *stageDev, i int) error {
	if r := st.d.eventCall(sd.ctx, sd.evs[i], false); r != Success {
		return st.d.err("cuEventSynchronize", r)
	}
	return nil
}

// FromDevice reads n bytes of device dev's memory at src and hands them to
// sink in order, a bounce buffer at a time (sink must not keep the slice).
// The device copies of the following pieces run while sink works.
func (st *Stager) FromDevice(dev int, src, n uint64, sink func([]byte) error) error {
	sd, err := st.dev(dev)
	if err != nil {
		return err
	}
	depth := len(st.bufs)
	pieces := int((n + st.piece - 1) / st.piece)
	size := func(k int) uint64 { return min(st.piece, n-uint64(k)*st.piece) }
	issued := 0
	var first error
	for ; issued < min(depth, pieces); issued++ {
		if err := st.issue(sd, issued, uint64(st.bufs[issued]), src+uint64(issued)*st.piece, size(issued)); err != nil {
			first = err
			break
		}
	}
	for k := 0; k < issued; k++ {
		i := k % depth
		if err := st.wait(sd, i); err != nil && first == nil {
			first = err
		}
		if first == nil {
			if err := sink(st.buf(i, size(k))); err != nil {
				first = err
			}
		}
		if first == nil && issued < pieces {
			if err := st.issue(sd, i, uint64(st.bufs[i]), src+uint64(issued)*st.piece, size(issued)); err != nil {
				first = err
			} else {
				issued++
			}
		}
	}
	return first
}

// ToDevice fills n bytes of device dev's memory at dst from source, which
// fills one bounce buffer at a time, in order; the device copy of each
// piece runs while source fills the next. It returns once every piece has
// landed (or failed).
func (st *Stager) ToDevice(dev int, dst, n uint64, source func([]byte) error) error {
	sd, err := st.dev(dev)
	if err != nil {
		return err
	}
	depth := len(st.bufs)
	pieces := int((n + st.piece - 1) / st.piece)
	inflight := make([]bool, depth)
	var first error
	for k := 0; k < pieces && first == nil; k++ {
		i := k % depth
		if inflight[i] {
			inflight[i] = false
			if err := st.wait(sd, i); err != nil {
				first = err
				break
			}
		}
		m := min(st.piece, n-uint64(k)*st.piece)
		if err := source(st.buf(i, m)); err != nil {
			first = err
			break
		}
		if err := st.issue(sd, i, dst+uint64(k)*st.piece, uint64(st.bufs[i]), m); err != nil {
			first = err
			break
		}
		inflight[i] = true
	}
	for i, f := range inflight {
		if f {
			if err := st.wait(sd, i); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Close frees the buffers, streams and events.
func (st *Stager) Close() {
	for dev, sd := range st.devs {
		for _, e := range sd.evs {
			st.d.destroyEvent(dev, e)
		}
		st.d.destroyStream(dev, sd.s)
	}
	st.devs = nil
	for _, p := range st.bufs {
		_ = st.d.HostFree(p)
	}
	st.bufs = nil
}
