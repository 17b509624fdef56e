package descriptor

import "testing"

// FuzzParseP2PName reads arbitrary P2P segment names ("host:port", what a
// peer asks to open): what parses names the same endpoint again.
func FuzzParseP2PName(f *testing.F) {
	for _, s := range []string{"127.0.0.1:15000", "[::1]:1", "host:0", "a:b", ":80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseP2PName(s)
		if err != nil {
			return
		}
		m2, err := ParseP2PName(P2PName(m.IPOrHostName, m.RPCPort))
		if err != nil || m2 != m {
			t.Fatalf("%q -> %+v -> %+v (%v)", s, m, m2, err)
		}
	})
}
