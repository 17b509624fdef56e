package asyncq_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/asyncq"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/wire"
)

func TestMain(m *testing.M) { os.Exit(testutil.VerifyNoLeaks(m)) }

// newClient starts a client with its own embedded master and segment.
func newClient(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := embedded.NewClient(ctx, client.Config{LocalHostname: "127.0.0.1", GlobalSegmentSize: 64 << 20,
		MasterServerAddr: client.EmbeddedMaster, PingInterval: 100 * time.Millisecond})
	assert.NilError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func cbuf(t *testing.T, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newQueue(t *testing.T, cfg asyncq.Config) *asyncq.Queue {
	t.Helper()
	q, err := asyncq.New(cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { assert.Check(t, q.Close()) })
	return q
}

// waitFD waits until the queue's eventfd is readable (10 s at most), as an
// event loop would, and resets it.
func waitFD(t *testing.T, q *asyncq.Queue) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(q.FD()), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		assert.NilError(t, err)
		assert.Equal(t, n, 1, "eventfd not readable in 10 s")
		break
	}
	var b [8]byte
	_, err := unix.Read(q.FD(), b[:])
	assert.NilError(t, err)
}

// collect polls q until want completions arrived, keyed by tag.
func collect(t *testing.T, q *asyncq.Queue, want int) map[uint64]asyncq.Completion {
	t.Helper()
	got := map[uint64]asyncq.Completion{}
	for len(got) < want {
		waitFD(t, q)
		for _, d := range q.Poll(64) {
			_, dup := got[d.Tag]
			assert.Assert(t, !dup, "tag %d completed twice", d.Tag)
			got[d.Tag] = d
		}
	}
	return got
}

func TestOps(t *testing.T) {
	c := newClient(t)
	var (
		mu     sync.Mutex
		failed []error
	)
	q := newQueue(t, asyncq.Config{Workers: 4, Depth: 64,
		Store:   func() (asyncq.Store, error) { return c, nil },
		OnError: func(err error) { mu.Lock(); failed = append(failed, err); mu.Unlock() },
	})
	src := cbuf(t, 1<<20)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 13)
	}
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpPut, Tag: 1, Key: "k", Addr: src.Addr(), Size: src.Len()}))
	got := collect(t, q, 1)
	assert.NilError(t, got[1].Err)
	assert.Equal(t, got[1].Value, uint64(0))

	dst := cbuf(t, 1<<20)
	small := cbuf(t, 4096)
	jobs := []asyncq.Job{
		{Op: asyncq.OpGetInto, Tag: 2, Key: "k", Addr: dst.Addr(), Size: dst.Len()},
		{Op: asyncq.OpGetAlloc, Tag: 3, Key: "k"},
		{Op: asyncq.OpIsExist, Tag: 4, Key: "k"},
		{Op: asyncq.OpIsExist, Tag: 5, Key: "missing"},
		{Op: asyncq.OpGetSize, Tag: 6, Key: "k"},
		{Op: asyncq.OpGetSize, Tag: 7, Key: "missing"},
		{Op: asyncq.OpGetInto, Tag: 8, Key: "k", Addr: small.Addr(), Size: small.Len()},
		{Op: asyncq.OpGetAlloc, Tag: 9, Key: "missing"},
		{Op: asyncq.OpPut, Tag: 10, Key: "", Addr: src.Addr(), Size: 10},
	}
	for _, j := range jobs {
		assert.NilError(t, q.Submit(j))
	}
	got = collect(t, q, len(jobs))
	assert.NilError(t, got[2].Err)
	assert.Equal(t, got[2].Value, uint64(1<<20))
	assert.Assert(t, bytes.Equal(dst.Bytes(), src.Bytes()))
	assert.NilError(t, got[3].Err)
	assert.Equal(t, got[3].Value, uint64(1<<20))
	assert.Assert(t, got[3].Data != 0)
	assert.Assert(t, bytes.Equal(cmem.Bytes(got[3].Data, 1<<20), src.Bytes()))
	cmem.Free(got[3].Data)
	assert.Equal(t, got[4].Value, uint64(1))
	assert.NilError(t, got[5].Err)
	assert.Equal(t, got[5].Value, uint64(0))
	assert.Equal(t, got[6].Value, uint64(1<<20))
	assert.Equal(t, wire.CodeOf(got[7].Err), wire.ErrObjectNotFound)
	assert.Equal(t, got[7].Value, uint64(0))
	assert.Equal(t, wire.CodeOf(got[8].Err), wire.ErrInvalidParams, "a buffer too small")
	assert.Equal(t, wire.CodeOf(got[9].Err), wire.ErrObjectNotFound)
	assert.Equal(t, got[9].Data, uintptr(0))
	assert.Equal(t, wire.CodeOf(got[10].Err), wire.ErrInvalidParams, "an empty key")
	mu.Lock()
	assert.Equal(t, len(failed), 4, "OnError saw every failed job: %v", failed)
	mu.Unlock()

	// Upsert replaces, put does not; remove with force ignores the leases
	// the reads took.
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpPut, Flags: asyncq.FlagUpsert, Tag: 11, Key: "k", Addr: src.Addr(), Size: 100}))
	assert.NilError(t, collect(t, q, 1)[11].Err)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpGetSize, Tag: 12, Key: "k"}))
	assert.Equal(t, collect(t, q, 1)[12].Value, uint64(100))
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpRemove, Tag: 13, Key: "k"}))
	assert.Equal(t, wire.CodeOf(collect(t, q, 1)[13].Err), wire.ErrObjectHasLease)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpRemove, Flags: asyncq.FlagForce, Tag: 14, Key: "k"}))
	assert.NilError(t, collect(t, q, 1)[14].Err)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpIsExist, Tag: 15, Key: "k"}))
	assert.Equal(t, collect(t, q, 1)[15].Value, uint64(0))
}

