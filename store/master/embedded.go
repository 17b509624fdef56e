package master

// EmbeddedAddr is the listen address of an embedded master: loopback, any
// free port.
const EmbeddedAddr = "127.0.0.1:0"

// StartEmbedded starts an in-process master for single-host use (the store
// client's master_server_addr "" or "embedded"): a full Server listening for
// gRPC on cfg.RPCAddr, 127.0.0.1 on a free port when empty, with no admin
// HTTP and no HA. Clients reach it through Addr over loopback gRPC like any
// other master, so the client code has one path. Close stops it.
func StartEmbedded(cfg Config) (*Server, error) {
	if cfg.RPCAddr == "" {
		cfg.RPCAddr = EmbeddedAddr
	}
	cfg.MetricsAddr = ""
	cfg.EnableHA = false
	return NewServer(cfg)
}
