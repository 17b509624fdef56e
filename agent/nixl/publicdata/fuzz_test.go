package publicdata

import "testing"

// FuzzParsePublicData: no panic, an error gives no result, and what parses
// formats back into a blob that parses to the same values.
func FuzzParsePublicData(f *testing.F) {
	f.Add("kvf1 7f0000001000 1048576 127.0.0.1:15001")
	f.Add("kvf1 0 1 x")
	f.Add("kvf1 -1 1 x")
	f.Add("kvf1  1 x")
	f.Fuzz(func(t *testing.T, blob string) {
		addr, n, seg, err := Parse(blob)
		if err != nil {
			if addr != 0 || n != 0 || seg != "" {
				t.Fatalf("error with a result: %v", err)
			}
			return
		}
		a2, n2, s2, err := Parse(Format(addr, n, seg))
		if err != nil || a2 != addr || n2 != n || s2 != seg {
			t.Fatalf("round trip of %q: %v", blob, err)
		}
	})
}
