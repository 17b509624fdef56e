package master

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/kvferry/kvferry/store/oplog"
)

// memLog is an in-memory oplog backend.
type memLog struct{ recs []oplog.Record }

func (m *memLog) Load(context.Context) (oplog.State, error) { return oplog.State{Records: m.recs}, nil }
func (m *memLog) Append(_ context.Context, r []oplog.Record) error {
	m.recs = append(m.recs, r...)
	return nil
}
func (m *memLog) Snapshot(context.Context, uint64, []byte) error { return nil }
func (m *memLog) Close() error                                   { return nil }

// FuzzRestore hands a restarting master an arbitrary snapshot and records
// (what a damaged or hostile oplog directory or etcd prefix holds, past
// the frames' checksums): restore refuses or succeeds, never panics, and
// the state it builds keeps every invariant while the holders remount,
// the restore window passes and new puts arrive.
func FuzzRestore(f *testing.F) {
	// A real log as the seed: two segments, objects on them, a removal.
	svc, err := newService(Config{Clock: newFakeClock(), Seed: 1, DisableGrants: true}, 1, fenceNone)
	if err != nil {
		f.Fatal(err)
	}
	svc.mu.Lock()
	for _, info := range []SegmentInfo{segInfo("s0", "n0", 1<<30), segInfo("s1", "n1", 2<<30)} {
		var e encoder
		encodeSegMount(&e, info)
		f.Add(e.b, []byte(nil))
		svc.mu.Unlock()
		_ = svc.MountSegment("c", info)
		svc.mu.Lock()
	}
	svc.mu.Unlock()
	_, _ = svc.PutStart("c", "", "k", 4096, ReplicateConfig{ReplicaNum: 2}, false)
	_ = svc.PutEnd("c", "", "k")
	svc.mu.Lock()
	snap := svc.encodeStateLocked()
	var ids []objectKey
	for id := range svc.mu.objects {
		ids = append(ids, id)
	}
	svc.mu.Unlock()
	for _, id := range ids {
		f.Add(snap, encodeRemove(id))
	}
	f.Add(snap, encodeSegGone("s1"))
	f.Fuzz(func(t *testing.T, snapshot, record []byte) {
		st := oplog.State{SnapshotSeq: 1, Snapshot: snapshot}
		if len(record) > 0 {
			st.Records = []oplog.Record{{Seq: 2, Data: record}}
		}
		r, err := replay(st)
		clock := newFakeClock()
		s, nerr := newService(Config{Clock: clock, Seed: 2, ClientTTL: 10 * time.Second, RestoreWindow: 20 * time.Second, DisableGrants: true}, 1, fenceNone)
		if nerr != nil {
			t.Fatal(nerr)
		}
		if rerr := s.restore(st, &memLog{}); (rerr == nil) != (err == nil) {
			t.Fatalf("replay says %v, restore %v", err, rerr)
		}
		if err != nil {
			return
		}
		checkInvariants(t, s)
		for _, info := range r.segs { // the holders come back
			_ = s.ReMountSegments(info.ClientID, []SegmentInfo{info})
			checkInvariants(t, s)
		}
		var key [8]byte
		binary.LittleEndian.PutUint64(key[:], uint64(len(snapshot)))
		if _, err := s.PutStart("c", "", string(key[:]), 1000, ReplicateConfig{ReplicaNum: 1}, true); err == nil {
			_ = s.PutEnd("c", "", string(key[:]))
		}
		checkInvariants(t, s)
		clock.Advance(30 * time.Second)
		s.Tick()
		checkInvariants(t, s)
	})
}
