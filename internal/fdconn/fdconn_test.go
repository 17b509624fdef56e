package fdconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

// pair returns a detached client connection and the server side (a plain
// net.Conn) of one loopback TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	assert.NilError(t, err)
	srv := <-accepted
	assert.Assert(t, srv != nil)
	t.Cleanup(func() { srv.Close() })
	dc, err := Detach(c.(*net.TCPConn))
	assert.NilError(t, err)
	t.Cleanup(func() { dc.Close() })
	assert.Equal(t, dc.RemoteAddr().String(), srv.LocalAddr().String())
	return dc, srv
}

func TestReadWrite(t *testing.T) {
	c, srv := pair(t)
	// More than the socket buffers hold, so that writes wait for room.
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i * 31)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(srv, int64(len(big))+3))
		got <- b
	}()
	bufs := net.Buffers{[]byte("ab"), nil, big[:1<<20], big[1<<20:], []byte("c")}
	n, err := c.WriteBuffers(&bufs)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(len(big)+3))
	assert.Equal(t, len(bufs), 0)
	b := <-got
	assert.Assert(t, bytes.Equal(b[:2], []byte("ab")) && bytes.Equal(b[2:len(b)-1], big) && b[len(b)-1] == 'c')

	// Reads wait for data, then see the end of the stream.
	go func() {
		time.Sleep(20 * time.Millisecond)
		srv.Write([]byte("hello"))
		srv.Close()
	}()
	r, err := io.ReadAll(c)
	assert.NilError(t, err)
	assert.Equal(t, string(r), "hello")
	_, err = c.Read(make([]byte, 1))
	assert.Equal(t, err, io.EOF)
}

func TestDeadlines(t *testing.T) {
	c, _ := pair(t)
	assert.NilError(t, c.SetReadDeadline(time.Now().Add(30*time.Millisecond)))
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	assert.Assert(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
	var ne net.Error
	assert.Assert(t, errors.As(err, &ne) && ne.Timeout())
	assert.Assert(t, time.Since(start) >= 30*time.Millisecond)

	// A write the peer does not read times out once the buffers are full.
	assert.NilError(t, c.SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = c.Write(make([]byte, 64<<20))
	assert.Assert(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)

	// A deadline in the past fails at once; none clears it.
	assert.NilError(t, c.SetReadDeadline(time.Unix(1, 0)))
	_, err = c.Read(make([]byte, 1))
	assert.Assert(t, errors.Is(err, os.ErrDeadlineExceeded))
	assert.NilError(t, c.SetDeadline(time.Time{}))
	assert.Equal(t, c.rd.deadline.Load(), int64(0))
}

// TestInterrupt: a deadline moved into the past and Close both end a
// blocked call at once (the transport aborts reads that way).
func TestInterrupt(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	assert.NilError(t, c.SetReadDeadline(time.Unix(1, 0)))
	select {
	case err := <-done:
		assert.Assert(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline in the past did not end the read")
	}
	assert.NilError(t, c.SetReadDeadline(time.Time{}))

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := c.Read(make([]byte, 1))
		errs <- err
	}()
	go func() {
		defer wg.Done()
		_, err := c.Write(make([]byte, 64<<20))
		errs <- err
	}()
	time.Sleep(20 * time.Millisecond)
	assert.NilError(t, c.Close())
	wg.Wait()
	for range 2 {
		err := <-errs
		assert.Assert(t, err != nil)
	}
	_, err := c.Read(make([]byte, 1))
	assert.Assert(t, errors.Is(err, net.ErrClosed), "%v", err)
	assert.Assert(t, errors.Is(c.Close(), net.ErrClosed))
	rc, err := c.SyscallConn()
	assert.NilError(t, err)
	assert.Assert(t, errors.Is(rc.Control(func(uintptr) {}), net.ErrClosed))
}

// TestRawConn: Read's function is called again once the socket is
// readable, as for the network poller's connections.
func TestRawConn(t *testing.T) {
	c, srv := pair(t)
	rc, err := c.SyscallConn()
	assert.NilError(t, err)
	go func() {
		time.Sleep(20 * time.Millisecond)
		srv.Write([]byte("x"))
	}()
	calls := 0
	var got byte
	assert.NilError(t, rc.Read(func(fd uintptr) bool {
		calls++
		var b [1]byte
		n, _ := unix.Read(int(fd), b[:])
		got = b[0]
		return n == 1
	}))
	assert.Equal(t, got, byte('x'))
	assert.Assert(t, calls >= 2, "calls %d", calls)
}
