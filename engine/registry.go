package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Region is one registered range of local memory.
type Region struct {
	// Addr and Length give the range [Addr, Addr+Length).
	Addr   uintptr
	Length uint64
	// Location is the registration's location string ("cpu:0", "*", ...).
	Location string
	// RemoteAccessible is the registration flag (informational for TCP).
	RemoteAccessible bool
	// MemoryInfo is the region's classification, made once at
	// registration: Kind (host, pinned, device, managed), Device (the CUDA
	// ordinal of GPU memory), and how same-host peers may map it.
	MemoryInfo

	refs    atomic.Int64
	dead    atomic.Bool
	drained chan struct{}
	once    sync.Once
	// gone is cancelled when the region is unregistered.
	gone       context.Context
	cancelGone context.CancelFunc
}

// Gone is done once the region is unregistered. A transport that blocks
// on a peer while it holds a pin (a payload trickling in, a reader that
// does not read) aborts that I/O when Gone is done (context.AfterFunc), so
// unregistering returns promptly instead of after the peer's deadline.
func (r *Region) Gone() context.Context {
	if r.gone == nil {
		return context.Background()
	}
	return r.gone
}

func (r *Region) end() uint64 { return uint64(r.Addr) + r.Length }

// contains reports whether [addr, addr+n) lies inside r.
func (r *Region) contains(addr, n uint64) bool {
	if addr < uint64(r.Addr) {
		return false
	}
	e := addr + n
	return e >= addr && e <= r.end()
}

// Release drops a pin taken by Pin.
func (r *Region) Release() {
	if r.refs.Add(-1) == 0 && r.dead.Load() {
		r.once.Do(func() { close(r.drained) })
	}
}

// registry holds the local regions in an immutable, chunked index
// (regindex.go) behind an atomic pointer, so lookups on the data path take
// no lock and a single registration or removal costs O(chunk), not O(n).
type registry struct {
	mu      sync.Mutex // serializes writers
	snap    atomic.Pointer[regIndex]
	devices atomic.Int32 // registered regions of device memory
}

func (g *registry) index() *regIndex {
	if x := g.snap.Load(); x != nil {
		return x
	}
	return emptyIndex
}

// regions returns the regions sorted by address (shared; do not modify).
func (g *registry) regions() []*Region { return g.index().regions() }

// add registers rs (which must not overlap each other or existing regions).
// It is all or nothing.
func (g *registry) add(rs []*Region) error {
	for _, r := range rs {
		if r.Addr == 0 || r.Length == 0 || uint64(r.Addr)+r.Length < uint64(r.Addr) {
			return fmt.Errorf("register %#x+%d: %w", r.Addr, r.Length, ErrInvalidArgument)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	x := g.index()
	for _, r := range rs {
		if o := x.overlaps(r); o != nil {
			return fmt.Errorf("register %#x+%d: overlaps %#x+%d: %w", r.Addr, r.Length, o.Addr, o.Length, ErrAddressOverlapped)
		}
		x = x.with(r)
	}
	for _, r := range rs {
		r.drained = make(chan struct{})
		r.gone, r.cancelGone = context.WithCancel(context.Background())
	}
	g.snap.Store(x)
	for _, r := range rs {
		if r.Kind == MemoryDevice {
			g.devices.Add(1)
		}
	}
	return nil
}

// remove unregisters the regions starting exactly at each addr, all or
// nothing, and returns them (not yet drained).
func (g *registry) remove(addrs []uintptr) ([]*Region, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	x := g.index()
	gone := make([]*Region, 0, len(addrs))
	for _, a := range addrs {
		r := x.at(a)
		if r == nil {
			return nil, fmt.Errorf("unregister %#x: %w", a, ErrAddressNotRegistered)
		}
		x = x.without(r)
		gone = append(gone, r)
	}
	g.snap.Store(x)
	for _, r := range gone {
		if r.Kind == MemoryDevice {
			g.devices.Add(-1)
		}
		r.dead.Store(true)
		r.cancelGone()
		if r.refs.Load() == 0 {
			r.once.Do(func() { close(r.drained) })
		}
	}
	return gone, nil
}

// find returns the region containing [addr, addr+n), or nil.
func (g *registry) find(addr, n uint64) *Region { return g.index().find(addr, n) }

// pin finds and pins the region containing [addr, addr+n). The caller must
// Release it. A region being unregistered cannot be pinned.
func (g *registry) pin(addr, n uint64) *Region {
	r := g.find(addr, n)
	if r == nil {
		return nil
	}
	r.refs.Add(1)
	if r.dead.Load() {
		r.Release()
		return nil
	}
	return r
}

// waitDrained waits until no pin remains on any of rs, or timeout.
func waitDrained(rs []*Region, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, r := range rs {
		select {
		case <-r.drained:
		case <-t.C:
			return false
		}
	}
	return true
}
