package client_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// Another client's reads of objects whose only replica is a file on the
// holder's disk (issue 32; Mooncake's offload RPC): the holder reads the
// file into its serve buffer and the reader pulls it with the transfer
// engine, whatever the holder's memory holds.

// dsSetup starts a master at its defaults (a read lease of 10 s), a holder
// with rbSeg of memory, a disk tier and a serve buffer of serveBytes (0:
// the default), puts n objects (several times its memory: the first ones
// are on disk only), and starts a reader that lends nothing.
func dsSetup(ctx context.Context, t *testing.T, n int, serveBytes uint64, rpcTimeout time.Duration) (srv *master.Server, holder, user *client.Client) {
	t.Helper()
	srv = startMaster(t, master.Config{})
	holder = newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: rbSeg, SSDOffloadPath: t.TempDir(),
		SSDCapacity: 256 << 20, DiskServeBufferSize: serveBytes})
	user = newClient(t, client.Config{MasterServerAddr: srv.Addr(), RPCTimeout: rpcTimeout})
	rbPut(ctx, t, holder, 0, n)
	return srv, holder, user
}

// diskOnly returns the keys among the first n whose only replica is a
// file (the query leases the others, as a read does).
func diskOnly(ctx context.Context, t *testing.T, c *client.Client, n int) []int {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = rbKey(i)
	}
	descs, err := c.ReplicaDescs(ctx, keys)
	assert.NilError(t, err)
	var out []int
	for i, d := range descs {
		assert.NilError(t, d.Err, "%s", keys[i])
		mem := false
		for _, r := range d.Replicas {
			mem = mem || !r.Disk
		}
		if !mem {
			out = append(out, i)
		}
	}
	return out
}

// TestDiskServeLeasedMemory: the holder's memory is full of objects it has
// just read (each leased for 10 s, so none can be evicted and no promotion
// could place a copy); a second client reads every object, those on disk
// only through the holder's serve buffer, and gets every byte, without
// one promotion.
func TestDiskServeLeasedMemory(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	n := 4 * rbSeg / rbObj
	srv, holder, user := dsSetup(ctx, t, n, 0, 0)
	// Lease what is in memory: the most recent objects.
	var inMemory []int
	onDisk := diskOnly(ctx, t, holder, n)
	for i := range n {
		if len(onDisk) == 0 || i > onDisk[len(onDisk)-1] {
			inMemory = append(inMemory, i)
		}
	}
	rbCheck(ctx, t, holder, inMemory)
	assert.Assert(t, len(onDisk) >= n/2, "only %d of %d objects on disk only", len(onDisk), n)
	rbCheck(ctx, t, user, seq(n))
	um, hm := user.Metrics(), holder.Metrics()
	t.Logf("%d objects, %d on disk only: reader %d remote disk reads, %d waits; holder served %d (peak %d bytes); master %+v",
		n, len(onDisk), um.RemoteDiskReads, um.RemoteDiskWaits, hm.DiskServed, hm.DiskServePeakBytes, srv.Service().Metrics().PromotionsTotal)
	assert.Equal(t, um.Promotions, uint64(0))
	assert.Equal(t, um.GetErrors, uint64(0))
	assert.Assert(t, um.RemoteDiskReads >= uint64(len(onDisk)))
	assert.Equal(t, hm.DiskServed, um.RemoteDiskReads)
	assert.Equal(t, hm.DiskServeUsedBytes, uint64(0), "grants left unreleased")
}

