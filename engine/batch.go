package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/internal/futex"
	"github.com/kvferry/kvferry/metrics"
)

// SegmentID identifies an opened segment within one engine.
type SegmentID int32

// LocalSegment is the engine's own segment.
const LocalSegment SegmentID = 0

// BatchID identifies a batch within one engine. It is never 0 and never
// math.MaxUint64 (Mooncake's INVALID_BATCH).
type BatchID uint64

// TaskState is a task's state; the values are Mooncake's STATUS_* codes.
type TaskState int32

// Task states.
const (
	StateWaiting   TaskState = 0
	StatePending   TaskState = 1
	StateInvalid   TaskState = 2
	StateCanceled  TaskState = 3
	StateCompleted TaskState = 4
	StateTimeout   TaskState = 5
	StateFailed    TaskState = 6
)

// Terminal reports whether s is a final state.
func (s TaskState) Terminal() bool {
	return s == StateCompleted || s == StateFailed || s == StateCanceled || s == StateTimeout
}

func (s TaskState) String() string {
	switch s {
	case StateWaiting:
		return "waiting"
	case StatePending:
		return "pending"
	case StateInvalid:
		return "invalid"
	case StateCanceled:
		return "canceled"
	case StateCompleted:
		return "completed"
	case StateTimeout:
		return "timeout"
	case StateFailed:
		return "failed"
	}
	return "state?"
}

// TaskStatus is what a status query reports for one task.
type TaskStatus struct {
	State TaskState
	// TransferredBytes is a lower bound of the bytes moved so far.
	TransferredBytes uint64
	// Err is why a task that ended other than completed did so (never nil
	// then); nil otherwise.
	Err error
}

// BatchStatus aggregates a batch.
type BatchStatus struct {
	// State is StateWaiting while any task runs, StateCompleted when all
	// completed, else the terminal state of the first task that did not
	// complete (StateFailed, StateCanceled).
	State TaskState
	// Tasks is the number of tasks submitted so far.
	Tasks int
	// TransferredBytes sums the tasks' transferred bytes.
	TransferredBytes uint64
	// Err is the first task error, if any.
	Err error
}

type task struct {
	batch       *batch
	length      uint64
	pending     atomic.Int32
	transferred atomic.Uint64
	failed      atomic.Bool
	state       atomic.Int32
	observed    atomic.Bool
	err         atomic.Pointer[error]
	pin         *Region
	pins        []*Region // more pins: pieces in other regions (Request.Pieces)
	start       time.Time
	op          OpCode
	link        *metrics.Link // nil: request metrics off
	probe       *pathProbe    // nil unless the route is measured
	peer        *Peer         // the target (failover.go)
	ends        Ends          // the memory ends the transport was chosen for
}

func (t *task) setErr(err error) {
	t.failed.Store(true)
	t.err.CompareAndSwap(nil, &err)
}

// sliceDone records s's outcome; the last slice finishes the task. It
// reports false when s failed over (it is not complete, and its
// batch's reference for it went along with it).
func (t *task) sliceDone(s *Slice, err error) bool {
	if err != nil {
		probe := s.probe
		if t.batch.e.failover(s, err) {
			return false // on its way over another transport
		}
		if probe && t.peer != nil && s.via != nil {
			// Not decided by a path failure (failover recorded that):
			// canceled or a request error. Let the next submission probe.
			if _, path := failoverCause(err); !path {
				t.peer.health.probeDone(s.via.Name())
			}
		}
		t.setErr(err)
	} else {
		t.transferred.Add(s.Length)
		if p := t.peer; p != nil && p.health.watch.Load() != 0 && s.via != nil {
			p.health.succeeded(t.batch.e, p, s.via.Name())
		}
	}
	if t.pending.Add(-1) == 0 {
		t.finish()
	}
	return true
}

// finish moves the task to its terminal state; called once.
func (t *task) finish() {
	st := StateCompleted
	if t.failed.Load() {
		st = StateFailed
		if p := t.err.Load(); p != nil && errors.Is(*p, ErrCanceled) {
			st = StateCanceled
		}
	}
	if t.pin != nil {
		t.pin.Release()
		t.pin = nil
	}
	for _, r := range t.pins {
		r.Release()
	}
	t.pins = nil
	t.record(st)
	if pp := t.probe; pp != nil {
		t.probe = nil
		pp.taskDone(st)
	}
	t.batch.taskTerminal(t, st)
}

