package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/spin"
)

// Mux client defaults.
const (
	// DefaultMuxDialTimeout bounds a connection attempt, hello included.
	DefaultMuxDialTimeout = 2 * time.Second
	// DefaultMuxStall is the least time a connection may go without any
	// answer arriving while requests wait on it before a call that gives
	// up takes it for dead (failing the calls in flight; the next call
	// dials a new one): MuxClientConfig.StallTimeout's default. It is
	// counted from the first request sent after the last answer, not from
	// the call giving up: a master slow to answer one short-deadline call
	// (the heartbeat's Ping) must not fail the others, and a connection
	// that only heartbeats still reaches it. The bound in force grows past
	// it with the waits the client has seen end in an answer (stallRule).
	// A 2-core machine at load 10-30 held a live master's answers back
	// for up to about 1 s (the soak's "no answer for 1.008s" under the
	// old 1 s rule); 5 s leaves room on top of that.
	DefaultMuxStall = 5 * time.Second
	// MaxMuxStall caps the bound the observed waits can raise it to.
	MaxMuxStall = time.Minute
	// stallFactor times the longest answerless wait that ended in an
	// answer is how long a wait may last before the connection is taken
	// for dead (when that is above the floor).
	stallFactor = 4
	// stallMemory is how long an observed wait counts in full; after that
	// its weight halves every stallMemory, so a passing slow spell does not
	// hold the bound up for ever.
	stallMemory = 2 * time.Minute
	// Buffers larger than this go back to the garbage collector, not to the
	// pool.
	muxPoolMaxBytes = 1 << 20
)

// ErrMuxRefused means the master at the address accepted the connection
// but does not speak mux (an older master, or not a kvferry master): use
// gRPC.
var ErrMuxRefused = errors.New("store master does not speak the mux protocol")

// MuxClientConfig configures a MuxClient.
type MuxClientConfig struct {
	// Addr is the master's address ("host:port"), its gRPC port.
	Addr string
	// DialTimeout bounds one connection attempt (default
	// DefaultMuxDialTimeout).
	DialTimeout time.Duration
	// Auth, when set, authenticates each connection with the cluster key
	// (peerauth, RoleMaster) before the hello.
	Auth *peerauth.Keys
	// TLS, when set, runs each connection over TLS (after Auth).
	TLS *tls.Config
	// SpinWait is how long the caller reading answers polls the socket
	// before it blocks (0: never; spin.Budget normalises a configured
	// value). Without TLS only. The poll offers its CPU to other threads
	// between reads (spin.ReadingShared): see newMuxConn.
	SpinWait time.Duration
	// StallTimeout is the floor of the bound after which a connection on
	// which requests wait with no answer arriving is taken for dead
	// (stallRule: the bound is stallFactor times the longest such wait
	// seen to end in an answer, when that is more, up to MaxMuxStall).
	// Zero means DefaultMuxStall.
	StallTimeout time.Duration
	// CallTimeout bounds a call whose ctx has no deadline, from when it is
	// sent until its answer is read; 0: none. A call whose ctx can neither
	// be canceled nor expire (no Done channel) then waits on a timer kept
	// with the call's pooled state, which allocates nothing, where a
	// context.WithTimeout per call would allocate a context, its timer and
	// the AfterFunc that stops the read (issue 38).
	CallTimeout time.Duration
}

// stallRule is the liveness bound of a client's master connections: a
// connection whose requests have waited bound() with no answer arriving is
// dead. The bound is the configured floor, or stallFactor times the
// longest wait that did end in an answer (the slowest a live master was
// seen to be, at the load this machine has), whichever is more, capped by
// MaxMuxStall. That wait counts in full for stallMemory and half as much
// for each stallMemory after. Only the goroutine holding a connection's
// reader role observes (one at a time); bound is safe from any goroutine.
type stallRule struct {
	floor time.Duration
	// longest is the longest observed wait (ns), at when it was seen
	// (Unix ns).
	longest, at atomic.Int64
}

// recent is the weight the longest wait has at now: itself within
// stallMemory, halved for every stallMemory after.
func (r *stallRule) recent(now time.Time) time.Duration {
	d, at := time.Duration(r.longest.Load()), r.at.Load()
	if age := now.UnixNano() - at; age > int64(stallMemory) {
		halvings := age / int64(stallMemory)
		if halvings >= 63 {
			return 0
		}
		d >>= halvings
	}
	return d
}

// observe records a wait of d that ended in an answer at now.
func (r *stallRule) observe(d time.Duration, now time.Time) {
	if d > r.recent(now) {
		r.longest.Store(int64(d))
		r.at.Store(now.UnixNano())
	}
}

// bound is how long requests may wait answerless at now.
func (r *stallRule) bound(now time.Time) time.Duration {
	b := max(r.floor, stallFactor*r.recent(now))
	return min(b, max(MaxMuxStall, r.floor))
}

