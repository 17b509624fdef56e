package wire

import (
	"bytes"
	"context"
	"hash/fnv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"
)

// putCommitRequestCases are commits as clients send them: one replica and
// several, no config and a full one, a tenant, a versioned upsert.
func putCommitRequestCases() []*PutCommitRequest {
	return []*PutCommitRequest{
		{},
		{ClientId: "client-1", Key: "k", Size: 4096, Replicas: []*GrantedReplica{{GrantId: 7, Address: 0x7f0000001000}}},
		{ClientId: "c", Key: "layer/7/é", Size: 1 << 20, Config: &ReplicateConfig{}, TenantId: "t1",
			Replicas: []*GrantedReplica{{GrantId: 1, Address: 64}, {GrantId: 2}, {Address: ^uint64(0)}}},
		{ClientId: "c", Key: "v", Size: ^uint64(0), Upsert: true, Versioned: true, ExpectedVersion: 3,
			Config: &ReplicateConfig{ReplicaNum: 3, SoftPin: SoftPinAction_SOFT_PIN_ENABLE, SoftPinTtlMs: 60000,
				HardPin: true, PreferredSegments: []string{"a", "b"}, GroupIds: []string{"g"}, HasGroupIds: true},
			Replicas: []*GrantedReplica{{GrantId: 9, Address: 4096}}},
		{Key: "x", Config: &ReplicateConfig{SoftPin: SoftPinAction(-2), HasGroupIds: true}},
	}
}

func putCommitResponseCases() []*PutCommitResponse {
	return []*PutCommitResponse{
		{},
		{GrantGeneration: 1, Version: 0, Uid: 5, ReplicaTags: []uint64{41}, ViewVersion: 1 << 50},
		{GrantGeneration: ^uint64(0), Version: 9, Uid: 1, ReplicaTags: []uint64{1, 0, ^uint64(0)}, ViewVersion: 2},
	}
}

// TestAppendPutCommitResponseMatchesProto checks that the hand encoding
// writes the bytes proto.Marshal writes, and that the descriptors have no
// field the hand code does not know.
func TestAppendPutCommitResponseMatchesProto(t *testing.T) {
	for _, c := range []struct {
		m proto.Message
		n int
	}{{&PutCommitRequest{}, 9}, {&ReplicateConfig{}, 7}, {&GrantedReplica{}, 2}, {&PutCommitResponse{}, 5}} {
		assert.Equal(t, c.m.ProtoReflect().Descriptor().Fields().Len(), c.n,
			"a new %T field: update putcommit.go", c.m)
	}
	for i, m := range putCommitResponseCases() {
		want, err := proto.Marshal(m)
		assert.NilError(t, err)
		got := AppendPutCommitResponse(nil, m.GrantGeneration, m.Version, m.Uid, m.ReplicaTags, m.ViewVersion)
		assert.Assert(t, bytes.Equal(got, want), "case %d: got %x, want %x", i, got, want)
	}
}

// TestDecodePutCommitReuses decodes requests and answers one after
// another into the same messages, as the mux server and a client's pooled
// commits do: each reads as a fresh proto.Unmarshal would, and a
// same-shaped one allocates nothing (but the request's key, which the
// master keeps).
func TestDecodePutCommitReuses(t *testing.T) {
	var d putCommitDecoder
	reqs := putCommitRequestCases()
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 2, 3, 1, 1}} {
		for _, i := range order {
			b, err := proto.Marshal(reqs[i])
			assert.NilError(t, err)
			got, err := d.decode(b)
			assert.NilError(t, err)
			assert.Assert(t, proto.Equal(got, reqs[i]), "request %d: got %v", i, got)
		}
	}
	b, err := proto.Marshal(reqs[2])
	assert.NilError(t, err)
	n := testing.AllocsPerRun(100, func() {
		if _, err := d.decode(b); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, n, 1.0, "the key alone")

	out := new(PutCommitResponse)
	resps := putCommitResponseCases()
	for _, i := range []int{0, 1, 2, 1, 0, 2} {
		b, err := proto.Marshal(resps[i])
		assert.NilError(t, err)
		assert.NilError(t, decodePutCommitResponse(b, out))
		assert.Assert(t, proto.Equal(out, resps[i]), "answer %d: got %v", i, out)
	}
	b, err = proto.Marshal(resps[2])
	assert.NilError(t, err)
	n = testing.AllocsPerRun(100, func() {
		if err := decodePutCommitResponse(b, out); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, n, 0.0)
}

// TestDecodePutCommitUnknownFields keeps fields this build does not know,
// as proto.Unmarshal does, and reads replica tags packed or not.
func TestDecodePutCommitUnknownFields(t *testing.T) {
	b, err := proto.Marshal(putCommitRequestCases()[3])
	assert.NilError(t, err)
	b = protowire.AppendTag(b, 100, protowire.BytesType)
	b = protowire.AppendString(b, "later")
	b = protowire.AppendTag(b, 2, protowire.VarintType) // a known number with another wire type
	b = protowire.AppendVarint(b, 1)
	// A second config is merged into the first, with a field of its own.
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, protowire.AppendVarint(protowire.AppendTag(nil, 50, protowire.VarintType), 8))
	want := new(PutCommitRequest)
	assert.NilError(t, proto.Unmarshal(b, want))
	var d putCommitDecoder
	got, err := d.decode(b)
	assert.NilError(t, err)
	assert.Assert(t, proto.Equal(got, want), "got %v, want %v", got, want)

	var resp []byte
	resp = protowire.AppendTag(resp, 4, protowire.VarintType) // unpacked
	resp = protowire.AppendVarint(resp, 7)
	resp = protowire.AppendTag(resp, 4, protowire.BytesType) // then packed
	resp = protowire.AppendBytes(resp, []byte{8, 9})
	resp = protowire.AppendTag(resp, 6, protowire.Fixed32Type)
	resp = protowire.AppendFixed32(resp, 1)
	wantResp := new(PutCommitResponse)
	assert.NilError(t, proto.Unmarshal(resp, wantResp))
	gotResp := new(PutCommitResponse)
	assert.NilError(t, decodePutCommitResponse(resp, gotResp))
	assert.Assert(t, proto.Equal(gotResp, wantResp), "got %v, want %v", gotResp, wantResp)
	assert.DeepEqual(t, gotResp.ReplicaTags, []uint64{7, 8, 9})
}

