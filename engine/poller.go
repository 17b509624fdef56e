package engine

import (
	"context"
	"time"
)

// A Poller reads, on the calling goroutine and without blocking, the
// answers that have already arrived for slices a transport has in flight,
// and completes their slices. A transport offers one for a slice whose
// answer is small and likely microseconds away (a small request on an idle
// connection): the goroutine that waits for the slice's batch (Wait, a
// status query) polls it, so that the answer is read and the batch
// completed by the thread that wants it, with no hand-off to the
// transport's reader goroutine and no thread woken (issue 18). The
// transport must still complete the slice on its own when nobody polls,
// within about SpinBudget.
type Poller interface {
	// Poll must not block, and must be safe to call from any goroutine,
	// concurrently, and after the slice completed.
	Poll()
}

// A WaitPoller is a Poller whose answers the waiting goroutine may also
// block for in the kernel, once its spin budget has passed: a transport
// offers one for a slice whose answer is far (a large payload) but whose
// submitter waits for it right away (Slice.SubmitterWaits). The waiter
// then reads the answer itself when it comes, woken by the kernel, instead
// of parking until the transport's reader goroutine, itself woken by the
// runtime's network poller, has read it and woken the waiter: on a small
// loaded VM each of those wake-ups costs tens to hundreds of microseconds
// (issue 18: a single 1 MiB store put or get). A transport offers one with
// SpinThenWaitWith for a small answer its submitter waits for: the waiter
// spins first, then blocks in the kernel rather than parking.
type WaitPoller interface {
	Poller
	// PollWait blocks the calling thread for up to d until more of the
	// answers offered to waiters have arrived, then reads what it can as
	// Poll does. It reports false at once when it has nothing offered to
	// wait for (the transport's reader took over, the connection failed):
	// the waiter then parks as usual.
	PollWait(d time.Duration) bool
}

// A Handoffer is a Poller that wants to know when the waiter stops
// polling and parks: it then reads the answers still to come itself, at
// once, instead of when its fallback timer fires. Such a timer is short
// (the spin budget), and when every P is idle the runtime's network poller
// runs it only after a millisecond (epoll_wait's unit): a waiter that
// parked, a C caller of kvferry_batch_wait above all, paid that
// millisecond (issue 38).
type Handoffer interface {
	Poller
	// Handoff must not block; it may be called after the slice completed.
	Handoff()
}

// pollWaitSlice bounds one PollWait: how late a waiter notices that its
// context ended, or that the transport's reader finished the batch while
// the waiter blocked (the reader does so only when the waiter did not come
// within its fallback delay).
const pollWaitSlice = time.Millisecond

// waitPolled blocks in the batch's WaitPollers until the batch is idle
// (true), or until none has anything to wait for or ctx ended (false: the
// caller parks as usual).
func (b *batch) waitPolled(ctx context.Context, deadline time.Time) bool {
	for {
		b.mu.Lock()
		ps := b.mu.pollers
		b.mu.Unlock()
		waited := false
		for _, p := range ps {
			if wp, ok := p.(WaitPoller); ok && wp.PollWait(pollWaitSlice) {
				waited = true
				break
			}
		}
		b.poll()
		if b.idle() {
			return true
		}
		if waited && ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
			continue
		}
		// Parking: from now on a transport must not leave an answer to
		// this waiter (WaitWith), unless one was offered meanwhile.
		b.mu.Lock()
		more := len(b.mu.pollers) > len(ps) && ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline))
		if !more {
			b.mu.parked = true
			ps = b.mu.pollers
		}
		b.mu.Unlock()
		if !more {
			// Nobody polls from now on: the transports read the rest.
			for _, p := range ps {
				if h, ok := p.(Handoffer); ok {
					h.Handoff()
				}
			}
			return false
		}
	}
}

// PollWith tells the engine that p reads s's answer when polled (see
// Poller). Call it before the slice can complete.
func (s *Slice) PollWith(p Poller) { s.task.batch.addPoller(p) }

// WaitWith tells the engine that the goroutine waiting for s's batch may
// block in p for s's answer (see WaitPoller); call it before the slice can
// complete. It reports false when that waiter has already parked: the
// transport must then see to the answer itself, without delay.
func (s *Slice) WaitWith(p WaitPoller) bool { return s.task.batch.addPollerUnlessParked(p, true) }

// SpinThenWaitWith is WaitWith for a slice whose answer is near (a small
// request): the waiter first polls for it for its spin budget, as for a
// Poller, and only then blocks in p for it instead of parking. A locked
// waiter (a C caller) that parks is woken through a timer that the
// runtime's network poller rounds to a millisecond; one that blocks in p is
// woken by the kernel when the answer comes. It reports false when the
// waiter has already parked, as WaitWith does.
func (s *Slice) SpinThenWaitWith(p WaitPoller) bool {
	return s.task.batch.addPollerUnlessParked(p, false)
}

// addPoller adds p to the batch's pollers (once).
func (b *batch) addPoller(p Poller) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addPollerLocked(p)
}

// addPollerUnlessParked is addPoller unless the waiter parked (false). A
// far answer also tells the waiter not to spin before it blocks in p.
func (b *batch) addPollerUnlessParked(p Poller, far bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.parked {
		return false
	}
	b.addPollerLocked(p)
	if far {
		b.waitOffered.Store(true)
	}
	return true
}

func (b *batch) addPollerLocked(p Poller) {
	for _, q := range b.mu.pollers {
		if q == p {
			return
		}
	}
	b.mu.pollers = append(b.mu.pollers, p)
	b.npollers.Store(int32(len(b.mu.pollers)))
}

// poll polls the batch's pollers while it is not idle. Pollers are only
// ever appended, so the elements read outside the lock stay as they were.
func (b *batch) poll() {
	n := int(b.npollers.Load())
	if n == 0 || b.idle() {
		return
	}
	b.mu.Lock()
	ps := b.mu.pollers[:n]
	b.mu.Unlock()
	for _, p := range ps {
		p.Poll()
	}
}

// settled is the wait's poll: it polls the batch's pollers, then reports
// whether the batch is idle.
func (b *batch) settled() bool {
	b.poll()
	return b.idle()
}
