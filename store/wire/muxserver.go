package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/spin"
)

// muxBufBytes is the size of the read and write buffers of a mux connection.
const muxBufBytes = 64 << 10

// MuxObserver is implemented by servers that time their mux calls.
type MuxObserver interface {
	// ObserveMuxCall reports one call of method that took d and failed
	// with err (nil on success).
	ObserveMuxCall(method string, d time.Duration, err error)
}

// ServeMuxConn answers mux requests on conn with srv until conn fails, the
// client closes it, or the caller closes it (its way to stop this call).
// The client's MuxHello must already have been read from conn; ServeMuxConn
// answers it first. Requests are served one after another in the calling
// goroutine, and answers to requests that arrived together go out in one
// write; slow calls (FetchTasks, PromoteObject, a graceful UnmountSegment:
// calls that wait) are answered from goroutines of their own, out of
// order, so that they hold up no other call. srv's errors may be plain store errors or gRPC status errors;
// either way the client sees what a gRPC call would have returned. It
// returns nil when the client closed the connection, the failure otherwise
// (a malformed frame closes nothing: the caller closes conn).
func ServeMuxConn(ctx context.Context, conn net.Conn, srv MasterServer) error {
	return ServeMuxConnConfig(ctx, conn, srv, MuxServerConfig{})
}

// Mux server defaults.
const (
	// DefaultMuxIdleTimeout closes a connection that sends no request for
	// this long; clients ping every few seconds.
	DefaultMuxIdleTimeout = 5 * time.Minute
	// DefaultMuxRequestTimeout bounds the arrival of a request's body
	// once its header came.
	DefaultMuxRequestTimeout = 30 * time.Second
	// muxSmallBody is the largest body read without the shared budget.
	muxSmallBody = 64 << 10
	// muxBudgetStep is how much budget a large body takes at a time, as
	// its bytes arrive.
	muxBudgetStep = 1 << 20
)

// MuxServerConfig bounds what one mux connection can make the master hold.
// The zero value means the defaults and no shared budget.
type MuxServerConfig struct {
	// Limits are checked on every request: its shape before decoding
	// (CheckShape), its keys and lists after (RequestLimits.Check).
	Limits RequestLimits
	// MaxRequestBytes caps a request body (DefaultMaxMuxRequest).
	MaxRequestBytes int
	// IdleTimeout and RequestTimeout bound the wait for the next header
	// and for a body once its header came (DefaultMuxIdleTimeout,
	// DefaultMuxRequestTimeout).
	IdleTimeout, RequestTimeout time.Duration
	// SpinWait is how long the server polls the socket for the next
	// request before it blocks (0: never; spin.Budget normalises a
	// configured value). Without TLS only.
	SpinWait time.Duration
	// Budget, when set, is shared by every connection: a body larger than
	// 64 KiB takes its bytes from it as they arrive and gives them back
	// once answered, so large requests in flight stay bounded in total.
	Budget *netguard.Budget
}

func (c MuxServerConfig) withDefaults() MuxServerConfig {
	c.Limits = c.Limits.withDefaults()
	if c.MaxRequestBytes <= 0 || c.MaxRequestBytes > MaxMuxBody {
		c.MaxRequestBytes = DefaultMaxMuxRequest
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultMuxIdleTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultMuxRequestTimeout
	}
	return c
}

