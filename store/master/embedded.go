package master

// EmbeddedAddr is the listen address of an embedded master: loopback, any
// free port.
const EmbeddedAddr = "127.0.0.1:0"

// StartEmbedded starts an in-process master for single-host use (the store
// client's master_server_addr "" or "embedded"): a full Server listening for
// gRPC on cfg.RPCAddr, 127.0.0.1 on a free port when empty, with no admin
// HTTP and no HA. Clients reach it through Addr over loopback gRPC like any
// other master, so the client code has one path. Close stops it.
//
// On a free port (RPCAddr empty) it has no predecessor whose clients still
// write into put grants (those would reach it only if the system handed
// out a dead master's port again by chance within the grant lease), so it
// allocates at once, without the start fence of NewServer: even a client
// that pings first and is answered NEED_REMOUNT is served. On an address
// the caller chose it fences as NewServer does.
func StartEmbedded(cfg Config) (*Server, error) {
	fence := fenceRemounted
	if cfg.RPCAddr == "" {
		cfg.RPCAddr = EmbeddedAddr
		fence = fenceNone
	}
	cfg.MetricsAddr = ""
	cfg.EnableHA = false
	return newServer(cfg, fence)
}
