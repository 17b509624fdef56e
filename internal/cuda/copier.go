package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultStreams is the number of streams of a Copier.
const DefaultStreams = 4

// ErrClosed: the copier was closed.
var ErrClosed = errors.New("CUDA copier closed")

// Copier runs batches of copies on a pool of non-blocking streams of one
// device, and reports each batch's completion through an event: a
// completer goroutine per stream blocks in cuEventSynchronize (blocking
// sync, no spinning) while a batch is in flight and on a channel when none
// is. Submit makes one cgo crossing per batch. It is safe for concurrent
// use.
type Copier struct {
	d       *Driver
	dev     int
	ctx     uintptr
	streams []*copyStream
	next    atomic.Uint32
	closed  atomic.Bool
	wg      sync.WaitGroup
}

// copyStream is one stream with its event pool and the batches in flight
// (in stream order).
type copyStream struct {
	c      *Copier
	s      uintptr
	mu     sync.Mutex // orders submissions: cgo queueing and the pending send
	closed bool       // guarded by mu
	pend   chan batch
	evMu   sync.Mutex
	free   []uintptr // idle events (guarded by evMu)
}

type batch struct {
	ev   uintptr
	err  error
	done func(error)
}

// NewCopier makes a copier of n streams (DefaultStreams when n <= 0) on
// device dev.
func (d *Driver) NewCopier(dev int, n int) (*Copier, error) {
	if n <= 0 {
		n = DefaultStreams
	}
	ctx, err := d.primary(dev)
	if err != nil {
		return nil, err
	}
	c := &Copier{d: d, dev: dev, ctx: ctx}
	for range n {
		s, err := d.newStream(dev)
		if err != nil {
			c.Close()
			return nil, err
		}
		cs := &copyStream{c: c, s: s, pend: make(chan batch, 1024)}
		c.streams = append(c.streams, cs)
		c.wg.Add(1)
		go cs.runCompleter()
	}
	return c, nil
}

// Device returns the copier's device.
func (c *Copier) Device() int { return c.dev }

// Submit queues ops in order on one of the streams and calls done once
// every one of them completed (nil) or failed, from a completer goroutine
// (or from Submit itself when nothing could be queued). done must not
// block for long: it holds up the stream's later completions.
func (c *Copier) Submit(ops []Copy, done func(error)) {
	if c.closed.Load() {
		done(ErrClosed)
		return
	}
	cs := c.streams[int(c.next.Add(1))%len(c.streams)]
	cs.submit(ops, done)
}

// Copy queues ops and waits for them.
func (c *Copier) Copy(ops []Copy) error {
	ch := make(chan error, 1)
	c.Submit(ops, func(err error) { ch <- err })
	return <-ch
}

func (cs *copyStream) submit(ops []Copy, done func(error)) {
	c := cs.c
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		done(ErrClosed)
		return
	}
	var ev uintptr
	cs.evMu.Lock()
	if n := len(cs.free); n > 0 {
		ev, cs.free = cs.free[n-1], cs.free[:n-1]
	}
	cs.evMu.Unlock()
	if ev == 0 {
		var err error
		if ev, err = c.d.newEvent(c.dev); err != nil {
			cs.mu.Unlock()
			done(err)
			return
		}
	}
	queued, r := c.d.submit(c.ctx, cs.s, ops, ev)
	b := batch{ev: ev, done: done}
	if r != Success {
		b.err = fmt.Errorf("copy %d of %d on device %d: %w", queued+1, len(ops), c.dev, c.d.err("cuMemcpyAsync", r))
	}
	cs.pend <- b // the completer waits for the event even after a failure
	cs.mu.Unlock()
}

// runCompleter completes batches in stream order; owned by the copier,
// stopped by Close (which closes pend).
func (cs *copyStream) runCompleter() {
	defer cs.c.wg.Done()
	for b := range cs.pend {
		r := cs.c.d.eventCall(cs.c.ctx, b.ev, false)
		err := b.err
		if err == nil && r != Success {
			err = fmt.Errorf("copies on device %d: %w", cs.c.dev, cs.c.d.err("cuEventSynchronize", r))
		}
		cs.evMu.Lock()
		cs.free = append(cs.free, b.ev)
		cs.evMu.Unlock()
		b.done(err)
	}
}

// Close waits for the batches in flight, then frees the streams and
// events. Later Submits fail with ErrClosed.
func (c *Copier) Close() {
	if c.closed.Swap(true) {
		return
	}
	for _, cs := range c.streams {
		cs.mu.Lock()
		cs.closed = true
		close(cs.pend)
		cs.mu.Unlock()
	}
	c.wg.Wait()
	for _, cs := range c.streams {
		for _, ev := range cs.free {
			c.d.destroyEvent(c.dev, ev)
		}
		c.d.destroyStream(c.dev, cs.s)
	}
}
