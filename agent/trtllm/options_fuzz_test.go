package trtllm

import (
	"strings"
	"testing"
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

// FuzzParseOptions reads arbitrary agent names, creation options and
// environment (TRTLLM_MOONCAKE_INTERFACE and the agent's variables): a
// result or a refusal, never a panic.
func FuzzParseOptions(f *testing.F) {
	f.Add("agent0", "metadata=P2PHANDSHAKE\nnotify_wait_us=100", "TRTLLM_MOONCAKE_INTERFACE=lo")
	f.Add("a", "notify_wait_us=-1\nprotocol=rdma", "KVFERRY_TRTLLM_NOTIFY_WAIT_US=x")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, name, opts, env string) {
		e := kv(env)
		_, _ = ParseOptions(name, kv(opts), func(k string) (string, bool) { v, ok := e[k]; return v, ok }, nil)
	})
}