// ServeMuxConnConfig is ServeMuxConn with limits.
func ServeMuxConnConfig(ctx context.Context, conn net.Conn, srv MasterServer, cfg MuxServerConfig) error {
	cfg = cfg.withDefaults()
	if _, err := conn.Write(MuxHello[:]); err != nil {
		return fmt.Errorf("mux hello: %w", err)
	}
	sr := serverReading(conn, cfg.SpinWait)
	poll, _ := sr.(*serverPoll)
	r := bufio.NewReaderSize(sr, muxBufBytes)
	w := &lockedWriter{w: bufio.NewWriterSize(conn, muxBufBytes), conn: conn, timeout: cfg.RequestTimeout}
	// Slow calls run in goroutines of their own, under a context that ends
	// with this call; it waits for them before it returns.
	slowCtx, stopSlow := context.WithCancel(ctx)
	var slowWG sync.WaitGroup
	slowSem := make(chan struct{}, maxSlowCalls)
	defer func() {
		stopSlow()
		slowWG.Wait()
	}()
	var hdr [MuxHeaderBytes]byte
	var body []byte
	out := make([]byte, MuxHeaderBytes, 4<<10)
	var held int64 // budget bytes the current request holds
	lister, _ := srv.(MuxReplicaLister)
	committer, _ := srv.(MuxPutCommitter)
	var commits *putCommitDecoder // made on the first PutCommit
	defer func() { cfg.Budget.Release(held) }()
	for {
		if r.Buffered() < MuxHeaderBytes {
			_ = conn.SetReadDeadline(time.Now().Add(cfg.IdleTimeout))
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("mux read: %w", err)
		}
		h, err := ParseMuxHeader(hdr[:])
		if err != nil {
			return err
		}
		if h.Status != 0 {
			return fmt.Errorf("%w: request with status %d", ErrMuxFrame, h.Status)
		}
		if int(h.BodyBytes) > cfg.MaxRequestBytes {
			return fmt.Errorf("%w: request body of %d bytes (at most %d)", ErrMuxFrame, h.BodyBytes, cfg.MaxRequestBytes)
		}
		if r.Buffered() < int(h.BodyBytes) {
			_ = conn.SetReadDeadline(time.Now().Add(cfg.RequestTimeout))
		}
		body, held, err = readMuxBody(ctx, r, body, int(h.BodyBytes), cfg)
		if err != nil {
			return fmt.Errorf("mux read body: %w", err)
		}
		call := &muxCalls[h.Method]
		t0 := time.Now()
		var req, resp proto.Message // req stays nil on the get's and put's own paths
		var putSize uint64          // the bytes a put names (serverPoll.after)
		switch {
		case lister != nil && h.Method == MuxGetReplicaList:
			// A get: no messages on this path (replicalist.go).
			out, err = answerReplicaList(ctx, out, h, body, lister, cfg.Limits)
		case committer != nil && h.Method == MuxPutCommit:
			// A put's commit: one reused message (putcommit.go).
			if commits == nil {
				commits = new(putCommitDecoder)
			}
			out, putSize, err = answerPutCommit(ctx, out, h, body, commits, committer, cfg.Limits)
		default:
			req = call.newReq()
			if err = CheckShape(req.ProtoReflect().Descriptor(), body, cfg.Limits.MaxElements); err != nil {
				err = fmt.Errorf("%s request: %w", h.Method.Name(), err)
			} else if err = proto.Unmarshal(body, req); err != nil {
				err = fmt.Errorf("decode %s request: %v: %w", h.Method.Name(), err, ErrInvalidParams)
			} else if err = cfg.Limits.Check(req); err != nil {
				err = fmt.Errorf("%s request: %w", h.Method.Name(), err)
			} else if call.slow {
				select {
				case slowSem <- struct{}{}:
					cfg.Budget.Release(held) // the request is decoded: its body is not needed
					held = 0
					slowWG.Add(1)
					go func(h MuxHeader) { // owned by this call; ends with slowCtx at the latest
						defer slowWG.Done()
						defer func() { <-slowSem }()
						resp, err := call.serve(slowCtx, srv, req)
						_ = w.answer(encodeAnswer(nil, h, resp, err), true)
					}(h)
					continue
				default: // too many waiting: this one is answered in line
					resp, err = call.serve(ctx, srv, req)
				}
			} else {
				resp, err = call.serve(ctx, srv, req)
			}
			putSize = putBytes(req)
		}
		if obs, ok := srv.(MuxObserver); ok {
			obs.ObserveMuxCall(h.Method.Name(), time.Since(t0), err)
		}
		poll.after(putSize)
		cfg.Budget.Release(held)
		held = 0
		if req != nil { // (the get's and put's own paths wrote their answers)
			out = encodeAnswer(out, h, resp, err)
		}
		// Flush once no further whole request is already buffered: answers
		// to requests that arrived together leave in one write.
		if err := w.answer(out, !wholeFrameBuffered(r)); err != nil {
			return err
		}
		if cap(out) > 4*muxBufBytes {
			out = make([]byte, MuxHeaderBytes, 4<<10) // do not keep a huge answer's buffer
		}
		if cap(body) > 4*muxBufBytes {
			body = nil // nor a huge request's
		}
	}
}

// serverReading returns the reader of a served connection: it polls the
// socket for up to budget before a read that would block (spin.Reader),
// without yielding its P (runtime.Gosched wakes an idle P each time, a
// thread wake-up that takes the other vCPU of a small VM from the client
// whose request is on its way), and only while fewer than
// maxServerSpinners() connections of the process poll: a poller holds its
// P, so the others block at once and leave the remaining Ps to the rest of
// the master. Between reads the poll offers its CPU to other threads
// (sched_yield, Reader.Shared): a client on the same CPU, whose next
// request this poll waits for, would otherwise wait for the budget to run
// out before it could send it.
func serverReading(conn net.Conn, budget time.Duration) io.Reader {
	pr := spin.NewReader(conn)
	if pr == nil || budget <= 0 {
		return conn
	}
	pr.Shared = true
	return &serverPoll{c: conn, r: pr, budget: budget, base: budget, limit: maxServerSpinners()}
}

