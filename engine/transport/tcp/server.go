package tcp

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/metrics"
)

// server accepts data connections and serves requests against the engine's
// registered memory. Owned by Transport; stopped by Transport.Close.
type server struct {
	t     *Transport
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	limit *netguard.Limiter
	guard *peerauth.Guard // nil without a cluster key

	rejected atomic.Uint64
	served   atomic.Uint64
	detached atomic.Int64 // open connections outside the network poller
}

func (s *server) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.conns == nil { // closed
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// retrack replaces tracked connection old with c (the same connection,
// detached: detach); false when the server closed meanwhile.
func (s *server) retrack(old, c net.Conn) bool {
	if old == c {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, old)
	if s.conns == nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// wholeHeader reports whether b holds a whole request header: for the
// connection limiter, which then leaves a connection whose header waits
// for its server alone (netguard.Limiter.WithFrames).
func wholeHeader(b []byte) bool { return len(b) >= tcpwire.HeaderSize }

// runAccept accepts until the listener closes.
func (s *server) runAccept() {
	defer s.wg.Done()
	var backoff netguard.Backoff
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: pause, longer each time.
			d := backoff.Next()
			s.t.warn("accept", "tcp accept failed", "err", err, "retry_in", d)
			select {
			case <-time.After(d):
			case <-s.t.ctx.Done():
				return
			}
			continue
		}
		backoff.Reset()
		slot, err := s.limit.Admit(c.RemoteAddr(), c)
		if err != nil {
			s.t.warn("limit", "tcp data connection refused", "peer", c.RemoteAddr().String(), "err", err)
			s.t.obs.Refused(metrics.RefusedLimit)
			c.Close()
			continue
		}
		if !s.track(c, true) {
			slot.Release()
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer slot.Release()
			s.serveConn(c, slot)
		}()
	}
}

func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// Limits of the response batch a connection accumulates before writing.
const (
	respMaxRequests = 512     // responses per writev (two iovecs each, within IOV_MAX)
	respMaxBytes    = 1 << 20 // READ payload bytes per writev
)

// respBatch accumulates responses (status frames and READ payloads, in
// request order) so that pipelined requests are answered with one writev.
// READ payloads stay pinned until written.
type respBatch struct {
	status [respMaxRequests * tcpwire.StatusSize]byte
	nst    int
	iov    net.Buffers
	pins   []*engine.Region
	bytes  int
	// wiov is the iovec header writeBuffers consumes, kept here so that a
	// flush does not move one to the heap.
	wiov net.Buffers
	// watches are the regions whose unregistration cuts this connection's
	// write (Region.Gone), each armed once and kept while the connection
	// serves them: a flush arms nothing for a region already watched.
	watches [respWatches]*regionWatch
	nextW   int // the slot replaced next when all are taken
	// extra are the AfterFunc stops of regions this flush answers from
	// beyond the slots, stopped when it ends.
	extra []func() bool
}

// respWatches is how many regions a connection keeps watched.
const respWatches = 4

// regionWatch is one region's armed context.AfterFunc and its stop. The
// callback cuts the write only while a flush answers from the region
// (flushing), so that a region gone while the connection answers from
// others costs them nothing.
type regionWatch struct {
	r        *engine.Region
	stop     func() bool
	flushing atomic.Bool
}

// watch makes sure that r's unregistration during this flush sets c's
// write deadline in the past. The caller has just set the flush's
// deadline: flushing is set after it, so either the callback sees it and
// cuts the write, or the check here sees r gone.
func (b *respBatch) watch(c net.Conn, r *engine.Region) {
	var w *regionWatch
	for _, x := range b.watches {
		if x != nil && x.r == r {
			w = x
			break
		}
	}
	if w == nil {
		old := b.watches[b.nextW]
		if old != nil && old.flushing.Load() {
			// More regions in this flush than slots: this one is watched
			// for this flush only (extra), keeping the slots armed.
			b.extra = append(b.extra, context.AfterFunc(r.Gone(), func() { _ = c.SetWriteDeadline(aLongTimeAgo) }))
			if r.Gone().Err() != nil {
				_ = c.SetWriteDeadline(aLongTimeAgo)
			}
			return
		}
		if old != nil {
			old.stop()
		}
		w = &regionWatch{r: r}
		w.stop = context.AfterFunc(r.Gone(), func() {
			if w.flushing.Load() {
				_ = c.SetWriteDeadline(aLongTimeAgo)
			}
		})
		b.watches[b.nextW] = w
		b.nextW = (b.nextW + 1) % respWatches
	}
	w.flushing.Store(true)
	if r.Gone().Err() != nil {
		_ = c.SetWriteDeadline(aLongTimeAgo)
	}
}

// unwatch disarms every watch; the connection is done.
func (b *respBatch) unwatch() {
	for i, w := range b.watches {
		if w != nil {
			w.stop()
			b.watches[i] = nil
		}
	}
}

// flushed ends the flush for every watch.
func (b *respBatch) flushed() {
	for _, w := range b.watches {
		if w != nil {
			w.flushing.Store(false)
		}
	}
	for i, stop := range b.extra {
		stop()
		b.extra[i] = nil
	}
	b.extra = b.extra[:0]
}

