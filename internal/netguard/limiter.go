package netguard

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limiter caps concurrent connections in total and per remote IP. It is
// safe for concurrent use; the zero value admits nothing (use NewLimiter).
//
// A cap never locks honest peers out while a slot is held by a connection
// that does not use it. When a new connection finds its cap reached (its
// address's, or the total), it displaces, within that cap's scope:
//
//  1. the oldest connection that has not completed a frame (Slot.Frame,
//     Slot.Begin): a peer that connected and sent part of a header, or
//     nothing. With WithFrames, a connection whose socket already holds a
//     whole frame its server has not read yet (a new connection whose
//     goroutine has not run: under a flood the displacements come faster
//     than the scheduler) counts as framed;
//  2. else the connection idle longest: the one whose last completed frame
//     or served request ended earliest.
//
// Displacements within one address's slots are paced, at most one per
// DisplaceGap: the accept loop that would displace again sooner waits
// first. A peer flooding its address's cap then waits in the listener's
// accept queue, not in a slot, and an honest connection from that address
// waiting there behind the flood has sent its first frame by the time it
// is accepted; a connection that has not completed a frame lives at least
// perIP times DisplaceGap. The cost: while an address floods, the accept
// loop takes about a thousand of its connections a second, and new
// connections of other addresses queued behind them wait their turn. (At
// the total cap, of many addresses, a young connection has that many
// displacements ahead of it; those are not paced.)
//
// A connection serving a request (between Slot.Begin and Slot.End) is
// never displaced; the new connection is refused only when every slot of
// the scope serves one. The displaced connection is closed; its own
// Release is then a no-op. Every process of one host shares an address
// (eight GPU workers, a store client and a NIXL agent on one node), so a
// per-address cap alone would let one of them, or a slowloris from that
// host, shut the others out.
type Limiter struct {
	total, perIP int
	base         time.Time // origin of Slot.last

	mu struct {
		sync.Mutex
		n    int
		seq  uint64
		byIP map[string]*ipSlots
	}
	scratch []*Slot // pick's candidates; guarded by mu
	peek    []byte  // pick's peek buffer; guarded by mu
	// complete reports whether bytes received on a connection (peeked,
	// at most len(peek)) begin with a whole frame (WithFrames).
	complete  func([]byte) bool
	refused   atomic.Uint64
	displaced atomic.Uint64
	// lastDisplace is when the last displacement was, ns since base.
	lastDisplace atomic.Int64
	// admitting serializes Admit's pacing wait (an accept loop is one
	// goroutine; others wait their turn).
	admitting sync.Mutex
}

// ipSlots are the slots of one address, oldest first.
type ipSlots struct{ slots []*Slot }

// slotGone in Slot.state marks a slot released or displaced; the bits
// below count the requests being served.
const slotGone = int64(1) << 62

// Slot is one admitted connection's place under a Limiter. Its methods
// are safe for concurrent use.
type Slot struct {
	l   *Limiter
	ip  string
	seq uint64 // admission order

	state  atomic.Int64 // requests being served; slotGone once gone
	framed atomic.Bool  // a frame was completed
	last   atomic.Int64 // time of the last frame or request end, ns since l.base

	// Guarded by l.mu.
	closer    io.Closer // closes the connection when it is displaced
	removed   bool      // released or displaced
	displaced bool
}

// NewLimiter returns a limiter of total connections, at most perIP of them
// from one IP address. A non-positive perIP means total.
func NewLimiter(total, perIP int) *Limiter {
	if total <= 0 {
		total = 1
	}
	if perIP <= 0 || perIP > total {
		perIP = total
	}
	l := &Limiter{total: total, perIP: perIP, base: time.Now()}
	l.mu.byIP = make(map[string]*ipSlots)
	return l
}

// WithFrames makes l recognize a whole frame that has arrived on a
// connection but is not read yet: complete reports whether b, the first
// bytes received (at most peek of them, left in the socket), begin with
// one; a peer that sent peek bytes or more counts as having sent one. At
// a cap, before displacing a connection that has not completed a frame, l
// peeks at its socket (recv with MSG_PEEK|MSG_DONTWAIT, oldest first) and
// counts one holding a whole frame as framed. It returns l; call it before
// the first Admit.
func (l *Limiter) WithFrames(peek int, complete func(b []byte) bool) *Limiter {
	l.peek = make([]byte, max(peek, 1))
	l.complete = complete
	return l
}

