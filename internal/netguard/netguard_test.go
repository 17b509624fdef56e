package netguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"testing/iotest"
	"time"

	"gotest.tools/v3/assert"
)

func tcp(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }

// closer records that it was closed.
type closer struct{ closed bool }

func (c *closer) Close() error { c.closed = true; return nil }

func admit(t *testing.T, l *Limiter, ip string) (*Slot, *closer) {
	t.Helper()
	c := &closer{}
	s, err := l.Admit(tcp(ip), c)
	assert.NilError(t, err)
	return s, c
}

func TestLimiter(t *testing.T) {
	l := NewLimiter(3, 2)
	s1, c1 := admit(t, l, "10.0.0.1")
	s2, c2 := admit(t, l, "10.0.0.1")
	assert.Assert(t, s1.Begin() && s2.Begin())
	_, err := l.Admit(tcp("10.0.0.1"), &closer{})
	assert.Assert(t, errors.Is(err, ErrLimit), "per-IP cap, every slot serving")
	s3, c3 := admit(t, l, "10.0.0.2")
	assert.Assert(t, s3.Begin())
	_, err = l.Admit(tcp("10.0.0.3"), &closer{})
	assert.Assert(t, errors.Is(err, ErrLimit), "total cap, every slot serving")
	assert.Equal(t, l.Refused(), uint64(2))
	assert.Equal(t, l.Displaced(), uint64(0))
	s1.End()
	s1.Release()
	s1.Release() // a second release is harmless
	assert.Equal(t, l.Open(), 2)
	s4, _ := admit(t, l, "10.0.0.1")
	s2.End()
	s2.Release()
	s3.End()
	s3.Release()
	s4.Release()
	assert.Equal(t, l.Open(), 0)
	assert.Assert(t, !c1.closed && !c2.closed && !c3.closed, "released slots are not closed by the limiter")
	l.mu.Lock()
	assert.Equal(t, len(l.mu.byIP), 0)
	l.mu.Unlock()
}

// TestDisplaceUnframedFirst: at the per-address cap a new connection
// displaces the oldest connection that never completed a frame, even when
// a framed one has been idle longer; one serving a request is never
// displaced.
func TestDisplaceUnframedFirst(t *testing.T) {
	l := NewLimiter(100, 4)
	framedOld, cFramedOld := admit(t, l, "10.0.0.1")
	framedOld.Frame() // completed a frame, idle since
	busy, cBusy := admit(t, l, "10.0.0.1")
	assert.Assert(t, busy.Begin()) // never completed: serving its first request
	stall1, cStall1 := admit(t, l, "10.0.0.1")
	stall2, cStall2 := admit(t, l, "10.0.0.1")
	other, cOther := admit(t, l, "10.0.0.2") // another address: out of scope

	n1, _ := admit(t, l, "10.0.0.1")
	assert.Assert(t, cStall1.closed && stall1.Displaced(), "the oldest unframed connection goes first")
	assert.Assert(t, !cStall2.closed && !cFramedOld.closed && !cBusy.closed)
	assert.Assert(t, !stall1.Begin(), "a displaced slot begins nothing")
	stall1.Release() // its server's release is a no-op
	assert.Equal(t, l.Open(), 5)

	n2, _ := admit(t, l, "10.0.0.1")
	assert.Assert(t, cStall2.closed && stall2.Displaced(), "then the next unframed one")
	// n1 and n2 have not completed a frame either: the older of them goes
	// before the framed connection.
	n1.Frame()
	_, _ = admit(t, l, "10.0.0.1")
	assert.Assert(t, !cFramedOld.closed)
	assert.Assert(t, n2.Displaced(), "n2 never completed a frame")
	assert.Assert(t, !cOther.closed && !other.Displaced())
	assert.Assert(t, !cBusy.closed && !busy.Displaced())
	assert.Equal(t, l.Displaced(), uint64(3))
	assert.Equal(t, l.Refused(), uint64(0))
}

