package hip

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvferry/kvferry/internal/bounce"
	"github.com/kvferry/kvferry/internal/cmem"
)

// DefaultStreams is the number of streams of a Copier.
const DefaultStreams = 4

// ErrClosed: the copier was closed.
var ErrClosed = errors.New("HIP copier closed")

// Copier runs batches of copies on a pool of non-blocking streams of one
// device and reports each batch's completion through an event: a
// completer goroutine per stream blocks in hipEventSynchronize (events
// made with hipEventBlockingSync: no spinning) while a batch is in flight,
// and on a channel when none is. It is safe for concurrent use.
type Copier struct {
	r       *Runtime
	dev     int
	streams []*copyStream
	next    atomic.Uint32
	closed  atomic.Bool
	wg      sync.WaitGroup
}

// copyStream is one stream with its idle events and its batches in flight
// (in stream order).
type copyStream struct {
	c *Copier
	s *Stream

	mu     sync.Mutex // orders submissions: queueing and the pending send
	closed bool       // guarded by mu
	pend   chan batch

	evMu sync.Mutex
	free []*Event // guarded by evMu
}

type batch struct {
	ev   *Event
	err  error
	done func(error)
}

// NewCopier makes a copier of n streams (DefaultStreams when n <= 0) on
// device dev.
func (r *Runtime) NewCopier(dev int, n int) (*Copier, error) {
	if n <= 0 {
		n = DefaultStreams
	}
	c := &Copier{r: r, dev: dev}
	for range n {
		s, err := r.NewStream(dev)
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
	c.streams[int(c.next.Add(1))%len(c.streams)].submit(ops, done)
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
	defer cs.mu.Unlock()
	if cs.closed {
		done(ErrClosed)
		return
	}
	var ev *Event
	cs.evMu.Lock()
	if n := len(cs.free); n > 0 {
		ev, cs.free = cs.free[n-1], cs.free[:n-1]
	}
	cs.evMu.Unlock()
	if ev == nil {
		var err error
		if ev, err = c.r.NewEvent(c.dev); err != nil {
			done(err)
			return
		}
	}
	queued, err := cs.s.Submit(ops, ev)
	b := batch{ev: ev, done: done}
	if err != nil {
		b.err = fmt.Errorf("copy %d of %d on HIP device %d: %w", queued+1, len(ops), c.dev, err)
	}
	cs.pend <- b // the completer waits for the event even after a failure
}

// runCompleter completes batches in stream order; owned by the copier,
// stopped by Close (which closes pend).
func (cs *copyStream) runCompleter() {
	defer cs.c.wg.Done()
	for b := range cs.pend {
		err := b.err
		if e2 := b.ev.Synchronize(); err == nil && e2 != nil {
			err = fmt.Errorf("copies on HIP device %d: %w", cs.c.dev, e2)
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
			_ = ev.Close()
		}
		_ = cs.s.Close()
	}
}

// Stager defaults.
const (
	// DefaultPieceBytes is the size of one pinned bounce buffer.
	DefaultPieceBytes = 256 << 10
	// DefaultDepth is the number of bounce buffers of a Stager.
	DefaultDepth = 4
	// MaxDepth caps the bounce buffers of a Stager.
	MaxDepth = 64
)

// Stager moves device memory to and from a host-side byte stream through
// a ring of pinned bounce buffers (hipHostMalloc), pipelined as
// internal/bounce does it. One goroutine uses a Stager at a time.
type Stager struct {
	r     *Runtime
	piece uint64
	bufs  []uintptr
	devs  map[int]*stageDev
}

// stageDev is a Stager's stream and events (one per buffer) on one device.
type stageDev struct {
	s   *Stream
	evs []*Event
}

// NewStager allocates depth pinned bounce buffers of piece bytes
// (defaults when <= 0).
func (r *Runtime) NewStager(piece uint64, depth int) (*Stager, error) {
	if piece == 0 {
		piece = DefaultPieceBytes
	}
	if depth <= 0 {
		depth = DefaultDepth
	}
	depth = min(depth, MaxDepth)
	st := &Stager{r: r, piece: piece, devs: make(map[int]*stageDev)}
	for range depth {
		p, err := r.HostAlloc(piece)
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
	s, err := st.r.NewStream(dev)
	if err != nil {
		return nil, err
	}
	sd := &stageDev{s: s}
	for range st.bufs {
		ev, err := st.r.NewEvent(dev)
		if err != nil {
			sd.close()
			return nil, err
		}
		sd.evs = append(sd.evs, ev)
	}
	st.devs[dev] = sd
	return sd, nil
}

func (sd *stageDev) close() {
	for _, e := range sd.evs {
		_ = e.Close()
	}
	_ = sd.s.Close()
}

// ring is the Stager's buffers with one device's stream and events.
type ring struct {
	st *Stager
	sd *stageDev
}

func (r ring) Depth() int                 { return len(r.st.bufs) }
func (r ring) PieceBytes() uint64         { return r.st.piece }
func (r ring) Buf(i int, n uint64) []byte { return cmem.Bytes(r.st.bufs[i], n) }
func (r ring) Addr(i int) uint64          { return uint64(r.st.bufs[i]) }
func (r ring) Wait(i int) error           { return r.sd.evs[i].Synchronize() }
func (r ring) Issue(i int, dst, src, n uint64) error {
	ops := [1]Copy{{Dst: dst, Src: src, N: n}}
	_, err := r.sd.s.Submit(ops[:], r.sd.evs[i])
	return err
}

// FromDevice reads n bytes of device dev's memory at src and hands them to
// sink in order, a bounce buffer at a time (sink must not keep the slice).
func (st *Stager) FromDevice(dev int, src, n uint64, sink func([]byte) error) error {
	sd, err := st.dev(dev)
	if err != nil {
		return err
	}
	return bounce.FromDevice(ring{st, sd}, src, n, sink)
}

// ToDevice fills n bytes of device dev's memory at dst from source, a
// bounce buffer at a time; it returns once every piece has landed.
func (st *Stager) ToDevice(dev int, dst, n uint64, source func([]byte) error) error {
	sd, err := st.dev(dev)
	if err != nil {
		return err
	}
	return bounce.ToDevice(ring{st, sd}, dst, n, source)
}

// Close frees the buffers, streams and events.
func (st *Stager) Close() {
	for _, sd := range st.devs {
		sd.close()
	}
	st.devs = nil
	for _, p := range st.bufs {
		_ = st.r.HostFree(p)
	}
	st.bufs = nil
}