// Limits returns the caps.
func (l *Limiter) Limits() (total, perIP int) { return l.total, l.perIP }

// Refused counts connections turned away.
func (l *Limiter) Refused() uint64 { return l.refused.Load() }

// Displaced counts connections closed to make room for a new one.
func (l *Limiter) Displaced() uint64 { return l.displaced.Load() }

// Open returns the connections admitted and neither released nor
// displaced.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.n
}

// DisplaceGap is the least time between two displacements of a Limiter.
const DisplaceGap = time.Millisecond

// ErrLimit is returned (wrapped) by Admit for a connection over a cap.
var ErrLimit = fmt.Errorf("connection limit reached")

// Admit admits a connection from addr, closed through c (nil: nothing to
// close; such a slot is displaced all the same) should it be displaced.
// At a cap it displaces a connection as the Limiter's comment says; it
// returns an error wrapping ErrLimit, naming the cap, only when every slot
// in the cap's scope serves a request. The caller calls Release once when
// the connection closes.
func (l *Limiter) Admit(addr net.Addr, c io.Closer) (*Slot, error) {
	ip := IP(addr)
	l.admitting.Lock()
	defer l.admitting.Unlock()
	if l.ipFull(ip) {
		// A displacement within ip's slots is coming: not sooner than
		// DisplaceGap after the last one.
		if wait := time.Duration(l.lastDisplace.Load() + int64(DisplaceGap) - l.now()); wait > 0 {
			time.Sleep(wait)
		}
	}
	l.mu.Lock()
	ips := l.mu.byIP[ip]
	var victim *Slot
	switch {
	case ips != nil && len(ips.slots) >= l.perIP:
		if victim = l.pickLocked(ips.slots); victim == nil {
			l.mu.Unlock()
			l.refused.Add(1)
			return nil, fmt.Errorf("%w: %d connections from %s, all serving requests", ErrLimit, l.perIP, ip)
		}
	case l.mu.n >= l.total:
		if victim = l.pickAllLocked(); victim == nil {
			l.mu.Unlock()
			l.refused.Add(1)
			return nil, fmt.Errorf("%w: %d connections, all serving requests", ErrLimit, l.total)
		}
	}
	var vc io.Closer
	if victim != nil {
		vc = victim.closer
		victim.displaced = true
		l.removeLocked(victim)
		ips = l.mu.byIP[ip]
	}
	l.mu.seq++
	s := &Slot{l: l, ip: ip, seq: l.mu.seq, closer: c}
	s.last.Store(l.now())
	if ips == nil {
		ips = &ipSlots{}
		l.mu.byIP[ip] = ips
	}
	ips.slots = append(ips.slots, s)
	l.mu.n++
	l.mu.Unlock()
	if victim != nil {
		l.lastDisplace.Store(l.now())
		l.displaced.Add(1)
		if vc != nil {
			_ = vc.Close()
		}
	}
	return s, nil
}

func (l *Limiter) now() int64 { return int64(time.Since(l.base)) }

// ipFull reports whether a connection from ip finds ip's cap reached.
func (l *Limiter) ipFull(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ips := l.mu.byIP[ip]
	return ips != nil && len(ips.slots) >= l.perIP
}

// pickLocked chooses and takes (marks gone) the slot of ss to displace,
// or returns nil when all serve requests.
func (l *Limiter) pickLocked(ss []*Slot) *Slot {
	return l.pick(func(yield func([]*Slot)) { yield(ss) })
}

// pickAllLocked is pickLocked over every slot.
func (l *Limiter) pickAllLocked() *Slot {
	return l.pick(func(yield func([]*Slot)) {
		for _, ips := range l.mu.byIP {
			yield(ips.slots)
		}
	})
}

