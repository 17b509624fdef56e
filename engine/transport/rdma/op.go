package rdma

import (
	"sync"

	"github.com/kvferry/kvferry/engine"
)

// op is one slice, or one part of a slice, on its way through the
// transport: one work request.
type op struct {
	s    *engine.Slice
	peer *engine.Peer
	// laddr, raddr and length are what this op moves: the whole slice, or
	// the part of it inside one memory region on both sides.
	laddr  uintptr
	raddr  uint64
	length uint64
	// whole is set on the parts of a slice cut at a memory region
	// boundary: the slice completes once every part has.
	whole *opGroup
	local *memReg
	tries int
	nic   *nic
	ep    *endpoint
	lkey  uint32
	rkey  uint32
	// accessRetried marks an op already retried after a remote access
	// error (with a refreshed descriptor).
	accessRetried bool
}

// opGroup completes a slice moved in several parts.
type opGroup struct {
	mu   sync.Mutex
	left int
	err  error
}

// cut splits o after n bytes (0 < n < o.length): o keeps the first n
// bytes and the returned op moves the rest; both complete o's slice
// together. It returns nil when n is not inside o.
func (o *op) cut(n uint64) *op {
	if n == 0 || n >= o.length {
		return nil
	}
	if o.whole == nil {
		o.whole = &opGroup{left: 1}
	}
	o.whole.mu.Lock()
	o.whole.left++
	o.whole.mu.Unlock()
	rest := &op{s: o.s, peer: o.peer, laddr: o.laddr + uintptr(n), raddr: o.raddr + n, length: o.length - n,
		whole: o.whole, tries: o.tries, accessRetried: o.accessRetried}
	o.length = n
	return rest
}

// finish completes o: the slice itself, or its share of it (the slice
// completes with the first error of any part once all are done).
func (o *op) finish(err error) {
	g := o.whole
	if g == nil {
		o.s.Complete(err)
		return
	}
	g.mu.Lock()
	if err != nil && g.err == nil {
		g.err = err
	}
	g.left--
	done, first := g.left == 0, g.err
	g.mu.Unlock()
	if done {
		o.s.Complete(first)
	}
}
