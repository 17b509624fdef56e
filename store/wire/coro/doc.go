// Package coro speaks yalantinglibs' coro_rpc protocol as Mooncake's store
// master and its MasterClient use it (specs/mooncake.md §7;
// docs/reports/coro-rpc.md gives the format facts and which of them were
// checked against bytes from a real Mooncake build).
//
// It holds the framing (the 20-byte request header, the 16-byte response
// header, function ids derived from handler names), the table of
// Mooncake's master methods, and the struct_pack codecs (package
// structpack) of the argument tuples and answers those methods exchange:
// Segment, Replica::Descriptor with its variant of memory, NoF, disk,
// local-disk and DFS descriptors, ReplicateConfig, ObjectMeta,
// GetReplicaListResponse, PingResponse and tl::expected<T, ErrorCode>.
//
// Everything here is pure data: reading a frame checks its header and
// bounds its body before allocating; nothing here owns a connection.
package coro
