package client

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// grpcRedial gives calls over gRPC the mux client's reconnect behaviour: a
// call that finds the connection in TRANSIENT_FAILURE (gRPC waiting out its
// backoff after failed connection attempts) has it try the master at once
// and waits for that attempt, instead of failing on the strength of an
// earlier attempt. Without it the first calls after a restarted master
// listens again fail with RPC_FAIL for up to the backoff's maximum, while
// other clients already use the master.
type grpcRedial struct {
	timeout time.Duration // bound of one call's wait for an attempt
	mu      sync.Mutex
	next    *dialAttempt // the attempt that ends next
}

// dialAttempt is the outcome of one connection attempt of the dialer.
type dialAttempt struct {
	done    chan struct{} // closed when it ended; the fields are set before
	started time.Time
	err     error
}

func newGRPCRedial(timeout time.Duration) *grpcRedial {
	return &grpcRedial{timeout: timeout, next: &dialAttempt{done: make(chan struct{})}}
}

// dialer wraps dial so that each attempt's end is seen by the waiting calls.
func (r *grpcRedial) dialer(dial func(ctx context.Context, addr string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		started := time.Now()
		conn, err := dial(ctx, addr)
		r.mu.Lock()
		a := r.next
		r.next = &dialAttempt{done: make(chan struct{})}
		r.mu.Unlock()
		a.started, a.err = started, err
		close(a.done)
		return conn, err
	}
}

// unary is the client interceptor.
func (r *grpcRedial) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if cc.GetState() == connectivity.TransientFailure {
		r.await(ctx, cc)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// await ends cc's backoff and waits, within r.timeout and ctx, until the
// connection is ready or an attempt begun after the call failed; the call
// then goes ahead (failing at once if the master is still away).
func (r *grpcRedial) await(ctx context.Context, cc *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	called := time.Now()
	for {
		r.mu.Lock()
		a := r.next
		r.mu.Unlock()
		cc.ResetConnectBackoff()
		select {
		case <-a.done:
		case <-ctx.Done():
			return
		}
		if a.err == nil {
			break
		}
		if !a.started.Before(called) {
			return // the master is still away
		}
		// That attempt was under way before the call: try again.
	}
	// Connected; the channel turns READY after the HTTP/2 (and TLS)
	// handshake, or stays in TRANSIENT_FAILURE if that fails.
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if s == connectivity.Shutdown || !cc.WaitForStateChange(ctx, s) {
			return
		}
	}
}
