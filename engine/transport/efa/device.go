package efa

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/efa/fabric"
)

// Poller tunables.
const (
	// idleWaitMs is how long an idle poller parks on the CQ's wait object
	// before it looks at the clock and its stop signal again.
	idleWaitMs = 50
	// busyWaitMs is the same while operations are in flight.
	busyWaitMs = 1
	// maxBacklog bounds the operations waiting for a slot on one device;
	// beyond it a slice fails with engine.ErrTooManyRequests.
	maxBacklog = 1 << 16
	// pollBatch is how many completions one Poll reads.
	pollBatch = 64
	// postBatch is how many operations one Post hands to C.
	postBatch = 64
)

// pending is a slice's operation before it has a slot (or after the
// provider refused it for now).
type pending struct {
	s        *engine.Slice
	op       fabric.Op // all but Peer and Slot
	peer     []byte    // the peer device's endpoint address
	peerName string
	// What reroute needs to move the slice to another pair of devices:
	// the peer's record, the local registration, the remote region, the
	// pair in use and the pairs tried (pairBit).
	pi     *peerInfo
	m      *memReg
	r      PublishedRegion
	li, pd int
	tried  uint64
}

// flight is an operation the provider holds, by slot.
type flight struct {
	pending
	fiAddr uint64
	posted time.Time
	// expired: the deadline passed and the peer's address was dropped;
	// the slice fails at its completion or at reapAfter.
	expired   bool
	reapAfter time.Time
	// retired: the slice was failed at reapAfter while the provider still
	// held the operation; the slot is freed when its completion comes.
	retired bool
}

// device is one opened endpoint and its poller.
type device struct {
	t        *Transport
	idx      int
	name     string
	info     fabric.Info
	dev      *fabric.Device
	addr     []byte // the endpoint's address (fi_getname), kept past Close
	virtAddr bool
	mrLocal  bool

	mu struct {
		sync.Mutex
		slot    []flight // by slot: in use while s != nil or retired
		free    []uint32
		backlog []pending
		av      map[string]uint64 // peer endpoint address (raw) -> fi_addr
		// gone holds peer endpoints whose connection failed, and when:
		// operations to them fail at once instead of waiting for the
		// provider to give up again (a restarted peer has a new address).
		gone map[string]time.Time
	}

	inflightBytes atomic.Uint64
	bytesDone     atomic.Uint64
	slicesDone    atomic.Uint64
	slicesFailed  atomic.Uint64
	retried       atomic.Uint64 // slices moved from this device to another pair
	waiting       atomic.Bool   // the poller parks on the CQ
}

func openDevice(t *Transport, idx int, name string, in fabric.Info) (*device, error) {
	slots := t.cfg.Slots
	if in.TxSize > 0 && in.TxSize < slots {
		slots = in.TxSize
	}
	fd, err := fabric.Open(in, DefaultAVCount, 2*slots, slots)
	if err != nil {
		return nil, fmt.Errorf("efa: device %s: %w", name, err)
	}
	d := &device{t: t, idx: idx, name: name, info: in, dev: fd, addr: fd.Addr(), virtAddr: in.MRMode&fabric.MRVirtAddr != 0,
		mrLocal: in.MRMode&fabric.MRLocal != 0}
	d.mu.slot = make([]flight, slots)
	d.mu.av = map[string]uint64{}
	d.mu.gone = map[string]time.Time{}
	d.mu.free = make([]uint32, slots)
	for i := range d.mu.free {
		d.mu.free[i] = uint32(slots - 1 - i)
	}
	return d, nil
}

func (d *device) peerCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.av)
}

// wake makes a parked poller look at its backlog and stop signal.
func (d *device) wake() {
	if d.dev != nil && d.waiting.Load() {
		_ = d.dev.Signal()
	}
}