func (b *respBatch) add(code uint32, payload []byte, pin *engine.Region) {
	st := b.status[b.nst*tcpwire.StatusSize : (b.nst+1)*tcpwire.StatusSize]
	b.nst++
	tcpwire.EncodeStatus(st, code)
	// Merge adjacent status frames into one iovec.
	if n := len(b.iov); n > 0 && len(b.iov[n-1]) > 0 && &b.iov[n-1][len(b.iov[n-1])-1] == &b.status[(b.nst-1)*tcpwire.StatusSize-1] {
		b.iov[n-1] = b.iov[n-1][:len(b.iov[n-1])+tcpwire.StatusSize]
	} else {
		b.iov = append(b.iov, st)
	}
	if payload != nil {
		b.iov = append(b.iov, payload)
		b.pins = append(b.pins, pin)
		b.bytes += len(payload)
	}
}

// addPayload queues a v1 READ payload (no status frame).
func (b *respBatch) addPayload(payload []byte, pin *engine.Region) {
	b.nst++ // keeps the count of responses; the status slot stays unused
	b.iov = append(b.iov, payload)
	b.pins = append(b.pins, pin)
	b.bytes += len(payload)
}

func (b *respBatch) full() bool { return b.nst >= respMaxRequests || b.bytes >= respMaxBytes }