func TestLimits(t *testing.T) {
	for _, cfg := range []asyncq.Config{
		{Workers: -1}, {Workers: asyncq.MaxWorkers + 1}, {Depth: -1}, {Depth: asyncq.MaxDepth + 1}, {},
	} {
		_, err := asyncq.New(cfg)
		assert.ErrorIs(t, err, asyncq.ErrInvalid, "%+v", cfg)
	}
	release := make(chan struct{})
	q := newQueue(t, asyncq.Config{Workers: 1, Depth: 2, Store: func() (asyncq.Store, error) {
		<-release
		return nil, errors.New("no store")
	}})
	assert.ErrorIs(t, q.Submit(asyncq.Job{Op: 0}), asyncq.ErrInvalid)
	assert.ErrorIs(t, q.Submit(asyncq.Job{Op: asyncq.OpRemove + 1}), asyncq.ErrInvalid)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpIsExist, Tag: 1}))
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpIsExist, Tag: 2}))
	assert.ErrorIs(t, q.Submit(asyncq.Job{Op: asyncq.OpIsExist, Tag: 3}), asyncq.ErrFull)
	close(release)
	// Completed but not polled still counts against the depth.
	got := collect(t, q, 2)
	assert.Equal(t, wire.CodeOf(got[1].Err), wire.ErrInternal, "the store's error: %v", got[1].Err)
	assert.Equal(t, len(q.Poll(10)), 0)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpIsExist, Tag: 3}))
	assert.Equal(t, len(collect(t, q, 1)), 1)

	assert.NilError(t, q.Close())
	assert.NilError(t, q.Close(), "a second Close is harmless")
	assert.ErrorIs(t, q.Submit(asyncq.Job{Op: asyncq.OpIsExist}), asyncq.ErrClosed)
}

// TestPanicAndClose: a panicking job completes as INTERNAL_ERROR without
// OnError; Close frees the data of completions nobody polled.
func TestPanicAndClose(t *testing.T) {
	// A nil Store interface panics inside the worker.
	var onError atomic.Int32
	q, err := asyncq.New(asyncq.Config{Workers: 1,
		Store:   func() (asyncq.Store, error) { return nil, nil },
		OnError: func(error) { onError.Add(1) },
	})
	assert.NilError(t, err)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpGetSize, Tag: 7, Key: "k"}))
	got := collect(t, q, 1)
	assert.Equal(t, wire.CodeOf(got[7].Err), wire.ErrInternal, "%v", got[7].Err)
	assert.Equal(t, got[7].Value, uint64(0))
	assert.NilError(t, q.Close()) // waits for the worker
	assert.Equal(t, onError.Load(), int32(0), "OnError was called for a panic")

	c := newClient(t)
	q = newQueue(t, asyncq.Config{Workers: 2, Store: func() (asyncq.Store, error) { return c, nil }})
	buf := cbuf(t, 4096)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpPut, Tag: 1, Key: "k", Addr: buf.Addr(), Size: buf.Len()}))
	assert.NilError(t, collect(t, q, 1)[1].Err)
	assert.NilError(t, q.Submit(asyncq.Job{Op: asyncq.OpGetAlloc, Tag: 2, Key: "k"}))
	waitFD(t, q) // completed, not polled: Close frees its data
	assert.NilError(t, q.Close())
	assert.Equal(t, len(q.Poll(1)), 0)
}
