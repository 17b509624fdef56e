package coro

import (
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// SegmentStatus is Mooncake's SegmentStatus (an enum class without a
// base: int): UNDEFINED 0, OK, DRAINING, DRAINED, GRACEFULLY_UNMOUNTING,
// UNMOUNTING.
type SegmentStatus int32

// ExpSegmentStatus answers QuerySegmentStatus and QuerySegmentStatusById.
type ExpSegmentStatus = sp.Expected[SegmentStatus, ErrorCode]

// Segment status methods: QuerySegmentStatus sends a bare segment name,
// QuerySegmentStatusById a bare segment UUID.
var (
	MethodQuerySegmentStatus     = method("QuerySegmentStatus")
	MethodQuerySegmentStatusByID = method("QuerySegmentStatusById")
)

// Segment status codecs.
var (
	SegmentStatusCodec    = enumI32[SegmentStatus]()
	ExpSegmentStatusCodec = sp.ExpectedOf(SegmentStatusCodec, ErrorCodeCodec)
)

// ExpClientIPs answers BatchQueryIp: per client that has segments, the
// hosts of its segments (an unordered_map<UUID, vector<string>>).
type ExpClientIPs = sp.Expected[[]sp.KV[UUID, []string], ErrorCode]

// MethodBatchQueryIP is BatchQueryIp: a bare vector of client UUIDs.
var MethodBatchQueryIP = method("BatchQueryIp")

// BatchQueryIp codecs.
var (
	UUIDsCodec        = sp.Vec(UUIDCodec)
	ExpClientIPsCodec = sp.ExpectedOf(sp.MapOf(UUIDCodec, vecString), ErrorCodeCodec)
)
