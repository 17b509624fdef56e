package master

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
)

// TestAppendReplicaListMatchesGet checks the mux's get against the
// generic one: for objects in memory (one and two replicas), on disk only,
// in another tenant, unfinished, missing and under an invalid tenant,
// Service.AppendReplicaList writes the bytes of the generic answer
// (replicaListToWire of GetReplicaList) or fails with its code, and
// allocates nothing on a hit.
func TestAppendReplicaListMatchesGet(t *testing.T) {
	svc, err := newService(Config{Clock: newFakeClock(), Seed: 5, ClientTTL: 10 * time.Second, DisableGrants: true}, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("ca", segInfo("sa", "127.0.0.1:1001", 1<<30)))
	assert.NilError(t, svc.MountSegment("cb", segInfo("sb", "127.0.0.1:1002", 2<<30)))
	mustPut(t, svc, "ca", "one", 4096, ReplicateConfig{}, false)
	mustPut(t, svc, "ca", "two", 8192, ReplicateConfig{ReplicaNum: 2}, false)
	mustPutIn(t, svc, "cb", "t1", "one", 100, ReplicateConfig{}, false)
	_, err = svc.PutStart("ca", "", "unfinished", 4096, ReplicateConfig{}, false)
	assert.NilError(t, err)
	two, err := svc.GetReplicaList("", "two")
	assert.NilError(t, err)
	_, err = svc.MountDiskSegment("cb", DiskSegmentInfo{ID: "db", Name: "127.0.0.1:1002", Path: "/ssd", Capacity: 1 << 30},
		[]DiskEntry{{Key: "ondisk", UID: 77, Size: 5000, FileBytes: diskFileBytes(5000)},
			{Key: "two", UID: two.UID, Size: 8192, FileBytes: diskFileBytes(8192)}})
	assert.NilError(t, err)

	for _, c := range []struct{ tenant, key string }{
		{"", "one"}, {"", "two"}, {"t1", "one"}, {"", "ondisk"}, {"default", "two"},
		{"", "unfinished"}, {"", "missing"}, {"t1", "two"}, {"_reserved", "one"}, {"bad\x01", "one"},
	} {
		l, gerr := svc.GetReplicaList(c.tenant, c.key)
		got, ferr := svc.AppendReplicaList([]byte("head"), []byte(c.tenant), []byte(c.key))
		if gerr != nil {
			assert.Assert(t, ferr != nil, "%q/%q: generic %v, hand path answered", c.tenant, c.key, gerr)
			assert.Equal(t, wire.CodeOf(ferr), wire.CodeOf(gerr), "%q/%q", c.tenant, c.key)
			assert.Equal(t, ferr.Error(), gerr.Error())
			continue
		}
		assert.NilError(t, ferr, "%q/%q", c.tenant, c.key)
		want, err := proto.Marshal(replicaListToWire(svc, l))
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, append([]byte("head"), want...)), "%q/%q:\n got %x\nwant %x", c.tenant, c.key, got, want)
	}
	l, err := svc.GetReplicaList("", "two")
	assert.NilError(t, err)
	assert.Equal(t, len(l.Replicas), 3) // two in memory, one on disk: every kind went through the comparison

	buf := make([]byte, 0, 4096)
	tenant, key := []byte("t1"), []byte("one")
	n := testing.AllocsPerRun(100, func() {
		if _, err := svc.AppendReplicaList(buf[:0], tenant, key); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, n, 0.0)
}
