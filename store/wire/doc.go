// Package wire is what the store master and the store client share: the
// gRPC service definition with its generated code, the mux protocol that
// carries the same messages over one persistent connection (mux.go: frame
// format, MuxClient, ServeMuxConn), the store ErrorCode table (Mooncake's
// negative codes, specs/mooncake.md §6.6) and the one translation between
// Go errors and gRPC status (AsStatusError gives the mux and in-process
// paths the same errors). store/client imports this package and never
// store/master.
//
// A Code is an error. Store functions return errors that wrap a Code, so
// callers test them with errors.Is(err, wire.ErrObjectNotFound) and turn any
// error into Mooncake's integer with CodeOf.
package wire
