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

func TestLimiter(t *testing.T) {
	l := NewLimiter(3, 2)
	r1, err := l.Acquire(tcp("10.0.0.1"))
	assert.NilError(t, err)
	r2, err := l.Acquire(tcp("10.0.0.1"))
	assert.NilError(t, err)
	_, err = l.Acquire(tcp("10.0.0.1"))
	assert.Assert(t, errors.Is(err, ErrLimit), "per-IP cap")
	r3, err := l.Acquire(tcp("10.0.0.2"))
	assert.NilError(t, err, "another IP still gets in")
	_, err = l.Acquire(tcp("10.0.0.3"))
	assert.Assert(t, errors.Is(err, ErrLimit), "total cap")
	assert.Equal(t, l.Refused(), uint64(2))
	r1()
	r1() // a second release is harmless
	assert.Equal(t, l.Open(), 2)
	r4, err := l.Acquire(tcp("10.0.0.1"))
	assert.NilError(t, err)
	r2()
	r3()
	r4()
	assert.Equal(t, l.Open(), 0)
	l.mu.Lock()
	assert.Equal(t, len(l.mu.byIP), 0)
	l.mu.Unlock()
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
