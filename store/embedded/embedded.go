// Package embedded joins the store client and master for single-host use:
// NewClient starts a client whose master runs in the same process when the
// master address is "" or "embedded". It is the one place that imports both
// store/client and store/master (the client never imports the master).
package embedded

import (
	"context"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
)

// StartMaster returns a client.EmbeddedMasterFunc that starts an
// in-process master with cfg (see master.StartEmbedded: gRPC on a loopback
// port for other processes, no admin HTTP, no HA). The client calls it
// directly (master.Server.InProcessClient), without gRPC.
func StartMaster(cfg master.Config) client.EmbeddedMasterFunc {
	return func() (client.InProcessMaster, error) {
		srv, err := master.StartEmbedded(cfg)
		if err != nil {
			return client.InProcessMaster{}, err
		}
		return client.InProcessMaster{Addr: srv.Addr(), Client: srv.InProcessClient(), Stop: srv}, nil
	}
}

// NewClient is client.New with the embedded master available: when
// cfg.MasterServerAddr is "" or "embedded" and cfg.StartEmbeddedMaster is
// nil, the client starts a default master in this process and stops it on
// Close.
func NewClient(ctx context.Context, cfg client.Config) (*client.Client, error) {
	if cfg.StartEmbeddedMaster == nil {
		cfg.StartEmbeddedMaster = StartMaster(WithClientAuth(master.Config{Logger: cfg.Logger}, cfg))
	}
	return client.New(ctx, cfg)
}

// WithClientAuth gives an embedded master the cluster key and TLS files of
// the client that starts it (its engine's, or its stack's files), so that
// its port, which other processes of the host can reach, authenticates
// them.
func WithClientAuth(mc master.Config, cfg client.Config) master.Config {
	switch {
	case mc.Auth != nil || mc.AuthKeyFile != "":
	case cfg.Engine != nil:
		mc.Auth = cfg.Engine.Auth()
	default:
		mc.Auth, mc.AuthKeyFile = cfg.Stack.Engine.Auth, cfg.Stack.Engine.AuthKeyFile
	}
	switch {
	case mc.TLS != nil || mc.TLSFiles.Enabled():
	case cfg.Engine != nil:
		mc.TLS = cfg.Engine.TLS().ServerConfig()
	case cfg.Stack.Engine.TLS.ServerConfig() != nil:
		mc.TLS = cfg.Stack.Engine.TLS.ServerConfig()
	case cfg.Stack.Engine.TLSFiles.Cert != "": // a client-only TLS setup serves no TLS
		mc.TLSFiles = cfg.Stack.Engine.TLSFiles
	}
	return mc
}
