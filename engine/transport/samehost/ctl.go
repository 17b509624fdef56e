package samehost

import (
	"runtime"
	"sort"
	"sync/atomic"
	"time"
)

// The control page is a memfd the owner maps read-write and every cma
// initiator maps read-only. It mirrors the owner's registered regions and
// carries the registration epoch:
//
//	off 0     magic
//	off 8     nonce     random per owner; the cma probe reads it across processes
//	off 16    epoch     bumped after every removal; epochClosed once the owner closes
//	off 24    seq       seqlock over count, overflow and the table (odd while written)
//	off 32    count     entries in the table
//	off 40    overflow  1 when the owner has more regions than the table holds
//	off 4096  table     count entries {addr, length}, sorted by addr
//
// Every field is an 8-byte word accessed with atomic loads and stores.
const (
	ctlMagic       = 0x314c54435346564b // "KVFSCTL1"
	ctlOffMagic    = 0
	ctlOffNonce    = 8
	ctlOffEpoch    = 16
	ctlOffSeq      = 24
	ctlOffCount    = 32
	ctlOffOverflow = 40
	ctlOffTable    = 4096
	// ctlEntries is the table's capacity; an owner with more regions sets
	// overflow, and initiators then use shm (whose owner-side checks have
	// no limit).
	ctlEntries = 1 << 16
	ctlBytes   = ctlOffTable + ctlEntries*16
	// epochClosed is the epoch of a closed owner.
	epochClosed = ^uint64(0)
)

// Slot pages: one per cma session, read-write on both sides; slot i is the
// word at i*slotStride. The initiator asks for Workers+CMAInlineSlots slots
// in its hello: slot i < Workers belongs to worker i, and slot Workers+k to
// inline copier k. Each stores the epoch it works in before it validates
// and copies, and 0 when done; the owner drains every slot it granted.
const (
	slotStride = 64 // one cache line per slot
	slotBytes  = 4096
	maxSlots   = slotBytes / slotStride
)

// ctlView reads or writes a control page mapping.
type ctlView struct{ m *shmap }

func (c ctlView) word(off uint64) *atomic.Uint64 { return c.m.u64(off) }
func (c ctlView) magic() uint64                  { return c.word(ctlOffMagic).Load() }
func (c ctlView) nonce() uint64                  { return c.word(ctlOffNonce).Load() }
func (c ctlView) epoch() uint64                  { return c.word(ctlOffEpoch).Load() }
func (c ctlView) entryAddr(i uint64) *atomic.Uint64 {
	return c.word(ctlOffTable + 16*i)
}
func (c ctlView) entryLen(i uint64) *atomic.Uint64 {
	return c.word(ctlOffTable + 16*i + 8)
}

// probeAddr is the owner-side address of the nonce, which an initiator
// reads with process_vm_readv to prove that the pid is the owner and that
// the kernel allows the access.
func (c ctlView) probeAddr() uint64 { return uint64(c.m.addr()) + ctlOffNonce }

// entry is one table row.
type entry struct{ addr, length uint64 }

// update runs f, which changes the table, inside the seqlock (the owner is
// the only writer).
func (c ctlView) update(f func()) {
	seq := c.word(ctlOffSeq)
	seq.Add(1) // odd: readers retry
	f()
	seq.Add(1)
}

// writeTable replaces the table with rows (sorted), rewriting only from the
// first row that differs from old. The owner is the only writer.
func (c ctlView) writeTable(old, rows []entry) {
	seq := c.word(ctlOffSeq)
	seq.Add(1) // odd: readers retry
	n := min(len(rows), ctlEntries)
	i := 0
	for i < n && i < len(old) && old[i] == rows[i] {
		i++
	}
	for ; i < n; i++ {
		c.entryAddr(uint64(i)).Store(rows[i].addr)
		c.entryLen(uint64(i)).Store(rows[i].length)
	}
	c.word(ctlOffCount).Store(uint64(n))
	var over uint64
	if len(rows) > ctlEntries {
		over = 1
	}
	c.word(ctlOffOverflow).Store(over)
	seq.Add(1)
}

// lookupResult is what a table read found for one range.
type lookupResult uint8

const (
	lookupOK lookupResult = iota
	lookupMissing
	lookupOverflow
	lookupBusy // the table stayed locked past the wait, or its owner is gone
)

// inlineTableWait is how long a copy in the submitting goroutine waits for
// a locked table before it hands the copy to the workers: Submit stays
// bounded. An owner's update takes microseconds, but its thread can be
// descheduled in the middle of one on a loaded host (or stopped at a
// preemption point) for milliseconds.
const inlineTableWait = time.Millisecond

// validate checks every range of rs against the table under the seqlock and
// writes one result per range into out. A locked table (its owner is
// writing) is read again, spinning at first, then yielding, then sleeping
// up to tableNap between looks; validate gives up with lookupBusy once it
// stayed locked for wait, or as soon as gone (nil: not asked; called only
// while sleeping) reports the owner gone: an owner that died in the middle
// of an update leaves the table locked for good.
func (c ctlView) validate(rs []rng, out []lookupResult, wait time.Duration, gone func() bool) {
	seq := c.word(ctlOffSeq)
	var start time.Time
	nap := time.Duration(0)
	for spins := 0; ; spins++ {
		s1 := seq.Load()
		if s1&1 == 0 {
			over := c.word(ctlOffOverflow).Load() != 0
			n := min(c.word(ctlOffCount).Load(), ctlEntries)
			for i, r := range rs {
				switch {
				case over:
					out[i] = lookupOverflow
				case c.contains(n, r.addr, r.length):
					out[i] = lookupOK
				default:
					out[i] = lookupMissing
				}
			}
			if seq.Load() == s1 {
				return
			}
		}
		if spins <= 64 {
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		if now.Sub(start) >= wait || (nap > 0 && gone != nil && gone()) {
			for i := range rs {
				out[i] = lookupBusy
			}
			return
		}
		if now.Sub(start) < inlineTableWait || wait <= inlineTableWait {
			runtime.Gosched()
			continue
		}
		nap = min(max(2*nap, 20*time.Microsecond), tableNap)
		time.Sleep(nap)
	}
}

// tableNap is the longest sleep between two looks at a locked table.
const tableNap = time.Millisecond

// contains reports whether [addr, addr+length) lies inside one of the first
// n table rows.
func (c ctlView) contains(n, addr, length uint64) bool {
	end := addr + length
	if length == 0 || end < addr {
		return false
	}
	// The last row whose start is <= addr.
	i := sort.Search(int(n), func(i int) bool { return c.entryAddr(uint64(i)).Load() > addr }) - 1
	if i < 0 {
		return false
	}
	a, l := c.entryAddr(uint64(i)).Load(), c.entryLen(uint64(i)).Load()
	return addr >= a && end <= a+l && a+l >= a
}

// rng is a remote range to validate.
type rng struct{ addr, length uint64 }

// slotWord returns slot i of a slot page.
func slotWord(m *shmap, i int) *atomic.Uint64 { return m.u64(uint64(i) * slotStride) }
