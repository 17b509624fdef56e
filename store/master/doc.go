// Package master is the kvferry store master (specs/mooncake.md §7): it
// places objects in memory segments that clients mount, tracks replicas,
// leases, soft and hard pins, evicts at the high watermark, reclaims the
// space of abandoned puts and expires clients that stop pinging. It never
// touches object data: clients move bytes between each other with the
// transfer engine, at the absolute addresses the master hands out.
//
// Service is the state machine, with no I/O, driven by a Clock so tests
// never sleep. Server serves a Service on one RPC port in two protocols,
// told apart by a connection's first bytes: gRPC (store/wire, wire.proto)
// and mux, the same messages in plain frames over one persistent
// connection per client (store/wire mux.go; the clients' default, several
// times cheaper per round trip). It runs its maintenance loop, serves admin HTTP (/metrics on a private Prometheus
// registry, /health, …) and, with EnableHA, campaigns in etcd (store/ha):
// only the leader serves, and each new term starts from an empty Service
// that clients rebuild by re-mounting their segments when Ping answers
// NEED_REMOUNT. StartEmbedded runs a loopback Server inside the client's
// process.
//
// Ownership: a Server owns its listeners, its connections, its goroutines
// (accept, one per mux connection, gRPC, HTTP, maintenance, HA campaign)
// and its etcd client; Close stops and waits for all of them.
package master
