package trtllmopt

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// kv splits "k=v\nk2=v2" into an options map (as the C shims pass them).
func kv(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(l, "=")
		m[k] = v
	}
	return m
}

// testEngine stands for the engine's facts (agent/trtllm passes the real
// ones).
var testEngine = Engine{P2P: "P2PHANDSHAKE", LocalIP: func() string { return "192.0.2.1" }, NotifyWait: time.Millisecond}

func TestParse(t *testing.T) {
	p, err := Parse("a", kv("transport=AUTO\ntcp_lanes=2\nauto_discover=0"), nil, nil, testEngine)
	if err != nil {
		t.Fatal(err)
	}
	if p.MetadataConn != "P2PHANDSHAKE" || p.LocalServerName != "192.0.2.1" || p.AutoDiscover || p.NotifyWait != time.Millisecond ||
		len(p.EngineOptions) != 1 || p.EngineOptions["tcp_lanes"] != "2" {
		t.Fatalf("%+v", p)
	}
	for _, bad := range []string{"-1", "1000001", "x"} {
		if _, err := Parse("a", map[string]string{"notify_wait_us": bad}, nil, nil, testEngine); !errors.Is(err, ErrInvalid) {
			t.Errorf("notify_wait_us %q: %v", bad, err)
		}
	}
	if _, err := Parse("", nil, nil, nil, testEngine); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty name: %v", err)
	}
}

// FuzzParseOptions reads arbitrary agent names, creation options and
// environment (TRTLLM_MOONCAKE_INTERFACE and the agent's variables): a
// result or a refusal, never a panic.
func FuzzParseOptions(f *testing.F) {
	f.Add("agent0", "metadata=P2PHANDSHAKE\nnotify_wait_us=100", "TRTLLM_MOONCAKE_INTERFACE=lo")
	f.Add("a", "notify_wait_us=-1\nprotocol=rdma", "KVFERRY_TRTLLM_NOTIFY_WAIT_US=x")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, name, opts, env string) {
		e := kv(env)
		_, _ = Parse(name, kv(opts), func(k string) (string, bool) { v, ok := e[k]; return v, ok }, nil, testEngine)
	})
}
