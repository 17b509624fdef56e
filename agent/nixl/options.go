package nixl

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

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

// optionKeys are the backend options, in the order Options lists them.
var optionKeys = []string{"metadata", "local_server_name", "transport", "tcp_lanes", "slice_size", "timeout_ms"}

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
	out := make([]Option, len(optionKeys))
	for i, k := range optionKeys {
		out[i] = Option{Key: k, Default: defs[k]}
	}
	return out
}

// EngineParams is what the engine of a new agent is created from.
type EngineParams struct {
	// MetadataConn is the metadata connection string (P2PHANDSHAKE by
	// default).
	MetadataConn string
	// LocalServerName is the engine's local server name: the option, else
	// the first non-loopback IPv4 address with P2P metadata, else the agent
	// name (the segment name a metadata service knows it by).
	LocalServerName string
	// EngineOptions are the remaining options, in kvferry_engine_create's
	// key/value form (transport, tcp_lanes, slice_size, timeout_ms); empty
	// values and transport "auto" are left out.
	EngineOptions map[string]string
	// Ignored lists, sorted, the keys that are not kvferry's: NIXL hands a
	// program's whole parameter map to every backend it creates, so keys
	// meant for other backends (num_workers, ucx_*, ...) arrive here too.
	// They are ignored, as NIXL's own plugins ignore keys they do not know.
	Ignored []string
}

// ParseOptions checks agent name and the backend options opts of a new
// agent and returns what its engine is created from. Keys kvferry does not
// own are ignored (EngineParams.Ignored). An empty name or a malformed
// value of one of kvferry's keys wraps engine.ErrInvalidArgument, with the
// key, the value and what is wanted in the message.
func ParseOptions(name string, opts map[string]string) (EngineParams, error) {
	if name == "" {
		return EngineParams{}, fmt.Errorf("nixl create: empty agent name: %w", engine.ErrInvalidArgument)
	}
	known := map[string]bool{}
	for _, k := range optionKeys {
		known[k] = true
	}
	var ignored []string
	eopts := map[string]string{}
	for k, v := range opts {
		if !known[k] {
			ignored = append(ignored, k)
			continue
		}
		if err := checkOption(k, v); err != nil {
			return EngineParams{}, fmt.Errorf("nixl create agent %q: %w", name, err)
		}
		if v != "" && k != "metadata" && k != "local_server_name" {
			eopts[k] = v
		}
	}
	sort.Strings(ignored)
	conn := opts["metadata"]
	if conn == "" {
		conn = metadata.P2PHandshake
	}
	server := opts["local_server_name"]
	if server == "" {
		if conn == metadata.P2PHandshake {
			server = engine.FirstNonLoopbackIPv4()
		} else {
			server = name
		}
	}
	if t := strings.ToLower(strings.TrimSpace(eopts["transport"])); t == "auto" {
		delete(eopts, "transport")
	}
	return EngineParams{MetadataConn: conn, LocalServerName: server, EngineOptions: eopts, Ignored: ignored}, nil
}

// checkOption checks the value of one of kvferry's keys; an empty value
// means the default.
func checkOption(k, v string) error {
	bad := func(want string) error {
		return fmt.Errorf("option %s=%q: want %s: %w", k, v, want, engine.ErrInvalidArgument)
	}
	t := strings.TrimSpace(v)
	if t == "" {
		return nil
	}
	num := func(lo, hi int64) bool {
		n, err := strconv.ParseInt(t, 10, 64)
		return err == nil && n >= lo && n <= hi
	}
	switch k {
	case "transport":
		t = strings.ToLower(t)
		if t != "auto" && !slices.Contains(engine.TransportNames(), t) {
			return bad("auto or one of " + strings.Join(engine.TransportNames(), ", "))
		}
	case "tcp_lanes":
		if !num(1, tcp.MaxLanes) {
			return bad(fmt.Sprintf("a number of lanes in 1-%d", tcp.MaxLanes))
		}
	case "slice_size":
		if !num(4096, 1<<40) {
			return bad("a size in bytes >= 4096")
		}
	case "timeout_ms":
		if !num(1, 1<<40) {
			return bad("milliseconds > 0")
		}
	}
	return nil
}
