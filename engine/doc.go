// Package engine is kvferry's transfer engine: a Go API with Mooncake's
// semantics (specs/mooncake.md §1-2) for moving bytes between registered
// memory of this process and memory that other engines registered.
//
// An Engine owns a memory registry (the local RAM segment), a cache of remote
// segments (name -> SegmentID, descriptor), batches of asynchronous
// requests, notifications, an RPC server (the handshake port) and the
// installed transports. Transports implement Transport; the engine picks one
// per request from the target segment's descriptor and slices large requests
// into pieces that transports may stripe over several connections.
//
// The engine never copies data through the Go heap: addresses are C memory
// the caller registered, reached through internal/cmem.
//
// Lifetime: New starts the RPC server and the notification sender; Close stops
// them, closes transports (in-flight tasks end FAILED) and unpublishes the
// segment. All methods are safe for concurrent use.
package engine