// fiAddr returns the AV address of a peer endpoint, inserting it once.
func (d *device) fiAddr(addr []byte) (uint64, error) {
	k := string(addr)
	d.mu.Lock()
	a, ok := d.mu.av[k]
	d.mu.Unlock()
	if ok {
		return a, nil
	}
	a, err := d.dev.Insert(addr)
	if err != nil {
		return 0, fmt.Errorf("efa: %s: peer address %s: %w", d.name, hex.EncodeToString(addr), err)
	}
	d.mu.Lock()
	if b, ok := d.mu.av[k]; ok { // inserted meanwhile: keep one
		d.mu.Unlock()
		_ = d.dev.Remove(a)
		return b, nil
	}
	d.mu.av[k] = a
	d.mu.Unlock()
	return a, nil
}

// goneTTL is how long a failed peer endpoint fails operations at once,
// at most (never longer than the transfer deadline, so that a peer back at
// the same address costs at most one deadline; a new incarnation of the
// peer clears it at once: forget).
const goneTTL = time.Minute

func (d *device) goneFor() time.Duration {
	if t := d.t.deadline; t > 0 && t < goneTTL {
		return t
	}
	return goneTTL
}

// forget clears what this device holds of a peer endpoint: its failure
// mark and its AV entry, which is inserted afresh at the next use (a new
// incarnation of the peer may answer at the old address: on EFA a reused
// QPN; its provider state must be new).
func (d *device) forget(addr []byte) {
	d.mu.Lock()
	_, gone := d.mu.gone[string(addr)]
	delete(d.mu.gone, string(addr))
	d.mu.Unlock()
	if gone {
		d.dropPeer(addr)
	}
}

// isGone reports whether addr is marked failed on d.
func (d *device) isGone(addr []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.mu.gone[string(addr)]
	return ok
}

// goneErr returns the error of an operation to a peer endpoint that
// failed within goneTTL, or nil.
func (d *device) goneErr(o pending) error {
	d.mu.Lock()
	at, ok := d.mu.gone[string(o.peer)]
	if ok && time.Since(at) > d.goneFor() {
		delete(d.mu.gone, string(o.peer))
		ok = false
	}
	d.mu.Unlock()
	if !ok {
		return nil
	}
	return fmt.Errorf("efa: %s %#x+%d on %q via %s: its endpoint failed %v ago: %w", opName(o.op.Write), o.s.Remote, o.s.Length,
		o.peerName, d.name, time.Since(at).Round(time.Millisecond), engine.ErrPeerGone)
}

// markGone records that a peer endpoint's connection failed and fails
// what waits for it in the backlog.
func (d *device) markGone(addr []byte) {
	var failed []pending
	d.mu.Lock()
	if len(d.mu.gone) >= DefaultAVCount {
		clear(d.mu.gone)
	}
	d.mu.gone[string(addr)] = time.Now()
	kept := d.mu.backlog[:0]
	for _, o := range d.mu.backlog {
		if string(o.peer) == string(addr) {
			failed = append(failed, o)
			continue
		}
		kept = append(kept, o)
	}
	d.mu.backlog = kept
	d.mu.Unlock()
	for _, o := range failed {
		d.fail(o.s, fmt.Errorf("efa: %s %#x+%d on %q via %s: its endpoint failed: %w", opName(o.op.Write), o.s.Remote, o.s.Length, o.peerName, d.name, engine.ErrPeerGone))
	}
}

// dropPeer removes a peer endpoint from the AV (after a failure or a
// deadline), so that its operations held by the provider fail and a later
// use reaches it again from scratch.
func (d *device) dropPeer(addr []byte) {
	k := string(addr)
	d.mu.Lock()
	a, ok := d.mu.av[k]
	delete(d.mu.av, k)
	d.mu.Unlock()
	if ok {
		if err := d.dev.Remove(a); err != nil {
			d.t.log.Debug("efa: removing a peer address failed", "device", d.name, "err", err)
		}
	}
}