func (t *task) status() TaskStatus {
	st := TaskStatus{State: TaskState(t.state.Load()), TransferredBytes: t.transferred.Load()}
	if st.State.Terminal() && st.State != StateCompleted {
		if p := t.err.Load(); p != nil {
			st.Err = *p
		} else {
			st.Err = fmt.Errorf("task ended %s, no reason recorded", st.State) // setErr precedes every failure
		}
	}
	return st
}

// pendingNotify is a notification to send once the batch completes.
type pendingNotify struct {
	peer *Peer // reqs[0]'s segment, as when submitted
	msg  Notification
}

type batch struct {
	id       BatchID
	capacity int
	e        *Engine

	canceled  atomic.Bool
	remaining atomic.Int64 // tasks not yet terminal
	// storing counts tasks inside taskTerminal: counted off remaining but
	// their state not yet stored. The batch is idle only once it is 0, so
	// a waiter never reads a last task still running.
	storing atomic.Int64
	failed  atomic.Int64 // terminal tasks that did not complete
	// notifying is true from the moment the last task completed until the
	// batch's notification was accepted by the peer or failed; completed
	// tasks read as pending meanwhile.
	notifying atomic.Bool
	// notifyErr is why the notification could not be delivered; completed
	// tasks read as failed then.
	notifyErr atomic.Pointer[error]

	npollers atomic.Int32 // len(mu.pollers)
	// waitOffered is set once an answer was offered to the waiter to
	// block for (Slice.WaitWith): a far answer, not worth a spin.
	waitOffered atomic.Bool

	// awaited is set for a batch whose submitter waits for it right away
	// (Transfer, Await); slices submitted after it is set see it.
	awaited atomic.Bool

	// refs counts who may still touch the batch: its owner until
	// FreeBatch, each call that looked it up, each slice handed to a
	// transport until completed or released (batchpool.go). At zero the
	// batch is recycled unless noReuse.
	refs atomic.Int32
	// noReuse: a slice went to a transport that is not a Releaser, or a
	// notification was submitted; the batch is left to the collector.
	noReuse atomic.Bool

	// oneUsed is set by the submit that took one.
	oneUsed atomic.Bool
	// one is the storage of a batch's first submit when it is one request
	// of one slice (batch-1, the common small case), so that it allocates
	// nothing beyond the batch: its task, group and slice, and the first
	// elements of mu.tasks and mu.pollers. It lives as long as the batch,
	// so a transport that still holds the slice after completing it
	// holds live memory.
	one struct {
		task    [1]task
		group   [1]group
		slice   [1]Slice
		slices  [1]*Slice
		tasks   [1]*task
		pollers [1]Poller
		waiters [1]*idleWaiter
		route   [1]route
	}
	// idleSeq changes each time the batch may have become idle
	// (wakeIfIdle); threads of locked waiters sleep on it in the kernel
	// (waitIdleThread), sleepers counts them.
	idleSeq  atomic.Uint32
	sleepers atomic.Int32

	mu struct {
		sync.Mutex
		tasks   []*task
		pollers []Poller // read the answers of slices in flight (PollWith)
		// parked: the waiter stopped blocking in WaitPollers and parks
		// (waitPolled); WaitWith refuses from then on.
		parked  bool
		notify  *pendingNotify
		waiters []*idleWaiter // signalled when the batch is idle (waitIdle)
		freed   bool
	}
}

// taskTerminal records that t ended in st. When it was the last task and
// the batch completed with a notification pending, the notification starts
// on its way before t's state becomes visible, so that nobody sees the
// batch completed before its notification has left.
func (b *batch) taskTerminal(t *task, st TaskState) {
	b.storing.Add(1)
	if st != StateCompleted {
		b.failed.Add(1)
	}
	last := b.remaining.Add(-1) == 0
	var n *pendingNotify
	if last && b.failed.Load() == 0 && !b.canceled.Load() {
		b.mu.Lock()
		if n = b.mu.notify; n != nil {
			b.mu.notify = nil
			b.notifying.Store(true)
		}
		b.mu.Unlock()
	}
	t.state.Store(int32(st))
	settled := b.storing.Add(-1) == 0
	switch {
	case n != nil:
		b.sendNotify(n)
	case last || settled:
		b.wakeIfIdle()
	}
}

