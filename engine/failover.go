package engine

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Failover across transports. A slice that a transport completes with a
// failure of its path to the peer (a failed work completion, a refused or
// lost connection, a remote access error that outlived the descriptor
// re-read, a refused mapping, no usable NIC left) is handed to the next
// transport that reaches the peer in the selector's order, as long as the
// request's deadline (its submission plus Config.TransferTimeout) has not
// passed. Errors of the request itself (outside registered memory,
// refused by the peer, canceled, invalid, the engine closing, a timeout)
// are final. A slice only ever moves down the order, so it meets each
// transport at most once: a peer dead on every transport costs one
// attempt per transport, never a storm.
//
// Bytes are never delivered twice to memory the caller can see as
// complete: a task completes only once every slice has, so a write moved
// to another transport rewrites the same bytes of the target before the
// batch (and its notification) completes, and a read overwrites the local
// range before the task reads as completed. A transport touches a slice's
// memory only until it completes the slice (Transport), so the failed
// transport no longer writes where the next one does.
//
// Health: each peer keeps, per transport, its consecutive path failures.
// After healthFailures of them the transport is down for that peer: the
// selector skips it (while another transport reaches the peer) for a
// back-off, healthBackoffMin doubling up to healthBackoffMax, and then
// probes it with one slice: the first submission that picks the transport
// after the back-off claims the probe (under the peer's health lock, so
// concurrent submitters never all become probes), sends its first slice
// over it and the rest of its slices, like every other submission while
// the probe is in flight, to the next transport, as while down. The
// probe's result decides: a success brings it up, a path failure takes it
// down again for twice as long (and the probe slice fails over like any
// other), any other end (canceled, a request error, a submission that
// never handed it out) releases the claim for the next submission. A
// failing-over slice never lands on a transport down or probing for its
// peer. So a dead path costs one slice per back-off. Mooncake's TENT pauses
// connecting to a peer after failures the same way (specs/mooncake.md).
// Engine.PathHealth reports it (showLinks prints it), every move counts
// in kvferry_engine_failovers_total{from,to,cause}, and the log gets state
// changes and moves, rate-limited per peer and transport.
//
// Config.NoFailover (KVFERRY_FAILOVER=off) and a forced transport
// (Config.ForceTransport: KVFERRY_TRANSPORT, MC_FORCE_TCP) turn all of
// this off: a failed slice fails its task, and no transport is skipped.

// Failover causes: the cause label of kvferry_engine_failovers_total and
// what PathFailure.FailoverCause returns.
const (
	// FailoverCompletion: the transport reported a failed completion (an
	// RDMA work completion with an error status).
	FailoverCompletion = "completion"
	// FailoverRefused: the connection or the access was refused
	// (ECONNREFUSED, a handshake refused, the kernel refusing cma).
	FailoverRefused = "refused"
	// FailoverReset: an established connection or session was lost.
	FailoverReset = "reset"
	// FailoverAccess: the peer's NIC refused the access even after the
	// peer's descriptor was read again.
	FailoverAccess = "access"
	// FailoverMapping: mapping the peer's memory was refused (a CUDA IPC
	// handle that does not open).
	FailoverMapping = "mapping"
	// FailoverNoPath: the transport has no usable path to the peer left
	// (every NIC down, the network unreachable).
	FailoverNoPath = "no_path"
)

// healthBackoffFloor is the first back-off of a transport taken down,
// healthBackoffMin unless a test sets a longer one (SetHealthBackoff in
// export_test.go) so that a loaded machine cannot end it mid-test.
var healthBackoffFloor atomic.Int64

func init() { healthBackoffFloor.Store(int64(healthBackoffMin)) }

// Health tuning.
const (
	// healthFailures consecutive path failures take a transport down for
	// a peer.
	healthFailures = 3
	// healthBackoffMin and healthBackoffMax bound how long a transport
	// that is down for a peer is skipped before it is probed again
	// (healthBackoffFloor is the first back-off; tests lengthen it).
	healthBackoffMin = time.Second
	healthBackoffMax = 30 * time.Second
	// healthErrBytes caps the last error text kept for PathHealth.
	healthErrBytes = 256
)

// PathFailure is implemented by errors that report a failure of a
// transport's path to a peer rather than of the request: the engine may
// carry the slice over another transport (see above). Transports mark
// their errors with PathFailed, or give their sentinels this method.
type PathFailure interface {
	error
	// FailoverCause is the cause label (Failover… constants).
	FailoverCause() string
}

