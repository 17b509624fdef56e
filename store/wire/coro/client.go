package coro

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("coro_rpc client closed")

// DefaultCallTimeout bounds a call whose context has no deadline (coro_rpc's
// own client default, MC_RPC_TIMEOUT_MS, is 30 s).
const DefaultCallTimeout = 30 * time.Second

// Client is one coro_rpc connection to a Mooncake-protocol master
// (mooncake_master, or kvferry-master's coro_rpc service), making one call
// at a time: the foundation of kvferry's client speaking to
// mooncake_master (issue 36). It is safe for concurrent use; calls are
// serialized on the connection. After an I/O or framing error the
// connection is closed and every later call fails; dial a new Client.
type Client struct {
	conn net.Conn
	mu   struct {
		sync.Mutex // guards the fields below and the connection's use
		seq        uint32
		err        error // the error that ended the connection
		out        []byte
	}
	maxBody int
}

// Dial connects to addr ("host:port") within ctx.
func Dial(ctx context.Context, addr string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("coro_rpc dial %s: %w", addr, err)
	}
	return NewClient(conn), nil
}

// NewClient returns a Client over an established connection, which it
// owns from now on.
func NewClient(conn net.Conn) *Client { return &Client{conn: conn, maxBody: DefaultMaxBody} }

// Close closes the connection; a second Close is harmless.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err == nil {
		c.mu.err = ErrClosed
		return c.conn.Close()
	}
	return nil
}

// Call sends body to the function id and returns the response frame,
// waiting at most until ctx's deadline (DefaultCallTimeout without one). A
// coro_rpc failure answer is returned as an *RPCError; the connection
// stays usable after one.
func (c *Client) Call(ctx context.Context, funcID uint32, body []byte) (Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return Response{}, c.mu.err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
	defer stop()
	_ = c.conn.SetDeadline(deadline)
	seq := c.mu.seq
	c.mu.seq++
	c.mu.out = AppendRequest(c.mu.out[:0], seq, funcID, body, nil)
	if _, err := c.conn.Write(c.mu.out); err != nil {
		return Response{}, c.failLocked(ctx, fmt.Errorf("coro_rpc call %#x: write: %w", funcID, err))
	}
	resp, err := ReadResponse(c.conn, c.maxBody)
	if err != nil {
		return Response{}, c.failLocked(ctx, fmt.Errorf("coro_rpc call %#x: read: %w", funcID, err))
	}
	if resp.Header.Seq != seq {
		return Response{}, c.failLocked(ctx, fmt.Errorf("coro_rpc call %#x: answer for seq %d, want %d: %w", funcID, resp.Header.Seq, seq, ErrFrame))
	}
	if err := ResponseError(resp); err != nil {
		return resp, err
	}
	return resp, nil
}

// failLocked ends the connection with err (or ctx's error when ctx ended
// the call) and returns it.
func (c *Client) failLocked(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", err, ctx.Err())
	}
	c.mu.err = err
	_ = c.conn.Close()
	return err
}

// Invoke calls method m with arguments a (encoded with ac) and decodes the
// answer with rc.
func Invoke[A, R any](ctx context.Context, c *Client, m Method, ac sp.Codec[A], a *A, rc sp.Codec[R]) (R, error) {
	var zero R
	resp, err := c.Call(ctx, m.ID, sp.Marshal(ac, a))
	if err != nil {
		return zero, fmt.Errorf("%s: %w", m.Name, err)
	}
	r, err := sp.Unmarshal(rc, resp.Body, sp.Limits{})
	if err != nil {
		return zero, fmt.Errorf("%s answer: %w", m.Name, err)
	}
	return r, nil
}

// InvokeNoArgs calls method m, which takes no arguments, and decodes the
// answer with rc.
func InvokeNoArgs[R any](ctx context.Context, c *Client, m Method, rc sp.Codec[R]) (R, error) {
	var zero R
	resp, err := c.Call(ctx, m.ID, nil)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", m.Name, err)
	}
	r, err := sp.Unmarshal(rc, resp.Body, sp.Limits{})
	if err != nil {
		return zero, fmt.Errorf("%s answer: %w", m.Name, err)
	}
	return r, nil
}