// TestDiskServeBounded: 16 readers at once (two clients, 8 goroutines
// each) read every disk-only object of a holder whose serve buffer takes
// 4 objects: the buffer never holds more, full answers make the readers
// ask again, and every byte arrives.
func TestDiskServeBounded(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	n := 4 * rbSeg / rbObj
	const serve = 4 * rbObj
	srv, holder, user := dsSetup(ctx, t, n, serve, 0)
	user2 := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	onDisk := diskOnly(ctx, t, holder, n)
	assert.Assert(t, len(onDisk) > 16)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		c := user
		if g%2 == 1 {
			c = user2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := g; j < len(onDisk)+g; j++ {
				i := onDisk[j%len(onDisk)]
				got, err := c.Get(ctx, rbKey(i))
				if err == nil && !bytes.Equal(got, rbVal(i)) {
					err = fmt.Errorf("wrong bytes (%d of %d)", len(got), len(rbVal(i)))
				}
				if err != nil {
					errs <- fmt.Errorf("reader %d, get %s: %w", g, rbKey(i), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	hm := holder.Metrics()
	waits := user.Metrics().RemoteDiskWaits + user2.Metrics().RemoteDiskWaits
	t.Logf("holder served %d reads, %d answered busy, peak %d of %d bytes; readers waited %d times",
		hm.DiskServed, hm.DiskServeBusy, hm.DiskServePeakBytes, serve, waits)
	assert.Assert(t, hm.DiskServePeakBytes <= serve, "serve buffer overrun: %d of %d bytes", hm.DiskServePeakBytes, serve)
	assert.Assert(t, hm.DiskServed >= uint64(16*len(onDisk)))
	assert.Equal(t, hm.DiskServeBusy, waits)
	assert.Equal(t, hm.DiskServeUsedBytes, uint64(0))
}

// TestDiskServeReaderDied: a reader took the holder's whole serve buffer
// and died before releasing it. The next reader is answered busy until
// that grant lapses, then reads.
func TestDiskServeReaderDied(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	n := 4 * rbSeg / rbObj
	_, holder, user := dsSetup(ctx, t, n, rbObj, 0)
	onDisk := diskOnly(ctx, t, holder, n)
	assert.Assert(t, len(onDisk) > 0)
	assert.NilError(t, client.DiskServeGrabForTest(holder, rbObj, 300*time.Millisecond))
	rbCheck(ctx, t, user, onDisk[:1])
	um, hm := user.Metrics(), holder.Metrics()
	assert.Equal(t, hm.DiskServeLapsed, uint64(1))
	assert.Assert(t, um.RemoteDiskWaits > 0)
	assert.Equal(t, um.RemoteDiskReads, uint64(1))
	rbCheck(ctx, t, user, onDisk) // and the buffer serves on
	assert.Equal(t, holder.Metrics().DiskServeUsedBytes, uint64(0))
}

// TestDiskServeHolderDies: the holder's process goes away (its engine
// closes) while it reads a file for a reader: the reader's get fails with
// a code, it does not hang. A holder that stalls instead fails the get
// once the reader's RPC timeout has passed.
func TestDiskServeHolderDies(t *testing.T) {
	for _, tc := range []struct {
		name string
		dies bool
	}{{"dies", true}, {"stalls", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 120*time.Second)
			n := 4 * rbSeg / rbObj
			_, holder, user := dsSetup(ctx, t, n, 0, time.Second)
			onDisk := diskOnly(ctx, t, holder, n)
			assert.Assert(t, len(onDisk) > 0)
			tier, err := holder.DiskTier()
			assert.NilError(t, err)
			reached, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			tier.SetReadHook(func(string) {
				once.Do(func() { close(reached) })
				select {
				case <-release:
				case <-time.After(60 * time.Second):
				}
			})
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			done := make(chan error, 1)
			go func() {
				_, err := user.Get(ctx, rbKey(onDisk[0]))
				done <- err
			}()
			select {
			case <-reached:
			case <-ctx.Done():
				t.Fatal("the holder never read the file")
			}
			closed := make(chan struct{})
			if tc.dies {
				go func() {
					defer close(closed)
					holder.Engine().Close() // returns once the read held up ends
				}()
			} else {
				close(closed)
			}
			var getErr error
			select {
			case getErr = <-done:
			case <-ctx.Done():
				t.Fatal("the get hung")
			}
			close(release)
			<-closed
			t.Logf("get: %v", getErr)
			assert.Assert(t, getErr != nil, "a get from a dead or stalled holder succeeded")
			c := code(getErr)
			assert.Assert(t, c == wire.ErrRPCFail || c == wire.ErrRPCTimeout || c == wire.ErrTransferFail, "code %v", c)
			assert.Equal(t, user.Metrics().RemoteDiskReads, uint64(0))
		})
	}
}
