package master

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/invariants"
	"github.com/kvferry/kvferry/store/wire"
)

// grantedMaster returns the handlers of a master whose client "c" holds
// put grants on two holders' segments, and those grants.
func grantedMaster(t *testing.T) (*handlers, []GrantInfo) {
	t.Helper()
	svc, err := newService(Config{Clock: newFakeClock(), Seed: 3, ClientTTL: 30 * time.Second, GrantBytes: 4 << 20}, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("ha", SegmentInfo{ID: "sa", Name: "h:1", Protocol: "tcp", Base: 1 << 30, Size: 64 << 20, ClientID: "ha"}))
	assert.NilError(t, svc.MountSegment("hb", SegmentInfo{ID: "sb", Name: "h:2", Protocol: "tcp", Base: 1 << 40, Size: 64 << 20, ClientID: "hb"}))
	assert.NilError(t, svc.ReMountSegments("c", nil))
	svc.mu.lastGrant, svc.mu.lastUID = 1000, 5000 // random otherwise: two masters in the same state
	gs, _, err := svc.AcquireGrants("c", 2, 4096, nil, nil)
	assert.NilError(t, err)
	assert.Equal(t, len(gs), 2)
	assert.Assert(t, gs[0].SegmentName != gs[1].SegmentName)
	s := &Server{}
	s.active.Store(svc)
	return &handlers{s: s}, gs
}

// TestAppendPutCommitMatchesGeneric checks the mux's put commit against
// the generic one on two masters in the same state: for commits of one
// and two replicas, in another tenant, versioned, in a group, an upsert
// and every refusal (an existing key, a foreign grant, a taken range, an
// unknown client, a bad tenant, two groups), AppendPutCommit writes the
// bytes of the generic answer or fails with its error; and a commit on
// the hand path allocates only the object's record.
func TestAppendPutCommitMatchesGeneric(t *testing.T) {
	generic, gs := grantedMaster(t)
	hand, gs2 := grantedMaster(t)
	assert.DeepEqual(t, gs, gs2)
	at := func(g GrantInfo, off uint64) *wire.GrantedReplica {
		return &wire.GrantedReplica{GrantId: g.ID, Address: g.Addr + off}
	}
	one := func(key string, off uint64) *wire.PutCommitRequest {
		return &wire.PutCommitRequest{ClientId: "c", Key: key, Size: 4096, Replicas: []*wire.GrantedReplica{at(gs[0], off)}}
	}
	with := func(r *wire.PutCommitRequest, f func(*wire.PutCommitRequest)) *wire.PutCommitRequest { f(r); return r }
	for i, c := range []struct {
		req  *wire.PutCommitRequest
		want error // the code of a refusal
	}{
		{one("a", 0), nil},
		{&wire.PutCommitRequest{ClientId: "c", Key: "two", Size: 5000, Config: &wire.ReplicateConfig{ReplicaNum: 2},
			Replicas: []*wire.GrantedReplica{at(gs[0], 8192), at(gs[1], 0)}}, nil},
		{with(one("a", 16384), func(r *wire.PutCommitRequest) { r.TenantId = "t1" }), nil},
		{one("a", 20480), wire.ErrObjectAlreadyExists},
		{with(one("a", 20480), func(r *wire.PutCommitRequest) { r.Upsert = true }), nil},
		{with(one("v", 24576), func(r *wire.PutCommitRequest) { r.Versioned = true }), nil},
		{with(one("v", 28672), func(r *wire.PutCommitRequest) { r.Versioned, r.ExpectedVersion = true, 7 }), wire.ErrInvalidVersion},
		{with(one("g", 32768), func(r *wire.PutCommitRequest) {
			r.Config = &wire.ReplicateConfig{GroupIds: []string{"grp"}, HasGroupIds: true, SoftPin: wire.SoftPinAction_SOFT_PIN_ENABLE}
		}), nil},
		{with(one("g2", 36864), func(r *wire.PutCommitRequest) {
			r.Config = &wire.ReplicateConfig{GroupIds: []string{"x", "y"}, HasGroupIds: true}
		}), wire.ErrInvalidParams},
		{one("taken", 0), wire.ErrInvalidWrite},
		{&wire.PutCommitRequest{ClientId: "c", Key: "foreign", Size: 4096,
			Replicas: []*wire.GrantedReplica{{GrantId: 999, Address: gs[0].Addr}}}, wire.ErrInvalidWrite},
		{with(one("who", 40960), func(r *wire.PutCommitRequest) { r.ClientId = "nobody" }), wire.ErrClientNotFound},
		{with(one("bad", 40960), func(r *wire.PutCommitRequest) { r.TenantId = "_reserved" }), wire.ErrInvalidParams},
		{&wire.PutCommitRequest{ClientId: "c", Key: "none", Size: 4096}, wire.ErrInvalidParams},
	} {
		resp, gerr := generic.PutCommit(context.Background(), c.req)
		got, herr := hand.AppendPutCommit(context.Background(), []byte("head"), c.req)
		assert.Equal(t, wire.CodeOf(gerr), wire.CodeOf(c.want), "request %d: %v", i, gerr)
		if gerr != nil {
			assert.Assert(t, herr != nil, "request %d: generic %v, hand path answered", i, gerr)
			assert.Equal(t, herr.Error(), gerr.Error())
			continue
		}
		assert.NilError(t, herr, "request %d", i)
		want, err := proto.Marshal(resp)
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, append([]byte("head"), want...)), "request %d:\n got %x\nwant %x", i, got, want)
	}

	if invariants.Enabled {
		return // checkLocked allocates
	}
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprint("fresh-", i)
	}
	next := 0
	buf := make([]byte, 0, 256)
	req := one("", 0)
	n := testing.AllocsPerRun(100, func() {
		req.Key = keys[next]
		req.Replicas[0].Address = gs[1].Addr + 64<<10 + uint64(next)*4096
		req.Replicas[0].GrantId = gs[1].ID
		next++
		if _, err := hand.AppendPutCommit(context.Background(), buf[:0], req); err != nil {
			t.Fatal(err)
		}
	})
	assert.Assert(t, n <= 1, "a commit allocates %v objects, want the record alone", n)
}