// submit posts ops, or queues them behind an existing backlog; the caller
// holds t.life.
func (d *device) submit(ops []pending) {
	d.mu.Lock()
	if len(d.mu.backlog) > 0 {
		over := d.queueLocked(ops)
		d.mu.Unlock()
		d.failOver(over)
		d.wake()
		return
	}
	d.mu.Unlock()
	d.post(ops)
}

// queueLocked appends ops to the backlog and returns those beyond its
// bound, for the caller to fail once it has let go of d.mu.
func (d *device) queueLocked(ops []pending) (over []pending) {
	room := max(maxBacklog-len(d.mu.backlog), 0)
	if room < len(ops) {
		over = ops[room:]
		ops = ops[:room]
	}
	d.mu.backlog = append(d.mu.backlog, ops...)
	return over
}

// failOver fails operations the backlog had no room for.
func (d *device) failOver(over []pending) {
	for _, o := range over {
		d.fail(o.s, fmt.Errorf("efa: %s backlog full: %w", d.name, engine.ErrTooManyRequests))
	}
}

// post gives ops slots and hands them to the provider; what finds no slot
// or is refused for now (EAGAIN) goes to the backlog.
func (d *device) post(ops []pending) {
	var batch [postBatch]fabric.Op
	var addrs [postBatch]uint64
	var ok [postBatch]bool
	for len(ops) > 0 {
		chunk := ops[:min(len(ops), postBatch)]
		ops = ops[len(chunk):]
		// Peer addresses first: fi_av_insert is a call into C.
		for i, o := range chunk {
			if err := d.goneErr(o); err != nil {
				ok[i] = false
				d.failOrRetry(o, err)
				continue
			}
			a, err := d.fiAddr(o.peer)
			addrs[i], ok[i] = a, err == nil
			if err != nil {
				d.fail(o.s, err)
			}
		}
		var canceled []*engine.Slice
		var wait []pending
		now := time.Now()
		k := 0
		d.mu.Lock()
		for i, o := range chunk {
			switch {
			case !ok[i]:
			case o.s.Canceled():
				canceled = append(canceled, o.s)
			case len(d.mu.free) == 0:
				wait = append(wait, o)
			default:
				slot := d.mu.free[len(d.mu.free)-1]
				d.mu.free = d.mu.free[:len(d.mu.free)-1]
				d.mu.slot[slot] = flight{pending: o, fiAddr: addrs[i], posted: now}
				batch[k] = o.op
				batch[k].Peer, batch[k].Slot = addrs[i], slot
				k++
				d.inflightBytes.Add(o.s.Length)
			}
		}
		var over []pending
		if len(wait) > 0 { // out of slots: the rest waits for completions
			over = d.queueLocked(append(wait, ops...))
			ops = nil
		}
		d.mu.Unlock()
		d.failOver(over)
		for _, s := range canceled {
			s.Complete(engine.ErrCanceled)
		}
		for done := 0; done < k; {
			m, err := d.dev.Post(batch[done:k])
			done += m
			if done == k {
				break
			}
			if errors.Is(err, syscall.EAGAIN) {
				// The provider's queue is full (or rxm is connecting):
				// the rest waits for the poller, in front of ops.
				var back []pending
				d.mu.Lock()
				for _, b := range batch[done:k] {
					back = append(back, d.takeLocked(b.Slot).pending)
				}
				d.mu.backlog = append(append(back, ops...), d.mu.backlog...)
				var extra []pending
				if len(d.mu.backlog) > maxBacklog {
					extra = d.mu.backlog[maxBacklog:]
					d.mu.backlog = d.mu.backlog[:maxBacklog]
				}
				d.mu.Unlock()
				d.failOver(extra)
				d.wake()
				return
			}
			// This one failed at once; the ones after it are tried again.
			d.mu.Lock()
			f := d.takeLocked(batch[done].Slot)
			d.mu.Unlock()
			d.fail(f.s, fmt.Errorf("efa: post to %q via %s: %w: %w", f.peerName, d.name, engine.ErrPeerGone, err))
			done++
		}
	}
}

