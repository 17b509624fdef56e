// Package trtllmopt reads the creation options and environment of a
// TensorRT-LLM transfer agent into what the agent and its engine are
// created from. It imports the standard library only, so that its fuzz
// target runs alone; agent/trtllm passes the engine's facts (Engine).
package trtllmopt

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid marks an empty agent name or a bad notify_wait_us.
var ErrInvalid = errors.New("invalid trtllm agent option")

// Engine is what Parse needs to know of the engine and the agent.
type Engine struct {
	// P2P is the P2P handshake metadata connection string (the default).
	P2P string
	// LocalIP returns the advertised host when nothing names one (the
	// first non-loopback IPv4 address).
	LocalIP func() string
	// NotifyWait is the default of Params.NotifyWait.
	NotifyWait time.Duration
}

// Env looks up an environment variable. abi/ passes hostenv.Getenv (C
// getenv); nil means an empty environment.
type Env func(name string) (string, bool)

// Params is what a new agent and its engine are created from.
type Params struct {
	// MetadataConn is the metadata connection string (P2PHANDSHAKE by
	// default).
	MetadataConn string
	// LocalServerName is the host the engine advertises: the
	// local_server_name option, else TLLM_MOONCAKE_IP_ADDR, else the address
	// of TRTLLM_MOONCAKE_INTERFACE, else the first non-loopback IPv4
	// address, else 127.0.0.1 (specs/tensorrt-llm.md §2.3, §3).
	LocalServerName string
	// AutoDiscover is false only with auto_discover "0".
	AutoDiscover bool
	// NotifyWait is Config.NotifyWait: the notify_wait_us option, else
	// KVFERRY_TRTLLM_NOTIFY_WAIT_US, else Engine.NotifyWait.
	NotifyWait time.Duration
	// EngineOptions are the remaining options, in kvferry_engine_create's
	// key/value form; transport "auto" is left out.
	EngineOptions map[string]string
}

// Parse checks agent name and the creation options opts (the keys of
// kvferry_engine_create plus notify_wait_us) and returns what the agent and
// its engine are created from, with the engine's facts from e. env
// supplies the defaults named in Params; log receives a warning when
// TRTLLM_MOONCAKE_INTERFACE has no address (nil discards it). An empty
// name or a bad notify_wait_us wraps ErrInvalid; engine option values are
// checked when the engine is configured.
func Parse(name string, opts map[string]string, env Env, log *slog.Logger, e Engine) (Params, error) {
	if name == "" {
		return Params{}, fmt.Errorf("trtllm create: empty agent name: %w", ErrInvalid)
	}
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eopts := map[string]string{}
	for k, v := range opts {
		eopts[k] = v
	}
	conn := eopts["metadata"]
	if conn == "" {
		conn = e.P2P
	}
	server := eopts["local_server_name"]
	if server == "" {
		server = advertisedHost(env, log, e)
	}
	auto := eopts["auto_discover"] != "0"
	wait := e.NotifyWait
	w, ok := eopts["notify_wait_us"]
	if !ok {
		w, ok = env("KVFERRY_TRTLLM_NOTIFY_WAIT_US")
	}
	if ok && strings.TrimSpace(w) != "" {
		us, err := strconv.ParseInt(strings.TrimSpace(w), 10, 64)
		if err != nil || us < 0 || us > 1_000_000 {
			return Params{}, fmt.Errorf("trtllm create: notify_wait_us %q: want 0-1000000: %w", w, ErrInvalid)
		}
		wait = time.Duration(us) * time.Microsecond
	}
	delete(eopts, "metadata")
	delete(eopts, "local_server_name")
	delete(eopts, "auto_discover")
	delete(eopts, "notify_wait_us")
	if t := strings.ToLower(strings.TrimSpace(eopts["transport"])); t == "auto" {
		delete(eopts, "transport")
	}
	return Params{MetadataConn: conn, LocalServerName: server, AutoDiscover: auto, NotifyWait: wait, EngineOptions: eopts}, nil
}

// advertisedHost picks the address the agent's engine advertises, as the
// stock agent does (specs/tensorrt-llm.md §2.3, §3): TLLM_MOONCAKE_IP_ADDR,
// else the address of TRTLLM_MOONCAKE_INTERFACE, else the first
// non-loopback IPv4 address, else 127.0.0.1.
func advertisedHost(env Env, log *slog.Logger, e Engine) string {
	if v, ok := env("TLLM_MOONCAKE_IP_ADDR"); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	if v, ok := env("TRTLLM_MOONCAKE_INTERFACE"); ok && strings.TrimSpace(v) != "" {
		if ip := interfaceIP(strings.TrimSpace(v)); ip != "" {
			return ip
		}
		log.Warn("TRTLLM_MOONCAKE_INTERFACE has no usable address", "interface", v)
	}
	return e.LocalIP()
}

// interfaceIP returns the first IPv4 address of interface name, else its
// first global IPv6 address, else "".
func interfaceIP(name string) string {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			return ip4.String()
		}
		if v6 == "" && ipn.IP.IsGlobalUnicast() {
			v6 = ipn.IP.String()
		}
	}
	return v6
}