// PathError marks Err as a failure of the transport's path (PathFailure).
// Its text is Err's; errors.Is and errors.As see through it.
type PathError struct {
	// Cause is the failover cause (Failover… constants).
	Cause string
	// Err is the failure.
	Err error
}

func (e *PathError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *PathError) Unwrap() error { return e.Err }

// FailoverCause returns Cause.
func (e *PathError) FailoverCause() string { return e.Cause }

// PathFailed returns err marked as a path failure of the given cause (nil
// for nil).
func PathFailed(cause string, err error) error {
	if err == nil {
		return nil
	}
	return &PathError{Cause: cause, Err: err}
}

// failoverCause reports whether err is a failure of the transport's path
// that another transport may get around, and its cause label. A marked
// path failure counts even when it also wraps a request error (an RDMA
// remote access error wraps ErrRejected); otherwise request errors are
// final and connection errors count.
func failoverCause(err error) (string, bool) {
	var pf PathFailure
	switch {
	case err == nil:
		return "", false
	case errors.Is(err, ErrCanceled), errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
		return "", false // canceled or closing: never moved, marked or not
	case errors.As(err, &pf):
		return pf.FailoverCause(), true
	case errors.Is(err, ErrRejected), errors.Is(err, ErrAddressNotRegistered), errors.Is(err, ErrInvalidArgument),
		errors.Is(err, ErrUnauthenticated), errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.EFAULT), errors.Is(err, syscall.EACCES):
		return "", false
	case errors.Is(err, syscall.ECONNREFUSED):
		return FailoverRefused, true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ENETDOWN):
		return FailoverNoPath, true
	case errors.Is(err, ErrPeerGone), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return FailoverReset, true
	}
	return "", false
}

// failoverOn reports whether slices fail over and health is tracked.
func (e *Engine) failoverOn() bool { return !e.cfg.NoFailover && e.cfg.ForceTransport == "" }

// failover moves s, which its transport completed with err, to the next
// transport that reaches its peer, and reports whether it did (then s is
// not complete). It records err in the health of s's transport toward the
// peer either way.
func (e *Engine) failover(s *Slice, err error) bool {
	t := s.task
	p := t.peer
	if p == nil || s.via == nil || !e.failoverOn() {
		return false
	}
	cause, ok := failoverCause(err)
	if !ok {
		return false
	}
	from := s.via.Name()
	now := time.Now()
	p.health.failed(e, p, from, err, now)
	if t.batch.canceled.Load() || e.closed.Load() || now.Sub(t.start) >= e.cfg.TransferTimeout {
		return false
	}
	next, ctr := e.nextTransport(p, t.ends, s.via)
	if next == nil {
		return false
	}
	to := next.Name()
	e.metrics.set.Failover(from, to, cause).Add(1)
	p.health.movedOff(from)
	if ok, suppressed := e.failoverLogs.Allow(p.Name + "\x00" + from + "\x00" + to); ok {
		e.log.Warn("slice failed over", "segment", p.Name, "transport", from, "to", to, "cause", cause,
			"op", s.Op, "bytes", s.Length, "err", err, "suppressed", suppressed)
	}
	if pp := t.probe; pp != nil {
		pp.failed.Store(true) // the measured route failed: left alone a while
	}
	s.probe = false
	out := reslice(s, next)
	t.pending.Add(int32(len(out) - 1))
	ctr.Add(uint64(len(out)))
	if l := e.metrics.link(next, p); l != nil {
		l.Sliced(len(out))
	}
	t.batch.handOut(next, len(out)-1) // s's reference goes along with s (or its first piece)
	next.Submit(p, out)
	return true
}

// probeOnly keeps the first of slices, all for peer p and the memory ends,
// on transport via, which is being probed for p, as the probe, and returns
// the others cut for the next transport that carries them (ctr counts
// them there; nil next: there is none, and all of slices stay on via). It
// runs before any of slices is handed out: the tasks' pending counts grow
// by the extra slices.
func (e *Engine) probeOnly(p *Peer, ends Ends, via Transport, slices []*Slice) (rest []*Slice, next Transport, ctr *atomic.Uint64) {
	slices[0].probe = true
	if len(slices) == 1 {
		return nil, nil, nil
	}
	if next, ctr = e.nextTransport(p, ends, via); next == nil {
		return nil, nil, nil
	}
	for _, s := range slices[1:] {
		out := reslice(s, next)
		for _, ns := range out {
			ns.moved = false // handed out by the submitter, not moved
		}
		s.task.pending.Add(int32(len(out) - 1))
		rest = append(rest, out...)
	}
	return rest, next, ctr
}