// MuxClient is a MasterClient over the mux protocol: every call of the
// process goes over one TCP connection, written and read by the calling
// goroutines themselves (no goroutine of its own). It dials on first use and
// again after the connection fails: a call that finds no live connection
// dials, and calls that arrive while that dial is under way wait for it and
// share its outcome. No call fails because an earlier dial failed, so the
// first call after a restarted master listens again reaches it (as a
// Mooncake client's, whose pool connects on the call). Errors are *StatusError values, as FromStatus returns for a
// gRPC call: the master's Code, or RPC_FAIL (connection lost), RPC_TIMEOUT
// (ctx deadline). Call options are ignored. Safe for concurrent use; after
// Close every call fails with RPC_FAIL.
type MuxClient struct {
	cfg MuxClientConfig
	// stall is the liveness bound shared by the client's connections, so
	// what one saw outlives it.
	stall stallRule
	// sessions numbers the connections (Session).
	sessions atomic.Uint64
	// names interns the strings of GetReplicaList answers (replicalist.go).
	names names

	mu struct {
		sync.Mutex
		conn    *muxConn // nil or failed: dial on next call
		dialing *muxDial // the dial in progress, or nil
		closed  bool
	}
}

var _ MasterClient = (*MuxClient)(nil)

// NewMuxClient returns a client for the master at cfg.Addr; it connects on
// the first call (or Connect).
func NewMuxClient(cfg MuxClientConfig) *MuxClient {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultMuxDialTimeout
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultMuxStall
	}
	c := &MuxClient{cfg: cfg}
	c.stall.floor = cfg.StallTimeout
	return c
}

// Addr returns the master address.
func (c *MuxClient) Addr() string { return c.cfg.Addr }

// Connect connects now unless connected. It returns ErrMuxRefused when the
// master answered the hello with anything but MuxHello or closed the
// connection (then use gRPC), and a *StatusError (RPC_FAIL) when it could
// not be reached.
func (c *MuxClient) Connect(ctx context.Context) error {
	_, err := c.conn(ctx)
	return err
}

// Close closes the connection. Calls in flight fail with RPC_FAIL. A second
// Close is harmless.
func (c *MuxClient) Close() error {
	c.mu.Lock()
	c.mu.closed = true
	mc := c.mu.conn
	c.mu.conn = nil
	c.mu.Unlock()
	if mc != nil {
		mc.fail(net.ErrClosed)
	}
	return nil
}

func rpcFail(format string, args ...any) *StatusError {
	return &StatusError{Code: ErrRPCFail, GRPC: codes.Unavailable, Message: fmt.Sprintf(format, args...)}
}

func ctxError(ctx context.Context, what string) *StatusError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &StatusError{Code: ErrRPCTimeout, GRPC: codes.DeadlineExceeded, Message: what + ": " + ctx.Err().Error()}
	}
	return &StatusError{Code: ErrRPCFail, GRPC: codes.Canceled, Message: what + ": " + ctx.Err().Error()}
}

// muxDial is one connection attempt; the calls waiting for it share its
// outcome.
type muxDial struct {
	done chan struct{} // closed when the attempt ended; err is set before
	// failed reports that the master could not be reached or refused mux
	// (not that the dialing caller's context ended); the waiters then
	// return err, ErrMuxRefused or an RPC_FAIL *StatusError. Otherwise
	// they look at c.mu.conn again.
	failed bool
	err    error
}

// conn returns a live connection, dialing one when needed.
func (c *MuxClient) conn(ctx context.Context) (*muxConn, error) {
	for {
		c.mu.Lock()
		if c.mu.closed {
			c.mu.Unlock()
			return nil, rpcFail("store master %s: client closed", c.cfg.Addr)
		}
		if mc := c.mu.conn; mc != nil && !mc.failed.Load() {
			c.mu.Unlock()
			return mc, nil
		}
		if d := c.mu.dialing; d != nil {
			c.mu.Unlock()
			select {
			case <-d.done:
				if d.failed {
					return nil, d.err
				}
				continue // connected (or the dialer gave up): look again
			case <-ctx.Done():
				return nil, ctxError(ctx, "connect to store master "+c.cfg.Addr)
			}
		}
		d := &muxDial{done: make(chan struct{})}
		c.mu.dialing = d
		c.mu.Unlock()

		mc, err := c.dial(ctx)

		c.mu.Lock()
		c.mu.dialing = nil
		switch {
		case err != nil && ctx.Err() != nil: // the caller's ctx, not the master
			close(d.done)
			c.mu.Unlock()
			return nil, ctxError(ctx, "connect to store master "+c.cfg.Addr)
		case err != nil:
			d.failed, d.err = true, err
			if !errors.Is(err, ErrMuxRefused) {
				d.err = rpcFail("connect to store master %s: %v", c.cfg.Addr, err)
			}
			close(d.done)
			c.mu.Unlock()
			return nil, d.err
		case c.mu.closed:
			close(d.done)
			c.mu.Unlock()
			mc.c.Close()
			return nil, rpcFail("store master %s: client closed", c.cfg.Addr)
		}
		c.mu.conn = mc
		close(d.done)
		c.mu.Unlock()
		return mc, nil
	}
}

