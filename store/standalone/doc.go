// Package standalone is the store's standalone storage mode (Mooncake's
// dummy / real client split, specs/mooncake.md §7.1): one real client
// process owns the store resources (its transfer engine, the memory it lends
// to the store, the master connection), and every inference rank runs a
// lightweight dummy client that forwards each store call to it.
//
// The split rests on shared memory. A rank allocates the buffers it moves
// KV cache from and into with the process's HostMemAllocator (memfd-backed,
// Mooncake's MooncakeHostMemAllocator); registering one with the dummy sends
// its file descriptor to the real client (SCM_RIGHTS over a Unix socket),
// which maps the same pages and registers them with its engine. A call
// naming addresses in such a buffer carries only the addresses: the real
// client translates them into its own mapping and the bytes move between
// its engine and the holders of the replicas, never through the dummy. A
// call naming any other memory carries the bytes themselves over the
// socket.
//
// Wire: the real client listens on the abstract Unix socket SocketName(port)
// (port names the real client, as Mooncake's "@mooncake_client_<port>.sock"
// does; server_address "host:port" selects it, and the host must be this
// one: the memory is shared). The first byte of a connection says what it
// is: 'R' starts a control connection (Go net/rpc, gob-encoded, many calls
// in flight), whose first call opens a session; 'F' carries one buffer's
// file descriptor into a session, named by the session's secret token. A
// session lives as long as its control connection: when the rank exits (or
// the connection breaks) the real client unregisters and unmaps its
// buffers. The real client only accepts peers of its own user (or root), and
// only ever touches a session's own shared buffers.
package standalone