// flush writes the batch and releases its pins.
func (b *respBatch) flush(c net.Conn, timeout time.Duration) error {
	if len(b.iov) == 0 {
		b.nst = 0
		return nil
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	// A reader that stops reading must not hold these pins until the
	// deadline: unregistering a region aborts the write (Region.Gone).
	var last *engine.Region
	for _, p := range b.pins {
		if p != last {
			b.watch(c, p)
			last = p
		}
	}
	b.wiov = b.iov
	_, err := writeBuffers(c, &b.wiov)
	b.wiov = nil
	b.flushed()
	b.release()
	clear(b.iov)
	b.iov, b.nst, b.bytes = b.iov[:0], 0, 0
	return err
}

// release drops the pins of an unwritten batch (connection failed).
func (b *respBatch) release() {
	for i := range b.pins {
		b.pins[i].Release()
		b.pins[i] = nil
	}
	b.pins = b.pins[:0]
}

// serveConn serves requests on one connection until it fails or closes.
// Responses are batched: they are written when the server would block
// waiting for the next header (or the batch is full), so pipelined requests
// get their status frames and READ payloads in one writev.
// c is tracked (server.close closes it); serveConn closes it and drops it.
// Each request counts for slot from its whole header until it is answered
// or its payload read (netguard.Slot.Begin): a connection that never sends
// a whole header, or sits idle longest, is the one a new connection
// displaces at a cap.
func (s *server) serveConn(c net.Conn, slot *netguard.Slot) {
	defer func() {
		s.track(c, false)
		c.Close()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if err := s.guard.Accept(c); err != nil {
		s.t.obs.Refused(metrics.RefusedAuth)
		return // counted and logged by the guard
	}
	// Outside the network poller a waiting connection holds a thread:
	// beyond the cap, connections stay in the poller (still polled).
	budget := s.t.e.SpinBudget()
	if s.detached.Add(1) > int64(s.t.cfg.MaxPolledConns) {
		budget = 0
	}
	dc, err := detach(c, budget)
	if err != nil || dc == c {
		s.detached.Add(-1) // not detached
	} else {
		defer s.detached.Add(-1)
	}
	if err != nil {
		s.t.log.Debug("tcp server: detach from the network poller", "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	if !s.retrack(c, dc) {
		dc.Close()
		return // the server closes
	}
	if dc != c && !slot.Rebind(dc) {
		return // displaced meanwhile (Rebind closed dc)
	}
	c = dc
	rd, err := newConnReader(c, s.t.e.SpinBudget())
	if err != nil {
		s.t.log.Error("tcp server: no read buffer", "err", err)
		return
	}
	defer rd.close()
	timeout := s.t.cfg.StatusTimeout
	out := &respBatch{iov: make(net.Buffers, 0, 2*respMaxRequests), pins: make([]*engine.Region, 0, respMaxRequests)}
	defer out.release()
	defer out.unwatch()
	var st gpu.Stager // stages requests on device memory (gpu.go)
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	cfg := &s.t.cfg
	first := true // nothing read yet: a hello may come
	for {
		if rd.buffered() < tcpwire.HeaderSize || out.full() {
			if err := out.flush(c, timeout); err != nil {
				s.t.log.Debug("tcp server: write responses", "peer", c.RemoteAddr().String(), "err", err)
				return
			}
			if n := rd.buffered(); n < tcpwire.HeaderSize {
				// About to wait for a header: an idle connection is closed
				// after IdleTimeout, and a header that has begun must be
				// complete within HeaderTimeout (a trickle cannot extend it).
				d := cfg.IdleTimeout
				if n > 0 {
					d = cfg.HeaderTimeout
				}
				_ = c.SetReadDeadline(time.Now().Add(d))
			}
		}
		hb, err := rd.peek(tcpwire.HeaderSize)
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				s.t.log.Debug("tcp server: idle or incomplete header, closing", "peer", c.RemoteAddr().String())
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				s.t.log.Debug("tcp server: read header", "peer", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		if s.guard == nil && peerauth.IsClientHello(hb) {
			s.t.warn("keyed", "tcp data connection refused: the peer has a cluster key and this node none (set KVFERRY_AUTH_KEY_FILE)",
				"peer", c.RemoteAddr().String())
			return
		}
		if first && tcpwire.IsHello(hb) {
			// The identity hello opens a kvferry initiator's connection;
			// later, the same bytes are a request of size 0 (refused).
			if !slot.Begin() || !s.answerHello(c, rd, timeout) {
				return
			}
			slot.End()
			first = false
			continue
		}
		first = false
		h, err := tcpwire.DecodeHeader(hb)
		rd.discard(tcpwire.HeaderSize)
		if err != nil {
			s.t.warn("header", "tcp server: bad header, closing", "peer", c.RemoteAddr().String(), "err", err)
			s.t.obs.Refused(metrics.RefusedMalformed)
			return
		}
		// A whole header: the connection serves a request until it is
		// answered (every return below closes the connection, and its
		// slot with it, so only the paths that go on call End).
		if !slot.Begin() {
			return // displaced meanwhile
		}
		if s.t.beforeServe != nil {
			s.t.beforeServe(h)
		}
		pin := s.t.e.PinRemote(h.Addr, h.Size)
		if pin == nil {
			s.rejected.Add(1)
			s.t.obs.Refused(metrics.RefusedRange)
			s.t.logReject(c.RemoteAddr().String(), h)
			if h.V2 {
				out.add(tcpwire.StatusRejected, nil, nil)
				_ = out.flush(c, timeout)
			}
			return
		}
		if pin.Kind == engine.MemoryDevice {
			if !s.serveDevice(c, rd, &st, h, pin, out) {
				return
			}
			slot.End()
			continue
		}
		mem := cmem.Bytes(uintptr(h.Addr), h.Size)
		if h.Write {
			if rd.buffered() < len(mem) {
				// The payload is still coming: answer what is batched
				// (its pins go), then wait bounded by the status timeout,
				// cut at once if the region is unregistered meanwhile (a
				// trickling peer must not hold the pin).
				if err := out.flush(c, timeout); err != nil {
					pin.Release()
					s.t.log.Debug("tcp server: write responses", "peer", c.RemoteAddr().String(), "err", err)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(timeout))
				stop := context.AfterFunc(pin.Gone(), func() { _ = c.SetReadDeadline(aLongTimeAgo) })
				err = rd.readFull(mem)
				stop()
			} else {
				err = rd.readFull(mem)
			}
			pin.Release()
			if err != nil {
				s.t.log.Debug("tcp server: read payload", "peer", c.RemoteAddr().String(), "err", err)
				return
			}
			if h.V2 {
				out.add(tcpwire.StatusOK, nil, nil)
			}
		} else if h.V2 {
			out.add(tcpwire.StatusOK, mem, pin)
		} else {
			out.addPayload(mem, pin)
		}
		slot.End()
		s.served.Add(1)
		rd.afterRequest(h.Size)
		if h.Write {
			s.t.obs.Served(1, h.Size)
		} else {
			s.t.obs.Served(0, h.Size)
		}
	}
}

// answerHello reads the identity hello at the head of rd and answers it:
// HelloOK and true when it names this engine's incarnation; else
// HelloStale, and false (the caller closes the connection before reading
// any request: the initiator holds the descriptor of another process that
// had this port).
func (s *server) answerHello(c net.Conn, rd *connReader, timeout time.Duration) bool {
	b, err := rd.peek(tcpwire.HelloSize)
	if err != nil {
		s.t.log.Debug("tcp server: read hello", "peer", c.RemoteAddr().String(), "err", err)
		return false
	}
	want, err := tcpwire.DecodeHello(b)
	rd.discard(tcpwire.HelloSize)
	if err != nil {
		return false
	}
	code := uint32(tcpwire.HelloOK)
	if want != s.t.inc {
		code = tcpwire.HelloStale
		s.t.staleHellos.Add(1)
		s.t.obs.Refused(metrics.RefusedStale)
		s.t.warn("stale", "tcp data connection refused: the initiator expects another incarnation of this segment (its descriptor predates a restart)",
			"peer", c.RemoteAddr().String(), "expected", hex.EncodeToString(want[:]))
	}
	var r [tcpwire.HelloReplySize]byte
	tcpwire.EncodeHelloReply(&r, code, s.t.inc)
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(r[:]); err != nil {
		s.t.log.Debug("tcp server: answer hello", "peer", c.RemoteAddr().String(), "err", err)
		return false
	}
	return code == tcpwire.HelloOK
}

// aLongTimeAgo is a deadline in the past: setting it makes blocked I/O on
// a connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

var _ engine.Transport = (*Transport)(nil)
