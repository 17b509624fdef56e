package nixl

import (
	"fmt"
	"strconv"

	"github.com/kvferry/kvferry/agent/nixl/nixlopt"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
)

// Option is one backend option NIXL shows its users, with its default.
type Option struct {
	// Key is the option's name.
	Key string
	// Default is its effective default value.
	Default string
}

// Options returns the backend options (specs/nixl.md §3.2) with the
// defaults an engine configured by cfg would use: the configured values
// where set (abi/ passes the MC_*/KVFERRY_* environment), else the built-in
// defaults.
func Options(cfg stack.Config) []Option {
	lanes := cfg.TCP.Lanes
	if lanes <= 0 {
		lanes = tcp.DefaultLanes
	}
	stripe := cfg.TCP.StripeSize
	if stripe == 0 {
		stripe = tcp.DefaultStripeSize
	}
	timeout := cfg.Engine.TransferTimeout
	if timeout == 0 {
		timeout = engine.DefaultTransferTimeout
	}
	transport := cfg.Engine.ForceTransport
	if transport == "" {
		transport = "auto"
	}
	defs := map[string]string{
		"metadata":          metadata.P2PHandshake,
		"local_server_name": "",
		"transport":         transport,
		"tcp_lanes":         strconv.Itoa(lanes),
		"slice_size":        strconv.FormatUint(stripe, 10),
		"timeout_ms":        strconv.FormatInt(timeout.Milliseconds(), 10),
	}
	out := make([]Option, len(nixlopt.Keys))
	for i, k := range nixlopt.Keys {
		out[i] = Option{Key: k, Default: defs[k]}
	}
	return out
}

// EngineParams is what the engine of a new agent is created from.
type EngineParams = nixlopt.Params

// ParseOptions checks agent name and the backend options opts of a new
// agent and returns what its engine is created from (nixlopt.Parse with
// this engine's transports and limits). Keys kvferry does not own are
// ignored (EngineParams.Ignored). An empty name or a malformed value of one
// of kvferry's keys wraps engine.ErrInvalidArgument, with the key, the
// value and what is wanted in the message.
func ParseOptions(name string, opts map[string]string) (EngineParams, error) {
	p, err := nixlopt.Parse(name, opts, nixlopt.Engine{Transports: engine.TransportNames(), MaxLanes: tcp.MaxLanes,
		P2P: metadata.P2PHandshake, LocalIP: engine.FirstNonLoopbackIPv4})
	if err != nil {
		return EngineParams{}, fmt.Errorf("%w: %w", err, engine.ErrInvalidArgument)
	}
	return p, nil
}