// TestDisplaceIdleLongest: when every connection of the scope completed a
// frame, the one idle longest goes; a request being served protects its
// connection, and a served request makes it the most recently active.
func TestDisplaceIdleLongest(t *testing.T) {
	l := NewLimiter(3, 3)
	a, ca := admit(t, l, "10.0.0.1")
	b, cb := admit(t, l, "10.0.0.2")
	c, cc := admit(t, l, "10.0.0.3")
	a.Frame()
	b.Frame()
	c.Frame()
	// a serves a request: it was idle longest, but is busy now.
	assert.Assert(t, a.Begin())
	d, cd := admit(t, l, "10.0.0.4") // the total cap: any address
	assert.Assert(t, cb.closed && b.Displaced() && !ca.closed && !cc.closed)
	d.Frame()
	a.End() // a is now the most recently active
	c.Frame()
	d.Frame()
	_, _ = admit(t, l, "10.0.0.5")
	assert.Assert(t, ca.closed, "a: served before c and d were active again")
	assert.Assert(t, !cc.closed && !cd.closed)
	// Every slot serving: refused.
	assert.Assert(t, c.Begin() && d.Begin())
	e, ce := admit(t, l, "10.0.0.6")
	assert.Assert(t, !ce.closed)
	assert.Assert(t, e.Begin())
	_, err := l.Admit(tcp("10.0.0.7"), &closer{})
	assert.Assert(t, errors.Is(err, ErrLimit), err)
	assert.Assert(t, !cc.closed && !cd.closed)
}

// TestRebind: a displaced slot closes the closer it was rebound to, and a
// rebind after displacement closes the new closer at once.
func TestRebind(t *testing.T) {
	l := NewLimiter(1, 1)
	s, c := admit(t, l, "10.0.0.1")
	moved := &closer{}
	assert.Assert(t, s.Rebind(moved))
	_, _ = admit(t, l, "10.0.0.1")
	assert.Assert(t, moved.closed && !c.closed)
	late := &closer{}
	assert.Assert(t, !s.Rebind(late))
	assert.Assert(t, late.closed)
}

// TestListenerDisplaces: through a Listener, connections that sent part of
// a request and stall are displaced by new ones from the same address, and
// a connection that was answered (a completed request) is kept.
func TestListenerDisplaces(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	ln := Listen(raw, NewLimiter(100, 3), nil, "test")
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	next := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no connection accepted")
		}
		return nil
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	honest := dial()
	hs := next()
	defer hs.Close()
	_, err = hs.Write([]byte("reply")) // it was answered: a completed frame
	assert.NilError(t, err)
	var stalled []net.Conn
	for range 5 {
		c := dial()
		_, err := c.Write([]byte{0, 0, 0, 9}) // part of a header
		assert.NilError(t, err)
		stalled = append(stalled, c)
		s := next()
		defer s.Close()
	}
	// Of the stalling connections only the last two hold slots; the first
	// three were closed by the server.
	for i, c := range stalled[:3] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		assert.Assert(t, err != nil && !isTimeout(err), "stalled connection %d: %v", i, err)
	}
	assert.Equal(t, ln.limit.Open(), 3)
	var b [5]byte
	_, err = io.ReadFull(honest, b[:])
	assert.NilError(t, err)
	assert.Equal(t, string(b[:]), "reply")
}

