// Package fdconn runs a TCP connection outside the Go runtime's network
// poller: a net.Conn over a non-blocking socket that no epoll set holds,
// whose blocking reads and writes wait in ppoll(2) on the calling thread.
//
// Why: the runtime registers every socket with its one epoll instance,
// edge-triggered, and keeps an idle thread blocked in epoll_pwait for
// them. A connection whose answers are busy-polled (internal/spin) still
// wakes that thread at every segment that arrives, for nothing: no
// goroutine waits there. On a 2-vCPU machine with one polling thread per
// side, each such wake-up takes a CPU from one of them; it was the main
// source of the tail of single small transfers (issue 18: about 10,000
// wake-ups a second through ep_poll_callback at 35,000 round trips a
// second). Here a socket wakes only the thread that reads it.
//
// The cost: a goroutine blocked in Read or Write holds an OS thread in
// ppoll (the runtime hands its P to others), where the network poller
// would park it for free. Use it for connections that are polled, not for
// many idle ones.
package fdconn

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is a TCP connection outside the network poller. Reads and writes
// follow net.Conn: one reader and one writer at a time, deadlines that
// interrupt blocked calls, Close that ends every call.
type Conn struct {
	fd           int // the socket, non-blocking, close-on-exec
	laddr, raddr net.Addr

	rd, wr dir

	mu     sync.Mutex
	users  int  // calls using fd (acquire)
	closed bool // Close ran: no new calls; the last user closes the fds
}

// dir is one direction's deadline and the eventfd that interrupts its
// blocked wait.
type dir struct {
	op       sync.Mutex   // one call of the direction at a time
	deadline atomic.Int64 // UnixNano; 0: none
	waiting  atomic.Bool  // a call is about to wait or waits in ppoll
	wake     int          // eventfd, non-blocking
}

// Detach takes c's socket out of the network poller and returns it as a
// Conn; c is closed (its descriptor, not the connection). Pending deadlines
// of c do not carry over.
func Detach(c *net.TCPConn) (*Conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("fdconn: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("fdconn: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("fdconn: dup: %w", derr)
	}
	laddr, raddr := c.LocalAddr(), c.RemoteAddr()
	// Closing c deletes its descriptor from the epoll set before closing
	// it; the duplicate shares the socket and was never in the set.
	if err := c.Close(); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fdconn: close the polled descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fdconn: %w", err)
	}
	cn := &Conn{fd: fd, laddr: laddr, raddr: raddr}
	for _, d := range []*dir{&cn.rd, &cn.wr} {
		w, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			cn.closeFds()
			return nil, fmt.Errorf("fdconn: eventfd: %w", err)
		}
		d.wake = w
	}
	return cn, nil
}

// acquire counts a call that uses the descriptors; false once closed.
func (c *Conn) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.users++
	return true
}

func (c *Conn) release() {
	c.mu.Lock()
	c.users--
	last := c.closed && c.users == 0
	c.mu.Unlock()
	if last {
		c.closeFds()
	}
}

func (c *Conn) closeFds() {
	for _, fd := range []int{c.fd, c.rd.wake, c.wr.wake} {
		if fd > 0 {
			unix.Close(fd)
		}
	}
}

// Close ends the connection: calls in progress return net.ErrClosed (or
// what the shut-down socket gives them) and the descriptors close when the
// last of them has.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("fdconn: close: %w", net.ErrClosed)
	}
	c.closed = true
	users := c.users
	if users > 0 {
		// Wake the waiters; shutdown also ends the connection for the peer
		// now, as closing the only descriptor would.
		_ = unix.Shutdown(c.fd, unix.SHUT_RDWR)
		c.rd.signal()
		c.wr.signal()
	}
	c.mu.Unlock()
	if users == 0 {
		c.closeFds()
	}
	return nil
}

func (d *dir) signal() {
	var one = [8]byte{1}
	_, _ = unix.Write(d.wake, one[:])
}

// set stores a deadline and interrupts a call waiting under the old one:
// it stores the deadline before it looks at waiting, and a waiter sets
// waiting before it reads the deadline, so either the waiter sees the new
// deadline or the eventfd, which stays readable until the waiter drains it.
func (d *dir) set(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
		if ns <= 0 {
			ns = 1 // a time before 1970 is in the past, not "none"
		}
	}
	d.deadline.Store(ns)
	if d.waiting.Load() {
		d.signal()
	}
}

