package tcp

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/spin"
	"github.com/kvferry/kvferry/metrics"
)

// maxWriteBatch caps the slices encoded into one writev (two iovecs each,
// within IOV_MAX); it must stay below half the window so the writer never
// waits on a window that only its own unwritten slices fill.
const maxWriteBatch = 256

// lane is one connection to a peer's data port with its own writer and
// reader goroutines. Slices are written in order with pipelining and their
// responses read in the same order.
type lane struct {
	t        *Transport
	addr     string
	peerName string
	peerID   engine.SegmentID
	v2       bool
	window   int
	// inc is the peer incarnation every connection is bound to by the
	// identity hello (tcpwire), "" for a peer without one (Mooncake: no
	// hello); incb is it decoded.
	inc  string
	incb [tcpwire.IncarnationSize]byte
	pc   *peerConns // the endpoint's lanes, this one among them

	kick      chan struct{}
	stopCh    chan struct{}
	connected atomic.Bool
	// live is the lane's connection while it is open (set by dial, cleared
	// by closeConn), for AbortCanceled, which must not take l.w.
	live   atomic.Pointer[conn]
	obs    *metrics.Conn
	dialed bool // a connection was made before (guarded by w)

	// w is held by whoever writes to the connection: the writer goroutine
	// or a submitter on the inline path. It guards cs and the scratch.
	w struct {
		sync.Mutex
		cs     *conn
		hdrs   [maxWriteBatch][tcpwire.HeaderSize]byte
		bufs   net.Buffers
		piece  net.Buffers
		inline bool // the submitter writes (submit), not the writer goroutine
		v1done []*engine.Slice
		stager gpu.Stager // stages WRITEs from device memory (gpu.go)
		// spare is the backing of the queue last taken and written, its
		// pointers cleared: the next take hands it to the queue, so that
		// enqueueing allocates nothing in the steady state.
		spare []*engine.Slice
	}

	mu struct {
		sync.Mutex
		queue   []*engine.Slice
		started bool
		stopped bool
	}
}

func newLane(t *Transport, addr string, p *engine.Peer, v2 bool, inc string) *lane {
	w := t.cfg.Window
	if w < 2*maxWriteBatch {
		w = 2 * maxWriteBatch
	}
	l := &lane{t: t, addr: addr, peerName: p.Name, peerID: p.ID, v2: v2, window: w, inc: inc,
		kick: make(chan struct{}, 1), stopCh: make(chan struct{}), obs: t.e.MetricSet().Conn(Name, p.Name)}
	l.incb, _ = descriptor.ParseIncarnation(inc)
	return l
}

func (l *lane) enqueue(ss []*engine.Slice) {
	l.mu.Lock()
	if l.mu.stopped {
		l.mu.Unlock()
		// Lanes replaced by newer ones for the endpoint (peerFor) pass
		// what still comes to them (a retry, a submitter that held them)
		// to those; the transport's Close stops them for good.
		if p := l.t.e.Peer(l.peerID); p != nil && p.Name == l.peerName && !l.t.closed.Load() {
			l.t.requeue(p, l.t.movable(p, ss))
			return
		}
		failAll(ss, engine.ErrClosed)
		return
	}
	l.mu.queue = append(l.mu.queue, ss...)
	if !l.mu.started {
		l.mu.started = true
		l.t.wg.Add(1)
		go l.runWriter()
	}
	l.mu.Unlock()
}

// take returns what is queued, leaving spare (empty) as the queue's
// backing; the caller holds l.w.
func (l *lane) take(spare []*engine.Slice) []*engine.Slice {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.mu.queue
	if len(q) == 0 {
		return nil
	}
	l.mu.queue = spare
	return q
}

func (l *lane) stop() { failAll(l.stopTake(), engine.ErrClosed) }

// stopTake stops the lane and returns the slices still queued on it
// (the caller completes or resubmits them).
func (l *lane) stopTake() []*engine.Slice {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.stopped {
		l.mu.stopped = true
		close(l.stopCh)
	}
	q := l.mu.queue
	l.mu.queue = nil
	return q
}

