// Package client is the kvferry store client (specs/mooncake.md §6-7). A
// Client is both a requester and a storage server: it maps, registers and
// mounts GlobalSegmentSize bytes that the master may place replicas in,
// keeps a registered staging buffer for data in unregistered memory, and
// moves object bytes directly to and from the clients that hold replicas
// with the transfer engine (engine/), never through the master. Replicas in
// its own segment are served by memcpy.
//
// The master is reached over mux, or over gRPC when it does not speak mux
// or Config.MasterRPC says so (store/wire): a "host:port" address, an
// "etcd://h1:2379;h2:2379" HA cluster whose leader the client follows
// (store/ha), or an embedded in-process master ("" or "embedded", started
// through Config.StartEmbeddedMaster; store/embedded wires it, since this
// package never imports store/master). A heartbeat goroutine pings the
// master every second and re-mounts the client's segments when the master
// answers NEED_REMOUNT, so clients survive a master restart or failover
// without restarting themselves.
//
// Ownership: a Client owns its engine (unless Config.Engine was given), its
// memory mappings, its master connection, its etcd client and its embedded
// master; Close releases all of them.
package client
