package ibv

import "testing"

// FuzzParseGID reads arbitrary text as a GID: what parses formats to text
// that parses to the same GID.
func FuzzParseGID(f *testing.F) {
	f.Add("fe:80:00:00:00:00:00:00:02:00:00:ff:fe:00:00:01")
	f.Add("::")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGID(s)
		if err != nil {
			return
		}
		again, err := ParseGID(g.String())
		if err != nil || again != g {
			t.Fatalf("round trip %q: %v -> %v (%v)", s, g, again, err)
		}
	})
}