// conn is one connection of a lane, with its in-flight FIFO. The writer owns
// it and closes inflight. Responses are read in order by whoever holds
// role: the reader goroutine, woken through kick, or a goroutine waiting
// for a slice offered to it (Poll, engine.Poller), which reads only what
// has already arrived.
type conn struct {
	l          *lane
	c          net.Conn
	rd         *connReader
	inflight   chan *engine.Slice
	readerDone chan struct{}
	// kick (one token) wakes the reader goroutine: slices to read, or
	// inflight closed. Whoever queues a slice that no poller was offered
	// kicks after queueing it.
	kick chan struct{}
	// fallback kicks the reader when a slice offered to its waiter was
	// not read within the spin budget (nobody polled, or not in time).
	fallback *time.Timer
	// role is the right to read responses: rd, cur, rcause, exited and
	// the receiving end of inflight are its.
	role   sync.Mutex
	wanted atomic.Bool   // the reader goroutine waits for role
	cur    *engine.Slice // taken from inflight, its response not read yet
	// What of cur's response was read (a waiter reads a large READ's
	// payload as it arrives, the reader resumes where it stopped): its
	// status frame, and payload bytes.
	hdone bool
	got   uint64
	// waitOffer tells whether the slice last offered on the idle
	// connection was a large one, or a small one its submitter waits for,
	// whose waiter blocks for its answer (PollWait), with the reader not
	// kicked for it; the reader clears it when it takes over.
	waitOffer atomic.Bool
	rcause    error // why reading failed: the slices after fail with it
	exited    bool  // the reader goroutine is gone: nobody reads any more
	dead      atomic.Bool
	stager    gpu.Stager // the reader's, for READs into device memory (gpu.go)
	// cause is why the writer gave the connection up (a stalled write is a
	// timeout, not a dropped connection), so that the reader fails the
	// slices in flight with it instead of retrying them.
	cause atomic.Pointer[error]
	// pending counts slices handed to the reader and not yet finished by
	// it; at zero (checked under l.w, which every hand-off needs) the
	// reader is not using the connection.
	pending atomic.Int32

	// wbusy is held by whoever writes slices' payloads from their memory
	// (writeAll). The reader takes it before it fails a slice (after
	// killing the connection, which ends the write at once), so that no
	// slice completes while its memory is still being sent.
	wbusy sync.Mutex
	// reading is the slice whose answer the reader waits for, nil between
	// answers; AbortCanceled kills the connection when its batch was
	// canceled, so a stalled answer is not waited for.
	reading atomic.Pointer[engine.Slice]
	// wchunk is the chunk being written (nil between writes), for
	// AbortCanceled; guarded by wmu.
	wmu    sync.Mutex
	wchunk []*engine.Slice
}

// awaitWriter returns once no payload is being written on cs.
func (cs *conn) awaitWriter() {
	cs.wbusy.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for the writer is the point
	cs.wbusy.Unlock()
}

// holdsCanceled reports whether a slice of a canceled batch is being read
// or written on cs.
func (cs *conn) holdsCanceled() bool {
	cs.wmu.Lock() // the reader clears reading under it (doneReading): s is not completed meanwhile
	defer cs.wmu.Unlock()
	if s := cs.reading.Load(); s != nil && s.Canceled() {
		return true
	}
	for _, s := range cs.wchunk {
		if s.Canceled() {
			return true
		}
	}
	return false
}

// doneReading clears reading before the reader completes the slice, under
// wmu, so that holdsCanceled no longer reads it once it may be reused.
func (cs *conn) doneReading() {
	cs.wmu.Lock()
	cs.reading.Store(nil)
	cs.wmu.Unlock()
}

// kill marks cs dead for cause (the first cause wins) and closes it.
func (cs *conn) kill(cause error) {
	cs.cause.CompareAndSwap(nil, &cause)
	cs.dead.Store(true)
	cs.c.Close()
}

// failure returns the writer's cause when it killed cs, else err.
func (cs *conn) failure(err error) error {
	if c := cs.cause.Load(); c != nil {
		return *c
	}
	return err
}

