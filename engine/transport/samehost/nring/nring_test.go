package nring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"gotest.tools/v3/assert"
)

// aligned returns n bytes starting on a 64-byte boundary.
func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))%64)) % 64
	return b[off : off+n]
}

func pair(t testing.TB, data int) (*Ring, *Ring) {
	t.Helper()
	mem := aligned(HeaderBytes + data)
	c, err := Init(mem)
	assert.NilError(t, err)
	p, err := Attach(mem)
	assert.NilError(t, err)
	return p, c
}

type note struct{ Name, Msg string }

func drainAll(t testing.TB, c *Ring) []note {
	t.Helper()
	var got []note
	_, err := c.Drain(func(name, msg string) bool { got = append(got, note{name, msg}); return true })
	assert.NilError(t, err)
	return got
}

func TestPushDrainInOrderAcrossWraps(t *testing.T) {
	p, c := pair(t, 4096)
	var want, got []note
	for i := range 5000 {
		n := note{fmt.Sprintf("agent-%d", i%7), strings.Repeat("x", i%300) + fmt.Sprint(i)}
		ok, err := p.Push(n.Name, n.Msg)
		assert.NilError(t, err)
		if !ok { // full: the consumer catches up, then it fits
			got = append(got, drainAll(t, c)...)
			ok, err = p.Push(n.Name, n.Msg)
			assert.NilError(t, err)
			assert.Assert(t, ok, "record %d does not fit an empty ring", i)
		}
		want = append(want, n)
		if i%13 == 0 {
			got = append(got, drainAll(t, c)...)
		}
	}
	got = append(got, drainAll(t, c)...)
	assert.DeepEqual(t, got, want)
	assert.Assert(t, !c.Pending())
}

func TestBytesExact(t *testing.T) {
	p, c := pair(t, 4096)
	msgs := []string{"", "\x00", "a\x00b\xff", strings.Repeat("\xfe", 1000)}
	for _, m := range msgs {
		ok, err := p.Push("", m)
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}
	got := drainAll(t, c)
	assert.Equal(t, len(got), len(msgs))
	for i := range msgs {
		assert.Equal(t, got[i].Msg, msgs[i])
	}
}

func TestFullAndTooLarge(t *testing.T) {
	p, c := pair(t, 4096)
	ok, err := p.Push("n", strings.Repeat("m", MaxRecord(4096)))
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a record over a quarter of the ring is refused")
	pushed := 0
	for {
		ok, err := p.Push("n", strings.Repeat("m", 100))
		assert.NilError(t, err)
		if !ok {
			break
		}
		pushed++
	}
	assert.Equal(t, pushed, int(4096/recordSize(1, 100)))
	assert.Equal(t, len(drainAll(t, c)), pushed)
}

func TestRefusedRecordStays(t *testing.T) {
	p, c := pair(t, 4096)
	for i := range 3 {
		ok, _ := p.Push("a", fmt.Sprint(i))
		assert.Assert(t, ok)
	}
	n, err := c.Drain(func(_, msg string) bool { return msg != "1" })
	assert.NilError(t, err)
	assert.Equal(t, n, 1)
	assert.Assert(t, c.Pending())
	assert.DeepEqual(t, drainAll(t, c), []note{{"a", "1"}, {"a", "2"}})
}

func TestParked(t *testing.T) {
	p, c := pair(t, 4096)
	assert.Assert(t, !p.Parked())
	c.SetParked(true)
	assert.Assert(t, p.Parked())
	c.SetParked(false)
	assert.Assert(t, !p.Parked())
}

// TestHostileIndices: impossible indices or records written by the other
// process break the ring for the side that sees them, never panic or
// reach outside the mapping.
func TestHostileIndices(t *testing.T) {
	t.Run("tail far ahead", func(t *testing.T) {
		_, c := pair(t, 4096)
		c.word(offTail).Store(1 << 40)
		_, err := c.Drain(func(string, string) bool { return true })
		assert.Assert(t, errors.Is(err, ErrBroken))
		assert.Assert(t, !c.Pending())
	})
	t.Run("record longer than published", func(t *testing.T) {
		p, c := pair(t, 4096)
		ok, _ := p.Push("a", "b")
		assert.Assert(t, ok)
		binary.LittleEndian.PutUint32(c.data[0:], 4000)
		_, err := c.Drain(func(string, string) bool { return true })
		assert.Assert(t, errors.Is(err, ErrBroken))
	})
	t.Run("name longer than record", func(t *testing.T) {
		p, c := pair(t, 4096)
		ok, _ := p.Push("a", "b")
		assert.Assert(t, ok)
		binary.LittleEndian.PutUint32(c.data[4:], 1<<31)
		_, err := c.Drain(func(string, string) bool { return true })
		assert.Assert(t, errors.Is(err, ErrBroken))
	})
	t.Run("head behind by more than the ring", func(t *testing.T) {
		p, c := pair(t, 4096)
		ok, _ := p.Push("a", "b")
		assert.Assert(t, ok)
		c.word(offHead).Store(1 << 50)
		_, err := p.Push("a", "b")
		assert.Assert(t, errors.Is(err, ErrBroken))
		_, err = p.Push("a", "b")
		assert.Assert(t, errors.Is(err, ErrBroken), "a broken ring stays broken")
	})
	t.Run("bad header", func(t *testing.T) {
		mem := aligned(HeaderBytes + 4096)
		_, err := Attach(mem)
		assert.Assert(t, errors.Is(err, ErrBroken))
		_, err = Init(aligned(HeaderBytes + 3000))
		assert.Assert(t, errors.Is(err, ErrBroken))
	})
}

// TestConcurrent: one producer and one consumer goroutine, as the two
// processes run; every message arrives once, in order.
func TestConcurrent(t *testing.T) {
	p, c := pair(t, 8192)
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; {
			ok, err := p.Push("p", fmt.Sprint(i))
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				i++
			}
		}
	}()
	next := 0
	for next < n {
		_, err := c.Drain(func(name, msg string) bool {
			if msg != fmt.Sprint(next) {
				t.Fatalf("got %q, want %d", msg, next)
			}
			next++
			return true
		})
		assert.NilError(t, err)
	}
	wg.Wait()
}

// FuzzDrain: whatever the producer's side of the memory holds, Drain
// neither panics nor returns a record outside the data.
func FuzzDrain(f *testing.F) {
	f.Add(uint64(64), []byte{64, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'})
	f.Add(uint64(4096), []byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, tail uint64, data []byte) {
		mem := aligned(HeaderBytes + 4096)
		c, err := Init(mem)
		assert.NilError(t, err)
		copy(c.data, data)
		c.word(offTail).Store(tail)
		_, _ = c.Drain(func(name, msg string) bool {
			assert.Assert(t, len(name)+len(msg) <= 4096)
			return true
		})
	})
}