// takeLocked returns the flight of slot and frees the slot.
func (d *device) takeLocked(slot uint32) flight {
	f := d.mu.slot[slot]
	d.mu.slot[slot] = flight{}
	d.mu.free = append(d.mu.free, slot)
	if f.s != nil {
		d.inflightBytes.Add(^(f.s.Length - 1))
	}
	return f
}

// failOrRetry moves an operation whose path failed (engine.ErrPeerGone)
// to another pair of devices it has not tried (Transport.reroute), or
// fails its slice with err. Called from a poller or a submitter, while
// every device is open.
func (d *device) failOrRetry(o pending, err error) {
	if errors.Is(err, engine.ErrPeerGone) {
		if alt, ok := d.t.reroute(o); ok {
			d.retried.Add(1)
			d.t.log.Debug("efa: slice retried on another device pair", "peer", o.peerName, "from", d.name, "to", d.t.devs[alt.li].name,
				"peer_device", alt.pd, "err", err)
			d.t.devs[alt.li].submit([]pending{alt})
			return
		}
	}
	d.fail(o.s, err)
}

func (d *device) fail(s *engine.Slice, err error) {
	d.slicesFailed.Add(1)
	s.Complete(err)
}

// runPoller reads the device's completions until the transport closes
// (owner: Transport, started by New, stopped by Close through t.ctx and
// wake). It also posts the backlog and enforces the transfer deadline.
func (d *device) runPoller() {
	defer d.t.wg.Done()
	comps := make([]fabric.Comp, pollBatch)
	lastSweep := time.Now()
	for d.t.ctx.Err() == nil {
		wait := idleWaitMs
		if d.inflightBytes.Load() > 0 {
			wait = busyWaitMs
		}
		d.mu.Lock()
		backlog := len(d.mu.backlog) > 0 && len(d.mu.free) > 0
		d.mu.Unlock()
		if backlog {
			wait = 0
		}
		d.waiting.Store(wait > 0)
		n, err := d.pollOnce(comps, wait)
		d.waiting.Store(false)
		if err != nil {
			d.t.log.Error("efa: reading the completion queue failed", "device", d.name, "err", err)
			time.Sleep(time.Millisecond) // an error that repeats must not spin a CPU
		}
		if n > 0 {
			d.complete(comps[:n])
		}
		if backlog || n > 0 {
			d.postBacklog()
		}
		if now := time.Now(); now.Sub(lastSweep) >= 100*time.Millisecond {
			lastSweep = now
			d.sweep(now)
		}
	}
}

func (d *device) pollOnce(comps []fabric.Comp, wait int) (int, error) {
	d.t.life.RLock()
	defer d.t.life.RUnlock()
	if d.t.closed.Load() && d.t.ctx.Err() != nil {
		return 0, nil
	}
	return d.dev.Poll(comps, wait)
}

// complete finishes the operations of a batch of completions.
func (d *device) complete(comps []fabric.Comp) {
	var done [pollBatch]flight
	var errs [pollBatch]fabric.Comp
	k := 0
	d.mu.Lock()
	for _, c := range comps {
		if int(c.Slot) >= len(d.mu.slot) || d.mu.slot[c.Slot].s == nil && !d.mu.slot[c.Slot].retired {
			d.t.log.Warn("efa: completion without an operation", "device", d.name, "slot", c.Slot, "err", c.Err)
			continue
		}
		f := d.takeLocked(c.Slot)
		if f.retired {
			continue
		}
		done[k], errs[k] = f, c
		k++
	}
	d.mu.Unlock()
	for i := 0; i < k; i++ {
		f, c := &done[i], errs[i]
		if c.Err != 0 {
			d.dropPeer(f.peer)
			err := failErr(&f.pending, d.name, c.Err, c.ProvErrno)
			if errors.Is(err, engine.ErrPeerGone) {
				d.markGone(f.peer)
			}
			if f.expired {
				err = fmt.Errorf("efa: %s %#x+%d on %q via %s: no completion within %v: %w", opName(f.op.Write), f.s.Remote, f.s.Length, f.peerName, d.name, d.t.deadline, engine.ErrTimeout)
				d.fail(f.s, err)
				continue
			}
			d.failOrRetry(f.pending, err)
			continue
		}
		d.bytesDone.Add(f.s.Length)
		d.slicesDone.Add(1)
		f.s.Complete(nil)
	}
}

