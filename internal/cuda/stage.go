package cuda

import (
	"fmt"

	"github.com/kvferry/kvferry/internal/bounce"
	"github.com/kvferry/kvferry/internal/cmem"
)

// Stager defaults.
const (
	// DefaultPieceBytes is the size of one pinned bounce buffer.
	DefaultPieceBytes = 256 << 10
	// DefaultDepth is the number of bounce buffers of a Stager.
	DefaultDepth = 4
	// MaxDepth caps the bounce buffers of a Stager.
	MaxDepth = 64
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
	depth = min(depth, MaxDepth)
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

// ring is the Stager's buffers with one device's stream and events, for
// the shared pipeline (internal/bounce).
type ring struct {
	st *Stager
	sd *stageDev
}

func (r ring) Depth() int                            { return len(r.st.bufs) }
func (r ring) PieceBytes() uint64                    { return r.st.piece }
func (r ring) Buf(i int, n uint64) []byte            { return r.st.buf(i, n) }
func (r ring) Addr(i int) uint64                     { return uint64(r.st.bufs[i]) }
func (r ring) Issue(i int, dst, src, n uint64) error { return r.st.issue(r.sd, i, dst, src, n) }
func (r ring) Wait(i int) error                      { return r.st.wait(r.sd, i) }

// FromDevice reads n bytes of device dev's memory at src and hands them to
// sink in order, a bounce buffer at a time (sink must not keep the slice).
// The device copies of the following pieces run while sink works.
func (st *Stager) FromDevice(dev int, src, n uint64, sink func([]byte) error) error {
	sd, err := st.dev(dev)
	if err != nil {
		return err
	}
	return bounce.FromDevice(ring{st, sd}, src, n, sink)
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
	return bounce.ToDevice(ring{st, sd}, dst, n, source)
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
