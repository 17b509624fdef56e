package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// ssdDirs: tmpfs and the test's temporary directory (a real filesystem on
// most machines).
func ssdDirs(t *testing.T) map[string]string {
	out := map[string]string{"tempdir": t.TempDir()}
	if d, err := os.MkdirTemp("/dev/shm", "kvferry-tier-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		out["tmpfs"] = d
	}
	return out
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSSDTier: a holder with an 8 MiB segment and a disk tier takes 20 MiB
// of objects: those above the offload watermark go to disk, eviction drops
// only their memory, and every object reads back with its bytes (read from
// the holder's files through its serve buffer). A removed object's file goes. A restarted holder finds its
// intact files and serves them again; a corrupt file is never served.
func TestSSDTier(t *testing.T) {
	for name, dir := range ssdDirs(t) {
		t.Run(name, func(t *testing.T) { ssdTier(t, dir) })
	}
}

func ssdTier(t *testing.T, dir string) {
	ctx := ctxT(t, 120*time.Second)
	// Short leases: the reads below would otherwise keep every object they
	// promoted in memory for 10 s, leaving no room to promote the next.
	srv := startMaster(t, master.Config{MaintenanceInterval: 20 * time.Millisecond, DefaultKVLeaseTTL: 300 * time.Millisecond})
	svc := srv.Service()
	const seg, obj, n = 8 << 20, 512 << 10, 40
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: seg, SSDOffloadPath: dir,
		SSDCapacity: 64 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	vals := make([][]byte, n)
	for i := range vals {
		vals[i] = pattern(obj-i*100, byte(i))
	}
	val := func(i int) []byte { return vals[i] }
	t0 := time.Now()
	phase := func(what string) { t.Logf("%v: %s", time.Since(t0).Round(time.Millisecond), what) }
	for i := range n {
		assert.NilError(t, user.Put(ctx, fmt.Sprintf("k%d", i), val(i), client.ReplicateConfig{}))
		// Once above the watermark, everything in the segment goes to
		// disk (oldest first) before the next put needs the room.
		if m := svc.Metrics(); float64(m.UsedBytes) >= master.DefaultOffloadWatermark*seg {
			waitUntil(t, "offloads", func() bool { return svc.Metrics().DiskObjects >= i+1 })
		}
	}
	phase("puts")
	m := svc.Metrics()
	assert.Assert(t, m.EvictedObjectsTotal > 0, "nothing was evicted: the test did not exceed memory")
	t.Logf("offloaded %d objects (%d bytes), evicted %d from memory", m.OffloadsTotal, m.OffloadedBytesTotal, m.EvictedObjectsTotal)
	descs, err := user.ReplicaDescs(ctx, []string{"k0"})
	assert.NilError(t, err)
	assert.Assert(t, len(descs[0].Replicas) >= 1)
	last := descs[0].Replicas[len(descs[0].Replicas)-1]
	assert.Assert(t, last.Disk && last.FilePath == dir && last.SegmentName == holder.Hostname(), "%+v", descs[0].Replicas)

	for i := range n {
		got, err := getRetry(ctx, user, fmt.Sprintf("k%d", i))
		assert.NilError(t, err, "k%d: %+v", i, svc.Metrics())
		assert.Assert(t, bytes.Equal(got, val(i)), "k%d: wrong bytes", i)
	}
	phase("gets")
	// Those only on disk came through the holder's serve buffer.
	assert.Assert(t, user.Metrics().RemoteDiskReads > 0)
	assert.Equal(t, holder.Metrics().DiskServed, user.Metrics().RemoteDiskReads)

	// Removing deletes the file.
	tier, err := holder.DiskTier()
	assert.NilError(t, err)
	before := len(tier.Entries())
	assert.NilError(t, user.Remove(ctx, "k1", true))
	waitUntil(t, "file deleted", func() bool { return len(tier.Entries()) == before-1 })

	// The holder restarts (a new process would do the same: a new client
	// and segment, the same directory). One file is corrupted meanwhile.
	phase("remove")
	assert.NilError(t, holder.Close())
	var corrupt string
	ents, err := os.ReadDir(dir)
	assert.NilError(t, err)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".kvd" {
			corrupt = filepath.Join(dir, e.Name())
			break
		}
	}
	b, err := os.ReadFile(corrupt)
	assert.NilError(t, err)
	b[len(b)-obj/2] ^= 0x55
	assert.NilError(t, os.WriteFile(corrupt, b, 0o644))

	holder2 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: seg, SSDOffloadPath: dir,
		SSDCapacity: 64 << 20})
	_ = holder2
	phase("restart")
	served, bad := 0, 0
	for i := range n {
		if i == 1 {
			continue
		}
		got, err := getRetry(ctx, user, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Logf("k%d after the restart: %v", i, err)
			bad++
			continue
		}
		assert.Assert(t, bytes.Equal(got, val(i)), "k%d after restart: wrong bytes", i)
		served++
	}
	phase("gets after the restart")
	t.Logf("after the holder's restart: %d objects served from disk, %d not (the corrupt one)", served, bad)
	assert.Equal(t, bad, 1)
	_, err = user.Get(ctx, "k1")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
}

