// Package tcp is the TCP transport, byte-compatible with Mooncake's classic
// TCP transport (specs/mooncake.md §4): a 24-byte request header, version 2
// status frames, persistent connections. kvferry adds several lanes
// (connections) per peer with pipelined, batched writes, slices striped
// over the lanes, and a server that checks every request against the
// registered memory before it touches a byte.
//
// Data moves between registered C memory and the socket directly: payloads
// are written with writev from the registered range and read into it, and
// the only staging is an off-heap read-ahead buffer of HeaderBatchBytes for
// headers, status frames and the first bytes of small payloads.
package tcp
