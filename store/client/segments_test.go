package client_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestMountedSegments: a client that lends nothing at setup mounts an
// allocated segment and a file's range, puts land in them, and unmounting
// takes their objects away (Mooncake's unmount), cycle after cycle.
func TestMountedSegments(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 4 << 20})
	assert.Equal(t, code(c.Put(ctx, "none", pattern(100, 1), client.ReplicateConfig{})), wire.ErrNoAvailableHandle)

	path := filepath.Join(t.TempDir(), "seg")
	assert.NilError(t, os.WriteFile(path, nil, 0o600))
	assert.NilError(t, os.Truncate(path, 8<<20))

	for cycle := range 3 {
		a, size, err := c.AllocateAndMount(ctx, 1<<20, "tcp", "")
		assert.NilError(t, err)
		assert.Equal(t, size, uint64(client.SegmentAlignment))
		va := pattern(200000, byte(cycle))
		assert.NilError(t, c.Put(ctx, "a", va, client.ReplicateConfig{}))
		got, err := c.Get(ctx, "a")
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, va))

		f, err := c.MountFile(ctx, path, 4096, 4<<20, "tcp", "")
		assert.NilError(t, err)
		assert.DeepEqual(t, c.Segments(), []string{a, f})
		assert.Equal(t, len(srv.Service().Segments()), 2)

		// The wrong family's unmount refuses; the right one takes the
		// segment and its objects away.
		assert.Assert(t, errors.Is(c.UnmountSegment(ctx, a, client.SegmentFile, 0), client.ErrNotMounted))
		assert.NilError(t, c.UnmountSegment(ctx, a, client.SegmentAllocated, 0))
		assert.Assert(t, errors.Is(c.UnmountSegment(ctx, a, client.SegmentAllocated, 0), client.ErrNotMounted))
		_, err = c.Get(ctx, "a")
		assert.Equal(t, code(err), wire.ErrObjectNotFound)

		// Now only the file's range lends space: a put lands in the file.
		vb := pattern(300000, byte(cycle+10))
		assert.NilError(t, c.Upsert(ctx, "b", vb, client.ReplicateConfig{}))
		disk, err := os.ReadFile(path)
		assert.NilError(t, err)
		assert.Assert(t, bytes.Contains(disk[4096:4096+4<<20], vb), "the object is in the mapped range of the file")
		assert.NilError(t, c.UnmountSegment(ctx, f, client.SegmentFile, 0))
		_, err = c.Get(ctx, "b")
		assert.Equal(t, code(err), wire.ErrObjectNotFound)
		assert.Equal(t, len(c.Segments()), 0)
		assert.Equal(t, len(srv.Service().Segments()), 0)
	}

	// Bad ranges and files are refused before anything is mounted.
	_, err := c.MountFile(ctx, path, 100, 4096, "tcp", "")
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	_, err = c.MountFile(ctx, path, 4096, 8<<20, "tcp", "")
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	_, err = c.MountFile(ctx, path+".missing", 0, 4096, "tcp", "")
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	_, _, err = c.AllocateAndMount(ctx, 0, "tcp", "")
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	assert.Equal(t, len(srv.Service().Segments()), 0)
}

// TestGracefulUnmountMovesObjects: with a grace period the master moves
// the objects only the unmounted segment holds to another client's
// segment first (the holder's task loop, started by the mount, copies
// them), so they stay readable.
func TestGracefulUnmountMovesObjects(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 4 << 20})
	a, _, err := c.AllocateAndMount(ctx, 1<<20, "", "")
	assert.NilError(t, err)
	v := pattern(100000, 5)
	assert.NilError(t, c.Put(ctx, "k", v, client.ReplicateConfig{}))
	other := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 32 << 20})

	assert.NilError(t, c.UnmountSegment(ctx, a, client.SegmentAllocated, 10*time.Second))
	got, err := c.Get(ctx, "k")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, v))
	descs, err := c.ReplicaDescs(ctx, []string{"k"})
	assert.NilError(t, err)
	assert.Equal(t, descs[0].Replicas[0].SegmentName, other.Hostname())
}

// TestMountedSegmentsGoWithClose: segments mounted after setup are
// unmounted by Close.
func TestMountedSegmentsGoWithClose(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	_, _, err := c.AllocateAndMount(ctx, 1<<20, "", "")
	assert.NilError(t, err)
	assert.Equal(t, len(srv.Service().Segments()), 2)
	assert.NilError(t, c.Close())
	assert.Equal(t, len(srv.Service().Segments()), 0)
	_, _, err = c.AllocateAndMount(ctx, 1<<20, "", "")
	assert.Assert(t, errors.Is(err, client.ErrClosed))
}

// TestDrainDiskSegment: the disk tier leaves the master (it names no
// holder of files any more) and later remounts do not bring it back; a
// client without a tier does nothing.
func TestDrainDiskSegment(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20,
		SSDOffloadPath: t.TempDir(), SSDCapacity: 64 << 20})
	assert.Equal(t, len(srv.Service().DiskSegments()), 1)
	assert.NilError(t, c.DrainDiskSegment(ctx, 10*time.Millisecond))
	assert.NilError(t, c.DrainDiskSegment(ctx, 0)) // drained already: nothing to do
	assert.Equal(t, len(srv.Service().DiskSegments()), 0)
	client.RemountForTest(c)
	assert.Equal(t, len(srv.Service().DiskSegments()), 0)
	assert.Equal(t, len(srv.Service().Segments()), 1)

	plain := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	assert.NilError(t, plain.DrainDiskSegment(ctx, time.Hour))
}
