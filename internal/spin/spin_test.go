package spin

import (
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestBudget(t *testing.T) {
	assert.Equal(t, Budget(0), Default)
	assert.Equal(t, Budget(-1), time.Duration(0))
	assert.Equal(t, Budget(time.Microsecond), time.Microsecond)
	assert.Equal(t, Budget(time.Hour), Max)
}

func TestUntil(t *testing.T) {
	assert.Assert(t, Until(0, true, func() bool { return true }))
	assert.Assert(t, !Until(0, true, func() bool { return false }))
	for _, yield := range []bool{true, false} {
		var n atomic.Int32
		assert.Assert(t, Until(time.Second, yield, func() bool { return n.Add(1) == 3 }))
		assert.Equal(t, n.Load(), int32(3))
		calls := 0
		assert.Assert(t, !Until(time.Millisecond, yield, func() bool { calls++; return false }))
		assert.Assert(t, calls > 1)
	}
}

// A yielding poll hands its P to the goroutines it waits for when there is
// only one P (a sched_yield would not run them: the poll would last until
// the runtime preempts it, 10 ms), and yields its thread, keeping the P,
// when there are more.
func TestUntilYieldsToGoroutinesOnOneP(t *testing.T) {
	assert.Equal(t, yielder(false), yieldNone)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	assert.Equal(t, yielder(true), yieldThread)
	runtime.GOMAXPROCS(1)
	assert.Equal(t, yielder(true), yieldP)
	for _, shared := range []bool{false, true} {
		for i := range 20 {
			var set atomic.Bool
			go set.Store(true)
			assert.Assert(t, until(5*time.Millisecond, true, shared, set.Load), "shared %v, try %d: the goroutine polled for never ran", shared, i)
		}
	}
}

func pipe(t *testing.T) (a, b net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	assert.NilError(t, err)
	b = <-acc
	assert.Assert(t, b != nil)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestReader(t *testing.T) {
	a, b := pipe(t)
	r := NewReader(b)
	assert.Assert(t, r != nil)
	buf := make([]byte, 16)

	// Nothing sent: nothing read, ok false.
	_, _, ok := r.Read(buf, 200*time.Microsecond, true)
	assert.Assert(t, !ok)
	// Off or nil: never polls.
	_, _, ok = r.Read(buf, 0, true)
	assert.Assert(t, !ok)
	_, _, ok = (*Reader)(nil).Read(buf, time.Second, true)
	assert.Assert(t, !ok)

	// Bytes already there, and bytes that come while polling.
	_, err := a.Write([]byte("hello"))
	assert.NilError(t, err)
	n, err, ok := r.Read(buf, 5*time.Second, false)
	assert.Assert(t, ok)
	assert.NilError(t, err)
	assert.Equal(t, string(buf[:n]), "hello")
	go func() {
		time.Sleep(time.Millisecond)
		_, _ = a.Write([]byte("late"))
	}()
	got := ""
	for len(got) < 4 {
		n, err, ok = r.Read(buf, 5*time.Second, true)
		assert.Assert(t, ok)
		assert.NilError(t, err)
		got += string(buf[:n])
	}
	assert.Equal(t, got, "late")

	// A passed deadline: ok false, and the blocking read reports it.
	assert.NilError(t, b.SetReadDeadline(time.Unix(1, 0)))
	_, _, ok = r.Read(buf, time.Second, true)
	assert.Assert(t, !ok)
	assert.NilError(t, b.SetReadDeadline(time.Time{}))

	// End of stream.
	a.Close()
	_, err, ok = r.Read(buf, 5*time.Second, true)
	assert.Assert(t, ok)
	assert.Equal(t, err, io.EOF)

	// Closed locally: ok false.
	b.Close()
	_, _, ok = r.Read(buf, time.Second, true)
	assert.Assert(t, !ok)
}

func TestReadNow(t *testing.T) {
	a, b := pipe(t)
	r := NewReader(b)
	buf := make([]byte, 16)
	_, err := r.ReadNow(buf)
	assert.Equal(t, err, ErrWouldBlock)
	_, err = (*Reader)(nil).ReadNow(buf)
	assert.Equal(t, err, ErrWouldBlock)
	_, err = a.Write([]byte("hi"))
	assert.NilError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	n := 0
	for n == 0 && time.Now().Before(deadline) {
		if n, err = r.ReadNow(buf); err == ErrWouldBlock {
			time.Sleep(time.Millisecond)
			continue
		}
		assert.NilError(t, err)
	}
	assert.Equal(t, string(buf[:n]), "hi")
	// A passed deadline or a closed connection: an error, not ErrWouldBlock.
	assert.NilError(t, b.SetReadDeadline(time.Unix(1, 0)))
	_, err = r.ReadNow(buf)
	assert.Assert(t, err != nil && err != ErrWouldBlock)
	assert.NilError(t, b.SetReadDeadline(time.Time{}))
	a.Close()
	for {
		if _, err = r.ReadNow(buf); err != ErrWouldBlock {
			break
		}
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, err, io.EOF)
	b.Close()
	_, err = r.ReadNow(buf)
	assert.Assert(t, err != nil && err != ErrWouldBlock && err != io.EOF)
}

func TestNewReaderWithoutSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	assert.Assert(t, NewReader(a) == nil)
}

func TestReading(t *testing.T) {
	a, b := pipe(t)
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	assert.Equal(t, Reading(x, time.Second, true), io.Reader(x))
	assert.Equal(t, Reading(b, 0, true), io.Reader(b))
	r := Reading(b, 100*time.Microsecond, false)
	go func() {
		time.Sleep(5 * time.Millisecond) // past the budget: the blocking read gets it
		_, _ = a.Write([]byte("abc"))
		a.Close()
	}()
	got, err := io.ReadAll(r)
	assert.NilError(t, err)
	assert.Equal(t, string(got), "abc")
}

func TestUntilShared(t *testing.T) {
	assert.Assert(t, UntilShared(0, true, func() bool { return true }))
	assert.Assert(t, !UntilShared(0, false, func() bool { return false }))
	for _, yield := range []bool{true, false} {
		var n atomic.Int32
		assert.Assert(t, UntilShared(time.Second, yield, func() bool { return n.Add(1) == 3 }))
		assert.Equal(t, n.Load(), int32(3))
		calls := 0
		assert.Assert(t, !UntilShared(time.Millisecond, yield, func() bool { calls++; return false }))
		assert.Assert(t, calls > 1)
	}
}

func TestReadingShared(t *testing.T) {
	a, b := pipe(t)
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	assert.Equal(t, ReadingShared(x, time.Second, true), io.Reader(x))
	assert.Equal(t, ReadingShared(b, 0, true), io.Reader(b))
	for _, yield := range []bool{true, false} {
		r := ReadingShared(b, 200*time.Microsecond, yield)
		assert.Assert(t, r.(*polling).r.Shared)
		go func() {
			_, _ = a.Write([]byte("x"))
			time.Sleep(2 * time.Millisecond) // past the budget: the blocking read gets it
			_, _ = a.Write([]byte("yz"))
		}()
		buf := make([]byte, 3)
		_, err := io.ReadFull(r, buf)
		assert.NilError(t, err)
		assert.Equal(t, string(buf), "xyz")
	}
}

// TestReaderYields: a shared poll offers its CPU between reads (counted),
// a holding one never does.
func TestReaderYields(t *testing.T) {
	a, b := pipe(t)
	buf := make([]byte, 4)
	for _, shared := range []bool{false, true} {
		r := NewReader(b)
		r.Shared = shared
		_, _, ok := r.Read(buf, 500*time.Microsecond, false) // nothing comes: polls the whole budget
		assert.Assert(t, !ok)
		if shared {
			assert.Assert(t, r.Yields() > 0)
		} else {
			assert.Equal(t, r.Yields(), uint64(0))
		}
	}
	assert.Equal(t, (*Reader)(nil).Yields(), uint64(0))
	rs := ReadingShared(b, 500*time.Microsecond, false)
	go func() {
		time.Sleep(2 * time.Millisecond)
		_, _ = a.Write([]byte("x"))
	}()
	_, err := rs.Read(buf)
	assert.NilError(t, err)
	assert.Assert(t, Yields(rs) > 0)
	assert.Equal(t, Yields(Reading(b, time.Millisecond, false)), uint64(0))
	assert.Equal(t, Yields(a), uint64(0))
}

// Wait blocks in the kernel until the socket is readable or its time is
// up, consuming nothing.
func TestReaderWait(t *testing.T) {
	a, b := pipe(t)
	r := NewReader(b)
	assert.Assert(t, !r.Wait(time.Millisecond), "nothing sent")
	assert.Assert(t, !r.Wait(0))
	assert.Assert(t, !(*Reader)(nil).Wait(time.Second))
	go func() {
		time.Sleep(time.Millisecond)
		_, _ = a.Write([]byte("x"))
	}()
	assert.Assert(t, r.Wait(5*time.Second))
	assert.Assert(t, r.Wait(time.Second), "still readable: Wait consumed nothing")
	buf := make([]byte, 4)
	n, err, ok := r.Read(buf, time.Second, false)
	assert.Assert(t, ok)
	assert.NilError(t, err)
	assert.Equal(t, string(buf[:n]), "x")
	// The peer's close makes the socket readable (the read reports EOF);
	// a local close makes Wait refuse.
	a.Close()
	assert.Assert(t, r.Wait(5*time.Second))
	b.Close()
	assert.Assert(t, !r.Wait(time.Second))
}
