package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Outgoing notifications. Every notification to a remote segment, sent
// through Notify or at the end of a batch submitted with one, goes through
// the segment's outbox: one queue per segment name, drained in order by one
// goroutine that exists while the queue is not empty. Segments do not wait
// for each other, and a notification is never dropped silently: it is
// delivered, or its sender (Notify's caller, or the batch, which then ends
// FAILED) learns why not. RemoveSegment waits for the segment's outbox
// before it forgets the segment.

// maxOutboxQueued bounds the notifications queued over all outboxes.
const maxOutboxQueued = 1 << 16

// outNotify is one notification on its way to a peer.
type outNotify struct {
	n Notification
	// done receives the outcome once (nil: delivered); called without
	// locks held.
	done func(error)
	// abandoned is set by a Notify caller that stopped waiting; a
	// notification abandoned before it is sent is not sent.
	abandoned atomic.Bool
}

// outbox is the queue of one segment.
type outbox struct {
	name string
	peer *Peer // the peer when the first queued notification came
	q    []*outNotify
	// idle is closed when the queue is empty and its goroutine gone; made
	// by waiters (RemoveSegment).
	idle chan struct{}
}

// outboxes are the engine's outboxes by segment name.
type outboxes struct {
	sync.Mutex
	m      map[string]*outbox
	queued int
	closed bool // Close began: nothing more is queued
}

// enqueueNotify queues n to peer p and reports the outcome to done. It
// never blocks; done may run before it returns.
func (e *Engine) enqueueNotify(p *Peer, o *outNotify) {
	ob := &e.out
	ob.Lock()
	if ob.closed {
		ob.Unlock()
		o.done(fmt.Errorf("notify segment %q: %w", p.Name, ErrClosed))
		return
	}
	if ob.queued >= maxOutboxQueued {
		ob.Unlock()
		e.metrics.notifiesFailed.Add(1)
		o.done(fmt.Errorf("notify segment %q: %d notifications already wait to be sent: %w", p.Name, maxOutboxQueued, ErrTooManyRequests))
		return
	}
	if ob.m == nil {
		ob.m = make(map[string]*outbox)
	}
	box := ob.m[p.Name]
	start := box == nil
	if start {
		box = &outbox{name: p.Name, peer: p}
		ob.m[p.Name] = box
		e.wg.Add(1)
	}
	box.q = append(box.q, o)
	ob.queued++
	ob.Unlock()
	if start {
		go e.drainOutbox(box)
	}
}

// drainOutbox sends box's notifications in order until it is empty; owned
// by the engine (e.wg), it ends early when the engine closes, failing what
// is left.
func (e *Engine) drainOutbox(box *outbox) {
	defer e.wg.Done()
	ob := &e.out
	for {
		ob.Lock()
		if len(box.q) == 0 {
			delete(ob.m, box.name)
			if box.idle != nil {
				close(box.idle)
			}
			ob.Unlock()
			return
		}
		o := box.q[0]
		box.q[0] = nil
		box.q = box.q[1:]
		ob.queued--
		ob.Unlock()
		if o.abandoned.Load() {
			o.done(fmt.Errorf("notify segment %q: %w", box.name, ErrCanceled))
			continue
		}
		o.done(e.notifyPeer(e.ctx, e.currentPeer(box), o.n))
	}
}

// currentPeer returns the segment box belongs to as the tables have it now
// (a refresh may have replaced it), else the one it was queued for.
func (e *Engine) currentPeer(box *outbox) *Peer {
	e.segments.RLock()
	p := e.segments.byName[box.name]
	e.segments.RUnlock()
	if p == nil {
		return box.peer
	}
	return p
}

// flushOutbox waits until the outbox of segment name is empty, at most
// timeout; the notifications still queued then fail (they are reported to
// their senders, and logged), so none is dropped unseen.
func (e *Engine) flushOutbox(name string, timeout time.Duration) {
	ob := &e.out
	ob.Lock()
	box := ob.m[name]
	if box == nil {
		ob.Unlock()
		return
	}
	if box.idle == nil {
		box.idle = make(chan struct{})
	}
	idle := box.idle
	ob.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return
	case <-t.C:
	}
	ob.Lock()
	left := box.q
	box.q = nil
	ob.queued -= len(left)
	ob.Unlock()
	if len(left) == 0 {
		return
	}
	e.metrics.notifiesFailed.Add(uint64(len(left)))
	e.log.Error("segment removed before its notifications could be delivered", "segment", name, "undelivered", len(left), "waited", timeout)
	for _, o := range left {
		o.done(fmt.Errorf("notify segment %q: segment removed after waiting %s for delivery: %w", name, timeout, ErrTimeout))
	}
}

// closeOutboxes stops queueing; the drain goroutines end with the engine's
// context (Close waits for them).
func (e *Engine) closeOutboxes() {
	e.out.Lock()
	e.out.closed = true
	e.out.Unlock()
}

// sendNotify sends n to p through its outbox and waits for the outcome,
// bounded by ctx (and the metadata timeout). When p's outbox is empty the
// caller sends n itself, holding the outbox meanwhile (what is queued
// behind it leaves afterwards, in order): no goroutine hand-off.
func (e *Engine) sendNotify(ctx context.Context, p *Peer, n Notification) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.MetadataTimeout)
	defer cancel()
	if box := e.claimOutbox(p); box != nil {
		stop := context.AfterFunc(e.ctx, cancel) // Close waits for this send
		err := e.notifyPeer(ctx, p, n)
		stop()
		e.releaseOutbox(box)
		return err
	}
	res := make(chan error, 1)
	o := &outNotify{n: n, done: func(err error) { res <- err }}
	e.enqueueNotify(p, o)
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		o.abandoned.Store(true)
		return fmt.Errorf("notify segment %q: %w: %w", p.Name, ErrTimeout, ctx.Err())
	}
}

// claimOutbox gives the caller p's outbox when p has none (nothing queued,
// nothing on its way); nil otherwise. releaseOutbox ends the hold.
func (e *Engine) claimOutbox(p *Peer) *outbox {
	ob := &e.out
	ob.Lock()
	defer ob.Unlock()
	if ob.closed || ob.m[p.Name] != nil {
		return nil
	}
	if ob.m == nil {
		ob.m = make(map[string]*outbox)
	}
	box := &outbox{name: p.Name, peer: p}
	ob.m[p.Name] = box
	e.wg.Add(1) // as a drain goroutine: Close waits for the holder
	return box
}

// releaseOutbox ends a claimOutbox hold: what was queued behind it leaves
// from a drain goroutine, as usual.
func (e *Engine) releaseOutbox(box *outbox) {
	ob := &e.out
	ob.Lock()
	if len(box.q) > 0 {
		ob.Unlock()
		go e.drainOutbox(box) // takes over the hold's e.wg count
		return
	}
	delete(ob.m, box.name)
	if box.idle != nil {
		close(box.idle)
	}
	ob.Unlock()
	e.wg.Done()
}