// nextTransport returns the first transport after from in the selector's
// order that carries ends to p, reaches it, and is neither down nor
// probing for it (a moved slice never claims a probe).
func (e *Engine) nextTransport(p *Peer, ends Ends, from Transport) (Transport, *atomic.Uint64) {
	e.transports.RLock()
	defer e.transports.RUnlock()
	after := false
	for _, in := range e.transports.list {
		if !after {
			after = in.t == from
			continue
		}
		if carries(in.t, p, ends) && in.t.Reaches(p) && !p.health.skip(e, p, in.t.Name(), time.Now(), false) {
			return in.t, in.slices
		}
	}
	return nil, nil
}

// reslice prepares s for transport to: s itself when it fits to's slice
// size (and its pieces, if any, go to a gathering transport), else new
// slices of the same ranges, cut at to's slice size and at the pieces.
func reslice(s *Slice, to Transport) []*Slice {
	ss := to.SliceSize()
	if (ss == 0 || s.Length <= ss+ss/4) && (s.Pieces == nil || gathers(to)) {
		s.via, s.moved, s.Retries = to, true, 0
		return []*Slice{s}
	}
	pieces := s.Pieces
	if pieces == nil {
		pieces = []Piece{{Addr: s.Local, Length: s.Length}}
	}
	n := 0
	for _, pc := range pieces {
		n += sliceCount(pc.Length, ss)
	}
	all := make([]Slice, n)
	out := make([]*Slice, 0, n)
	at := s.Remote
	for _, pc := range pieces {
		cnt := sliceCount(pc.Length, ss)
		var off uint64
		for k := 0; k < cnt; k++ {
			l := pc.Length - off
			if k < cnt-1 {
				l = ss
			}
			ns := &all[len(out)]
			*ns = Slice{Op: s.Op, Local: pc.Addr + uintptr(off), Remote: at + off, Length: l, Posted: s.Posted,
				task: s.task, region: s.region, via: to, moved: true}
			out = append(out, ns)
			off += l
		}
		at += pc.Length
	}
	return out
}

// Health states of a transport toward a peer.
const (
	healthUp      = "up"
	healthDown    = "down"
	healthProbing = "probing"
)

// pathHealth is one transport's health toward one peer.
type pathHealth struct {
	state     string
	fails     int // consecutive path failures
	failures  uint64
	failovers uint64 // slices moved off it
	backoff   time.Duration
	downUntil time.Time
	lastErr   string
	probing   bool // while probing: the probe slice is in flight
}

// peerHealth holds a peer's transports' health (see above).
type peerHealth struct {
	// watch counts the transports with failures recorded or not up: the
	// selector and completions look no further while it is 0.
	watch atomic.Int32
	mu    struct {
		sync.Mutex
		m map[string]*pathHealth // by transport name
	}
}

// watched reports whether h is not up or counts failures.
func (h *pathHealth) watched() bool { return h.state != healthUp || h.fails > 0 }

// update runs f on the health of transport name, created up unless
// existing (then f does not run for a transport without one), keeping
// watch in step.
func (ph *peerHealth) update(name string, existing bool, f func(h *pathHealth)) {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	h := ph.mu.m[name]
	if h == nil {
		if existing {
			return
		}
		if ph.mu.m == nil {
			ph.mu.m = make(map[string]*pathHealth)
		}
		h = &pathHealth{state: healthUp}
		ph.mu.m[name] = h
	}
	was := h.watched()
	f(h)
	switch now := h.watched(); {
	case now && !was:
		ph.watch.Add(1)
	case was && !now:
		ph.watch.Add(-1)
	}
}

// failed records a path failure of transport name toward p.
func (ph *peerHealth) failed(e *Engine, p *Peer, name string, err error, now time.Time) {
	var backoff time.Duration
	ph.update(name, false, func(h *pathHealth) {
		h.fails++
		h.failures++
		h.lastErr = err.Error()
		if len(h.lastErr) > healthErrBytes {
			h.lastErr = h.lastErr[:healthErrBytes]
		}
		switch {
		case h.state == healthDown:
			return // slices already in flight when it went down
		case h.state == healthProbing:
			h.backoff = min(2*h.backoff, healthBackoffMax)
		case h.fails >= healthFailures:
			h.backoff = time.Duration(healthBackoffFloor.Load())
		default:
			return
		}
		h.state, h.downUntil, h.probing, backoff = healthDown, now.Add(h.backoff), false, h.backoff
	})
	if backoff > 0 {
		if ok, suppressed := e.failoverLogs.Allow(p.Name + "\x00" + name + "\x00down"); ok {
			e.log.Warn("transport down for peer", "segment", p.Name, "transport", name, "probe_in", backoff,
				"err", err, "suppressed", suppressed)
		}
	}
}