// sendNotify hands the batch's notification to its peer and settles the
// batch with the outcome.
func (b *batch) sendNotify(n *pendingNotify) {
	done := func(err error) {
		if err != nil {
			err = fmt.Errorf("batch %d completed, but its notification did not reach segment %q: %w", b.id, n.peer.Name, err)
			b.notifyErr.Store(&err)
			b.e.log.Warn("batch notification failed", "batch", b.id, "segment", n.peer.Name, "err", err)
		}
		b.notifying.Store(false)
		b.wakeIfIdle()
	}
	if n.peer.Local() {
		done(b.e.notifyPeer(b.e.ctx, n.peer, n.msg))
		return
	}
	if b.e.notifyDirect(n.peer, n.msg) {
		done(nil)
		return
	}
	b.e.enqueueNotify(n.peer, &outNotify{n: n.msg, done: done})
}

// idle reports whether no task runs and no notification is on its way.
func (b *batch) idle() bool {
	return b.remaining.Load() == 0 && b.storing.Load() == 0 && !b.notifying.Load()
}

// wakeIfIdle wakes waitIdle's and waitIdleThread's waiters once the
// batch is idle.
func (b *batch) wakeIfIdle() {
	if b.idle() {
		// After the state the waiter reads: a waiter that read the batch
		// busy is counted in sleepers before this load, and sees idleSeq
		// changed or is woken (waitIdleThread).
		b.idleSeq.Add(1)
		if b.sleepers.Load() > 0 {
			futex.Wake(&b.idleSeq)
		}
	}
	b.mu.Lock()
	if len(b.mu.waiters) > 0 && b.idle() {
		for i, w := range b.mu.waiters {
			w.wake()
			b.mu.waiters[i] = nil
		}
		b.mu.waiters = b.mu.waiters[:0]
	}
	b.mu.Unlock()
}

// idleWaiter is one goroutine's wait in waitIdle: a wake-up signal and a
// deadline timer, taken from the engine's pool and returned to it once the
// wait no longer appears in any batch.
type idleWaiter struct {
	ch    chan struct{} // one token: the batch became idle
	timer *time.Timer   // nil until a wait with a timeout used it
}