// FuzzDecodePutCommitRequest decodes arbitrary bytes by hand and with
// proto.Unmarshal: both refuse, or both accept the same message, also
// with a decoder a previous request filled.
func FuzzDecodePutCommitRequest(f *testing.F) {
	for _, m := range putCommitRequestCases() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x22, 0x02, 0x2a, 0x01})       // a config with a short string
	f.Add([]byte{0x22, 0x03, 0x2a, 0x01, 0xc0}) // invalid UTF-8 in a config list
	f.Add([]byte{0x32, 0x02, 0x0b, 0x0c})       // a group inside a replica
	f.Add([]byte{0x12, 0x01, 0xff})             // invalid UTF-8 in the key
	prev, err := proto.Marshal(putCommitRequestCases()[3])
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(PutCommitRequest)
		werr := proto.Unmarshal(b, want)
		for _, reuse := range []bool{false, true} {
			var d putCommitDecoder
			if reuse {
				if _, err := d.decode(prev); err != nil {
					t.Fatal(err)
				}
			}
			got, gerr := d.decode(b)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("hand decoder: %v, proto.Unmarshal: %v", gerr, werr)
			}
			if werr == nil && !proto.Equal(got, want) {
				t.Fatalf("hand decoder read %v, proto.Unmarshal %v", got, want)
			}
		}
	})
}

// FuzzDecodePutCommitResponse is FuzzDecodePutCommitRequest for answers.
func FuzzDecodePutCommitResponse(f *testing.F) {
	for _, m := range putCommitResponseCases() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x22, 0x02, 0x01, 0x80}) // a packed list ending in a cut varint
	f.Add([]byte{0x20, 0x01, 0x20, 0x02}) // unpacked
	prev, err := proto.Marshal(putCommitResponseCases()[2])
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(PutCommitResponse)
		werr := proto.Unmarshal(b, want)
		for _, reuse := range []bool{false, true} {
			got := new(PutCommitResponse)
			if reuse {
				if err := decodePutCommitResponse(prev, got); err != nil {
					t.Fatal(err)
				}
			}
			gerr := decodePutCommitResponse(b, got)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("hand decoder: %v, proto.Unmarshal: %v", gerr, werr)
			}
			if werr == nil && !proto.Equal(got, want) {
				t.Fatalf("hand decoder read %v, proto.Unmarshal %v", got, want)
			}
		}
	})
}

// digest sums the encoding of m, unknown fields included, so that two
// decodings of one request answer alike only when they read the same.
func digest(m proto.Message) uint64 {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// PutCommit answers from the request alone: its digest and grant ids
// (listerMaster, for FuzzServeMuxConn); key "exists" fails.
func (l *listerMaster) PutCommit(_ context.Context, req *PutCommitRequest) (*PutCommitResponse, error) {
	if req.GetKey() == "exists" {
		return nil, ErrObjectAlreadyExists
	}
	resp := &PutCommitResponse{GrantGeneration: req.GetSize(), Uid: uint64(len(req.GetReplicas())),
		ViewVersion: digest(req)}
	for _, r := range req.GetReplicas() {
		resp.ReplicaTags = append(resp.ReplicaTags, r.GetGrantId())
	}
	return resp, nil
}

// AppendPutCommit is PutCommit on the mux's hand path.
func (l *listerMaster) AppendPutCommit(ctx context.Context, b []byte, req *PutCommitRequest) ([]byte, error) {
	l.fast.Add(1)
	resp, err := l.PutCommit(ctx, req)
	if err != nil {
		return b, err
	}
	return AppendPutCommitResponse(b, resp.GrantGeneration, resp.Version, resp.Uid, resp.ReplicaTags, resp.ViewVersion), nil
}