// getRetry is Get, asked again while a promotion finds the memory full of
// leased objects (NO_AVAILABLE_HANDLE: the leases run out soon), and when
// the read outlasted the short lease the tests use (LEASE_EXPIRED: a loaded
// machine can take longer than that to promote and read), until ctx ends.
func getRetry(ctx context.Context, c *client.Client, key string) ([]byte, error) {
	for {
		got, err := c.Get(ctx, key)
		if cd := code(err); (cd != wire.ErrNoAvailableHandle && cd != wire.ErrLeaseExpired) || ctx.Err() != nil {
			return got, err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

func segmentsOf(t *testing.T, c *client.Client, key string) map[string]bool {
	t.Helper()
	d, err := c.ReplicaDescs(context.Background(), []string{key})
	assert.NilError(t, err)
	assert.NilError(t, d[0].Err)
	out := map[string]bool{}
	for _, r := range d[0].Replicas {
		out[r.SegmentName] = true
	}
	return out
}

func waitTask(t *testing.T, c *client.Client, id string) client.TaskInfo {
	t.Helper()
	var info client.TaskInfo
	waitUntil(t, "task "+id, func() bool {
		var err error
		info, err = c.QueryTask(context.Background(), id)
		assert.NilError(t, err)
		return info.Status == "SUCCESS" || info.Status == "FAILED"
	})
	return info
}

// TestCopyMoveDrain: copy and move tasks run by the holders, and a holder
// that leaves gracefully takes none of the objects only it held along.
func TestCopyMoveDrain(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	a := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20})
	b := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20, DrainOnClose: 10 * time.Second})
	cc := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	v := pattern(300<<10, 7)
	assert.NilError(t, user.Put(ctx, "k", v, client.ReplicateConfig{PreferredSegments: []string{a.Hostname()}}))
	assert.DeepEqual(t, segmentsOf(t, user, "k"), map[string]bool{a.Hostname(): true})

	id, err := user.CreateCopyTask(ctx, "k", []string{b.Hostname()})
	assert.NilError(t, err)
	info := waitTask(t, user, id)
	assert.Equal(t, info.Status, "SUCCESS", info.Message)
	assert.Assert(t, !info.Move)
	assert.DeepEqual(t, segmentsOf(t, user, "k"), map[string]bool{a.Hostname(): true, b.Hostname(): true})

	id, err = user.CreateMoveTask(ctx, "k", a.Hostname(), cc.Hostname())
	assert.NilError(t, err)
	info = waitTask(t, user, id)
	assert.Equal(t, info.Status, "SUCCESS", info.Message)
	assert.DeepEqual(t, segmentsOf(t, user, "k"), map[string]bool{b.Hostname(): true, cc.Hostname(): true})
	// The copies hold the bytes: read from each holder alone.
	got, err := b.Get(ctx, "k") // its own replica, by memcpy
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, v))
	got, err = cc.Get(ctx, "k")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, v))

	_, err = user.CreateMoveTask(ctx, "k", a.Hostname(), cc.Hostname())
	assert.Equal(t, code(err), wire.ErrReplicaNotFound)
	_, err = user.QueryTask(ctx, "no-such-task")
	assert.Equal(t, code(err), wire.ErrTaskNotFound)

	// Drain: objects only b holds move out before it leaves.
	for i := range 4 {
		assert.NilError(t, user.Put(ctx, fmt.Sprintf("d%d", i), pattern(200<<10, byte(i)),
			client.ReplicateConfig{PreferredSegments: []string{b.Hostname()}}))
	}
	assert.NilError(t, b.Close())
	for i := range 4 {
		key := fmt.Sprintf("d%d", i)
		got, err := user.Get(ctx, key)
		assert.NilError(t, err, key)
		assert.Assert(t, bytes.Equal(got, pattern(200<<10, byte(i))))
		assert.Assert(t, !segmentsOf(t, user, key)[b.Hostname()])
	}
	got, err = user.Get(ctx, "k")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, v))
}