// succeeded records that transport name carried a slice to p.
func (ph *peerHealth) succeeded(e *Engine, p *Peer, name string) {
	up := false
	ph.update(name, true, func(h *pathHealth) {
		if h.state == healthDown {
			return // a slice sent before it went down
		}
		up = h.state == healthProbing
		h.state, h.fails, h.backoff, h.probing = healthUp, 0, 0, false
	})
	if up {
		e.log.Info("transport up again for peer", "segment", p.Name, "transport", name)
	}
}

// movedOff counts a slice moved off transport name.
func (ph *peerHealth) movedOff(name string) {
	ph.update(name, false, func(h *pathHealth) { h.failovers++ })
}

// skip reports whether the selector passes over transport name for p
// now. A down transport is skipped until its back-off has passed; then
// (and while probing with no probe in flight) the caller takes it as the
// probe if claim is set (probe: it now sends exactly one slice, see
// Engine.probeOnly, and then probeDone or a result), and skips it
// otherwise. The claim is taken under ph.mu: of concurrent submitters one
// probes and the others skip. A probing transport with its probe in
// flight is skipped.
func (ph *peerHealth) skip(e *Engine, p *Peer, name string, now time.Time, claim bool) (skip bool) {
	skip, _ = ph.check(e, p, name, now, claim)
	return skip
}

// check is skip, also reporting whether the caller claimed the probe.
func (ph *peerHealth) check(e *Engine, p *Peer, name string, now time.Time, claim bool) (skip, probe bool) {
	if ph.watch.Load() == 0 {
		return false, false
	}
	ph.mu.Lock()
	h := ph.mu.m[name]
	switch {
	case h == nil || h.state == healthUp:
		ph.mu.Unlock()
		return false, false
	case h.state == healthDown && now.Before(h.downUntil), h.state == healthProbing && h.probing, !claim:
		ph.mu.Unlock()
		return true, false
	}
	again := h.state == healthProbing
	h.state, h.probing = healthProbing, true
	ph.mu.Unlock()
	if !again && e.log.Enabled(e.ctx, slog.LevelInfo) {
		e.log.Info("transport probed again for peer", "segment", p.Name, "transport", name)
	}
	return false, true
}

// probeDone releases the probe claimed on transport name for p when the
// probe slice ended without deciding (canceled, a request error) or was
// never handed out: the next submission may probe.
func (ph *peerHealth) probeDone(name string) {
	ph.update(name, true, func(h *pathHealth) {
		if h.state == healthProbing {
			h.probing = false
		}
	})
}

// PathHealth is one transport's health toward one peer (Engine.PathHealth).
type PathHealth struct {
	// Segment is the peer.
	Segment string
	// Transport is the transport's name.
	Transport string
	// State is "up", "down" (skipped until RetryIn has passed) or
	// "probing" (down before; one slice is sent over it, and its result
	// decides).
	State string
	// ConsecutiveFailures counts path failures since the last success.
	ConsecutiveFailures int
	// Failures counts every path failure.
	Failures uint64
	// Failovers counts the slices moved off the transport to another.
	Failovers uint64
	// RetryIn is, while down, the time left until it is probed again.
	RetryIn time.Duration
	// LastError is the last path failure's text.
	LastError string
}

// PathHealth reports the health of every (peer, transport) that has seen a
// path failure, by segment and transport name.
func (e *Engine) PathHealth() []PathHealth {
	e.segments.RLock()
	peers := make([]*Peer, 0, len(e.segments.byID))
	for _, p := range e.segments.byID {
		if p != nil {
			peers = append(peers, p)
		}
	}
	e.segments.RUnlock()
	now := time.Now()
	var out []PathHealth
	for _, p := range peers {
		out = append(out, e.pathHealthOf(p, now)...)
	}
	slices.SortFunc(out, func(a, b PathHealth) int {
		return cmp.Or(cmp.Compare(a.Segment, b.Segment), cmp.Compare(a.Transport, b.Transport))
	})
	return out
}

// pathHealthOf reports p's transports' health at now.
func (e *Engine) pathHealthOf(p *Peer, now time.Time) []PathHealth {
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	var out []PathHealth
	for name, h := range p.health.mu.m {
		ph := PathHealth{Segment: p.Name, Transport: name, State: h.state, ConsecutiveFailures: h.fails,
			Failures: h.failures, Failovers: h.failovers, LastError: h.lastErr}
		if h.state == healthDown {
			ph.RetryIn = max(h.downUntil.Sub(now), 0)
		}
		out = append(out, ph)
	}
	return out
}
