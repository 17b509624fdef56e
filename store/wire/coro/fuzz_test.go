package coro

import (
	"sort"
	"testing"

	"gotest.tools/v3/assert"

	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// fuzzOne decodes b with c: no panic, an error leaves the zero value, and
// a decoded value survives a re-encode and decode unchanged.
func fuzzOne[T any](t *testing.T, c sp.Codec[T], b []byte) {
	lim := sp.Limits{MaxElements: 1 << 16}
	v, err := sp.Unmarshal(c, b, lim)
	if err != nil {
		var zero T
		assert.DeepEqual(t, v, zero)
		return
	}
	w, err := sp.Unmarshal(c, sp.Marshal(c, &v), lim)
	assert.NilError(t, err)
	assert.DeepEqual(t, w, v)
}

// FuzzMessages feeds every argument and answer decoder the same bytes: the
// first byte picks the codec, the rest is the message. The seeds are the
// reference messages.
func FuzzMessages(f *testing.F) {
	decoders := []func(*testing.T, []byte){
		func(t *testing.T, b []byte) { fuzzOne(t, UUIDCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, MountSegmentArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ReMountSegmentArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, UnmountSegmentArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, GracefulUnmountSegmentArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, KeyArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, KeysArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, PutStartArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchPutStartArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, PutEndArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchPutEndArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchUpsertEndArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, PutRevokeArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchPutRevokeArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchUpsertRevokeArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, RemoveArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, RemoveAllArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchRemoveArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpVoidCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpBoolCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpStringCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpInt64Codec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpPingCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpDescriptorsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpReplicaListCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpStorageConfigCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpRegexReplicasCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchVoidCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchBoolCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchDescriptorsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchReplicaListCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ReplicaClearArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, CreateCopyTaskArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, CreateMoveTaskArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, CopyStartArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, DynamicCopyStartArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ClientKeyArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, DynamicCopyEndArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, MoveStartArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ClientFlagArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ReportSsdCapacityArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, NotifyOffloadSuccessArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, PromotionAllocStartArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, EvictDiskReplicaArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, BatchEvictDiskReplicaArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, MountNoFSegmentArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ReMountNoFSegmentArgsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpStringsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpUUIDCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpQueryTaskCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpCopyStartCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpMoveStartCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpOffloadTasksCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpPromotionAllocCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpNoFSegmentsCodec, b) },
		func(t *testing.T, b []byte) { fuzzOne(t, ExpNoFOwnersCodec, b) },
	}
	// Each reference message once, behind a decoder byte the fuzzer
	// mutates; names sorted so the seeds do not change between runs.
	msgs, _ := loadReference(f)
	names := make([]string, 0, len(msgs))
	for n := range msgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		f.Add(append([]byte{byte(i % len(decoders))}, msgs[n]...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		decoders[int(b[0])%len(decoders)](t, b[1:])
	})
}