func opName(write uint32) string {
	if write != 0 {
		return "write"
	}
	return "read"
}

// postBacklog posts what waits, as far as slots allow.
func (d *device) postBacklog() {
	d.mu.Lock()
	n := min(len(d.mu.backlog), len(d.mu.free))
	if n == 0 {
		d.mu.Unlock()
		return
	}
	ops := append([]pending(nil), d.mu.backlog[:n]...)
	d.mu.backlog = append(d.mu.backlog[:0], d.mu.backlog[n:]...)
	d.mu.Unlock()
	d.t.life.RLock()
	defer d.t.life.RUnlock()
	if d.t.closed.Load() {
		for _, o := range ops {
			o.s.Complete(engine.ErrClosed)
		}
		return
	}
	d.post(ops)
}

// sweep enforces the transfer deadline: an operation in flight past it
// gets its peer's address dropped, which makes the provider fail what it
// holds for that peer; one still not completed a second later is failed
// with engine.ErrTimeout and its slot stays retired until the provider
// gives it back. Backlog entries past the deadline fail at once.
func (d *device) sweep(now time.Time) {
	if d.t.deadline <= 0 {
		return
	}
	var drop [][]byte
	var reaped, late []pending
	d.mu.Lock()
	for i := range d.mu.slot {
		f := &d.mu.slot[i]
		if f.s == nil {
			continue
		}
		switch {
		case !f.expired && now.Sub(f.posted) > d.t.deadline:
			f.expired = true
			f.reapAfter = now.Add(time.Second)
			drop = append(drop, f.peer)
		case f.expired && now.After(f.reapAfter):
			// The provider still holds the operation: fail the slice
			// and keep the slot retired until its completion comes.
			reaped = append(reaped, f.pending)
			d.inflightBytes.Add(^(f.s.Length - 1))
			f.s, f.retired = nil, true
		}
	}
	kept := d.mu.backlog[:0]
	for _, o := range d.mu.backlog {
		if now.Sub(o.s.Posted) > d.t.deadline {
			late = append(late, o)
			continue
		}
		kept = append(kept, o)
	}
	d.mu.backlog = kept
	d.mu.Unlock()
	for _, p := range drop {
		d.dropPeer(p)
	}
	for _, o := range reaped {
		d.fail(o.s, fmt.Errorf("efa: %s %#x+%d on %q via %s: no completion within %v: %w", opName(o.op.Write), o.s.Remote, o.s.Length, o.peerName, d.name, d.t.deadline, engine.ErrTimeout))
	}
	for _, o := range late {
		d.fail(o.s, fmt.Errorf("efa: %s %#x+%d on %q via %s: not posted within %v: %w", opName(o.op.Write), o.s.Remote, o.s.Length, o.peerName, d.name, d.t.deadline, engine.ErrTimeout))
	}
}

// close closes the device and fails whatever it still held (the caller
// holds t.life exclusively and the poller has stopped).
func (d *device) close() {
	if d.dev == nil {
		return
	}
	_ = d.dev.Close()
	d.dev = nil
	var left []*engine.Slice
	d.mu.Lock()
	for i := range d.mu.slot {
		if s := d.mu.slot[i].s; s != nil {
			left = append(left, s)
		}
		d.mu.slot[i] = flight{}
	}
	for _, o := range d.mu.backlog {
		left = append(left, o.s)
	}
	d.mu.backlog = nil
	d.mu.Unlock()
	for _, s := range left {
		s.Complete(engine.ErrClosed)
	}
}
