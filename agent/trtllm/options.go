package trtllm

import (
	"fmt"
	"log/slog"

	"github.com/kvferry/kvferry/agent/trtllm/trtllmopt"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
)

// Env looks up an environment variable. abi/ passes hostenv.Getenv (C
// getenv); nil means an empty environment.
type Env = trtllmopt.Env

// EngineParams is what a new agent and its engine are created from.
type EngineParams = trtllmopt.Params

// ParseOptions checks agent name and the creation options opts (the keys of
// kvferry_engine_create plus notify_wait_us) and returns what the agent and
// its engine are created from. env supplies the defaults named in
// EngineParams; log receives a warning when TRTLLM_MOONCAKE_INTERFACE has
// no address (nil discards it). An empty name or a bad notify_wait_us wraps
// engine.ErrInvalidArgument; engine option values are checked when the
// engine is configured.
func ParseOptions(name string, opts map[string]string, env Env, log *slog.Logger) (EngineParams, error) {
	p, err := trtllmopt.Parse(name, opts, env, log, trtllmopt.Engine{P2P: metadata.P2PHandshake,
		LocalIP: engine.FirstNonLoopbackIPv4, NotifyWait: DefaultNotifyWait})
	if err != nil {
		return EngineParams{}, fmt.Errorf("%w: %w", err, engine.ErrInvalidArgument)
	}
	return p, nil
}