func (l *lane) dial() (*conn, error) {
	d := net.Dialer{Timeout: l.t.cfg.ConnectTimeout}
	c, err := d.DialContext(l.t.ctx, "tcp", l.addr)
	l.obs.Dials.Add(1)
	if err != nil {
		l.obs.DialErrors.Add(1)
		return nil, fmt.Errorf("dial %s: %w", l.addr, err)
	}
	if l.dialed {
		l.obs.Redials.Add(1)
	}
	l.dialed = true
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if err := peerauth.Handshake(l.t.ctx, c, l.t.e.Auth(), peerauth.RoleData, l.t.cfg.ConnectTimeout); err != nil {
		c.Close()
		l.obs.DialErrors.Add(1)
		if errors.Is(err, peerauth.ErrRefused) || errors.Is(err, peerauth.ErrNoHandshake) {
			// The cause label of kvferry_engine_errors_total reads "auth".
			return nil, fmt.Errorf("connect to %s: %w: %w", l.addr, engine.ErrUnauthenticated, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", l.addr, err)
	}
	if l.inc != "" {
		if err := l.hello(c); err != nil {
			c.Close()
			l.obs.DialErrors.Add(1)
			return nil, err
		}
	}
	if c, err = detach(c, l.t.e.SpinBudget()); err != nil {
		l.obs.DialErrors.Add(1)
		return nil, fmt.Errorf("connect to %s: %w", l.addr, err)
	}
	rd, err := newConnReader(c, l.t.e.SpinBudget())
	if err != nil {
		c.Close()
		return nil, err
	}
	cs := &conn{l: l, c: c, rd: rd, inflight: make(chan *engine.Slice, l.window), readerDone: make(chan struct{}), kick: make(chan struct{}, 1)}
	cs.fallback = time.AfterFunc(time.Hour, cs.kickReader)
	cs.fallback.Stop()
	l.connected.Store(true)
	l.live.Store(cs)
	l.obs.Open.Add(1)
	l.t.wg.Add(1)
	go l.runReader(cs)
	return cs, nil
}

// hello binds the new connection c to the peer incarnation l expects
// (tcpwire's identity hello): no request goes out before the server named
// it. A server of another incarnation, or one that refuses the hello as a
// request of size 0 (it does not know it: Mooncake, or kvferry before the
// hello), fails with ErrStaleIncarnation.
func (l *lane) hello(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(l.t.cfg.ConnectTimeout))
	defer c.SetDeadline(time.Time{})
	var b [tcpwire.HelloSize]byte
	tcpwire.EncodeHello(&b, l.incb)
	if _, err := c.Write(b[:]); err != nil {
		return fmt.Errorf("connect to %s: identity hello: %w: %w", l.addr, errConn, err)
	}
	var r [tcpwire.HelloReplySize]byte
	if _, err := io.ReadFull(c, r[:tcpwire.StatusSize]); err != nil {
		return fmt.Errorf("connect to %s: identity hello: %w", l.addr, l.classify(err))
	}
	stale := func(why string) error {
		l.t.staleDials.Add(1)
		return fmt.Errorf("connect to %s for segment %q (incarnation %s): %w: %s: %w", l.addr, l.peerName, l.inc, ErrStaleIncarnation, why, engine.ErrPeerGone)
	}
	code, err := tcpwire.DecodeStatus(r[:tcpwire.StatusSize])
	switch {
	case err != nil:
		return stale(fmt.Sprintf("the server answered %x", r[:tcpwire.StatusSize]))
	case code == tcpwire.StatusRejected:
		return stale("the server does not know the identity hello (not the kvferry engine that published the descriptor)")
	case code != tcpwire.HelloOK && code != tcpwire.HelloStale:
		return stale(fmt.Sprintf("the server answered status %#x", code))
	}
	if _, err := io.ReadFull(c, r[tcpwire.StatusSize:]); err != nil {
		return fmt.Errorf("connect to %s: identity hello: %w", l.addr, l.classify(err))
	}
	got, _ := tcpwire.DecodeHelloReply(r[tcpwire.StatusSize:])
	if code != tcpwire.HelloOK || got != l.incb {
		return stale("the server is incarnation " + hex.EncodeToString(got[:]))
	}
	return nil
}

// rereadMark is the bit of Slice.Retries that says the slice was held
// back once for a descriptor re-read (reread).
const rereadMark = 0x80

// reread handles slices that found another incarnation behind the peer's
// data port (cause): it re-reads the peer's descriptor once, and sends
// the slices to the incarnation it names now if that is a new one whose
// registered memory holds them; otherwise they fail with cause. A slice
// is re-read for at most once. The re-read runs on its own goroutine
// (a metadata round trip, bounded by the metadata timeout), owned by the
// transport.
func (l *lane) reread(ss []*engine.Slice, cause error) {
	again := ss[:0:0]
	for _, s := range ss {
		if s.Retries&rereadMark != 0 || s.Canceled() {
			l.fail(s, cause)
			continue
		}
		s.Retries |= rereadMark
		again = append(again, s)
	}
	if len(again) == 0 {
		return
	}
	if l.t.closed.Load() {
		failAll(again, engine.ErrClosed)
		return
	}
	if p := l.t.e.Peer(l.peerID); p != nil && p.Name == l.peerName && p.Descriptor().Incarnation != l.inc {
		l.redirect(p, again, cause) // re-read already (by another lane)
		return
	}
	// One re-read for the endpoint at a time: the other lanes' slices
	// that find the stale incarnation meanwhile join it.
	rr := &l.pc.rr
	rr.Lock()
	if rr.pending != nil {
		rr.pending = append(rr.pending, again...)
		rr.Unlock()
		return
	}
	rr.pending = again
	rr.Unlock()
	l.t.rereads.Add(1)
	l.t.wg.Add(1)
	go func() {
		defer l.t.wg.Done()
		ctx, cancel := context.WithTimeout(l.t.ctx, l.t.e.Config().MetadataTimeout)
		defer cancel()
		_, err := l.t.e.OpenSegmentNoCache(ctx, l.peerName)
		rr.Lock()
		again := rr.pending
		rr.pending = nil
		rr.Unlock()
		p := l.t.e.Peer(l.peerID)
		switch {
		case err != nil:
			cause = fmt.Errorf("%w (descriptor re-read: %v)", cause, err)
		case p == nil || p.Name != l.peerName:
			cause = fmt.Errorf("%w (segment closed meanwhile)", cause)
		case p.Descriptor().Incarnation == l.inc:
			cause = fmt.Errorf("%w (the metadata still names that incarnation: the peer is gone or has not published again)", cause)
		default:
			l.t.log.Info("tcp peer restarted: requests go to its new incarnation", "peer", l.peerName, "old", l.inc, "new", p.Descriptor().Incarnation)
			l.redirect(p, again, cause)
			return
		}
		for _, s := range again {
			l.fail(s, cause)
		}
	}()
}

// redirect sends ss, which found a stale incarnation (cause), to the one
// p's descriptor names now: those its registered memory holds; the others
// fail.
func (l *lane) redirect(p *engine.Peer, ss []*engine.Slice, cause error) {
	send := ss[:0:0]
	for _, s := range ss {
		if p.Contains(s.Remote, s.Length) {
			send = append(send, s)
		} else {
			l.fail(s, fmt.Errorf("%w (its new incarnation does not register %#x+%d): %w", cause, s.Remote, s.Length, engine.ErrAddressNotRegistered))
		}
	}
	l.t.requeue(p, send)
}

// closeConn closes cs, lets the reader fail or retry what is in flight, and
// waits for it.
func (l *lane) closeConn(cs *conn) {
	l.live.CompareAndSwap(cs, nil)
	cs.dead.Store(true)
	cs.c.Close()
	close(cs.inflight)
	cs.fallback.Stop()
	cs.kickReader()
	<-cs.readerDone
	cs.rd.close()
	l.connected.Store(false)
	l.obs.Open.Add(-1)
}

// inlineMaxBytes bounds the wire bytes of a submission that the submitting
// goroutine writes itself when the lane is connected and idle: one handoff
// fewer for small requests, while big ones never block a submitter that
// does not wait for them (Transport.Submit).
const inlineMaxBytes = 256 << 10

// submit queues ss and, with inline, writes them at once when the lane is
// idle and connected; else it wakes the writer goroutine.
func (l *lane) submit(ss []*engine.Slice, inline bool) {
	l.enqueue(ss)
	if inline && l.w.TryLock() {
		cs := l.w.cs
		if cs != nil && !cs.dead.Load() {
			l.w.inline = true
			l.drainLocked()
			l.w.inline = false
			l.w.Unlock()
			if !l.queued() {
				return
			}
		} else {
			l.w.Unlock()
		}
	}
	l.wake()
}

func (l *lane) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *lane) queued() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.queue) > 0
}

