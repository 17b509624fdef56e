package nixl

import (
	"strings"
	"testing"
)

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
		p, err := ParseOptions(name, m)
		if err == nil && name == "" {
			t.Fatalf("empty name accepted: %+v", p)
		}
	})
}
