package wire

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"
)

// replicaListCases are answers as the master builds them: none, one and
// several replicas, memory and disk, every field set or zero, an enum
// outside its values.
func replicaListCases() []*GetReplicaListResponse {
	return []*GetReplicaListResponse{
		{},
		{Size: 4096, LeaseTtlMs: 10000, Uid: 7, Version: 1, ViewVersion: 3},
		{Replicas: []*Replica{{SegmentName: "127.0.0.1:15001", Address: 0x7f0000001000, Size: 4096,
			Status: ReplicaStatus_REPLICA_STATUS_COMPLETE, SegmentId: "seg-1", Protocol: "tcp", Tag: 41}},
			Size: 4096, LeaseTtlMs: 10000, Uid: 1 << 40, Version: 2, ViewVersion: 1},
		{Replicas: []*Replica{
			{SegmentName: "a", Address: 1, Size: 1 << 20, Status: ReplicaStatus_REPLICA_STATUS_PROCESSING, SegmentId: "ida", Protocol: "rdma", Tag: 1},
			{SegmentName: "b", Size: 1 << 20, SegmentId: "idb", Kind: ReplicaKind_REPLICA_KIND_LOCAL_DISK, FilePath: "/var/kv/é"},
			{Status: ReplicaStatus(-3), Kind: ReplicaKind(99), Tag: ^uint64(0)},
		}, Size: ^uint64(0), Uid: 9},
	}
}

func fieldsOf(r *Replica) ReplicaFields {
	return ReplicaFields{SegmentName: r.SegmentName, Address: r.Address, Size: r.Size, Status: r.Status,
		SegmentID: r.SegmentId, Protocol: r.Protocol, Kind: r.Kind, FilePath: r.FilePath, Tag: r.Tag}
}

// TestAppendReplicaListMatchesProto checks that the hand encoding writes
// the bytes proto.Marshal writes, and that the descriptor has no field
// the hand code does not know.
func TestAppendReplicaListMatchesProto(t *testing.T) {
	assert.Equal(t, (&Replica{}).ProtoReflect().Descriptor().Fields().Len(), 9, "a new Replica field: update replicalist.go")
	assert.Equal(t, (&GetReplicaListResponse{}).ProtoReflect().Descriptor().Fields().Len(), 6,
		"a new GetReplicaListResponse field: update replicalist.go")
	assert.Equal(t, (&KeyRequest{}).ProtoReflect().Descriptor().Fields().Len(), 2, "a new KeyRequest field: update replicalist.go")
	for i, m := range replicaListCases() {
		want, err := proto.Marshal(m)
		assert.NilError(t, err)
		var got []byte
		for _, r := range m.Replicas {
			f := fieldsOf(r)
			got = AppendReplica(got, &f)
		}
		got = AppendReplicaListTail(got, m.LeaseTtlMs, m.Size, m.Uid, m.Version, m.ViewVersion)
		assert.Assert(t, bytes.Equal(got, want), "case %d: got %x, want %x", i, got, want)
	}
}

// TestDecodeReplicaListReuses decodes answers one after another into the
// same message, as a client's pooled gets do: each reads as a fresh
// proto.Unmarshal would, and a same-sized answer allocates nothing.
func TestDecodeReplicaListReuses(t *testing.T) {
	var in names
	out := new(GetReplicaListResponse)
	cases := replicaListCases()
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {3, 0, 3, 2, 2}} {
		for _, i := range order {
			b, err := proto.Marshal(cases[i])
			assert.NilError(t, err)
			assert.NilError(t, decodeReplicaList(b, out, &in))
			assert.Assert(t, proto.Equal(out, cases[i]), "case %d: got %v", i, out)
		}
	}
	b, err := proto.Marshal(cases[2])
	assert.NilError(t, err)
	n := testing.AllocsPerRun(100, func() {
		if err := decodeReplicaList(b, out, &in); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, n, 0.0)
}

// TestDecodeReplicaListUnknownFields keeps fields this build does not know
// (a newer master's), as proto.Unmarshal does.
func TestDecodeReplicaListUnknownFields(t *testing.T) {
	b, err := proto.Marshal(replicaListCases()[2])
	assert.NilError(t, err)
	b = protowire.AppendTag(b, 100, protowire.BytesType)
	b = protowire.AppendString(b, "later")
	b = protowire.AppendTag(b, 2, protowire.BytesType) // a known number with another wire type
	b = protowire.AppendString(b, "x")
	want := new(GetReplicaListResponse)
	assert.NilError(t, proto.Unmarshal(b, want))
	var in names
	got := new(GetReplicaListResponse)
	assert.NilError(t, decodeReplicaList(b, got, &in))
	assert.Assert(t, proto.Equal(got, want))
	again, err := proto.Marshal(got)
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(again, b))
}

func TestNamesBounded(t *testing.T) {
	var in names
	long := strings.Repeat("n", maxNameBytes+1)
	assert.Equal(t, in.intern([]byte(long)), long)
	assert.Equal(t, len(in.m), 0, "a long string is not kept")
	for i := range maxNames + 10 {
		want := strconv.Itoa(i)
		assert.Equal(t, in.intern([]byte(want)), want)
	}
	assert.Equal(t, len(in.m), maxNames)
	assert.Equal(t, in.intern(nil), "")
}

