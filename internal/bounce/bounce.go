// Package bounce pipelines a device copy through a ring of pinned host
// buffers: the part of staging that the GPU bindings (internal/cuda,
// internal/hip) share. A binding supplies the ring (its buffers, one
// stream and one event per buffer); FromDevice and ToDevice run the
// pipeline over it, so that the caller works on one buffer while the
// device copies of the others run.
package bounce

// Ring is a binding's ring of bounce buffers on one device.
type Ring interface {
	// Depth is the number of buffers, PieceBytes the size of each.
	Depth() int
	PieceBytes() uint64
	// Buf returns the first n bytes of buffer i, Addr its address.
	Buf(i int, n uint64) []byte
	Addr(i int) uint64
	// Issue queues a copy of n bytes from src to dst and marks buffer i
	// busy until it lands; Wait waits for buffer i's copy.
	Issue(i int, dst, src, n uint64) error
	Wait(i int) error
}

// FromDevice reads n bytes of device memory at src and hands them to sink
// in order, a buffer at a time (sink must not keep the slice). The device
// copies of the following pieces run while sink works.
func FromDevice(r Ring, src, n uint64, sink func([]byte) error) error {
	depth, piece := r.Depth(), r.PieceBytes()
	pieces := int((n + piece - 1) / piece)
	size := func(k int) uint64 { return min(piece, n-uint64(k)*piece) }
	issued := 0
	var first error
	for ; issued < min(depth, pieces); issued++ {
		if err := r.Issue(issued, r.Addr(issued), src+uint64(issued)*piece, size(issued)); err != nil {
			first = err
			break
		}
	}
	for k := 0; k < issued; k++ {
		i := k % depth
		if err := r.Wait(i); err != nil && first == nil {
			first = err
		}
		if first == nil {
			if err := sink(r.Buf(i, size(k))); err != nil {
				first = err
			}
		}
		if first == nil && issued < pieces {
			if err := r.Issue(i, r.Addr(i), src+uint64(issued)*piece, size(issued)); err != nil {
				first = err
			} else {
				issued++
			}
		}
	}
	return first
}

// ToDevice fills n bytes of device memory at dst from source, which fills
// one buffer at a time, in order; the device copy of each piece runs while
// source fills the next. It returns once every piece has landed (or
// failed).
func ToDevice(r Ring, dst, n uint64, source func([]byte) error) error {
	depth, piece := r.Depth(), r.PieceBytes()
	pieces := int((n + piece - 1) / piece)
	var inflight [64]bool // bindings cap the depth at 64
	if depth > len(inflight) {
		depth = len(inflight)
	}
	var first error
	for k := 0; k < pieces && first == nil; k++ {
		i := k % depth
		if inflight[i] {
			inflight[i] = false
			if err := r.Wait(i); err != nil {
				first = err
				break
			}
		}
		m := min(piece, n-uint64(k)*piece)
		if err := source(r.Buf(i, m)); err != nil {
			first = err
			break
		}
		if err := r.Issue(i, dst+uint64(k)*piece, r.Addr(i), m); err != nil {
			first = err
			break
		}
		inflight[i] = true
	}
	for i := range depth {
		if inflight[i] {
			if err := r.Wait(i); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