// TestDisplaceWholeFrameWaiting: with WithFrames, a connection that has
// not completed a frame but whose socket holds a whole one its server has
// not read yet (its goroutine has not run) counts as framed: a newer one
// holding part of a header goes first, and the waiting one then only as
// the framed one idle longest.
func TestDisplaceWholeFrameWaiting(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer raw.Close()
	pair := func() (client, server net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		assert.NilError(t, err)
		s, err := raw.Accept()
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, s
	}
	// A frame is 8 bytes here.
	l := NewLimiter(10, 3).WithFrames(64, func(b []byte) bool { return len(b) >= 8 })
	arrived := func(s net.Conn) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		l.mu.Lock()
		defer l.mu.Unlock()
		for !l.sentFrame(s) {
			assert.Assert(t, time.Now().Before(deadline), "bytes never arrived")
			time.Sleep(time.Millisecond)
		}
	}
	waitingC, waitingS := pair()
	partialC, partialS := pair()
	framedC, framedS := pair()
	waiting, err := l.Admit(waitingS.RemoteAddr(), waitingS)
	assert.NilError(t, err)
	partial, err := l.Admit(partialS.RemoteAddr(), partialS)
	assert.NilError(t, err)
	framed, err := l.Admit(framedS.RemoteAddr(), framedS)
	assert.NilError(t, err)
	framed.Frame() // active after waiting's admission
	_, err = waitingC.Write([]byte("8 bytes!"))
	assert.NilError(t, err)
	_, err = partialC.Write([]byte{0, 0, 0, 8})
	assert.NilError(t, err)
	_, err = framedC.Write([]byte("next one"))
	assert.NilError(t, err)
	arrived(waitingS)

	_, newS := pair()
	_, err = l.Admit(newS.RemoteAddr(), newS)
	assert.NilError(t, err)
	assert.Assert(t, partial.Displaced(), "part of a header: displaced first though newer")
	assert.Assert(t, !waiting.Displaced() && !framed.Displaced())
	// newS sent nothing: it goes next, before either framed one.
	_, newS2 := pair()
	_, err = l.Admit(newS2.RemoteAddr(), newS2)
	assert.NilError(t, err)
	assert.Assert(t, !waiting.Displaced() && !framed.Displaced())
	// Then the framed one idle longest: waiting (idle since admission).
	_, newS3 := pair()
	s3, err := l.Admit(newS3.RemoteAddr(), newS3)
	assert.NilError(t, err)
	s3.Frame()
	_, newS4 := pair()
	_, err = l.Admit(newS4.RemoteAddr(), newS4)
	assert.NilError(t, err)
	assert.Assert(t, waiting.Displaced() && !framed.Displaced())
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestBackoff(t *testing.T) {
	var b Backoff
	assert.Equal(t, b.Next().Milliseconds(), int64(5))
	assert.Equal(t, b.Next().Milliseconds(), int64(10))
	for range 20 {
		b.Next()
	}
	assert.Equal(t, b.Next().Seconds(), 1.0)
	b.Reset()
	assert.Equal(t, b.Next().Milliseconds(), int64(5))
}

func TestReadFull(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 50000)
	got, err := ReadFull(iotest.OneByteReader(bytes.NewReader(data)), nil, len(data))
	assert.NilError(t, err)
	assert.DeepEqual(t, got, data)

	// A reused buffer that is large enough is not replaced.
	buf := make([]byte, 0, 100)
	got, err = ReadFull(bytes.NewReader(data), buf, 100)
	assert.NilError(t, err)
	assert.Equal(t, &got[0], &buf[:1][0])

	// A short body is an unexpected EOF, and the buffer never grew far
	// beyond what arrived.
	_, err = ReadFull(bytes.NewReader(data[:1000]), nil, 64<<20)
	assert.Assert(t, errors.Is(err, io.ErrUnexpectedEOF), err)
	_, err = ReadFull(bytes.NewReader(nil), nil, 10)
	assert.Assert(t, errors.Is(err, io.EOF), err)
}

// A claimed 64 MiB body of which 100 bytes arrive allocates about a chunk.
func TestReadFullAllocatesAsBytesArrive(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		_, _ = ReadFull(bytes.NewReader(make([]byte, 100)), nil, 64<<20)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / 10
	assert.Assert(t, per < 2*ReadChunk, "%d bytes per call", per)
}

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	ctx := context.Background()
	assert.NilError(t, b.Acquire(ctx, 60))
	assert.Assert(t, errors.Is(b.Acquire(ctx, 101), ErrLimit))
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	assert.Assert(t, errors.Is(b.Acquire(short, 50), context.DeadlineExceeded))
	done := make(chan error)
	go func() { done <- b.Acquire(ctx, 50) }()
	time.Sleep(10 * time.Millisecond)
	b.Release(60)
	assert.NilError(t, <-done)
	assert.Equal(t, b.Used(), int64(50))
	b.Release(50)
	assert.Equal(t, b.Used(), int64(0))
}
