// Package spin is bounded busy-polling: a goroutine about to park for an
// answer that is likely a few microseconds away polls for it first, for at
// most a budget, and parks only when it did not come.
//
// Why: on a virtual machine a parked thread that is woken pays a vCPU
// wake-up (tens of microseconds here, bench/pingpong.c measures it), and
// every goroutine hand-off through the netpoller or a channel can cost one.
// A request/answer exchange on loopback takes ~10 µs when both sides poll.
// The budget bounds the CPU a poll can burn: nothing spins when nothing is
// in flight, and a budget of zero (KVFERRY_SPIN_US=0) never spins.
//
// The Shared forms (UntilShared, ReadingShared, Reader.Shared) offer the
// thread's CPU to any other runnable thread before each poll
// (sched_yield, which returns at once when there is none). They are for
// exchanges whose answer needs the work of several threads on each side:
// a notification is read by the peer's RPC server, delivered, seen by the
// application's waiter, answered through the peer's own RPC client and
// read by this side's server. With a poller per hop the pollers outnumber
// two vCPUs, and a poll that holds its CPU keeps the very thread that must
// run next waiting for a scheduler time slice (a notification round trip
// took 180-220 us with holding polls, 40-60 us with shared ones, and
// about 110-130 us without polling). A request/answer exchange with one
// poller per side (a transfer's lane reader and the peer's connection
// reader) polls holding its CPU: there, nothing else needs it. The store's
// master connection shares: the scheduler may put the client and the
// master on one CPU, where a holding poll keeps the other side from
// running until its budget runs out (store/wire, newMuxConn).
package spin

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Default is the budget when none is configured (KVFERRY_SPIN_US).
const Default = 50 * time.Microsecond

// Max bounds a configured budget.
const Max = 10 * time.Millisecond

// Budget normalises a configured budget: 0 means Default, a negative one
// means never spin (0), and one above Max is Max.
func Budget(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return Default
	case d < 0:
		return 0
	case d > Max:
		return Max
	}
	return d
}

// Until calls done until it reports true or budget has passed, and returns
// its last answer. With yield, the poll lets other work run between polls:
// with one P the other goroutines of this P (runtime.Gosched), with more
// other threads (sched_yield, which keeps the P: the other Ps run this P's
// other goroutines, woken for them as they became runnable). A Gosched
// with several Ps wakes an idle P's thread every time, to run whatever it
// queued; on a small VM those wake-ups take a vCPU from the peer's poller
// and stretch the tail (with sched_yield the p99 of a batch-1 4 KiB
// transfer between two processes on the 2-vCPU VM here fell by a fifth to
// a third, issue 18; see yielder). A goroutine locked to its thread
// (every C thread calling in through cgo is, for the length of the call)
// must not yield to goroutines: its Gosched hands the thread's P away and
// back, two thread wake-ups, the very cost the poll is there to avoid.
func Until(budget time.Duration, yield bool, done func() bool) bool {
	return until(budget, yield, false, done)
}

// yielding is how a poll lets other work run between its polls.
type yielding uint8

const (
	yieldNone   yielding = iota // it does not
	yieldP                      // other goroutines of this P (runtime.Gosched)
	yieldThread                 // other threads (sched_yield; the P stays)
)

// yielder is how a poll asked to yield does: with a single P only
// runtime.Gosched runs the goroutines the poll waits for; with more, the
// other Ps do, and a Gosched would only wake one of their threads each
// time (runtime.wakep), two context switches per poll.
func yielder(yield bool) yielding {
	switch {
	case !yield:
		return yieldNone
	case runtime.GOMAXPROCS(0) > 1:
		return yieldThread
	}
	return yieldP
}

// between lets other work run between two polls: y's, and other threads
// first for a shared poll.
func between(y yielding, shared bool) {
	if shared || y == yieldThread {
		osYield()
	}
	if y == yieldP {
		runtime.Gosched()
	}
}

// UntilShared is Until offering the thread's CPU to other threads before
// each poll (see the package comment). It keeps the thread's P.
func UntilShared(budget time.Duration, yield bool, done func() bool) bool {
	return until(budget, yield, true, done)
}

func until(budget time.Duration, yield, shared bool, done func() bool) bool {
	if done() {
		return true
	}
	if budget <= 0 {
		return false
	}
	y := yielder(yield)
	start := time.Now()
	for {
		between(y, shared)
		if done() {
			return true
		}
		if time.Since(start) >= budget {
			return false
		}
	}
}

// Reader polls one connection's socket without blocking; one goroutine at
// a time reads through it. The zero value and nil never poll.
type Reader struct {
	// Shared makes each poll after the first offer the thread's CPU to
	// other threads first (see the package comment).
	Shared bool
	// yields counts the offers (Yields).
	yields atomic.Uint64

	rc syscall.RawConn
	fn func(fd uintptr) bool // the raw read, made once (a closure per call would be a heap allocation)
	// The raw read's buffer and outcome.
	buf   []byte
	n     uintptr
	errno syscall.Errno
}

// NewReader returns a Reader over c's socket, or nil when c has none
// (a TLS connection, a pipe): such connections are read blocking only.
func NewReader(c net.Conn) *Reader {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &Reader{rc: rc}
	r.fn = func(fd uintptr) bool {
		// A non-blocking read cannot block: no entersyscall needed.
		r.n, _, r.errno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
		return true
	}
	return r
}

