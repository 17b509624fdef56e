package nixlopt

import (
	"errors"
	"strings"
	"testing"
)

// testEngine stands for the engine's facts (agent/nixl passes the real
// registry's).
var testEngine = Engine{Transports: []string{"local", "tcp", "cma", "shm"}, MaxLanes: 16, P2P: "P2PHANDSHAKE",
	LocalIP: func() string { return "192.0.2.1" }}

func TestParse(t *testing.T) {
	p, err := Parse("x", map[string]string{"transport": "Auto", "tcp_lanes": "2", "num_workers": "4"}, testEngine)
	if err != nil {
		t.Fatal(err)
	}
	if p.MetadataConn != "P2PHANDSHAKE" || p.LocalServerName != "192.0.2.1" || len(p.EngineOptions) != 1 ||
		p.EngineOptions["tcp_lanes"] != "2" || len(p.Ignored) != 1 || p.Ignored[0] != "num_workers" {
		t.Fatalf("%+v", p)
	}
	for _, o := range []map[string]string{{"transport": "carrier-pigeon"}, {"tcp_lanes": "17"}, {"slice_size": "1"}, {"timeout_ms": "0"}} {
		if _, err := Parse("x", o, testEngine); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "want ") {
			t.Errorf("%v: %v", o, err)
		}
	}
	if _, err := Parse("", nil, testEngine); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty name: %v", err)
	}
}

// FuzzParseOptions reads arbitrary backend names and parameters (NIXL's
// nixl_b_params_t as the shim passes them): a result or a refusal with
// the key named, never a panic.
func FuzzParseOptions(f *testing.F) {
	f.Add("agent0", "metadata=P2PHANDSHAKE\nnum_threads=4")
	f.Add("a", "transfer_timeout_sec=-3\nunknown=1")
	f.Fuzz(func(t *testing.T, name, opts string) {
		m := map[string]string{}
		for _, l := range strings.Split(opts, "\n") {
			k, v, _ := strings.Cut(l, "=")
			m[k] = v
		}
		p, err := Parse(name, m, testEngine)
		if err == nil && name == "" {
			t.Fatalf("empty name accepted: %+v", p)
		}
	})
}
