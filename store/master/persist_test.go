package master

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/oplog"
	"github.com/kvferry/kvferry/store/wire"
)

// persistDirs: the oplog on tmpfs and on the test's temporary directory
// (a real filesystem on most machines).
func persistDirs(t *testing.T) map[string]string {
	out := map[string]string{"tempdir": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "kvferry-master-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			out["tmpfs"] = d
		}
	}
	return out
}

// openPersisted starts a Service on the oplog in dir, as a restarted master
// does.
func openPersisted(t *testing.T, dir string, clock Clock, snapshotRecords int) (*Service, *oplog.Dir) {
	t.Helper()
	svc, err := newService(Config{Clock: clock, Seed: 5, ClientTTL: 10 * time.Second, RestoreWindow: 20 * time.Second,
		SnapshotRecords: snapshotRecords, DisableGrants: true}, 1, fenceNone)
	assert.NilError(t, err)
	be, err := oplog.OpenDir(oplog.DirConfig{Path: dir})
	assert.NilError(t, err)
	st, err := be.Load(context.Background())
	assert.NilError(t, err)
	assert.NilError(t, svc.restore(st, be))
	return svc, be
}

func segInfo(id, name string, base uint64) SegmentInfo {
	return SegmentInfo{ID: id, Name: name, Protocol: "tcp", Base: base, Size: 1 << 20}
}

func mustPutIn(t *testing.T, svc *Service, client, tenant, key string, size uint64, cfg ReplicateConfig, upsert bool) []Replica {
	t.Helper()
	reps, err := svc.PutStart(client, tenant, key, size, cfg, upsert)
	assert.NilError(t, err, key)
	assert.NilError(t, svc.PutEnd(client, tenant, key), key)
	return reps
}

func mustPut(t *testing.T, svc *Service, client, key string, size uint64, cfg ReplicateConfig, upsert bool) []Replica {
	t.Helper()
	return mustPutIn(t, svc, client, "", key, size, cfg, upsert)
}

func keys(t *testing.T, svc *Service, tenant string) []string {
	t.Helper()
	k, err := svc.Keys(tenant)
	assert.NilError(t, err)
	return k
}

func addrs(rs []Replica) map[string]uint64 {
	out := map[string]uint64{}
	for _, r := range rs {
		out[r.SegmentName] = r.Addr
	}
	return out
}

