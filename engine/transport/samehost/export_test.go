package samehost

import "github.com/kvferry/kvferry/engine"

// HoldLastSlot stores the owner's current epoch in the last epoch slot (an
// inline copier's) of t's session to p, as a copy in progress does, and
// returns the session's slot count and a function that clears the slot.
func HoldLastSlot(t *CMA, p *engine.Peer) (slots int, clear func()) {
	s := t.sessionFor(p, false)
	if s == nil {
		return 0, func() {}
	}
	w := slotWord(s.slots, s.nslots-1)
	w.Store(s.ctl.epoch())
	return s.nslots, func() { w.Store(0) }
}

// TakeInlineCopiers takes every free inline copier of t, so that
// submissions go to the workers, and returns a function that gives them
// back.
func TakeInlineCopiers(t *CMA) (giveBack func()) {
	var ws []*cmaWorker
	for {
		select {
		case w := <-t.inline:
			ws = append(ws, w)
			continue
		default:
		}
		break
	}
	return func() {
		for _, w := range ws {
			t.inline <- w
		}
	}
}

// LockMirror makes t's registration mirror read as being written (its
// seqlock odd), as an owner whose thread is descheduled in the middle of an
// update leaves it, and returns the function that ends the update. The
// owner's own table updates wait meanwhile.
func LockMirror(t *CMA) (unlock func()) {
	n := t.node
	n.mu.Lock()
	n.ctl.word(ctlOffSeq).Add(1)
	return func() {
		n.ctl.word(ctlOffSeq).Add(1)
		n.mu.Unlock()
	}
}

// HostMaps returns how many regions of p's owner t's session maps now and
// how many copies went through such mappings (-1, 0 without a session or
// when the session maps nothing).
func HostMaps(t *CMA, p *engine.Peer) (regions int, copies uint64) {
	s := t.sessionFor(p, false)
	if s == nil || s.maps == nil {
		return -1, 0
	}
	return s.maps.count(), s.maps.copies.Load()
}

// OwnerSock returns the abstract socket address of t's node.
func OwnerSock(t *CMA) string { return t.node.sock }

// SetCallHook makes t move about callBytes per process_vm call (0:
// unchanged) and run f before each call with the slice of its first
// range. Call it before any Submit.
func SetCallHook(t *CMA, callBytes uint64, f func(first *engine.Slice)) {
	if callBytes > 0 {
		t.callBytes = callBytes
	}
	t.beforeCall = f
}

// RefuseCalls makes every later process_vm call of t fail with EPERM (on
// true), as a kernel whose ptrace policy tightened mid-session does.
func RefuseCalls(t *CMA, on bool) { t.refuseCalls.Store(on) }