// serverSpinners counts the connections of the process polling now.
var serverSpinners atomic.Int32

// maxServerSpinners is how many connections may poll at once: all Ps but
// one, at least one.
func maxServerSpinners() int32 { return int32(max(runtime.GOMAXPROCS(0)-1, 1)) }

// serverPoll is serverReading's polling reader.
type serverPoll struct {
	c      net.Conn
	r      *spin.Reader
	budget time.Duration
	base   time.Duration // the configured budget (after)
	limit  int32         // maxServerSpinners when the connection came
}

// largePutBytes is the put size from which the client's next request is
// likely a transfer away (after).
const largePutBytes = 64 << 10

// after sets the budget of the wait for the request that follows req.
// After a put of a large object (PutStart, BatchPutStart, PutCommit) the
// client's next call comes once a transfer of that object has ended: a
// PutEnd, or the next put's commit when it puts one object after another
// (a KV cache written layer by layer). The poll then lasts about as long
// as moving the object at 1 GB/s, within 8 and 20 budgets (400 us to 1 ms
// by default; it yields its CPU between reads as every server poll here
// does), so that the call finds the master awake rather than paying a
// wake-up: 1 MiB store puts in a loop on 2 vCPUs, median p50 451 -> 424
// us with eight budgets, 436 -> 415 us with sixteen rather than eight.
// Other calls (n 0: putBytes) keep the budget.
func (p *serverPoll) after(n uint64) {
	if p == nil {
		return
	}
	p.budget = p.base
	if n >= largePutBytes {
		p.budget = min(max(8*p.base, time.Duration(n)), 20*p.base, spin.Max)
	}
}

// putBytes returns the bytes a put request names (PutStart,
// BatchPutStart, PutCommit), 0 for other requests.
func putBytes(req proto.Message) uint64 {
	var n uint64
	switch r := req.(type) {
	case *PutStartRequest:
		n = r.GetSize()
	case *PutCommitRequest:
		n = r.GetSize()
	case *BatchPutStartRequest:
		for _, s := range r.GetSizes() {
			n += s
		}
	}
	return n
}

func (p *serverPoll) Read(b []byte) (int, error) {
	if serverSpinners.Add(1) <= p.limit {
		n, err, ok := p.r.Read(b, p.budget, false)
		serverSpinners.Add(-1)
		if ok {
			return n, err
		}
	} else {
		serverSpinners.Add(-1)
	}
	return p.c.Read(b)
}

// maxSlowCalls bounds the slow calls one connection has waiting at once;
// beyond it they are served in line.
const maxSlowCalls = 64

// lockedWriter serializes the answers of the serving loop and of slow
// calls.
type lockedWriter struct {
	mu      sync.Mutex
	w       *bufio.Writer
	conn    net.Conn
	timeout time.Duration
}

// answer writes one answer frame, and flushes when asked.
func (l *lockedWriter) answer(frame []byte, flush bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(frame); err != nil {
		return fmt.Errorf("mux write: %w", err)
	}
	if flush {
		// A client that stops reading its answers is cut, not waited on.
		_ = l.conn.SetWriteDeadline(time.Now().Add(l.timeout))
		if err := l.w.Flush(); err != nil {
			return fmt.Errorf("mux write: %w", err)
		}
	}
	return nil
}

// encodeAnswer appends to out[:0] (or a new buffer) the answer frame to
// the request of header h: resp, or err.
func encodeAnswer(out []byte, h MuxHeader, resp proto.Message, err error) []byte {
	out = answerHead(out)
	if err == nil {
		if out, err = (proto.MarshalOptions{}).MarshalAppend(out, resp); err != nil {
			err = fmt.Errorf("encode %s answer: %v: %w", h.Method.Name(), err, ErrInternal)
		}
	}
	return finishAnswer(out, h, err)
}

// answerHead returns out[:MuxHeaderBytes] (or a new buffer), for an
// answer's body to be appended.
func answerHead(out []byte) []byte {
	if cap(out) < MuxHeaderBytes {
		out = make([]byte, MuxHeaderBytes, 4<<10)
	}
	return out[:MuxHeaderBytes]
}

// finishAnswer completes the answer frame out to the request of header h:
// its body as appended, or err's answer in its place; a body over
// MaxMuxBody becomes BUFFER_OVERFLOW.
func finishAnswer(out []byte, h MuxHeader, err error) []byte {
	status := uint16(0)
	if err != nil {
		out, status = AppendMuxError(out[:MuxHeaderBytes], err)
	}
	if len(out)-MuxHeaderBytes > MaxMuxBody {
		out, status = AppendMuxError(out[:MuxHeaderBytes], fmt.Errorf("%s answer of %d bytes (at most %d): %w",
			h.Method.Name(), len(out)-MuxHeaderBytes, MaxMuxBody, ErrBufferOverflow))
	}
	PutMuxHeader(out, MuxHeader{BodyBytes: uint32(len(out) - MuxHeaderBytes), ID: h.ID, Method: h.Method, Status: status})
	return out
}