// free reports whether the lane has no work now: nothing queued, no
// writer writing, no answer awaited on its connection. A snapshot only
// (Transport.startLane's choice), never a promise.
func (l *lane) free() bool {
	if l.queued() || !l.w.TryLock() {
		return false
	}
	cs := l.w.cs
	l.w.Unlock()
	return cs == nil || cs.pending.Load() == 0
}

// retired reports whether the lane holds nothing: no writer running,
// nothing queued, no connection (never used, or its writer retired). A lane
// someone is writing on right now is not retired.
func (l *lane) retired() bool {
	if !l.w.TryLock() {
		return false
	}
	defer l.w.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.mu.started && len(l.mu.queue) == 0 && l.w.cs == nil
}

// idleClose is how long a lane may sit idle before its writer closes the
// connection and exits (the next submission starts it again).
const idleClose = 2 * time.Minute

// healthInterval is how often an idle lane checks that the peer has not
// closed its connection (the peer died or restarted): such a lane closes
// the connection and exits at once instead of holding them until
// idleClose, and the next submission dials afresh without a failed try.
const healthInterval = 2 * time.Second

// runWriter writes queued slices whenever woken; owned by the lane, stopped
// by lane.stop, the transport's context, idleness, or a peer that closed
// the idle connection.
func (l *lane) runWriter() {
	defer l.t.wg.Done()
	idle := time.NewTimer(idleClose)
	defer idle.Stop()
	health := time.NewTicker(healthInterval)
	defer health.Stop()
	for {
		select {
		case <-l.kick:
		case <-l.stopCh:
			l.shutdown()
			return
		case <-l.t.ctx.Done():
			l.shutdown()
			return
		case <-idle.C:
			if l.retire() {
				return
			}
			idle.Reset(idleClose)
			continue
		case <-health.C:
			if l.peerClosed() && l.retire() {
				return
			}
			continue
		}
		l.w.Lock()
		l.drainLocked()
		unconnected := l.w.cs == nil
		l.w.Unlock()
		if unconnected && l.retire() {
			// The dial failed (the peer is gone or restarted elsewhere):
			// nothing to hold until idleClose; the next submission starts
			// the writer again.
			return
		}
		idle.Reset(idleClose)
	}
}

// shutdown closes the connection and fails whatever is still queued.
func (l *lane) shutdown() {
	l.w.Lock()
	if l.w.cs != nil {
		l.closeConn(l.w.cs)
		l.w.cs = nil
	}
	l.closeStager()
	l.w.Unlock()
	l.stop()
}

// peerClosed checks an idle connection without blocking: when the peer
// closed it (or sent what nobody asked for) it is closed and the lane left
// without one, and peerClosed reports true.
func (l *lane) peerClosed() bool {
	l.w.Lock()
	defer l.w.Unlock()
	cs := l.w.cs
	if cs == nil || cs.pending.Load() != 0 || l.queued() {
		return false
	}
	if cs.rd.buffered() == 0 && quiet(cs.c) {
		return false
	}
	l.t.log.Debug("tcp idle connection closed by the peer", "peer", l.peerName, "addr", l.addr)
	cs.kill(fmt.Errorf("connection to %s closed by the peer: %w", l.addr, errConn))
	l.closeConn(cs)
	l.w.cs = nil
	return true
}

// quiet reports whether c has nothing to read and is still open, without
// blocking or consuming anything (recv with MSG_PEEK|MSG_DONTWAIT).
func quiet(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	alive := true
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = n <= 0 && (err == syscall.EAGAIN || err == syscall.EINTR)
		return true // never wait
	})
	return alive
}

// retire ends an idle writer: it closes the connection and marks the lane
// not started, unless work arrived meanwhile.
func (l *lane) retire() bool {
	l.w.Lock()
	defer l.w.Unlock()
	l.mu.Lock()
	if len(l.mu.queue) > 0 || l.mu.stopped {
		l.mu.Unlock()
		return false
	}
	l.mu.started = false
	l.mu.Unlock()
	if l.w.cs != nil {
		l.closeConn(l.w.cs)
		l.w.cs = nil
	}
	l.closeStager()
	return true
}