// wait blocks until the socket has events (POLLIN or POLLOUT, or failed),
// the direction's deadline passes, or Close. The caller holds a use and
// d.op.
func (c *Conn) wait(d *dir, events int16) error {
	d.waiting.Store(true)
	defer d.waiting.Store(false)
	for {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return net.ErrClosed
		}
		var ts *unix.Timespec
		if dl := d.deadline.Load(); dl != 0 {
			left := dl - time.Now().UnixNano()
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := unix.NsecToTimespec(left)
			ts = &t
		}
		pfd := [2]unix.PollFd{{Fd: int32(c.fd), Events: events}, {Fd: int32(d.wake), Events: unix.POLLIN}}
		_, err := unix.Ppoll(pfd[:], ts, nil)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("fdconn: ppoll: %w", err)
		}
		if pfd[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(d.wake, b[:]) // re-check the deadline and Close
			continue
		}
		if pfd[0].Revents != 0 {
			return nil
		}
	}
}

// opError wraps a failure as net's own connections do.
func (c *Conn) opError(op string, err error) error {
	if errors.Is(err, io.EOF) {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.laddr, Addr: c.raddr, Err: err}
}

// Read reads like net.Conn's Read: io.EOF at the end of the stream.
func (c *Conn) Read(b []byte) (int, error) {
	if !c.acquire() {
		return 0, c.opError("read", net.ErrClosed)
	}
	defer c.release()
	if len(b) == 0 {
		return 0, nil
	}
	c.rd.op.Lock()
	defer c.rd.op.Unlock()
	for {
		n, err := unix.Read(c.fd, b)
		switch {
		case err == nil && n == 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return 0, c.opError("read", os.NewSyscallError("read", err))
		}
		if err := c.wait(&c.rd, unix.POLLIN); err != nil {
			return 0, c.opError("read", err)
		}
	}
}

// Write writes all of b like net.Conn's Write.
func (c *Conn) Write(b []byte) (int, error) {
	bufs := net.Buffers{b}
	n, err := c.WriteBuffers(&bufs)
	return int(n), err
}

// maxIov bounds the buffers of one writev (IOV_MAX).
const maxIov = 1024

// WriteBuffers writes all of v with writev(2), consuming it as
// net.Buffers.WriteTo does (which, for a Conn, writes buffer by buffer).
func (c *Conn) WriteBuffers(v *net.Buffers) (int64, error) {
	if !c.acquire() {
		return 0, c.opError("write", net.ErrClosed)
	}
	defer c.release()
	c.wr.op.Lock()
	defer c.wr.op.Unlock()
	var total int64
	var iov [][]byte
	for {
		for len(*v) > 0 && len((*v)[0]) == 0 {
			*v = (*v)[1:]
		}
		if len(*v) == 0 {
			return total, nil
		}
		iov = (*v)[:min(len(*v), maxIov)]
		n, err := unix.Writev(c.fd, iov)
		if n > 0 {
			total += int64(n)
			consume(v, int64(n))
		}
		switch {
		case err == nil || err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return total, c.opError("write", os.NewSyscallError("writev", err))
		}
		if err := c.wait(&c.wr, unix.POLLOUT); err != nil {
			return total, c.opError("write", err)
		}
	}
}

// consume drops the first n bytes of v.
func consume(v *net.Buffers, n int64) {
	for len(*v) > 0 && n > 0 {
		if int64(len((*v)[0])) > n {
			(*v)[0] = (*v)[0][n:]
			return
		}
		n -= int64(len((*v)[0]))
		*v = (*v)[1:]
	}
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wr.set(t)
	return nil
}

// SetReadDeadline sets the deadline of reads, including one blocked now;
// the zero time means none. It costs no system call unless a read waits.
func (c *Conn) SetReadDeadline(t time.Time) error { c.rd.set(t); return nil }

// SetWriteDeadline sets the deadline of writes, as SetReadDeadline does.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wr.set(t); return nil }

// SyscallConn returns the socket for raw non-blocking use (internal/spin
// reads through it; Control's function may poll it).
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return rawConn{c}, nil }

// rawConn is Conn's syscall.RawConn.
type rawConn struct{ c *Conn }

func (r rawConn) Control(f func(fd uintptr)) error {
	if !r.c.acquire() {
		return net.ErrClosed
	}
	defer r.c.release()
	f(uintptr(r.c.fd))
	return nil
}

func (r rawConn) Read(f func(fd uintptr) bool) error  { return r.io(&r.c.rd, unix.POLLIN, f) }
func (r rawConn) Write(f func(fd uintptr) bool) error { return r.io(&r.c.wr, unix.POLLOUT, f) }

// io calls f until it reports done, waiting for events between calls.
func (r rawConn) io(d *dir, events int16, f func(fd uintptr) bool) error {
	if !r.c.acquire() {
		return net.ErrClosed
	}
	defer r.c.release()
	d.op.Lock()
	defer d.op.Unlock()
	for !f(uintptr(r.c.fd)) {
		if err := r.c.wait(d, events); err != nil {
			return err
		}
	}
	return nil
}

var (
	_ net.Conn     = (*Conn)(nil)
	_ syscall.Conn = (*Conn)(nil)
)