// dial connects and exchanges the hello.
func (c *MuxClient) dial(ctx context.Context) (*muxConn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, err
	}
	if err := peerauth.Handshake(ctx, conn, c.cfg.Auth, peerauth.RoleMaster, c.cfg.DialTimeout); err != nil {
		conn.Close()
		return nil, err
	}
	if c.cfg.TLS != nil {
		tc := tls.Client(conn, tlsconf.ForAddr(c.cfg.TLS, c.cfg.Addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("tls with master %s: %w", c.cfg.Addr, err)
		}
		conn = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var hello [len(MuxHello)]byte
	_, err = conn.Write(MuxHello[:])
	if err == nil {
		_, err = io.ReadFull(conn, hello[:])
		if err == nil && hello != MuxHello {
			err = fmt.Errorf("%w: answered %q", ErrMuxRefused, hello[:])
		} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
			isConnReset(err) {
			// The master read our hello as a bad HTTP/2 preface and hung up.
			err = fmt.Errorf("%w: connection closed after hello (%v)", ErrMuxRefused, err)
		}
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	mc := newMuxConn(conn, c.cfg.Addr, c.cfg.SpinWait)
	mc.stall = &c.stall
	mc.session = c.sessions.Add(1)
	return mc, nil
}

// Session returns the number of the connection calls go over now (each new
// connection gets a larger one; 0 means none yet) and whether it is up: not
// failed, and not closed by the master as far as the socket shows. That
// last check is a non-blocking peek, one system call, that sees the FIN or
// RST a master's host sends when the master process stops or dies (a
// connection found closed is failed at once: the next call dials). A
// caller that holds state granted over one connection (store/client's put
// grants) uses it to learn, before acting on that state, that the master
// which granted it may be gone: a restarted master on the same address is
// reached over a new connection, with a new number.
func (c *MuxClient) Session() (uint64, bool) {
	return c.session(true)
}

// SessionKnown is Session without the peek: what this client already
// knows (a connection it failed or closed, or one the last Session or call
// found closed), and no system call. It suits a caller that peeks with
// Session right before it acts and only wants to skip work on a
// connection already known down, or one that confirms what an answer over
// the session just showed.
func (c *MuxClient) SessionKnown() (uint64, bool) {
	return c.session(false)
}

func (c *MuxClient) session(peek bool) (uint64, bool) {
	c.mu.Lock()
	mc := c.mu.conn
	closed := c.mu.closed
	c.mu.Unlock()
	if mc == nil {
		return 0, false
	}
	if closed || mc.failed.Load() {
		return mc.session, false
	}
	if peek && !mc.peerOpen() {
		// Dead: fail it now, so the next call dials instead of sending
		// into it and reading the end of the stream.
		mc.fail(errors.New("closed by the master"))
		return mc.session, false
	}
	return mc.session, true
}

// muxConn is one connection and its calls in flight. There is no reader
// goroutine: a caller waiting for its answer takes the reader role (tok),
// reads answers until its own arrives, hands the others to their callers,
// and passes the role on. A lone caller thus writes its request and reads
// its answer itself, without waking another goroutine: on a 2-core VM this
// halves the round trip (about 65 us to 33 us).
type muxConn struct {
	c        net.Conn
	rc       syscall.RawConn // c's raw form (peerOpen), or nil
	rcBroken bool            // c has no usable raw form: peerOpen says closed
	// peek is peerOpen's: the function handed to rc.Control (made once,
	// so a peek allocates nothing) and its result.
	peek struct {
		sync.Mutex
		fn   func(fd uintptr)
		open bool
		b    [1]byte
	}
	addr    string
	session uint64 // MuxClient.Session
	nextID  atomic.Uint32
	failed  atomic.Bool
	// lastRead is when the last answer arrived (Unix ns).
	lastRead atomic.Int64
	// silentSince is when the first request after the last answer was sent
	// (Unix ns): with silentSince > lastRead the connection has been
	// waiting, answerless, since then (noteSent, stalled).
	silentSince atomic.Int64
	// stall is the client's liveness bound (MuxClient.stall); nil: the
	// default floor alone.
	stall *stallRule
	// tok holds the reader role: receive it to read, send it back after.
	tok chan struct{}
	// w coalesces concurrent requests: while one caller writes, the others
	// append their frames to queue, and the writer sends them in its next
	// write.
	w struct {
		sync.Mutex
		busy  bool   // a caller is writing
		queue []byte // frames waiting for the writer
		spare []byte // the other buffer of the pair
	}
	// r and fr belong to the reader role; r reads from poll, the socket
	// polled (spin).
	r    *bufio.Reader
	poll io.Reader
	fr   frameReader

	mu struct {
		sync.Mutex
		pending map[uint32]*muxPending // calls waiting for an answer
		err     error                  // why the connection failed
	}
}

func newMuxConn(c net.Conn, addr string, spinWait time.Duration) *muxConn {
	// Callers read their own answers, and a caller may be a C thread: the
	// poll does not yield its P (runtime.Gosched). It does offer its CPU
	// to other threads between reads (sched_yield: spin.ReadingShared),
	// because the thread that must run for the answer to come may be
	// queued behind it: a master on the same CPU as this client (the
	// scheduler puts them together on a small loaded machine, and keeps
	// them there for seconds) could not answer until the poll's budget
	// ran out, and then its own poll for the next request held that CPU
	// from this client the same way (a master round trip: about 20 us on
	// two CPUs, 150-200 us on one, with holding polls).
	poll := spin.ReadingShared(c, spinWait, false)
	mc := &muxConn{c: c, addr: addr, tok: make(chan struct{}, 1), r: bufio.NewReaderSize(poll, muxBufBytes), poll: poll}
	raw := c
	if tc, ok := c.(*tls.Conn); ok { // the liveness peek looks at the socket under TLS
		raw = tc.NetConn()
	}
	if sc, ok := raw.(syscall.Conn); ok {
		var err error
		if mc.rc, err = sc.SyscallConn(); err != nil {
			mc.rcBroken = true
		}
	}
	mc.tok <- struct{}{}
	mc.mu.pending = make(map[uint32]*muxPending)
	mc.lastRead.Store(time.Now().UnixNano())
	return mc
}

// peerOpen reports whether the master has not closed the connection: a
// peek at the socket without waiting finds either nothing (open), answers
// (open), or the end of the stream or an error (closed). It takes no lock
// of the connection, so a reader blocked in Read does not delay it.
func (mc *muxConn) peerOpen() bool {
	if mc.rc == nil {
		return !mc.rcBroken
	}
	mc.peek.Lock()
	defer mc.peek.Unlock()
	if mc.peek.fn == nil {
		mc.peek.fn = mc.peekFD
	}
	mc.peek.open = true
	err := mc.rc.Control(mc.peek.fn)
	return err == nil && mc.peek.open
}

// peekFD is peerOpen's look at the socket; the caller holds mc.peek.
func (mc *muxConn) peekFD(fd uintptr) {
	n, _, perr := syscall.Recvfrom(int(fd), mc.peek.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case perr == syscall.EAGAIN || perr == syscall.EINTR:
	case perr != nil, n == 0:
		mc.peek.open = false
	}
}

// frameReader is a frame read in progress; a read that stops at a deadline
// resumes where it stopped.
type frameReader struct {
	hdr  [MuxHeaderBytes]byte
	hn   int // header bytes read
	h    MuxHeader
	body *[]byte // nil until the header is complete
	bn   int     // body bytes read
}

// readFrame reads the next answer (resuming a partial one).
func (mc *muxConn) readFrame() (MuxHeader, *[]byte, error) {
	fr := &mc.fr
	for fr.hn < MuxHeaderBytes {
		n, err := mc.r.Read(fr.hdr[fr.hn:])
		fr.hn += n
		if err != nil && fr.hn < MuxHeaderBytes {
			return MuxHeader{}, nil, err
		}
	}
	if fr.body == nil {
		h, err := ParseMuxHeader(fr.hdr[:])
		if err != nil {
			return MuxHeader{}, nil, err
		}
		b := bufPool.Get().(*[]byte)
		if cap(*b) < int(h.BodyBytes) {
			*b = make([]byte, h.BodyBytes)
		}
		*b = (*b)[:h.BodyBytes]
		fr.h, fr.body, fr.bn = h, b, 0
	}
	for fr.bn < len(*fr.body) {
		n, err := mc.r.Read((*fr.body)[fr.bn:])
		fr.bn += n
		if err != nil && fr.bn < len(*fr.body) {
			return MuxHeader{}, nil, err
		}
	}
	h, b := fr.h, fr.body
	*fr = frameReader{}
	return h, b, nil
}

// muxPending is a call waiting for its answer.
type muxPending struct {
	done chan struct{} // receives once when another goroutine answered it
	// timer bounds a wait whose ctx has no Done channel (CallTimeout);
	// made on first use, stopped when the wait ends.
	timer  *time.Timer
	status uint16
	body   *[]byte // the answer body (pooled); nil when err is set
	err    error
}

// stopTimer stops p's timer, if it has one, before p goes back to its pool.
func (p *muxPending) stopTimer() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

var pendingPool = sync.Pool{New: func() any { return &muxPending{done: make(chan struct{}, 1)} }}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func putBuf(b *[]byte) {
	if b == nil || cap(*b) > muxPoolMaxBytes {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// fail marks the connection failed, fails every call in flight and closes
// the socket (which ends the read in progress, if any).
func (mc *muxConn) fail(err error) {
	mc.failed.Store(true)
	mc.mu.Lock()
	if mc.mu.err == nil {
		mc.mu.err = err
		for id, p := range mc.mu.pending {
			p.err = rpcFail("store master %s: connection lost: %v", mc.addr, err)
			p.done <- struct{}{}
			delete(mc.mu.pending, id)
		}
	}
	mc.mu.Unlock()
	mc.c.Close()
}

// readFor runs the reader role for the call id: it reads answers, hands
// each to its caller, and returns true once id's own answer is in p. It
// returns false with the read error (a deadline, or a broken connection),
// or false, nil when another goroutine answered p meanwhile.
func (mc *muxConn) readFor(ctx context.Context, id uint32, p *muxPending, deadline time.Time) (bool, error) {
	_ = mc.c.SetReadDeadline(deadline)
	// A cancellation before the line above was undone by it: look now. One
	// after it reaches the read through invoke's AfterFunc.
	if ctx.Err() != nil {
		return false, os.ErrDeadlineExceeded
	}
	for {
		mc.mu.Lock()
		_, waiting := mc.mu.pending[id]
		mc.mu.Unlock()
		if !waiting { // answered (or failed) by someone else: p.done has it
			return false, nil
		}
		h, b, err := mc.readFrame()
		if err != nil {
			return false, err
		}
		now := time.Now()
		if since := mc.silentSince.Load(); since > mc.lastRead.Load() && mc.stall != nil {
			mc.stall.observe(now.Sub(time.Unix(0, since)), now)
		}
		mc.lastRead.Store(now.UnixNano())
		mc.mu.Lock()
		q := mc.mu.pending[h.ID]
		delete(mc.mu.pending, h.ID)
		mc.mu.Unlock()
		switch {
		case q == nil: // its caller gave up
			putBuf(b)
		case h.ID == id:
			q.status, q.body = h.Status, b
			return true, nil
		default:
			q.status, q.body = h.Status, b
			q.done <- struct{}{}
		}
	}
}

// send writes frame, or queues it for the caller that is writing now (one
// write carries the frames that queued meanwhile). A write error fails the
// connection, and so every call in flight. It does not keep frame.
func (mc *muxConn) send(frame []byte) {
	mc.w.Lock()
	if mc.w.busy {
		mc.w.queue = append(mc.w.queue, frame...)
		mc.w.Unlock()
		return
	}
	mc.w.busy = true
	mc.w.Unlock()
	out := frame
	for {
		if _, err := mc.c.Write(out); err != nil {
			mc.w.Lock()
			mc.w.busy = false
			mc.w.queue = mc.w.queue[:0]
			mc.w.Unlock()
			mc.fail(err)
			return
		}
		mc.w.Lock()
		if &out[0] != &frame[0] && cap(out) <= muxPoolMaxBytes {
			mc.w.spare = out[:0] // written: reusable
		}
		if len(mc.w.queue) == 0 {
			mc.w.busy = false
			mc.w.Unlock()
			return
		}
		out, mc.w.queue, mc.w.spare = mc.w.queue, mc.w.spare, nil
		mc.w.Unlock()
	}
}

// forget removes a call that stopped waiting; false means it was answered
// meanwhile (p.done has it).
func (mc *muxConn) forget(id uint32) bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if _, ok := mc.mu.pending[id]; !ok {
		return false
	}
	delete(mc.mu.pending, id)
	return true
}

type muxSessionKey struct{}

// WithMuxSession returns a ctx for MuxClient calls that must go over the
// connection numbered session (Session): such a call fails with RPC_FAIL,
// without dialing, when that connection is failed or replaced. A caller
// sends state tied to one connection (store/client's put grants) so, never
// to whichever master answers on the next one.
func WithMuxSession(ctx context.Context, session uint64) context.Context {
	return context.WithValue(ctx, muxSessionKey{}, session)
}

// invoke sends in as method and decodes the answer into out.
func (c *MuxClient) invoke(ctx context.Context, m MuxMethod, in, out proto.Message) error {
	var call MuxCall // on the stack: a call waited for at once
	if err := c.send(ctx, m, in, &call); err != nil {
		return err
	}
	return call.wait(out)
}

// MuxCall is a call sent whose answer is still to be read (Wait). Calls
// in flight on a connection are answered in any order; each caller reads
// its own when it waits.
type MuxCall struct {
	c   *MuxClient
	ctx context.Context
	mc  *muxConn
	id  uint32
	p   *muxPending
	m   MuxMethod
	// deadline is ctx's, or the CallTimeout from sending when it has none.
	deadline time.Time
}

// StartGetReplicaList sends a GetReplicaList request and returns without
// waiting for the answer, which call.Wait reads: the caller can do other
// work during the round trip (store/client's speculative gets read a
// value). ctx bounds the call until Wait returns. The call's state is in
// call, which the caller owns: nothing keeps a pointer to it past Wait, so
// it may live on the caller's stack.
func (c *MuxClient) StartGetReplicaList(ctx context.Context, in *KeyRequest, call *MuxCall) error {
	return c.send(ctx, MuxGetReplicaList, in, call)
}

// Wait reads the answer of the call into out (the message type of its
// method's answer). Call it once.
func (call *MuxCall) Wait(out proto.Message) error { return call.wait(out) }

// send sends in as method and fills call for its wait.
func (c *MuxClient) send(ctx context.Context, m MuxMethod, in proto.Message, call *MuxCall) error {
	pinned, isPinned := ctx.Value(muxSessionKey{}).(uint64)
	return c.sendOn(ctx, m, in, call, pinned, isPinned)
}

// sendOn is send over the connection numbered pinned when isPinned
// (WithMuxSession).
func (c *MuxClient) sendOn(ctx context.Context, m MuxMethod, in proto.Message, call *MuxCall, pinned uint64, isPinned bool) error {
	if isPinned {
		c.mu.Lock()
		cur := c.mu.conn
		c.mu.Unlock()
		if cur == nil || cur.failed.Load() || cur.session != pinned {
			return rpcFail("store master %s: connection %d gone", c.cfg.Addr, pinned)
		}
	}
	mc, err := c.conn(ctx)
	if err != nil {
		if errors.Is(err, ErrMuxRefused) {
			return rpcFail("store master %s: %v", c.cfg.Addr, err)
		}
		return err
	}
	if isPinned && mc.session != pinned {
		return rpcFail("store master %s: connection %d gone", c.cfg.Addr, pinned)
	}
	buf := bufPool.Get().(*[]byte)
	frame, err := proto.MarshalOptions{}.MarshalAppend(append((*buf)[:0], make([]byte, MuxHeaderBytes)...), in)
	*buf = frame
	if err != nil || len(frame)-MuxHeaderBytes > MaxMuxBody {
		putBuf(buf)
		return &StatusError{Code: ErrInvalidParams, GRPC: codes.Internal,
			Message: fmt.Sprintf("encode %s request (%d bytes): %v", m.Name(), len(frame)-MuxHeaderBytes, err)}
	}
	id := mc.nextID.Add(1)
	PutMuxHeader(frame, MuxHeader{BodyBytes: uint32(len(frame) - MuxHeaderBytes), ID: id, Method: m})

	p := pendingPool.Get().(*muxPending)
	mc.mu.Lock()
	if mc.mu.err != nil {
		err := mc.mu.err
		mc.mu.Unlock()
		putBuf(buf)
		pendingPool.Put(p)
		return rpcFail("store master %s: connection lost: %v", c.cfg.Addr, err)
	}
	mc.mu.pending[id] = p
	mc.mu.Unlock()
	sent := time.Now()
	deadline, ok := ctx.Deadline()
	if d := c.cfg.CallTimeout; d > 0 && !ok {
		deadline = sent.Add(d)
	}
	mc.noteSent(sent)
	mc.send(frame)
	putBuf(buf)
	*call = MuxCall{c: c, ctx: ctx, mc: mc, id: id, p: p, m: m, deadline: deadline}
	return nil
}

// wait reads the call's answer into out.
func (call *MuxCall) wait(out proto.Message) error {
	c, ctx, mc, id, p, m := call.c, call.ctx, call.mc, call.id, call.p, call.m

	deadline := call.deadline
	var expired <-chan time.Time // the CallTimeout of a ctx without Done
	if ctx.Done() != nil {
		// A read blocks in the kernel; a cancellation (before the
		// deadline, or without one: a long poll ended by Close) stops it
		// through an expired read deadline.
		stop := context.AfterFunc(ctx, func() { _ = mc.c.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	if _, ok := ctx.Deadline(); !ok && !deadline.IsZero() {
		// A caller that waits while another reads is woken at its
		// CallTimeout by the call's timer (stopped before p goes back to
		// its pool), as ctx would wake it at its deadline.
		d := time.Until(deadline)
		if p.timer == nil {
			p.timer = time.NewTimer(d)
		} else {
			p.timer.Reset(d)
		}
		expired = p.timer.C
	}
	for answered := false; !answered; {
		select {
		case <-p.done:
			answered = true
		case <-mc.tok:
			mine, rerr := mc.readFor(ctx, id, p, deadline)
			mc.tok <- struct{}{}
			switch {
			case mine:
				answered = true
			case rerr == nil: // p.done has the answer
			case errors.Is(rerr, os.ErrDeadlineExceeded) && ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)):
				// Spurious (a cancellation of another caller): read again.
			case errors.Is(rerr, os.ErrDeadlineExceeded):
				if err := c.giveUp(ctx, mc, id, p, m); err != nil {
					return err
				}
				answered = true
			default:
				mc.fail(rerr) // answers p
			}
		case <-ctx.Done():
			if err := c.giveUp(ctx, mc, id, p, m); err != nil {
				return err
			}
			answered = true
		case <-expired:
			if err := c.giveUp(ctx, mc, id, p, m); err != nil {
				return err
			}
			answered = true
		}
	}
	err, status, body := p.err, p.status, p.body
	p.err, p.status, p.body = nil, 0, nil
	p.stopTimer()
	pendingPool.Put(p)
	if err != nil {
		return err
	}
	defer putBuf(body)
	if status != 0 {
		return ParseMuxError(status, *body)
	}
	switch o := out.(type) {
	case *GetReplicaListResponse:
		err = decodeReplicaList(*body, o, &c.names) // no allocation for a get
	case *PutCommitResponse:
		err = decodePutCommitResponse(*body, o) // no allocation into a reused answer
	default:
		err = proto.Unmarshal(*body, out)
	}
	if err != nil {
		return rpcFail("decode %s answer from %s: %v", m.Name(), c.cfg.Addr, err)
	}
	return nil
}

// giveUp ends a call whose ctx is done: it returns the ctx error, or nil
// when the answer came meanwhile (then it is in p). A connection on which
// requests waited the stall bound (stallRule) with no answer arriving is
// taken for dead.
func (c *MuxClient) giveUp(ctx context.Context, mc *muxConn, id uint32, p *muxPending, m MuxMethod) error {
	if !mc.forget(id) {
		<-p.done // answered meanwhile by another goroutine
		return nil
	}
	if d, bound, ok := mc.stalled(time.Now()); ok {
		mc.fail(fmt.Errorf("no answer for %v (bound %v)", d.Round(time.Millisecond), bound.Round(time.Millisecond)))
	}
	p.stopTimer()
	pendingPool.Put(p)
	if ctx.Err() == nil { // the read deadline passed before ctx noticed
		return &StatusError{Code: ErrRPCTimeout, GRPC: codes.DeadlineExceeded, Message: m.Name() + ": " + context.DeadlineExceeded.Error()}
	}
	return ctxError(ctx, m.Name())
}

// noteSent opens a silence at t unless one is open: t is the first request
// since the last answer.
func (mc *muxConn) noteSent(t time.Time) {
	ns := t.UnixNano()
	for {
		since := mc.silentSince.Load()
		if since > mc.lastRead.Load() {
			return
		}
		if mc.silentSince.CompareAndSwap(since, ns) {
			return
		}
	}
}

// stalled reports how long requests have waited on the connection with no
// answer arriving, the bound in force, and whether the wait reached it.
func (mc *muxConn) stalled(now time.Time) (time.Duration, time.Duration, bool) {
	bound := DefaultMuxStall
	if mc.stall != nil {
		bound = mc.stall.bound(now)
	}
	since := mc.silentSince.Load()
	if since <= mc.lastRead.Load() {
		return 0, bound, false
	}
	d := now.Sub(time.Unix(0, since))
	return d, bound, d >= bound
}

// Ping calls Master.Ping.
func (c *MuxClient) Ping(ctx context.Context, in *PingRequest, _ ...grpc.CallOption) (*PingResponse, error) {
	out := new(PingResponse)
	if err := c.invoke(ctx, MuxPing, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// MountSegment calls Master.MountSegment.
func (c *MuxClient) MountSegment(ctx context.Context, in *MountSegmentRequest, _ ...grpc.CallOption) (*MountSegmentResponse, error) {
	out := new(MountSegmentResponse)
	if err := c.invoke(ctx, MuxMountSegment, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ReMountSegments calls Master.ReMountSegments.
func (c *MuxClient) ReMountSegments(ctx context.Context, in *ReMountSegmentsRequest, _ ...grpc.CallOption) (*ReMountSegmentsResponse, error) {
	out := new(ReMountSegmentsResponse)
	if err := c.invoke(ctx, MuxReMountSegments, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// UnmountSegment calls Master.UnmountSegment.
func (c *MuxClient) UnmountSegment(ctx context.Context, in *UnmountSegmentRequest, _ ...grpc.CallOption) (*UnmountSegmentResponse, error) {
	out := new(UnmountSegmentResponse)
	if err := c.invoke(ctx, MuxUnmountSegment, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ExistKey calls Master.ExistKey.
func (c *MuxClient) ExistKey(ctx context.Context, in *KeyRequest, _ ...grpc.CallOption) (*ExistKeyResponse, error) {
	out := new(ExistKeyResponse)
	if err := c.invoke(ctx, MuxExistKey, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchExistKey calls Master.BatchExistKey.
func (c *MuxClient) BatchExistKey(ctx context.Context, in *BatchKeyRequest, _ ...grpc.CallOption) (*BatchExistKeyResponse, error) {
	out := new(BatchExistKeyResponse)
	if err := c.invoke(ctx, MuxBatchExistKey, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// GetReplicaList calls Master.GetReplicaList.
func (c *MuxClient) GetReplicaList(ctx context.Context, in *KeyRequest, _ ...grpc.CallOption) (*GetReplicaListResponse, error) {
	out := new(GetReplicaListResponse)
	if err := c.invoke(ctx, MuxGetReplicaList, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchGetReplicaList calls Master.BatchGetReplicaList.
func (c *MuxClient) BatchGetReplicaList(ctx context.Context, in *BatchKeyRequest, _ ...grpc.CallOption) (*BatchGetReplicaListResponse, error) {
	out := new(BatchGetReplicaListResponse)
	if err := c.invoke(ctx, MuxBatchGetReplicaList, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PutStart calls Master.PutStart.
func (c *MuxClient) PutStart(ctx context.Context, in *PutStartRequest, _ ...grpc.CallOption) (*PutStartResponse, error) {
	out := new(PutStartResponse)
	if err := c.invoke(ctx, MuxPutStart, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchPutStart calls Master.BatchPutStart.
func (c *MuxClient) BatchPutStart(ctx context.Context, in *BatchPutStartRequest, _ ...grpc.CallOption) (*BatchPutStartResponse, error) {
	out := new(BatchPutStartResponse)
	if err := c.invoke(ctx, MuxBatchPutStart, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PutEnd calls Master.PutEnd.
func (c *MuxClient) PutEnd(ctx context.Context, in *PutEndRequest, _ ...grpc.CallOption) (*PutEndResponse, error) {
	out := new(PutEndResponse)
	if err := c.invoke(ctx, MuxPutEnd, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchPutEnd calls Master.BatchPutEnd.
func (c *MuxClient) BatchPutEnd(ctx context.Context, in *BatchPutEndRequest, _ ...grpc.CallOption) (*BatchCodesResponse, error) {
	out := new(BatchCodesResponse)
	if err := c.invoke(ctx, MuxBatchPutEnd, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Remove calls Master.Remove.
func (c *MuxClient) Remove(ctx context.Context, in *RemoveRequest, _ ...grpc.CallOption) (*RemoveResponse, error) {
	out := new(RemoveResponse)
	if err := c.invoke(ctx, MuxRemove, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchRemove calls Master.BatchRemove.
func (c *MuxClient) BatchRemove(ctx context.Context, in *BatchRemoveRequest, _ ...grpc.CallOption) (*BatchCodesResponse, error) {
	out := new(BatchCodesResponse)
	if err := c.invoke(ctx, MuxBatchRemove, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveByRegex calls Master.RemoveByRegex.
func (c *MuxClient) RemoveByRegex(ctx context.Context, in *RemoveByRegexRequest, _ ...grpc.CallOption) (*CountResponse, error) {
	out := new(CountResponse)
	if err := c.invoke(ctx, MuxRemoveByRegex, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveAll calls Master.RemoveAll.
func (c *MuxClient) RemoveAll(ctx context.Context, in *RemoveAllRequest, _ ...grpc.CallOption) (*CountResponse, error) {
	out := new(CountResponse)
	if err := c.invoke(ctx, MuxRemoveAll, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ListSegments calls Master.ListSegments.
func (c *MuxClient) ListSegments(ctx context.Context, in *ListSegmentsRequest, _ ...grpc.CallOption) (*ListSegmentsResponse, error) {
	out := new(ListSegmentsResponse)
	if err := c.invoke(ctx, MuxListSegments, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ListKeys calls Master.ListKeys.
func (c *MuxClient) ListKeys(ctx context.Context, in *ListKeysRequest, _ ...grpc.CallOption) (*ListKeysResponse, error) {
	out := new(ListKeysResponse)
	if err := c.invoke(ctx, MuxListKeys, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// AcquireGrants calls Master.AcquireGrants.
func (c *MuxClient) AcquireGrants(ctx context.Context, in *AcquireGrantsRequest, _ ...grpc.CallOption) (*AcquireGrantsResponse, error) {
	out := new(AcquireGrantsResponse)
	if err := c.invoke(ctx, MuxAcquireGrants, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PutCommit calls Master.PutCommit.
func (c *MuxClient) PutCommit(ctx context.Context, in *PutCommitRequest, _ ...grpc.CallOption) (*PutCommitResponse, error) {
	out := new(PutCommitResponse)
	if err := c.invoke(ctx, MuxPutCommit, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PutCommitOn is PutCommit over the connection numbered session, as under
// WithMuxSession, with the answer decoded into out (reused: its
// replica_tags keep their backing). ctx needs no session value, so a
// put's commit makes no context.
func (c *MuxClient) PutCommitOn(ctx context.Context, session uint64, in *PutCommitRequest, out *PutCommitResponse) error {
	var call MuxCall
	if err := c.sendOn(ctx, MuxPutCommit, in, &call, session, true); err != nil {
		return err
	}
	return call.wait(out)
}

// ReturnGrants calls Master.ReturnGrants.
func (c *MuxClient) ReturnGrants(ctx context.Context, in *ReturnGrantsRequest, _ ...grpc.CallOption) (*ReturnGrantsResponse, error) {
	out := new(ReturnGrantsResponse)
	if err := c.invoke(ctx, MuxReturnGrants, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// MountDiskSegment calls the master over the connection.
func (c *MuxClient) MountDiskSegment(ctx context.Context, in *MountDiskSegmentRequest, _ ...grpc.CallOption) (*MountDiskSegmentResponse, error) {
	out := new(MountDiskSegmentResponse)
	if err := c.invoke(ctx, MuxMountDiskSegment, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// FetchTasks calls the master over the connection.
func (c *MuxClient) FetchTasks(ctx context.Context, in *FetchTasksRequest, _ ...grpc.CallOption) (*FetchTasksResponse, error) {
	out := new(FetchTasksResponse)
	if err := c.invoke(ctx, MuxFetchTasks, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PromoteObject calls the master over the connection.
func (c *MuxClient) PromoteObject(ctx context.Context, in *KeyRequest, _ ...grpc.CallOption) (*GetReplicaListResponse, error) {
	out := new(GetReplicaListResponse)
	if err := c.invoke(ctx, MuxPromoteObject, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateTask calls the master over the connection.
func (c *MuxClient) CreateTask(ctx context.Context, in *CreateTaskRequest, _ ...grpc.CallOption) (*CreateTaskResponse, error) {
	out := new(CreateTaskResponse)
	if err := c.invoke(ctx, MuxCreateTask, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// QueryTask calls the master over the connection.
func (c *MuxClient) QueryTask(ctx context.Context, in *QueryTaskRequest, _ ...grpc.CallOption) (*QueryTaskResponse, error) {
	out := new(QueryTaskResponse)
	if err := c.invoke(ctx, MuxQueryTask, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// WaitObject calls the master over the connection.
func (c *MuxClient) WaitObject(ctx context.Context, in *WaitObjectRequest, _ ...grpc.CallOption) (*GetReplicaListResponse, error) {
	out := new(GetReplicaListResponse)
	if err := c.invoke(ctx, MuxWaitObject, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// GetReplicaListByRegex calls the master over the connection.
func (c *MuxClient) GetReplicaListByRegex(ctx context.Context, in *GetReplicaListByRegexRequest, _ ...grpc.CallOption) (*GetReplicaListByRegexResponse, error) {
	out := new(GetReplicaListByRegexResponse)
	if err := c.invoke(ctx, MuxGetReplicaListByRegex, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchQueryIp calls the master over the connection.
func (c *MuxClient) BatchQueryIp(ctx context.Context, in *BatchQueryIpRequest, _ ...grpc.CallOption) (*BatchQueryIpResponse, error) {
	out := new(BatchQueryIpResponse)
	if err := c.invoke(ctx, MuxBatchQueryIp, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CalcCacheStats calls the master over the connection.
func (c *MuxClient) CalcCacheStats(ctx context.Context, in *CalcCacheStatsRequest, _ ...grpc.CallOption) (*CalcCacheStatsResponse, error) {
	out := new(CalcCacheStatsResponse)
	if err := c.invoke(ctx, MuxCalcCacheStats, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateDrainJob calls the master over the connection.
func (c *MuxClient) CreateDrainJob(ctx context.Context, in *CreateDrainJobRequest, _ ...grpc.CallOption) (*CreateDrainJobResponse, error) {
	out := new(CreateDrainJobResponse)
	if err := c.invoke(ctx, MuxCreateDrainJob, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// QueryDrainJob calls the master over the connection.
func (c *MuxClient) QueryDrainJob(ctx context.Context, in *DrainJobIdRequest, _ ...grpc.CallOption) (*QueryJobResponse, error) {
	out := new(QueryJobResponse)
	if err := c.invoke(ctx, MuxQueryDrainJob, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CancelDrainJob calls the master over the connection.
func (c *MuxClient) CancelDrainJob(ctx context.Context, in *DrainJobIdRequest, _ ...grpc.CallOption) (*CancelDrainJobResponse, error) {
	out := new(CancelDrainJobResponse)
	if err := c.invoke(ctx, MuxCancelDrainJob, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// BatchReplicaClear calls the master over the connection.
func (c *MuxClient) BatchReplicaClear(ctx context.Context, in *BatchReplicaClearRequest, _ ...grpc.CallOption) (*BatchReplicaClearResponse, error) {
	out := new(BatchReplicaClearResponse)
	if err := c.invoke(ctx, MuxBatchReplicaClear, in, out); err != nil {
		return nil, err
	}
	return out, nil
}