// closeStager frees the writer's bounce buffers; the caller holds l.w.
func (l *lane) closeStager() {
	if l.w.stager != nil {
		l.w.stager.Close()
		l.w.stager = nil
	}
}

// drainLocked writes everything queued; the caller holds l.w.
func (l *lane) drainLocked() {
	for {
		batch := l.take(l.w.spare[:0])
		if len(batch) == 0 {
			return
		}
		l.w.spare = nil // the queue's now
		taken, written := batch, true
		for len(batch) > 0 {
			cs := l.w.cs
			if cs != nil && cs.dead.Load() {
				l.closeConn(cs)
				l.w.cs, cs = nil, nil
			}
			if cs == nil {
				var err error
				if cs, err = l.dial(); err != nil {
					l.t.log.Warn("tcp connect failed", "peer", l.peerName, "err", err)
					written = false // reread and fail may keep batch
					if errors.Is(err, ErrStaleIncarnation) {
						l.reread(batch, err)
						break
					}
					for _, s := range batch {
						l.fail(s, err)
					}
					break
				}
				l.w.cs = cs
			}
			chunk := batch[:min(len(batch), maxWriteBatch)]
			batch = batch[len(chunk):]
			l.writeChunk(cs, chunk)
		}
		if written && cap(taken) <= 4*maxWriteBatch {
			clear(taken)
			l.w.spare = taken[:0]
		}
	}
}

// writeChunk encodes and writes up to maxWriteBatch slices with one writev.
// It holds the slices (engine.Slice.Hold) until it is done with the chunk:
// the reader may complete a slice while the writer still reads it (the
// chunk after queueing it, wchunk for AbortCanceled).
func (l *lane) writeChunk(cs *conn, chunk []*engine.Slice) {
	for _, s := range chunk {
		s.Hold()
	}
	l.writeHeld(cs, chunk)
	for _, s := range chunk {
		s.Release()
	}
}

// writeHeld is writeChunk with chunk held.
func (l *lane) writeHeld(cs *conn, chunk []*engine.Slice) {
	if l.stagedWrites(chunk) {
		l.writeChunkStaged(cs, chunk)
		return
	}
	bufs := l.w.bufs[:0]
	v1done := l.w.v1done[:0]
	sent, queued := 0, false
	// A single small slice written by its submitter on an idle connection
	// is offered to its waiter, which then reads the answer itself; so is
	// a large one whose submitter waits for it (whoever writes it), and
	// that waiter blocks in the kernel for the answer (PollWait).
	offer := len(chunk) == 1 && cs.pending.Load() == 0 && l.pollable(cs, chunk[0])
	long := offer && !small(l, chunk[0])
	offer = offer && (l.w.inline || long)
	// A small one whose submitter waits is offered the same way: its
	// waiter polls for it for its spin budget, then blocks in the kernel
	// for it too (SpinThenWaitWith) instead of parking until the reader,
	// woken by the network poller, has read it. A locked waiter (a C
	// caller) that parks is woken through a timer the network poller
	// rounds to a millisecond.
	awaited := offer && !long && chunk[0].SubmitterWaits()
	for i, s := range chunk {
		if s.Canceled() {
			s.Complete(engine.ErrCanceled)
			continue
		}
		tcpwire.Header{Size: s.Length, Addr: s.Remote, Write: s.Op == engine.OpWrite, V2: l.v2}.Encode(&l.w.hdrs[i])
		bufs = append(bufs, l.w.hdrs[i][:])
		if s.Op == engine.OpWrite {
			bufs = appendLocal(bufs, s)
		}
		if l.v2 || s.Op == engine.OpRead {
			if long || awaited {
				// Counted in pending before it is offered: a waiter that
				// finds it offered but not yet queued kicks the reader
				// (Poll), it does not park on a slice nobody reads. The
				// waiter may already have parked: then the reader reads
				// it, woken as for any other slice.
				cs.pending.Add(1)
				cs.waitOffer.Store(true)
				var took bool
				if long {
					took = s.WaitWith(cs)
				} else {
					took = s.SpinThenWaitWith(cs)
				}
				if !took {
					cs.waitOffer.Store(false)
					offer, long, awaited = false, false, false
				}
				cs.queue(s)
			} else {
				if offer {
					cs.waitOffer.Store(false)
					s.PollWith(cs)
				}
				cs.push(s)
			}
			queued = true
		} else {
			v1done = append(v1done, s)
		}
		sent++
	}
	l.w.bufs, l.w.v1done = bufs[:0], v1done[:0]
	// The reader is woken before the write, so that it is ready when the
	// answers come, unless the chunk is one large write: its answer cannot
	// come before the payload is all written, and a reader woken now would
	// take a CPU (it polls first) from this write and the other lanes'
	// (a 1 MiB store put: one stripe per lane). With more slices the
	// answers of the first are read while the rest is written.
	kickLate := queued && !offer && len(chunk) == 1 && chunk[0].Op == engine.OpWrite && chunk[0].Length > largePayload
	if queued && !kickLate {
		if long {
			cs.fallback.Reset(waitFallback)
		} else if awaited {
			cs.fallback.Reset(l.t.e.SpinBudget() + waitFallback)
		} else if offer {
			cs.fallback.Reset(l.t.e.SpinBudget())
		} else {
			cs.kickReader()
		}
	}
	if kickLate {
		defer cs.kickReader()
	}
	if sent == 0 {
		return
	}
	cs.wmu.Lock()
	cs.wchunk = chunk
	cs.wmu.Unlock()
	cs.wbusy.Lock()
	err := l.writeAll(cs.c, bufs)
	cs.wbusy.Unlock()
	cs.wmu.Lock()
	cs.wchunk = nil
	cs.wmu.Unlock()
	if err != nil {
		// The reader fails or retries what is in flight, with this cause
		// (or with its own, when it closed cs first).
		werr := cs.failure(l.classifyWrite(err))
		cs.kill(werr)
		cs.kickReader() // what was offered to a poller fails now, not at the fallback
		for _, s := range v1done {
			l.fail(s, werr)
		}
		return
	}
	l.t.sent.Add(uint64(sent))
	if l.w.inline {
		l.t.inlined.Add(uint64(sent))
	}
	for _, s := range v1done {
		s.Complete(nil) // v1: done once it left our socket
	}
}

