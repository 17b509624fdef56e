package priority

import (
	"reflect"
	"testing"
)

// FuzzParseMatrix reads arbitrary text as a NIC priority matrix (the
// installTransport argument and the descriptor's priority_matrix).
func FuzzParseMatrix(f *testing.F) {
	f.Add(`{"cpu:0":[["mlx5_0"],["mlx5_1"]]}`)
	f.Add(`{"cpu:0":[["a"]]}`)
	f.Add(`{"x":[[],null]}`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(string(m.JSON()))
		if err != nil || !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip: %v -> %v (%v)", m, again, err)
		}
	})
}
