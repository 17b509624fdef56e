// Package nring is a single-producer, single-consumer ring of notifications
// in memory that two processes of one host map: the same-host transport's
// way of handing a notification to a peer engine without a round trip
// through the peer's goroutines. The producer (an initiator) writes a
// record and publishes it by advancing the tail; once Push returns, the
// notification lies in the peer's memory, and the peer's application
// thread reads it in its own getNotifs call.
//
// Neither side trusts the other: every index and length read from the
// shared memory is checked before use, a malformed ring is reported as
// broken (ErrBroken) and never read or written again, and no access leaves
// the mapping.
//
// Layout (little endian; every word on its own cache line):
//
//	0    magic u64      8 capacity u64 (data bytes, a power of two)
//	64   head u64       (consumer: bytes consumed; producer reads)
//	128  tail u64       (producer: bytes published; consumer reads)
//	192  parked u32     (consumer: 1 while an application thread sleeps for
//	                     a notification; the producer then wakes it)
//	HeaderBytes: the data, capacity bytes
//
// A record is 8-aligned: total u32 (bytes of the record with this header,
// padded to 8), nameLen u32, msgLen u32, reserved u32, the name, the
// message. A record never wraps:
// where the bytes left before the end of the data cannot hold it, the
// producer writes a skip marker (total = Skip) and starts at offset 0.
package nring

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

const (
	// Magic marks an initialised ring ("kvfnring").
	Magic = 0x676e69726e66766b
	// HeaderBytes is the size of the header before the data.
	HeaderBytes = 4096
	// Skip is the total of a skip marker.
	Skip = 0xffffffff

	offMagic  = 0
	offCap    = 8
	offHead   = 64
	offTail   = 128
	offParked = 192

	recHeader = 16
)

// ErrBroken marks a ring whose shared words or records make no sense; the
// side that sees it stops using the ring.
var ErrBroken = errors.New("notification ring broken")

// Ring is one side's view of a mapped ring.
type Ring struct {
	mem  []byte
	data []byte
	cap  uint64
	mask uint64
	// pos is this side's own index (the producer's tail or the consumer's
	// head), kept privately: the shared copy is only ever written from it.
	pos    uint64
	broken bool
}

func words(mem []byte) bool {
	return len(mem) > HeaderBytes && uintptr(unsafe.Pointer(&mem[0]))%64 == 0
}

func (r *Ring) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}

func (r *Ring) parkedWord() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[offParked]))
}

// Init lays out a new ring over mem (the consumer's side): mem must be
// 64-aligned, and its bytes past the header a power of two of at least
// 4 KiB are the data.
func Init(mem []byte) (*Ring, error) {
	if !words(mem) {
		return nil, fmt.Errorf("ring of %d bytes: too small or unaligned: %w", len(mem), ErrBroken)
	}
	c := uint64(len(mem) - HeaderBytes)
	if c < 4096 || bits.OnesCount64(c) != 1 {
		return nil, fmt.Errorf("ring data of %d bytes: not a power of two of at least 4 KiB: %w", c, ErrBroken)
	}
	r := &Ring{mem: mem, data: mem[HeaderBytes:], cap: c, mask: c - 1}
	r.word(offHead).Store(0)
	r.word(offTail).Store(0)
	r.parkedWord().Store(0)
	r.word(offCap).Store(c)
	r.word(offMagic).Store(Magic)
	return r, nil
}

// Attach views a ring another process laid out over mem (the producer's
// side); it checks the header against the mapping's size.
func Attach(mem []byte) (*Ring, error) {
	if !words(mem) {
		return nil, fmt.Errorf("ring of %d bytes: too small or unaligned: %w", len(mem), ErrBroken)
	}
	r := &Ring{mem: mem}
	c := r.word(offCap).Load()
	if r.word(offMagic).Load() != Magic || c != uint64(len(mem)-HeaderBytes) || bits.OnesCount64(c) != 1 {
		return nil, fmt.Errorf("ring header (capacity %d in a mapping of %d bytes): %w", c, len(mem), ErrBroken)
	}
	r.data, r.cap, r.mask = mem[HeaderBytes:], c, c-1
	r.pos = r.word(offTail).Load()
	if h := r.word(offHead).Load(); r.pos-h > c {
		return nil, fmt.Errorf("ring indices head %d tail %d: %w", h, r.pos, ErrBroken)
	}
	return r, nil
}

// MaxRecord is the largest name plus message one Push takes for a ring of
// data capacity c: a quarter of it, less the record header.
func MaxRecord(c uint64) int { return int(c/4) - recHeader }