// appendLocal appends the local memory of write slice s to bufs: one
// buffer, or one per piece (a slice that gathers pieces is one frame).
func appendLocal(bufs net.Buffers, s *engine.Slice) net.Buffers {
	if s.Pieces == nil {
		return append(bufs, cmem.Bytes(s.Local, s.Length))
	}
	for _, p := range s.Pieces {
		if p.Length > 0 {
			bufs = append(bufs, cmem.Bytes(p.Addr, p.Length))
		}
	}
	return bufs
}

// largePayload is the payload of a one-write chunk above which its
// answer's reader is woken only after the write (writeChunk).
const largePayload = 64 << 10

// writePiece is how many bytes one writev carries at most: the status
// timeout bounds each piece, so it bounds a stall, not the time a large
// batch takes on a slow link.
const writePiece = 1 << 20

// writeAll writes bufs (consuming them) in pieces of up to writePiece
// bytes, renewing the write deadline for each; the caller holds l.w.
func (l *lane) writeAll(c net.Conn, bufs net.Buffers) error {
	for len(bufs) > 0 {
		piece, n := l.w.piece[:0], 0
		for len(bufs) > 0 && n < writePiece {
			b := bufs[0]
			if room := writePiece - n; len(b) > room {
				piece = append(piece, b[:room])
				bufs[0] = b[room:]
				break
			}
			piece = append(piece, b)
			n += len(b)
			bufs = bufs[1:]
		}
		if l.t.beforeWrite != nil {
			l.t.beforeWrite()
		}
		_ = c.SetWriteDeadline(time.Now().Add(l.t.cfg.StatusTimeout))
		l.w.piece = piece // WriteTo consumes its receiver; a field does not escape
		_, err := writeBuffers(c, &l.w.piece)
		clear(piece)
		l.w.piece = piece[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

// push queues s for its response to be read (counted in pending first);
// when the window is full it wakes the reader to make room.
func (cs *conn) push(s *engine.Slice) {
	cs.pending.Add(1)
	cs.queue(s)
}

// queue is push for a slice already counted in pending.
func (cs *conn) queue(s *engine.Slice) {
	select {
	case cs.inflight <- s:
	default:
		cs.kickReader()
		cs.inflight <- s
	}
}

// kickReader wakes the reader goroutine (its token may already be there).
func (cs *conn) kickReader() {
	select {
	case cs.kick <- struct{}{}:
	default:
	}
}

// runReader reads responses in order whenever kicked; owned by the lane's
// writer, which closes cs.inflight to stop it.
func (l *lane) runReader(cs *conn) {
	defer l.t.wg.Done()
	defer close(cs.readerDone)
	defer func() {
		if cs.stager != nil {
			cs.stager.Close()
		}
	}()
	for range cs.kick {
		cs.wanted.Store(true) // pollers stand back (a TryLock loop would starve Lock)
		cs.role.Lock()
		cs.wanted.Store(false)
		cs.waitOffer.Store(false) // the reader reads what is queued: waiters park
		if l.readQueued(cs) {
			cs.exited = true
			cs.role.Unlock()
			return
		}
		cs.role.Unlock()
	}
}

// readQueued reads the responses of every slice queued, blocking for each;
// it reports whether inflight was closed. The caller holds cs.role.
func (l *lane) readQueued(cs *conn) (closed bool) {
	for {
		s := cs.cur
		cs.cur = nil
		if s == nil {
			select {
			case q, ok := <-cs.inflight:
				if !ok {
					return true
				}
				s = q
			default:
				return false
			}
		}
		l.finish(cs, s)
	}
}

// finish reads s's response (blocking) and completes s, or fails or
// retries it when the connection failed. The caller holds cs.role.
//
// A slice fails only once nothing touches its memory: the reader itself
// no longer reads into it, and the writer, which the failure's kill of cs
// stops at once, has left writeAll (awaitWriter). A slice of a canceled
// batch whose answer has not all arrived is not waited for: cs is killed
// (its other slices are retried as after a lost connection).
func (l *lane) finish(cs *conn, s *engine.Slice) {
	cs.reading.Store(s) // before the Canceled check: AbortCanceled sees one or the other
	if s.Canceled() && !cs.dead.Load() && cs.rd.buffered() < l.responseSize(s) {
		cs.kill(l.abortCause())
	}
	switch {
	case cs.dead.Load():
		if cs.rcause == nil {
			cs.rcause = cs.failure(fmt.Errorf("connection to %s closed: %w", l.addr, errConn))
		}
		cs.doneReading()
		cs.awaitWriter()
		l.retryOrFail(s, cs.rcause)
	default:
		err := l.readResponse(cs, s)
		cs.doneReading()
		if err != nil {
			cs.rcause = cs.failure(err)
			cs.kill(cs.rcause)
			cs.awaitWriter()
			l.retryOrFail(s, cs.rcause)
		} else {
			s.Complete(nil)
		}
	}
	cs.hdone, cs.got = false, 0
	cs.pending.Add(-1)
}

// responseSize is the bytes of s's response: its status frame (protocol
// v2) and a READ's payload.
func (l *lane) responseSize(s *engine.Slice) int {
	n := 0
	if l.v2 {
		n = tcpwire.StatusSize
	}
	if s.Op == engine.OpRead {
		n += int(s.Length)
	}
	return n
}

// pollable reports whether s's response may be read by a poller: polling
// is on, the socket can be read without blocking, the response lands in
// host memory, and either it is small (it fits the read-ahead buffer
// easily) or its submitter waits for it (Slice.SubmitterWaits: the waiter
// blocks for it, PollWait) and a READ's payload lands in one buffer.
func (l *lane) pollable(cs *conn, s *engine.Slice) bool {
	if l.t.e.SpinBudget() <= 0 || !cs.rd.canPoll() || s.LocalKind() == engine.MemoryDevice {
		return false
	}
	return small(l, s) || (s.SubmitterWaits() && (s.Op == engine.OpWrite || s.Pieces == nil))
}

// small reports whether s moves little: its payload and its response fit
// the read-ahead buffer easily.
func small(l *lane, s *engine.Slice) bool {
	return s.Length <= HeaderBatchBytes/2 && l.responseSize(s) <= HeaderBatchBytes/2
}

// waitFallback is how long the reader leaves a slice offered to its
// waiter to block for (waitOffer) before it reads the answer itself: the waiter blocks
// for it in the kernel and pushes this out while it does (PollWait), so
// the reader comes only for a waiter that went away or was kept from the
// CPU that long.
const waitFallback = 4 * time.Millisecond

// PollWait blocks the calling thread in the kernel (ppoll) for up to d
// until more answers arrive on the connection, then reads them as Poll
// does (engine.WaitPoller); false when nothing is offered to a waiter to
// block for here.
func (cs *conn) PollWait(d time.Duration) bool {
	if !cs.waitOffer.Load() || cs.dead.Load() || cs.pending.Load() == 0 {
		return false
	}
	cs.Poll()
	if !cs.waitOffer.Load() || cs.pending.Load() == 0 {
		return true // all read, or the reader took over: the waiter looks again
	}
	cs.fallback.Reset(d + waitFallback)
	cs.rd.poll.Wait(d)
	cs.Poll()
	return true
}

// Poll reads the responses that have already arrived, in order, without
// blocking (engine.Poller: the goroutine waiting for a slice offered to it
// calls it). Whatever it cannot finish now (nothing arrived yet, a
// failure, a response it does not read) it leaves to the reader
// goroutine: at once for a failure, else when the fallback fires.
func (cs *conn) Poll() {
	if cs.wanted.Load() || !cs.role.TryLock() {
		return // the reader (or another poller) is at it
	}
	defer cs.role.Unlock()
	if cs.exited {
		return
	}
	l := cs.l
	for {
		s := cs.cur
		if s == nil {
			select {
			case q, ok := <-cs.inflight:
				if !ok {
					cs.kickReader()
					return
				}
				s, cs.cur = q, q
				// The deadline of the last response may have passed
				// while the connection sat idle.
				_ = cs.c.SetReadDeadline(time.Now().Add(l.t.cfg.StatusTimeout))
			default:
				// All read. A slice queued meanwhile (counted before it is
				// queued, its fallback armed after) keeps its fallback or
				// gets the reader now.
				cs.fallback.Stop()
				if cs.pending.Load() != 0 {
					cs.kickReader()
				}
				return
			}
		}
		if cs.dead.Load() || !l.pollable(cs, s) {
			cs.kickReader()
			return
		}
		var err error
		if small(l, s) {
			err = cs.rd.fill(l.responseSize(s))
		} else {
			err = l.pollLarge(cs, s)
		}
		switch {
		case err == spin.ErrWouldBlock:
			return
		case err != nil:
			cs.kickReader() // it reads again, blocking, and reports the failure
			return
		}
		cs.cur = nil
		l.finish(cs, s)
		l.t.polled.Add(1)
	}
}

// Handoff reads what has arrived, as Poll does, and kicks the reader for
// what is still to come (engine.Handoffer: the waiter stopped polling), so
// that the answer is read when it comes, not when the fallback timer
// fires, which the runtime may run a millisecond late.
func (cs *conn) Handoff() {
	cs.Poll()
	if cs.pending.Load() != 0 {
		cs.kickReader()
	}
}

// errNotOK stops a poller at a status frame that is not OK: the reader
// reads it again and reports it.
var errNotOK = errors.New("tcp: status not OK")

// pollLarge reads what has arrived of the response of s, a large slice
// (a WRITE's status frame, a READ's status frame and payload), without
// blocking: nil once all of it is read (the payload into s's buffer, the
// status frame left buffered for readResponse), spin.ErrWouldBlock while
// more is to come; what it read counts in cs.hdone and cs.got. The caller
// holds cs.role.
func (l *lane) pollLarge(cs *conn, s *engine.Slice) error {
	if s.Op == engine.OpWrite {
		return cs.rd.fill(l.responseSize(s))
	}
	if l.v2 && !cs.hdone {
		if err := cs.rd.fill(tcpwire.StatusSize); err != nil {
			return err
		}
		b, _ := cs.rd.peek(tcpwire.StatusSize) // buffered: no read
		if code, err := tcpwire.DecodeStatus(b); err != nil || code != tcpwire.StatusOK {
			return errNotOK
		}
		cs.rd.discard(tcpwire.StatusSize)
		cs.hdone = true
	}
	dst := cmem.Bytes(s.Local, s.Length)
	cs.got += uint64(cs.rd.take(dst[cs.got:]))
	for cs.got < s.Length {
		n, err := cs.rd.poll.ReadNow(dst[cs.got:])
		cs.got += uint64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// readResponse reads s's response (what a poller has not read of it
// already: cs.hdone, cs.got), blocking.
func (l *lane) readResponse(cs *conn, s *engine.Slice) error {
	_ = cs.c.SetReadDeadline(time.Now().Add(l.t.cfg.StatusTimeout))
	if l.v2 && !cs.hdone {
		b, err := cs.rd.peek(tcpwire.StatusSize)
		if err != nil {
			return l.classify(err)
		}
		code, err := tcpwire.DecodeStatus(b)
		cs.rd.discard(tcpwire.StatusSize)
		if err != nil {
			return fmt.Errorf("from %s: %w", l.addr, err)
		}
		if code != tcpwire.StatusOK {
			return fmt.Errorf("%s %#x+%d: %w (status %d)", s.Op, s.Remote, s.Length, engine.ErrRejected, code)
		}
	}
	if s.Op == engine.OpRead {
		if s.LocalKind() == engine.MemoryDevice {
			return l.readStaged(cs, s)
		}
		if s.Pieces == nil {
			if err := cs.rd.readFull(cmem.Bytes(s.Local, s.Length)[cs.got:]); err != nil {
				return l.classify(err)
			}
			return nil
		}
		for _, p := range s.Pieces { // one payload scattered over the pieces
			if err := cs.rd.readFull(cmem.Bytes(p.Addr, p.Length)); err != nil {
				return l.classify(err)
			}
		}
	}
	return nil
}

// classify marks errors that mean "the connection went away" as errConn,
// and deadline expiry as engine.ErrTimeout.
func (l *lane) classify(err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no response from %s within %s: %w", l.addr, l.t.cfg.StatusTimeout, engine.ErrTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("read from %s: %w: %w", l.addr, errConn, err)
	}
	return fmt.Errorf("read from %s: %w", l.addr, err)
}

// classifyWrite is classify for a failed write: a write that made no
// progress within the status timeout is a timeout (the peer stopped
// reading), anything else a lost connection.
func (l *lane) classifyWrite(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("write to %s made no progress within %s: %w", l.addr, l.t.cfg.StatusTimeout, engine.ErrTimeout)
	}
	return fmt.Errorf("write to %s: %w: %w", l.addr, errConn, err)
}

// retryOrFail resubmits a slice once after a connection-level failure (an
// idle connection the peer dropped); anything else fails the slice.
func (l *lane) retryOrFail(s *engine.Slice, err error) {
	if errors.Is(err, errConn) && s.Retries&^rereadMark == 0 && !s.Canceled() && !l.t.closed.Load() {
		s.Retries++
		l.obs.Retries.Add(1)
		l.enqueue([]*engine.Slice{s})
		l.wake()
		return
	}
	l.fail(s, err)
}

// abortCause is why a connection is killed to abort a canceled slice in
// flight: a connection-level failure, so that the other slices on it are
// retried.
func (l *lane) abortCause() error {
	return fmt.Errorf("connection to %s closed to abort a canceled request in flight: %w", l.addr, errConn)
}

// abortCanceled kills the lane's connection when it reads or writes a
// slice of a canceled batch (Transport.AbortCanceled).
func (l *lane) abortCanceled() {
	cs := l.live.Load()
	if cs == nil || cs.dead.Load() || cs.pending.Load() == 0 || !cs.holdsCanceled() {
		return
	}
	cs.kill(l.abortCause())
	cs.kickReader()
}

func (l *lane) fail(s *engine.Slice, err error) {
	l.t.failed.Add(1)
	if s.Canceled() {
		err = fmt.Errorf("%w: %w", engine.ErrCanceled, err)
	}
	s.Complete(&engine.TransferError{Op: s.Op, Peer: l.peerName, Transport: Name, Addr: s.Remote, Length: s.Length, Err: err})
}