// Read tries to read into b without blocking for up to budget. When
// something came it returns ok with n > 0, or with io.EOF at the end of
// the stream; otherwise (nothing in time, a deadline already passed, a
// closed connection, any other error) it returns ok false, having consumed
// nothing, and the caller reads as usual, which reports the error.
func (r *Reader) Read(b []byte, budget time.Duration, yield bool) (n int, err error, ok bool) {
	if r == nil || budget <= 0 || len(b) == 0 {
		return 0, nil, false
	}
	r.buf = b
	defer func() { r.buf = nil }()
	var start time.Time
	var y yielding
	for i := 0; ; i++ {
		if cerr := r.rc.Read(r.fn); cerr != nil {
			return 0, nil, false
		}
		switch {
		case r.errno == 0 && r.n > 0:
			return int(r.n), nil, true
		case r.errno == 0:
			return 0, io.EOF, true
		case r.errno != syscall.EAGAIN && r.errno != syscall.EINTR:
			return 0, nil, false
		}
		if i == 0 {
			start = time.Now()
			y = yielder(yield)
		} else if time.Since(start) >= budget {
			return 0, nil, false
		}
		between(y, r.Shared)
		if r.Shared {
			r.yields.Add(1)
		}
	}
}

// Yields reports how many times r's polls offered the thread's CPU to
// other threads (Shared); 0 for nil.
func (r *Reader) Yields() uint64 {
	if r == nil {
		return 0
	}
	return r.yields.Load()
}

// ErrWouldBlock is ReadNow's answer when nothing has arrived.
var ErrWouldBlock = errors.New("spin: nothing to read yet")

// ReadNow reads into b once, without blocking: n > 0 and nil when
// something came, io.EOF at the end of the stream, ErrWouldBlock when
// nothing is there yet, another error when the read failed or the
// connection is closed (nothing consumed then).
func (r *Reader) ReadNow(b []byte) (int, error) {
	if r == nil || len(b) == 0 {
		return 0, ErrWouldBlock
	}
	r.buf = b
	cerr := r.rc.Read(r.fn)
	r.buf = nil
	switch {
	case cerr != nil:
		return 0, cerr
	case r.errno == 0 && r.n > 0:
		return int(r.n), nil
	case r.errno == 0:
		return 0, io.EOF
	case r.errno == syscall.EAGAIN || r.errno == syscall.EINTR:
		return 0, ErrWouldBlock
	}
	return 0, r.errno
}

// Wait blocks the calling thread in the kernel (ppoll(2)) until the
// socket has something to read (or has failed or hung up: a read then
// reports it), or until d has passed; it reports whether the socket became
// readable, false after d or when it cannot wait (nil, d <= 0, a closed
// connection). It consumes nothing and, unlike Read, may be called while
// another goroutine reads through r.
//
// Why: a goroutine that parks in the netpoller for an answer is woken by
// whichever thread polls the network and, when it is locked to its thread
// (a C thread calling in through cgo), handed on to its own thread: two
// thread wake-ups where a thread blocked in ppoll pays one, the kernel
// waking it directly (issue 18). d bounds the wait because the runtime
// cannot interrupt it: a deadline set on the connection, or its Close,
// takes effect only when Wait returns.
func (r *Reader) Wait(d time.Duration) bool {
	if r == nil || d <= 0 {
		return false
	}
	ready := false
	ts := unix.NsecToTimespec(int64(d))
	err := r.rc.Control(func(fd uintptr) {
		// unix.Ppoll blocks as a system call (Syscall6), so the runtime
		// may hand the thread's P to others meanwhile.
		pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Ppoll(pfd[:], &ts, nil)
		ready = err == nil && n > 0
	})
	return err == nil && ready
}

// YieldThread offers this thread's CPU to another runnable thread, as a
// poll that found nothing does (osYield). C threads may call it.
func YieldThread() { osYield() }

// osYield offers this thread's CPU to another runnable thread
// (sched_yield). It cannot block (no entersyscall needed) and keeps the
// thread's P, so C threads may call it too.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// Reading returns a reader of c that polls c's socket for up to budget
// before each read that would block (c itself when it cannot poll or
// budget is 0). yield is as for Until: false for a reader that may run on
// a C thread.
func Reading(c net.Conn, budget time.Duration, yield bool) io.Reader {
	return reading(c, budget, yield, false)
}

// ReadingShared is Reading with polls that offer the thread's CPU to
// other threads (Reader.Shared).
func ReadingShared(c net.Conn, budget time.Duration, yield bool) io.Reader {
	return reading(c, budget, yield, true)
}

func reading(c net.Conn, budget time.Duration, yield, shared bool) io.Reader {
	r := NewReader(c)
	if r == nil || budget <= 0 {
		return c
	}
	r.Shared = shared
	return &polling{c: c, r: r, budget: budget, yield: yield}
}

type polling struct {
	c      net.Conn
	r      *Reader
	budget time.Duration
	yield  bool
}

// Yields reports how many times the polls of rd, a reader from Reading
// or ReadingShared, offered the thread's CPU to other threads; 0 for any
// other reader.
func Yields(rd io.Reader) uint64 {
	if p, ok := rd.(*polling); ok {
		return p.r.Yields()
	}
	return 0
}

func (p *polling) Read(b []byte) (int, error) {
	if n, err, ok := p.r.Read(b, p.budget, p.yield); ok {
		return n, err
	}
	return p.c.Read(b)
}
