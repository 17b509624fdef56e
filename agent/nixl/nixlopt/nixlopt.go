// Package nixlopt reads the options of a NIXL backend agent (NIXL's
// nixl_b_params_t as the shim passes them) into what its engine is created
// from. It imports the standard library only, so that its fuzz target runs
// alone; agent/nixl passes the engine's facts (Engine).
package nixlopt

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Keys are the backend options kvferry owns, in the order
// nixl.Options lists them.
var Keys = []string{"metadata", "local_server_name", "transport", "tcp_lanes", "slice_size", "timeout_ms"}

// ErrInvalid marks an empty agent name or a malformed value of one of
// kvferry's keys.
var ErrInvalid = errors.New("invalid nixl agent option")

// Engine is what Parse needs to know of the engine.
type Engine struct {
	// Transports are the transport names the engine knows.
	Transports []string
	// MaxLanes caps tcp_lanes.
	MaxLanes int64
	// P2P is the P2P handshake metadata connection string (the default).
	P2P string
	// LocalIP returns the local server name with P2P metadata and no
	// local_server_name (the first non-loopback IPv4 address).
	LocalIP func() string
}

// Params is what the engine of a new agent is created from.
type Params struct {
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

// Parse checks agent name and the backend options opts of a new agent and
// returns what its engine is created from, with the engine's facts from e.
// Keys kvferry does not own are ignored (Params.Ignored). An empty name or
// a malformed value of one of kvferry's keys wraps ErrInvalid, with the
// key, the value and what is wanted in the message.
func Parse(name string, opts map[string]string, e Engine) (Params, error) {
	if name == "" {
		return Params{}, fmt.Errorf("nixl create: empty agent name: %w", ErrInvalid)
	}
	known := map[string]bool{}
	for _, k := range Keys {
		known[k] = true
	}
	var ignored []string
	eopts := map[string]string{}
	for k, v := range opts {
		if !known[k] {
			ignored = append(ignored, k)
			continue
		}
		if err := checkOption(k, v, e); err != nil {
			return Params{}, fmt.Errorf("nixl create agent %q: %w", name, err)
		}
		if v != "" && k != "metadata" && k != "local_server_name" {
			eopts[k] = v
		}
	}
	sort.Strings(ignored)
	conn := opts["metadata"]
	if conn == "" {
		conn = e.P2P
	}
	server := opts["local_server_name"]
	if server == "" {
		if conn == e.P2P {
			server = e.LocalIP()
		} else {
			server = name
		}
	}
	if t := strings.ToLower(strings.TrimSpace(eopts["transport"])); t == "auto" {
		delete(eopts, "transport")
	}
	return Params{MetadataConn: conn, LocalServerName: server, EngineOptions: eopts, Ignored: ignored}, nil
}

// checkOption checks the value of one of kvferry's keys; an empty value
// means the default.
func checkOption(k, v string, e Engine) error {
	bad := func(want string) error {
		return fmt.Errorf("option %s=%q: want %s: %w", k, v, want, ErrInvalid)
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
		if t != "auto" && !slices.Contains(e.Transports, t) {
			return bad("auto or one of " + strings.Join(e.Transports, ", "))
		}
	case "tcp_lanes":
		if !num(1, e.MaxLanes) {
			return bad(fmt.Sprintf("a number of lanes in 1-%d", e.MaxLanes))
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