// pick chooses and takes the victim among the slots that each yields:
// the oldest idle unframed slot whose socket was read dry, else the
// oldest idle unframed one, else the framed one idle longest. The caller
// holds l.mu; the unread-bytes check is one ioctl per slot looked at, in
// age order (a stalled connection is usually the first).
func (l *Limiter) pick(each func(yield func([]*Slot))) *Slot {
	for {
		unframed := l.scratch[:0]
		var framed *Slot
		each(func(ss []*Slot) {
			for _, s := range ss {
				switch {
				case s.state.Load() != 0: // serving a request
				case !s.framed.Load():
					unframed = append(unframed, s)
				case framed == nil || worse(s, framed):
					framed = s
				}
			}
		})
		slices.SortFunc(unframed, func(a, b *Slot) int { return cmp.Compare(a.seq, b.seq) })
		var v *Slot
		for _, s := range unframed {
			if l.complete == nil || !l.sentFrame(s.closer) {
				v = s
				break
			}
			// A whole frame waits for its server: framed, idle since
			// admission.
			s.framed.Store(true)
			if framed == nil || worse(s, framed) {
				framed = s
			}
		}
		if v == nil {
			v = framed
		}
		clear(unframed)
		l.scratch = unframed[:0]
		if v == nil || v.state.CompareAndSwap(0, slotGone) {
			return v
		}
		// It began serving a request meanwhile: choose again.
	}
}

// sentFrame reports whether c's socket holds a whole frame not read yet
// (WithFrames); false when c has no socket to peek at. The caller holds
// l.mu.
func (l *Limiter) sentFrame(c io.Closer) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if err := rc.Control(func(fd uintptr) {
		n, _, err = unix.Recvfrom(int(fd), l.peek, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil || n <= 0 {
		return false
	}
	return n >= len(l.peek) || l.complete(l.peek[:n])
}

// HTTPHeaderComplete reports whether b begins with the whole header of an
// HTTP/1 request (its blank line arrived): a WithFrames predicate for
// HTTP listeners.
func HTTPHeaderComplete(b []byte) bool { return bytes.Contains(b, []byte("\r\n\r\n")) }

// worse reports whether a should be displaced before b.
func worse(a, b *Slot) bool {
	af, bf := a.framed.Load(), b.framed.Load()
	switch {
	case af != bf:
		return !af
	case !af:
		return a.seq < b.seq
	}
	if al, bl := a.last.Load(), b.last.Load(); al != bl {
		return al < bl
	}
	return a.seq < b.seq
}

// removeLocked takes s off the books.
func (l *Limiter) removeLocked(s *Slot) {
	if s.removed {
		return
	}
	s.removed = true
	s.closer = nil
	l.mu.n--
	ips := l.mu.byIP[s.ip]
	for i, x := range ips.slots {
		if x == s {
			ips.slots = append(ips.slots[:i], ips.slots[i+1:]...)
			break
		}
	}
	if len(ips.slots) == 0 {
		delete(l.mu.byIP, s.ip)
	}
}

// Frame records that the connection completed a frame (a request header,
// a hello, a reply sent): it now counts as used, and as active now.
func (s *Slot) Frame() {
	if !s.framed.Load() {
		s.framed.Store(true)
	}
	s.last.Store(s.l.now())
}

// Begin records that a request (a completed frame) is being served: the
// slot is not displaced until the matching End. It returns false when the
// slot was displaced already; the caller then drops the connection.
func (s *Slot) Begin() bool {
	for {
		v := s.state.Load()
		if v&slotGone != 0 {
			return false
		}
		if s.state.CompareAndSwap(v, v+1) {
			if !s.framed.Load() {
				s.framed.Store(true)
			}
			return true
		}
	}
}

// End records that the request begun by Begin was served; the connection
// counts as idle from now.
func (s *Slot) End() {
	s.last.Store(s.l.now())
	s.state.Add(-1)
}

// Displaced reports whether the slot was taken for another connection.
func (s *Slot) Displaced() bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.displaced
}

// Rebind makes c the closer used to displace the connection (its
// descriptor moved: a socket taken out of the network poller). When the
// slot was displaced meanwhile it closes c and returns false.
func (s *Slot) Rebind(c io.Closer) bool {
	s.l.mu.Lock()
	if s.removed {
		s.l.mu.Unlock()
		if c != nil {
			_ = c.Close()
		}
		return false
	}
	s.closer = c
	s.l.mu.Unlock()
	return true
}

// Release gives the slot back; a second Release, or one after the slot
// was displaced, does nothing. A nil Slot is ignored.
func (s *Slot) Release() {
	if s == nil {
		return
	}
	s.state.Or(slotGone)
	s.l.mu.Lock()
	s.l.removeLocked(s)
	s.l.mu.Unlock()
}
