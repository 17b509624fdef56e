package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestFailoverCause: which errors move a slice, and under which label.
func TestFailoverCause(t *testing.T) {
	for _, tc := range []struct {
		err   error
		cause string // "": final
	}{
		{nil, ""},
		{ErrRejected, ""},
		{ErrAddressNotRegistered, ""},
		{ErrInvalidArgument, ""},
		{ErrUnauthenticated, ""},
		{ErrCanceled, ""},
		{context.Canceled, ""},
		{ErrClosed, ""},
		{fmt.Errorf("no response: %w", ErrTimeout), ""},
		{syscall.EFAULT, ""},
		{errors.New("something else"), ""},
		{&TransferError{Err: fmt.Errorf("dial: %w: %w", ErrPeerGone, syscall.ECONNREFUSED)}, FailoverRefused},
		{&TransferError{Err: fmt.Errorf("read: %w", syscall.ECONNRESET)}, FailoverReset},
		{fmt.Errorf("write: %w", syscall.EPIPE), FailoverReset},
		{ErrPeerGone, FailoverReset},
		{syscall.ENETUNREACH, FailoverNoPath},
		// Marked: counts although it also wraps a request error.
		{&TransferError{Err: PathFailed(FailoverAccess, fmt.Errorf("remote access error: %w", ErrRejected))}, FailoverAccess},
		{PathFailed(FailoverMapping, errors.New("cuIpcOpenMemHandle: 201")), FailoverMapping},
		// Canceled or closing wins over a mark.
		{PathFailed(FailoverReset, fmt.Errorf("%w: endpoint", ErrClosed)), ""},
	} {
		got, ok := failoverCause(tc.err)
		assert.Equal(t, ok, tc.cause != "", "%v", tc.err)
		assert.Equal(t, got, tc.cause, "%v", tc.err)
	}
}

// TestPathHealth walks one transport's health toward a peer: down after
// healthFailures failures, skipped for the back-off, probed by one claimant
// after it (the others skip it meanwhile), down again for twice as long
// after a failed probe, up after a good one.
func TestPathHealth(t *testing.T) {
	e := &Engine{log: slog.New(slog.DiscardHandler), ctx: context.Background()}
	p := &Peer{Name: "peer"}
	h := &p.health
	t0 := time.Unix(1000, 0)
	boom := PathFailed(FailoverCompletion, errors.New("boom"))
	state := func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.mu.m["rdma"].state
	}
	assert.Assert(t, !h.skip(e, p, "rdma", t0, true))
	for i := range healthFailures - 1 {
		h.failed(e, p, "rdma", boom, t0)
		assert.Equal(t, state(), healthUp, "after %d", i+1)
	}
	assert.Equal(t, h.watch.Load(), int32(1))
	h.succeeded(e, p, "rdma")
	assert.Equal(t, h.watch.Load(), int32(0)) // a success clears the count
	for range healthFailures {
		h.failed(e, p, "rdma", boom, t0)
	}
	assert.Equal(t, state(), healthDown)
	assert.Assert(t, h.skip(e, p, "rdma", t0.Add(healthBackoffMin/2), true))
	assert.Assert(t, !h.skip(e, p, "tcp", t0, true)) // others unaffected
	// After the back-off: a caller that does not claim (a moving slice,
	// ChooseTransport) still skips it; the first claimant probes, and
	// while its probe is in flight everyone else skips it.
	assert.Assert(t, h.skip(e, p, "rdma", t0.Add(healthBackoffMin), false))
	assert.Equal(t, state(), healthDown)
	skip, probe := h.check(e, p, "rdma", t0.Add(healthBackoffMin), true)
	assert.Assert(t, !skip && probe)
	assert.Equal(t, state(), healthProbing)
	skip, probe = h.check(e, p, "rdma", t0.Add(healthBackoffMin), true)
	assert.Assert(t, skip && !probe, "a second probe while one is in flight")
	// A probe that ends undecided (canceled) lets the next one probe.
	h.probeDone("rdma")
	skip, probe = h.check(e, p, "rdma", t0.Add(healthBackoffMin), true)
	assert.Assert(t, !skip && probe)
	// A failed probe: down for twice as long.
	t1 := t0.Add(healthBackoffMin)
	h.failed(e, p, "rdma", boom, t1)
	assert.Equal(t, state(), healthDown)
	assert.Assert(t, h.skip(e, p, "rdma", t1.Add(2*healthBackoffMin-time.Millisecond), true))
	assert.Assert(t, !h.skip(e, p, "rdma", t1.Add(2*healthBackoffMin), true))
	assert.Assert(t, h.skip(e, p, "rdma", t1.Add(2*healthBackoffMin), true))
	// A success while down (sent before) changes nothing; while probing it
	// brings the transport up.
	h.succeeded(e, p, "rdma")
	assert.Equal(t, state(), healthUp)
	assert.Equal(t, h.watch.Load(), int32(0))
	assert.Assert(t, !h.skip(e, p, "rdma", t1, true))
	// The back-off stops doubling at healthBackoffMax.
	now := t1
	for range 20 {
		for range healthFailures {
			h.failed(e, p, "rdma", boom, now)
		}
		now = now.Add(healthBackoffMax)
		assert.Assert(t, !h.skip(e, p, "rdma", now, true))
	}
	ph := e.pathHealthOf(p, now)
	assert.Equal(t, len(ph), 1)
	assert.Equal(t, ph[0].State, healthProbing)
	assert.Equal(t, ph[0].LastError, "boom")
}