// A restarted master serves every committed object at the addresses it
// had, once the holders remounted; what was removed, evicted or replaced
// stays so; a holder that does not come back takes its replicas along;
// restored replicas are never handed out again (the invariants build tag
// checks the tiling of every segment after each call).
func TestServiceRestore(t *testing.T) {
	for name, dir := range persistDirs(t) {
		t.Run(name, func(t *testing.T) {
			for _, snap := range []int{1 << 30, 3} { // never, and every 3 records
				clock := newFakeClock()
				svc, be := openPersisted(t, dir+"/"+map[int]string{1 << 30: "nosnap", 3: "snap"}[snap], clock, snap)
				segA, segB := segInfo("sa", "hostA:1", 1<<30), segInfo("sb", "hostB:1", 2<<30)
				assert.NilError(t, svc.MountSegment("ca", segA))
				assert.NilError(t, svc.MountSegment("cb", segB))
				want := map[string]map[string]uint64{}
				onA := ReplicateConfig{PreferredSegments: []string{"hostA:1"}}
				onB := ReplicateConfig{PreferredSegments: []string{"hostB:1"}}
				both := ReplicateConfig{ReplicaNum: 2}
				want["a1"] = addrs(mustPut(t, svc, "ca", "a1", 1000, onA, false))
				want["a2"] = addrs(mustPut(t, svc, "ca", "a2", 5000, onA, false))
				want["b1"] = addrs(mustPut(t, svc, "cb", "b1", 700, onB, false))
				want["ab"] = addrs(mustPut(t, svc, "ca", "ab", 300, both, false))
				mustPut(t, svc, "ca", "gone", 64, onA, false)
				mustPutIn(t, svc, "ca", "t2", "a1", 64, onA, false) // the same key, another tenant
				assert.NilError(t, svc.Remove("", "gone", false))
				mustPut(t, svc, "ca", "up", 100, onA, false)
				want["up"] = addrs(mustPut(t, svc, "ca", "up", 200, onB, true)) // replaced, now on B
				// A put in flight is not committed: it is not restored.
				_, err := svc.PutStart("ca", "", "inflight", 100, onA, false)
				assert.NilError(t, err)
				assert.NilError(t, svc.Snapshot(false))
				// The master dies (no final snapshot).
				assert.NilError(t, be.Close())

				clock.Advance(time.Second)
				svc, be = openPersisted(t, be.Path(), clock, snap)
				assert.DeepEqual(t, keys(t, svc, ""), []string{"a1", "a2", "ab", "b1", "up"})
				assert.DeepEqual(t, keys(t, svc, "t2"), []string{"a1"})
				// Before the holder remounts: the object exists, nothing to read.
				_, err = svc.GetReplicaList("", "a1")
				assert.Assert(t, errors.Is(err, wire.ErrReplicaIsNotReady), err)
				ok, _ := svc.ExistKey("", "a1")
				assert.Assert(t, !ok)
				_, err = svc.PutStart("cx", "", "a1", 10, ReplicateConfig{}, false)
				assert.Assert(t, errors.Is(err, wire.ErrObjectAlreadyExists), err)

				// Client A comes back with its segment; B never does.
				assert.NilError(t, svc.ReMountSegments("ca", []SegmentInfo{segA}))
				for _, k := range []string{"a1", "a2"} {
					rl, err := svc.GetReplicaList("", k)
					assert.NilError(t, err, k)
					assert.DeepEqual(t, addrs(rl.Replicas), want[k])
				}
				rl, err := svc.GetReplicaList("", "ab")
				assert.NilError(t, err)
				assert.DeepEqual(t, addrs(rl.Replicas), map[string]uint64{"hostA:1": want["ab"]["hostA:1"]})
				_, err = svc.GetReplicaList("", "b1")
				assert.Assert(t, errors.Is(err, wire.ErrReplicaIsNotReady), err)
				// New puts never land on restored replicas (invariants check
				// it) and fill what was freed.
				for i := range 20 {
					mustPut(t, svc, "ca", "new"+string(rune('a'+i)), 4000, onA, false)
				}

				// The restore window ends: B's replicas are dropped.
				clock.Advance(25 * time.Second)
				assert.NilError(t, svc.ReMountSegments("ca", nil)) // keep ca alive
				svc.Tick()
				_, err = svc.GetReplicaList("", "b1")
				assert.Assert(t, errors.Is(err, wire.ErrObjectNotFound), err)
				_, err = svc.GetReplicaList("", "up")
				assert.Assert(t, errors.Is(err, wire.ErrObjectNotFound), err)
				rl, err = svc.GetReplicaList("", "ab")
				assert.NilError(t, err)
				assert.Equal(t, len(rl.Replicas), 1)
				assert.NilError(t, be.Close())

				// A third start agrees: B is gone for good, A's objects wait.
				svc, be = openPersisted(t, be.Path(), clock, snap)
				left := keys(t, svc, "")
				assert.Equal(t, len(left), 3+20, left)
				assert.NilError(t, svc.ReMountSegments("ca", []SegmentInfo{segA}))
				rl, err = svc.GetReplicaList("", "a2")
				assert.NilError(t, err)
				assert.DeepEqual(t, addrs(rl.Replicas), want["a2"])
				assert.NilError(t, be.Close())
			}
		})
	}
}

// A segment remounted with another range (a restarted client that reused
// the id) gets none of the restored replicas.
func TestServiceRestoreMismatchedSegment(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	svc, be := openPersisted(t, dir, clock, 1<<30)
	seg := segInfo("s", "h:1", 1<<30)
	assert.NilError(t, svc.MountSegment("c", seg))
	mustPut(t, svc, "c", "k", 100, ReplicateConfig{}, false)
	assert.NilError(t, be.Close())

	svc, be = openPersisted(t, dir, clock, 1<<30)
	defer be.Close()
	seg.Base += 1 << 20
	assert.NilError(t, svc.ReMountSegments("c", []SegmentInfo{seg}))
	_, err := svc.GetReplicaList("", "k")
	assert.Assert(t, errors.Is(err, wire.ErrObjectNotFound), err)
}
