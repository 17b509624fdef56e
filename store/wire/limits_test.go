package wire

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"
)

func TestCheckShape(t *testing.T) {
	md := (&BatchPutStartRequest{}).ProtoReflect().Descriptor()
	ok, _ := proto.Marshal(&BatchPutStartRequest{ClientId: "c", Keys: []string{"a", "b"}, Sizes: []uint64{1, 2},
		Config: &ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s"}}})
	assert.NilError(t, CheckShape(md, ok, 10))
	// 1 client id + 2 keys + 1 packed field with 2 sizes + config(1) with
	// replica_num and one preferred segment = 9 elements.
	assert.Assert(t, errors.Is(CheckShape(md, ok, 8), ErrRequestLimit))
	// Elements nested in a message and packed scalars count.
	nested, _ := proto.Marshal(&PutStartRequest{Config: &ReplicateConfig{PreferredSegments: make([]string, 100)}})
	assert.Assert(t, errors.Is(CheckShape((&PutStartRequest{}).ProtoReflect().Descriptor(), nested, 50), ErrRequestLimit))
	packed, _ := proto.Marshal(&BatchPutStartRequest{Sizes: make([]uint64, 100)})
	assert.Assert(t, errors.Is(CheckShape(md, packed, 50), ErrRequestLimit))
	assert.Assert(t, errors.Is(CheckShape(md, []byte{0xff}, 50), ErrInvalidParams))
}

func TestRequestLimitsCheck(t *testing.T) {
	l := RequestLimits{MaxKeyBytes: 8, MaxBatchKeys: 2}
	assert.NilError(t, l.Check(&KeyRequest{Key: "12345678"}))
	assert.Assert(t, errors.Is(l.Check(&KeyRequest{Key: "123456789"}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&BatchKeyRequest{Keys: []string{"a", "b", "c"}}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&BatchRemoveRequest{Keys: []string{strings.Repeat("k", 9)}}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&PutCommitRequest{Key: "k", Replicas: make([]*GrantedReplica, maxListItems+1)}), ErrRequestLimit))
	assert.NilError(t, l.Check(&PingRequest{ClientId: strings.Repeat("x", 100)}))
	assert.Assert(t, errors.Is(l.Check(&GetReplicaListByRegexRequest{Pattern: strings.Repeat("a", 9)}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&BatchQueryIpRequest{ClientIds: []string{"a", "b", "c"}}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&CreateDrainJobRequest{Segments: make([]string, maxListItems+1)}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&CreateDrainJobRequest{TargetSegments: make([]string, maxListItems+1)}), ErrRequestLimit))
	assert.Assert(t, errors.Is(l.Check(&DrainJobIdRequest{JobId: strings.Repeat("j", 9)}), ErrRequestLimit))
	assert.NilError(t, l.Check(&CreateDrainJobRequest{Segments: []string{"a:1", "b:2"}}))
}