// keyRequestDesc is KeyRequest's descriptor, for the shape check of the
// requests answerReplicaList decodes by hand.
// (Made on first use: package variables are set before the generated
// code registers its descriptors.)
var keyRequestDesc = sync.OnceValue(func() protoreflect.MessageDescriptor {
	return (&KeyRequest{}).ProtoReflect().Descriptor()
})

// answerReplicaList appends to out[:0] the answer frame to the
// GetReplicaList request body of header h, from lister: the checks of
// the generic path (shape, decoding, the key limit) without a message.
func answerReplicaList(ctx context.Context, out []byte, h MuxHeader, body []byte, lister MuxReplicaLister, limits RequestLimits) ([]byte, error) {
	out = answerHead(out)
	var err error
	if err = CheckShape(keyRequestDesc(), body, limits.MaxElements); err != nil {
		err = fmt.Errorf("%s request: %w", h.Method.Name(), err)
	} else if key, tenant, perr := parseKeyRequest(body); perr != nil {
		err = fmt.Errorf("decode %s request: %v: %w", h.Method.Name(), perr, ErrInvalidParams)
	} else if err = limits.checkKey(len(key)); err != nil {
		err = fmt.Errorf("%s request: %w", h.Method.Name(), err)
	} else {
		out, err = lister.AppendReplicaList(ctx, out, tenant, key)
	}
	return finishAnswer(out, h, err), err
}

// putCommitRequestDesc is PutCommitRequest's descriptor (keyRequestDesc).
var putCommitRequestDesc = sync.OnceValue(func() protoreflect.MessageDescriptor {
	return (&PutCommitRequest{}).ProtoReflect().Descriptor()
})

// answerPutCommit appends to out[:0] the answer frame to the PutCommit
// request body of header h, decoded by d, from committer: the checks of
// the generic path. It returns the size the request names.
func answerPutCommit(ctx context.Context, out []byte, h MuxHeader, body []byte, d *putCommitDecoder,
	committer MuxPutCommitter, limits RequestLimits) ([]byte, uint64, error) {
	out = answerHead(out)
	var err error
	var size uint64
	if err = CheckShape(putCommitRequestDesc(), body, limits.MaxElements); err != nil {
		err = fmt.Errorf("%s request: %w", h.Method.Name(), err)
	} else if req, derr := d.decode(body); derr != nil {
		err = fmt.Errorf("decode %s request: %v: %w", h.Method.Name(), derr, ErrInvalidParams)
	} else if err = limits.Check(req); err != nil {
		err = fmt.Errorf("%s request: %w", h.Method.Name(), err)
	} else {
		size = req.GetSize()
		out, err = committer.AppendPutCommit(ctx, out, req)
	}
	return finishAnswer(out, h, err), size, err
}

// readMuxBody reads an n-byte body into body (reused when it is large
// enough). A body over muxSmallBody grows as its bytes arrive and takes
// cfg.Budget in steps first; it returns how much budget it holds.
func readMuxBody(ctx context.Context, r *bufio.Reader, body []byte, n int, cfg MuxServerConfig) ([]byte, int64, error) {
	if n <= muxSmallBody || cfg.Budget == nil {
		b, err := netguard.ReadFull(r, body, n)
		return b, 0, err
	}
	var held int64
	buf := body[:0]
	for len(buf) < n {
		step := min(muxBudgetStep, n-len(buf))
		actx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		err := cfg.Budget.Acquire(actx, int64(step))
		cancel()
		if err != nil {
			cfg.Budget.Release(held)
			return nil, 0, err
		}
		held += int64(step)
		if cap(buf)-len(buf) < step {
			nb := make([]byte, len(buf), len(buf)+max(step, min(len(buf), n-len(buf))))
			copy(nb, buf)
			buf = nb
		}
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+step]); err != nil {
			cfg.Budget.Release(held)
			return nil, 0, err
		}
		buf = buf[:len(buf)+step]
	}
	return buf, held, nil
}

// wholeFrameBuffered reports whether r holds a whole frame already.
func wholeFrameBuffered(r *bufio.Reader) bool {
	n := r.Buffered()
	if n < MuxHeaderBytes {
		return false
	}
	b, _ := r.Peek(MuxHeaderBytes)
	return uint64(n) >= MuxHeaderBytes+uint64(binary.LittleEndian.Uint32(b))
}
