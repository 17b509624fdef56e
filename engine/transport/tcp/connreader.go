package tcp

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/fdconn"
	"github.com/kvferry/kvferry/internal/spin"
)

// HeaderBatchBytes is the size of each connection's off-heap read-ahead
// buffer. Headers and status frames of pipelined requests are read in bulk
// through it; payloads larger than what it already holds are read straight
// into registered memory.
const HeaderBatchBytes = 64 << 10

// connReader is a read-ahead buffer over a connection, in off-heap memory.
// Not safe for concurrent use.
type connReader struct {
	c    net.Conn
	m    *cmem.Map
	buf  []byte
	r, w int
	// poll polls the socket for up to budget before a read through the
	// buffer blocks (an answer or the next request is usually microseconds
	// away; see internal/spin).
	poll   *spin.Reader
	budget time.Duration
	base   time.Duration // the configured budget (afterRequest)
}

func newConnReader(c net.Conn, budget time.Duration) (*connReader, error) {
	m, err := cmem.MapAnon(HeaderBatchBytes)
	if err != nil {
		return nil, err
	}
	cr := &connReader{c: c, m: m, buf: m.Bytes(), budget: budget, base: budget}
	if budget > 0 {
		cr.poll = spin.NewReader(c)
	}
	return cr, nil
}

// detach takes c's socket out of the runtime's network poller
// (internal/fdconn) when its answers are polled (budget > 0): a polled
// socket in the poller's epoll set wakes the runtime's idle thread at
// every segment that arrives, for nothing. Other connections (TLS, polling
// off) stay as they are. On failure c is closed.
func detach(c net.Conn, budget time.Duration) (net.Conn, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok || budget <= 0 {
		return c, nil
	}
	fc, err := fdconn.Detach(tc)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("tcp: %w", err)
	}
	return fc, nil
}

// writeBuffers writes v to c as one writev where c can (net.Buffers'
// WriteTo does so only for the net package's own connections).
func writeBuffers(c net.Conn, v *net.Buffers) (int64, error) {
	if bw, ok := c.(interface {
		WriteBuffers(*net.Buffers) (int64, error)
	}); ok {
		return bw.WriteBuffers(v)
	}
	return v.WriteTo(c)
}

// read reads into b, polling first.
func (cr *connReader) read(b []byte) (int, error) {
	if n, err, ok := cr.poll.Read(b, cr.budget, true); ok {
		return n, err
	}
	return cr.c.Read(b)
}

func (cr *connReader) close() { cr.m.Close() }

// largeRequestBytes is the size from which a served request counts as
// large for the wait that follows it (afterRequest).
const largeRequestBytes = HeaderBatchBytes

// afterRequest sets how a server waits for the next request after serving
// one of n bytes. After a small one it polls holding its CPU for the
// configured budget: the next request of a small exchange is microseconds
// away and a yielding poll costs the exchange a system call each turn
// (4 KiB batch-1 reads: p50 8.5 -> 10.1 us with yielding polls here).
// After a large one (a stripe of a store put or get) it polls for four
// budgets offering its CPU to other threads (spin.Reader.Shared): the
// client's next request follows its round trip to the store master, which
// parks this side under the plain budget and then pays a wake-up, and
// which needs the CPUs this poll would hold (1 MiB store puts and gets
// through a master on 2 vCPUs: about 5 % faster each).
func (cr *connReader) afterRequest(n uint64) {
	if cr.poll == nil {
		return
	}
	large := n >= largeRequestBytes
	cr.poll.Shared = large
	cr.budget = cr.base
	if large {
		cr.budget = min(4*cr.base, spin.Max)
	}
}

// canPoll reports whether fill can read without blocking (the socket is
// a raw one and polling is on).
func (cr *connReader) canPoll() bool { return cr.poll != nil }

// fill reads what has arrived, without blocking, until n bytes (at most
// len(buf)) are buffered: nil once they are, spin.ErrWouldBlock while they
// have not all come, io.EOF or another error when the connection ended or
// failed (what was read stays buffered).
func (cr *connReader) fill(n int) error {
	for cr.w-cr.r < n {
		if cr.r > 0 && len(cr.buf)-cr.r < n {
			copy(cr.buf, cr.buf[cr.r:cr.w])
			cr.w -= cr.r
			cr.r = 0
		}
		k, err := cr.poll.ReadNow(cr.buf[cr.w:])
		cr.w += k
		if err != nil {
			return err
		}
	}
	return nil
}

func (cr *connReader) buffered() int { return cr.w - cr.r }

// take moves what is buffered, up to len(dst), into dst and returns how
// much it moved.
func (cr *connReader) take(dst []byte) int {
	n := copy(dst, cr.buf[cr.r:cr.w])
	cr.discard(n)
	return n
}

// peek returns the next n bytes (n <= len(buf)) without consuming them,
// reading more from the connection as needed.
func (cr *connReader) peek(n int) ([]byte, error) {
	for cr.w-cr.r < n {
		if cr.r > 0 && len(cr.buf)-cr.r < n {
			copy(cr.buf, cr.buf[cr.r:cr.w])
			cr.w -= cr.r
			cr.r = 0
		}
		k, err := cr.read(cr.buf[cr.w:])
		cr.w += k
		if err != nil && cr.w-cr.r < n {
			if err == io.EOF && cr.w-cr.r > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return cr.buf[cr.r : cr.r+n], nil
}

func (cr *connReader) discard(n int) {
	cr.r += n
	if cr.r == cr.w {
		cr.r, cr.w = 0, 0
	}
}

// readFull fills dst: first from the buffer, then straight from the socket.
func (cr *connReader) readFull(dst []byte) error {
	n := copy(dst, cr.buf[cr.r:cr.w])
	cr.discard(n)
	if n == len(dst) {
		return nil
	}
	rest := dst[n:]
	if len(rest) >= HeaderBatchBytes/4 {
		_, err := io.ReadFull(cr.c, rest)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	// Small remainder: read ahead through the buffer so that the headers
	// that follow come in the same system call.
	b, err := cr.peek(len(rest))
	if err != nil {
		return err
	}
	copy(rest, b)
	cr.discard(len(rest))
	return nil
}
