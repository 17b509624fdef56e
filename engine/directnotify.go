package engine

// Notifications that skip the notify RPC. A transport that shares memory
// with a peer engine (the same-host transport's notification ring) hands a
// notification straight into the peer's memory: the sender's call (or the
// batch's completion) returns once it lies there, and the peer's
// application thread takes it in its own Notifications call. Nothing waits
// for either side's goroutines, which matters when both applications poll
// on every CPU of the host (NIXL's checkXfer and getNotifs loops).
//
// Order is kept: a notification goes the direct way only while nothing to
// the same segment is queued or on its way through the RPC (the outbox is
// empty), and the receiver drains its sources before it queues a
// notification that came by RPC, so a later RPC notification never
// overtakes an earlier direct one.

// DirectNotifier is a transport that can place a notification in a peer's
// memory without a round trip.
type DirectNotifier interface {
	// NotifyDirect places n in p's memory and reports true once it lies
	// there; false when it cannot now (no shared ring with p, the ring is
	// full, n is too large), and the engine then sends n by RPC. It must
	// not block.
	NotifyDirect(p *Peer, n Notification) bool
}

// NotifySource is where notifications that came the direct way wait: the
// engine drains it in the application's thread (Notifications,
// WaitNotifications) and before it queues an RPC notification.
type NotifySource interface {
	// DrainNotifications hands the waiting notifications to take, oldest
	// first, until take refuses one (it stays for a later drain).
	DrainNotifications(take func(Notification) bool)
	// NotificationsPending reports whether a notification waits.
	NotificationsPending() bool
	// SetParked tells the senders that an application thread sleeps for a
	// notification (they must wake it with WakeNotificationWaiters) or no
	// longer does.
	SetParked(on bool)
	// Origin names the sender for the queue's per-peer caps and logs.
	Origin() string
}

// notifyDirect hands n to p through a DirectNotifier when nothing for p is
// queued ahead of it; true when it was delivered.
func (e *Engine) notifyDirect(p *Peer, n Notification) bool {
	if p.Local() {
		return false
	}
	ob := &e.out
	ob.Lock()
	defer ob.Unlock()
	if ob.closed || ob.m[p.Name] != nil {
		return false
	}
	e.transports.RLock()
	defer e.transports.RUnlock()
	for _, in := range e.transports.list {
		if d, ok := in.t.(DirectNotifier); ok && d.NotifyDirect(p, n) {
			e.metrics.notifiesSent.Add(1)
			return true
		}
	}
	return false
}

// AddNotifySource starts draining s (a transport's session with a peer).
func (e *Engine) AddNotifySource(s NotifySource) {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	e.inbox.sources = append(e.inbox.sources, s)
	if e.inbox.parked > 0 {
		s.SetParked(true)
	}
}

// RemoveNotifySource stops draining s, after taking what it holds (queue
// caps permitting: a notification the queue refuses is dropped and
// counted, as an RPC notification refused then would be).
func (e *Engine) RemoveNotifySource(s NotifySource) {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	for i, x := range e.inbox.sources {
		if x == s {
			e.drainSourceLocked(s)
			e.inbox.sources = append(e.inbox.sources[:i], e.inbox.sources[i+1:]...)
			break
		}
	}
	if s.NotificationsPending() {
		e.metrics.notifiesFailed.Add(1)
		e.log.Warn("notifications dropped with their same-host session: the application has not drained the queue", "peer", s.Origin())
	}
	e.wakeLocked()
}

// WakeNotificationWaiters wakes the application threads that sleep for a
// notification when a source holds one (a sender saw SetParked).
func (e *Engine) WakeNotificationWaiters() {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	e.drainSourcesLocked()
	e.wakeLocked()
}

func (e *Engine) drainSourcesLocked() {
	for _, s := range e.inbox.sources {
		e.drainSourceLocked(s)
	}
}

func (e *Engine) drainSourceLocked(s NotifySource) {
	if !s.NotificationsPending() {
		return
	}
	peer := s.Origin()
	s.DrainNotifications(func(n Notification) bool { return e.admitLocked(n, peer) })
}

// sourcesPendingLocked reports whether a source holds a notification.
func (e *Engine) sourcesPendingLocked() bool {
	for _, s := range e.inbox.sources {
		if s.NotificationsPending() {
			return true
		}
	}
	return false
}

// parkLocked counts a thread about to sleep for a notification (on) or
// done sleeping, telling the sources when the first starts or the last
// ends.
func (e *Engine) parkLocked(on bool) {
	if on {
		e.inbox.parked++
		if e.inbox.parked == 1 {
			for _, s := range e.inbox.sources {
				s.SetParked(true)
			}
		}
		return
	}
	e.inbox.parked--
	if e.inbox.parked == 0 {
		for _, s := range e.inbox.sources {
			s.SetParked(false)
		}
	}
}
