package rpc

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Keep-alive defaults. A pooled connection holds one of the server's
// per-address connection slots, so connections are kept only while
// requests follow each other closely: the client drops an idle one well
// before the server would close it.
const (
	// DefaultKeepAliveIdle is how long a server keeps a keep-alive
	// connection without a request.
	DefaultKeepAliveIdle = 2 * time.Second
	// poolIdle is how long a Pool keeps an idle connection.
	poolIdle = time.Second
	// poolMaxIdle is the most idle connections a Pool keeps per address.
	poolMaxIdle = 1
)

// Pool calls servers that announce keep-alive (descriptor.FeatureRPCKeepAlive)
// over connections it keeps between calls: one request at a time on each,
// no dial, no handshake, no authentication per request. A call on a kept
// connection that the server closed meanwhile (before any byte of an
// answer) is sent again on a new connection: the server never handles a
// request it does not answer, except for refusing it, which it would do
// again. Safe for concurrent use; the zero value is not usable (NewPool).
type Pool struct {
	mu     sync.Mutex
	idle   map[string][]pooledConn
	closed bool
}

type pooledConn struct {
	c     net.Conn
	since time.Time
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{idle: make(map[string][]pooledConn)} }

// Call is the package's Call over a kept connection to addr, with t sent
// as t|KeepAlive (t must be a base type: Connection, Metadata, Notify or
// Probe).
func (p *Pool) Call(ctx context.Context, addr string, t Type, body []byte, cfg ClientConfig) ([]byte, error) {
	if t > TypeStore {
		return nil, &CallError{Addr: addr, Type: t, Stage: "send", Err: fmt.Errorf("%w: no keep-alive form of type %s", ErrFrame, t)}
	}
	cfg = cfg.withDefaults()
	kt := t | KeepAlive
	for {
		c, reused := p.get(addr)
		if c == nil {
			var err error
			if c, err = dial(ctx, addr, t, cfg); err != nil {
				return nil, err
			}
		}
		reply, answered, err := exchange(ctx, c, addr, kt, body, cfg)
		if err == nil {
			_ = c.SetDeadline(time.Time{})
			p.put(addr, c)
			return reply, nil
		}
		c.Close()
		if !reused || answered || ctx.Err() != nil {
			return nil, err
		}
		// The server closed the kept connection first: a new one.
	}
}

// get takes a kept connection to addr, dropping those idle too long.
func (p *Pool) get(addr string) (net.Conn, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[addr]
	for len(cs) > 0 {
		pc := cs[len(cs)-1]
		cs[len(cs)-1] = pooledConn{}
		cs = cs[:len(cs)-1]
		if time.Since(pc.since) < poolIdle {
			p.idle[addr] = cs
			return pc.c, true
		}
		pc.c.Close()
	}
	delete(p.idle, addr)
	return nil, false
}

// put keeps c for the next call to addr, or closes it.
func (p *Pool) put(addr string, c net.Conn) {
	p.mu.Lock()
	if p.closed || len(p.idle[addr]) >= poolMaxIdle {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.idle[addr] = append(p.idle[addr], pooledConn{c: c, since: time.Now()})
	p.mu.Unlock()
}

// Close closes the kept connections; later calls dial and close their own.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = make(map[string][]pooledConn)
	p.mu.Unlock()
	for _, cs := range idle {
		for _, pc := range cs {
			pc.c.Close()
		}
	}
}