// wake leaves the token unless one is there already.
func (w *idleWaiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// maxFreeWaiters caps the engine's free list of idle waiters: as many
// goroutines as park at once on a busy engine.
const maxFreeWaiters = 64

func (e *Engine) getWaiter() *idleWaiter {
	e.waiters.Lock()
	defer e.waiters.Unlock()
	if n := len(e.waiters.free); n > 0 {
		w := e.waiters.free[n-1]
		e.waiters.free[n-1] = nil
		e.waiters.free = e.waiters.free[:n-1]
		return w
	}
	return &idleWaiter{ch: make(chan struct{}, 1)}
}

// putWaiter returns w, which no batch lists any more, with no token left.
func (e *Engine) putWaiter(w *idleWaiter) {
	select {
	case <-w.ch:
	default:
	}
	e.waiters.Lock()
	if len(e.waiters.free) < maxFreeWaiters {
		e.waiters.free = append(e.waiters.free, w)
	}
	e.waiters.Unlock()
}

// waitIdle waits until every submitted task is terminal and the batch's
// notification (if any) has settled, ctx is done, or timeout (if not 0)
// has passed; then it returns context.DeadlineExceeded.
func (b *batch) waitIdle(ctx context.Context, timeout time.Duration) error {
	if b.idle() {
		return nil
	}
	w := b.e.getWaiter()
	defer b.e.putWaiter(w)
	var expired <-chan time.Time
	if timeout > 0 {
		if w.timer == nil {
			w.timer = time.NewTimer(timeout)
		} else {
			w.timer.Reset(timeout)
		}
		defer w.timer.Stop()
		expired = w.timer.C
	}
	listed := false
	defer func() {
		if !listed {
			return
		}
		b.mu.Lock()
		for i, x := range b.mu.waiters {
			if x == w {
				last := len(b.mu.waiters) - 1
				b.mu.waiters[i] = b.mu.waiters[last]
				b.mu.waiters[last] = nil
				b.mu.waiters = b.mu.waiters[:last]
				break
			}
		}
		b.mu.Unlock()
	}()
	for {
		b.mu.Lock()
		if b.idle() {
			b.mu.Unlock()
			return nil
		}
		if !listed {
			b.mu.waiters = append(b.mu.waiters, w)
			listed = true
		}
		b.mu.Unlock()
		select {
		case <-w.ch:
			listed = false // wakeIfIdle took it off the list
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			if b.idle() {
				return nil
			}
			return context.DeadlineExceeded
		}
	}
}

// lockedWaitSlice bounds one sleep of waitIdleThread: how late a waiter
// notices a cancellation of its context that is not its deadline (a
// completion wakes it at once, and the deadline bounds the last sleep).
const lockedWaitSlice = 10 * time.Millisecond

// waitIdleThread is waitIdle for a goroutine locked to its thread (a C
// caller): the thread sleeps in the kernel on idleSeq (futex) and the
// goroutine that makes the batch idle wakes it directly (wakeIfIdle), with
// no hand-off through the Go scheduler, which for a locked goroutine costs
// a second thread wake-up and on a loaded VM a millisecond tail. The
// earlier of ctx's deadline and timeout (when positive) bounds the wait;
// with neither it sleeps lockedWaitSlice at a time until ctx ends.
func (b *batch) waitIdleThread(ctx context.Context, timeout time.Duration) error {
	deadline, hasDeadline := ctx.Deadline()
	if timeout > 0 {
		if d := time.Now().Add(timeout); !hasDeadline || d.Before(deadline) {
			deadline, hasDeadline = d, true
		}
	}
	for {
		seq := b.idleSeq.Load()
		if b.idle() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		d := lockedWaitSlice
		if hasDeadline {
			if d = min(d, time.Until(deadline)); d <= 0 {
				return context.DeadlineExceeded
			}
		}
		b.sleepers.Add(1)
		if !b.idle() {
			futex.Wait(&b.idleSeq, seq, d)
		}
		b.sleepers.Add(-1)
	}
}

// taskAt returns task i or nil.
func (b *batch) taskAt(i int) *task {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 0 || i >= len(b.mu.tasks) {
		return nil
	}
	return b.mu.tasks[i]
}

// status is t's status as the batch reports it: a completed task reads
// as pending while the batch's notification is on its way (unless it was
// reported completed before), and as failed once it could not be
// delivered.
func (b *batch) status(t *task) (TaskStatus, error) {
	st := t.status()
	if st.State != StateCompleted {
		return st, nil
	}
	// notifying before notifyErr: the sender stores the error first, so a
	// notification seen settled has its outcome visible.
	if b.notifying.Load() {
		if !t.observed.Load() {
			st.State = StatePending
		}
		return st, nil
	}
	if p := b.notifyErr.Load(); p != nil {
		st.State, st.Err = StateFailed, *p
		return st, *p
	}
	return st, nil
}

// observe reports t's status and, if terminal, marks it observed.
func (b *batch) observe(t *task) TaskStatus {
	st, _ := b.status(t)
	if st.State.Terminal() {
		t.observed.Store(true)
	}
	return st
}

// aggregate computes the batch status; terminal tasks become observed.
func (b *batch) aggregate() BatchStatus {
	b.mu.Lock()
	tasks := b.mu.tasks
	b.mu.Unlock()
	var bs BatchStatus
	bs.Tasks = len(tasks)
	bs.State = StateCompleted
	running := false
	for _, t := range tasks {
		st, nerr := b.status(t)
		bs.TransferredBytes += st.TransferredBytes
		if !st.State.Terminal() {
			running = true
			continue
		}
		t.observed.Store(true)
		if st.State != StateCompleted && bs.State == StateCompleted {
			bs.State = st.State
			if p := t.err.Load(); p != nil {
				bs.Err = *p
			} else if nerr != nil {
				bs.Err = nerr
			}
		}
	}
	if running {
		bs.State = StateWaiting
	}
	return bs
}

// busy reports whether some task has not been observed terminal.
func (b *batch) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.mu.tasks {
		if !t.observed.Load() {
			return true
		}
	}
	return false
}