// FuzzDecodeReplicaList decodes arbitrary bytes by hand and with
// proto.Unmarshal: both refuse, or both accept the same message, also
// into a message a previous answer filled.
func FuzzDecodeReplicaList(f *testing.F) {
	for _, m := range replicaListCases() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0x0a, 0xff})          // a replica with a bad string
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xc0})    // invalid UTF-8
	f.Add([]byte{0x0b, 0x0c})                      // a group
	f.Add([]byte{0x0a, 0x02, 0x23, 0x24, 0x10, 1}) // a group inside a replica
	prev, err := proto.Marshal(replicaListCases()[3])
	if err != nil {
		f.Fatal(err)
	}
	var in names
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(GetReplicaListResponse)
		werr := proto.Unmarshal(b, want)
		for _, reuse := range []bool{false, true} {
			got := new(GetReplicaListResponse)
			if reuse {
				if err := decodeReplicaList(prev, got, &in); err != nil {
					t.Fatal(err)
				}
			}
			gerr := decodeReplicaList(b, got, &in)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("hand decoder: %v, proto.Unmarshal: %v", gerr, werr)
			}
			if werr == nil && !proto.Equal(got, want) {
				t.Fatalf("hand decoder read %v, proto.Unmarshal %v", got, want)
			}
		}
	})
}

// FuzzParseKeyRequest parses arbitrary bytes as a KeyRequest by hand and
// with proto.Unmarshal: the same verdict, the same key and tenant.
func FuzzParseKeyRequest(f *testing.F) {
	for _, m := range []*KeyRequest{{}, {Key: "k"}, {Key: "key", TenantId: "t"}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x01, 'a', 0x0a, 0x01, 'b', 0x18, 0x01}) // the last key wins; an unknown varint
	f.Add([]byte{0x12, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(KeyRequest)
		werr := proto.Unmarshal(b, want)
		key, tenant, gerr := parseKeyRequest(b)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("hand parser: %v, proto.Unmarshal: %v", gerr, werr)
		}
		if werr == nil && (string(key) != want.Key || string(tenant) != want.TenantId) {
			t.Fatalf("hand parser read %q/%q, proto.Unmarshal %q/%q", key, tenant, want.Key, want.TenantId)
		}
	})
}

// listerMaster answers GetReplicaList both ways: the generic handler (the
// fake's) and the mux's hand path, from the same table.
type listerMaster struct {
	fakeMaster
	lists map[string]*GetReplicaListResponse
	fast  atomic.Int64 // calls that took the hand path
}

func (l *listerMaster) GetReplicaList(_ context.Context, req *KeyRequest) (*GetReplicaListResponse, error) {
	if m, ok := l.lists[req.GetTenantId()+"/"+req.GetKey()]; ok {
		return m, nil
	}
	return nil, ErrObjectNotFound
}

func (l *listerMaster) AppendReplicaList(_ context.Context, b []byte, tenant, key []byte) ([]byte, error) {
	l.fast.Add(1)
	m, ok := l.lists[string(tenant)+"/"+string(key)]
	if !ok {
		return b, ErrObjectNotFound
	}
	for _, r := range m.Replicas {
		f := fieldsOf(r)
		b = AppendReplica(b, &f)
	}
	return AppendReplicaListTail(b, m.LeaseTtlMs, m.Size, m.Uid, m.Version, m.ViewVersion), nil
}

// TestMuxReplicaLister gets replica lists over the mux from a server with
// the hand path: answers, errors and the request limits as the generic
// path gives them.
func TestMuxReplicaLister(t *testing.T) {
	srv := &listerMaster{lists: map[string]*GetReplicaListResponse{}}
	for i, m := range replicaListCases() {
		srv.lists[[]string{"/a", "/b", "t1/c", "t2/d"}[i]] = m
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		var hello [len(MuxHello)]byte
		if _, err := io.ReadFull(c, hello[:]); err != nil {
			done <- err
			return
		}
		done <- ServeMuxConnConfig(context.Background(), c, srv, MuxServerConfig{Limits: RequestLimits{MaxKeyBytes: 8}})
	}()
	c := NewMuxClient(MuxClientConfig{Addr: lis.Addr().String()})
	ctx := ctxFor(t, 30*time.Second) // a bound for a hung call
	for k, want := range srv.lists {
		tenant, key, _ := strings.Cut(k, "/")
		got, err := c.GetReplicaList(ctx, &KeyRequest{TenantId: tenant, Key: key})
		assert.NilError(t, err)
		assert.Assert(t, proto.Equal(got, want), "%s: got %v", k, got)
	}
	_, err = c.GetReplicaList(ctx, &KeyRequest{Key: "none"})
	assert.Equal(t, CodeOf(err), ErrObjectNotFound)
	_, err = c.GetReplicaList(ctx, &KeyRequest{Key: "a-long-key"})
	assert.Equal(t, CodeOf(err), ErrInvalidParams)
	assert.ErrorContains(t, err, "key of 10 bytes")
	assert.Equal(t, srv.fast.Load(), int64(len(srv.lists)+1)) // the long key stopped before the lister
	assert.NilError(t, c.Close())
	assert.NilError(t, <-done)
}