func recordSize(name, msg int) uint64 { return (uint64(recHeader+name+msg) + 7) &^ 7 }

// Push appends a notification (producer). It reports false, writing
// nothing, when the record is too large for the ring or the ring has no
// room for it now, and ErrBroken when the consumer's index is impossible.
// Only one goroutine at a time may push.
func (r *Ring) Push(name, msg string) (bool, error) {
	if r.broken {
		return false, ErrBroken
	}
	if len(name)+len(msg) > MaxRecord(r.cap) {
		return false, nil
	}
	size := recordSize(len(name), len(msg))
	head := r.word(offHead).Load()
	used := r.pos - head
	if used > r.cap || head&7 != 0 {
		r.broken = true
		return false, fmt.Errorf("ring indices head %d tail %d: %w", head, r.pos, ErrBroken)
	}
	off := r.pos & r.mask
	skip := uint64(0)
	if left := r.cap - off; left < size {
		skip = left
	}
	if used+skip+size > r.cap {
		return false, nil
	}
	if skip > 0 {
		putU32(r.data[off:], Skip)
		off = 0
	}
	rec := r.data[off : off+size]
	putU32(rec[0:], uint32(size))
	putU32(rec[4:], uint32(len(name)))
	putU32(rec[8:], uint32(len(msg)))
	putU32(rec[12:], 0)
	copy(rec[recHeader:], name)
	copy(rec[recHeader+len(name):], msg)
	r.pos += skip + size
	r.word(offTail).Store(r.pos) // publishes the record (release)
	return true, nil
}

// Parked reports whether the consumer sleeps for a notification
// (producer): after a Push that reads true, the producer must wake it.
func (r *Ring) Parked() bool { return r.parkedWord().Load() != 0 }

// SetParked announces (consumer) that an application thread is about to
// sleep for a notification, or no longer does. After setting it the
// consumer must look at Pending once more before it sleeps.
func (r *Ring) SetParked(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	r.parkedWord().Store(v)
}

// Pending reports whether a published record waits to be drained
// (consumer).
func (r *Ring) Pending() bool { return !r.broken && r.word(offTail).Load() != r.pos }

// Drain hands the published records to take, oldest first, until take
// refuses one (that record stays in the ring, for a later Drain) or none
// is left, and frees the ring space of those taken (consumer). It returns
// how many were taken, and ErrBroken (after taking the valid records
// before it) when the producer's index or a record is malformed.
func (r *Ring) Drain(take func(name, msg string) bool) (int, error) {
	if r.broken {
		return 0, ErrBroken
	}
	tail := r.word(offTail).Load() // acquire: the records before it are complete
	if tail-r.pos > r.cap || tail&7 != 0 {
		return r.fail(0, "tail %d with head %d", tail, r.pos)
	}
	n := 0
	for r.pos != tail {
		off := r.pos & r.mask
		total := uint64(getU32(r.data[off:]))
		if total == Skip {
			if r.cap-off > tail-r.pos {
				return r.fail(n, "skip at %d past the tail %d", r.pos, tail)
			}
			r.pos += r.cap - off
			continue
		}
		if total < recHeader || total > r.cap-off || total > tail-r.pos {
			return r.fail(n, "record at %d: %d bytes", r.pos, total)
		}
		nameLen, msgLen := uint64(getU32(r.data[off+4:])), uint64(getU32(r.data[off+8:]))
		if recordSize(int(nameLen), int(msgLen)) != total {
			return r.fail(n, "record at %d: %d bytes for a name of %d and a message of %d", r.pos, total, nameLen, msgLen)
		}
		rec := r.data[off : off+total]
		name := string(rec[recHeader : recHeader+nameLen])
		msg := string(rec[recHeader+nameLen : recHeader+nameLen+msgLen])
		if !take(name, msg) {
			break
		}
		r.pos += total
		r.word(offHead).Store(r.pos)
		n++
	}
	r.word(offHead).Store(r.pos)
	return n, nil
}

func (r *Ring) fail(n int, format string, args ...any) (int, error) {
	r.broken = true
	return n, fmt.Errorf("notification ring: "+format+": %w", append(args, ErrBroken)...)
}

// Broken reports whether this side stopped using the ring.
func (r *Ring) Broken() bool { return r.broken }

// Capacity is the ring's data capacity in bytes.
func (r *Ring) Capacity() uint64 { return r.cap }

func putU32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func getU32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
