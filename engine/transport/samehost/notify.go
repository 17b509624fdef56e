package samehost

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost/nring"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
)

// Notifications through shared memory (cma sessions). An initiator asks
// for a notification ring in its hello (shwire.FlagNotifyRing); the owner
// creates one per session (a sealed memfd, nring's layout) and passes it
// third with the reply. The initiator's engine then hands a notification to
// that owner by writing it into the ring (engine.DirectNotifier): a batch
// with a notification is complete once the data is copied and the
// notification lies in the owner's memory, with no notify RPC and no
// goroutine of either process in between. The owner's engine drains the
// ring in its application's own Notifications call (engine.NotifySource).
// When the owner's application sleeps for a notification (WaitNotifications)
// the ring says so, and the initiator follows its write with a wake message
// on the session socket.
//
// A ring that is full, a notification larger than a quarter of it, or a
// session without a ring (an older owner, KVFERRY_NOTIFY_RING=0) leave the
// notification to the notify RPC, which the engine keeps in order behind
// what went through the ring. The owner treats the ring as the
// initiator's input: every index and record is checked (nring), a malformed
// ring ends the session.

// ringDataBytes is the data capacity of a session's notification ring.
const ringDataBytes = 256 << 10

// ownerRing is the owner's side of a session's ring: a notification source
// of the owner's engine, drained under the engine's queue lock only.
type ownerRing struct {
	r      *nring.Ring
	m      *shmap
	origin string
	s      *ownerSession
	n      *node
	logged bool
}

// newOwnerRing creates the ring of session s; the caller passes fd on and
// closes it.
func (n *node) newOwnerRing(s *ownerSession) (*ownerRing, int, error) {
	m, fd, err := newMemfd("kvferry-notify", nring.HeaderBytes+ringDataBytes, false)
	if err != nil {
		return nil, -1, err
	}
	r, err := nring.Init(m.b)
	if err != nil {
		m.Close()
		unix.Close(fd)
		return nil, -1, err
	}
	return &ownerRing{r: r, m: m, origin: fmt.Sprintf("same-host pid %d", s.pid), s: s, n: n}, fd, nil
}

// DrainNotifications implements engine.NotifySource.
func (o *ownerRing) DrainNotifications(take func(engine.Notification) bool) {
	_, err := o.r.Drain(func(name, msg string) bool { return take(engine.Notification{Name: name, Msg: msg}) })
	if err != nil && !o.logged {
		o.logged = true
		o.n.warn("ring", "cma session: malformed notification ring, closing the session", "peer_pid", o.s.pid, "err", err)
		o.s.c.Close()
	}
}

// NotificationsPending implements engine.NotifySource.
func (o *ownerRing) NotificationsPending() bool { return o.r.Pending() }

// SetParked implements engine.NotifySource.
func (o *ownerRing) SetParked(on bool) { o.r.SetParked(on) }

// Origin implements engine.NotifySource.
func (o *ownerRing) Origin() string { return o.origin }

// initRing is the initiator's side of a session's ring.
type initRing struct {
	mu sync.Mutex // one pusher at a time
	r  *nring.Ring
	m  *shmap
}

// attachRing maps the ring the owner passed.
func attachRing(fd int) (*initRing, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("notification ring: %w", err)
	}
	if st.Size != nring.HeaderBytes+ringDataBytes {
		return nil, fmt.Errorf("notification ring of %d bytes: %w", st.Size, shwire.ErrProtocol)
	}
	m, err := mapFd(fd, uint64(st.Size), true)
	if err != nil {
		return nil, err
	}
	r, err := nring.Attach(m.b)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%w: %w", err, shwire.ErrProtocol)
	}
	return &initRing{r: r, m: m}, nil
}

// NotifyDirect implements engine.DirectNotifier: n goes into the ring of
// the live cma session to p, when there is one with room.
func (t *CMA) NotifyDirect(p *engine.Peer, n engine.Notification) bool {
	s := t.sessionFor(p, false)
	if s == nil || s.ring == nil || !s.acquire() {
		return false
	}
	defer s.release()
	if s.isDead() {
		return false
	}
	ir := s.ring
	ir.mu.Lock()
	ok, err := ir.r.Push(n.Name, n.Msg)
	wake := ok && ir.r.Parked()
	ir.mu.Unlock()
	if err != nil {
		if err != nring.ErrBroken { //nolint:errorlint // the bare sentinel: broken before, logged then
			t.log.Warn("cma: the owner's notification ring is malformed; notifications to it go by RPC", "peer", p.Name, "err", err)
		}
		return false
	}
	if !ok {
		return false // full, or too large: the RPC takes it
	}
	t.ringed.Add(1)
	if wake {
		var b [shwire.WakeSize]byte
		shwire.EncodeWake(b[:])
		if _, err := s.conn.Write(b[:]); err != nil {
			// The notification is in the owner's memory; a sleeping
			// application finds it at its next call or wake.
			s.kill(fmt.Errorf("%w: wake message: %w", ErrPeerGone, err))
		}
	}
	return true
}

var _ engine.DirectNotifier = (*CMA)(nil)
