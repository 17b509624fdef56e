package connstr

import "testing"

// FuzzParse reads arbitrary metadata connection strings (Mooncake's
// metadata_server argument): what parses formats to a string that parses
// to the same connection.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"P2PHANDSHAKE", "http://127.0.0.1:8080/metadata", "etcd://a:2379,b:2379", "127.0.0.1:2379", "redis://x", "redis://u:p@[::1]:1/2", "rediss://:p@h", "https://[::1]:1/x?y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			return
		}
		c2, err := Parse(c.String())
		if err != nil || c2.String() != c.String() {
			t.Fatalf("%q -> %q -> %q (%v)", s, c.String(), c2.String(), err)
		}
	})
}
