// Package structpack encodes and decodes yalantinglibs' struct_pack binary
// format, the body format of coro_rpc, for the types Mooncake's store master
// and its clients exchange (docs/reports/coro-rpc.md gives the format in
// full; specs/mooncake.md §7 the master's role).
//
// A value is described by a Codec: its type literal (the byte string from
// which struct_pack derives the 32-bit type hash that heads every message),
// its encoder and its decoder. Codecs compose (Vec, Opt, Expected, Variant
// and hand-written struct codecs built with StructLit), so the literal of a
// composite type is derived from the same pieces that encode it and cannot
// drift from the bytes.
//
// A message is the 4-byte type hash (little endian; its low bit says a
// metainfo byte follows), then, when the low bit is set, one metainfo byte
// (bits 3-4: the width of every container length in the message), then the
// fields in declaration order: fixed-width little-endian scalars,
// containers as a length followed by their elements, optionals and
// expecteds as a presence byte followed by the value (or the error),
// variants as an index byte followed by the alternative. Lengths take one
// byte when every container in the message has fewer than 256 elements,
// else 2, 4 or 8 bytes as the largest one needs.
//
// Decoding is bounded: every length is checked against the bytes left (and
// a per-call element cap) before anything is allocated, the whole input
// must be consumed, and malformed input returns an error wrapping
// ErrMalformed, never a panic. Encoders and decoders are pure functions of
// their input and safe for concurrent use.
package structpack
