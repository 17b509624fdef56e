package rdma

import (
	"reflect"
	"testing"

	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

// FuzzDecodeHandshake reads arbitrary bytes as a peer's Connection
// handshake (jsoncpp-lenient): no panic, and what decodes encodes and
// decodes again to the same value.
func FuzzDecodeHandshake(f *testing.F) {
	f.Add(encodeHandshake(&handshake{LocalNICPath: "10.0.0.1:15000@mlx5_0", PeerNICPath: "10.0.0.2:15001@mlx5_1", QPNum: []uint32{1, 2}, LocalGID: "00:00"}))
	f.Add([]byte(`{"local_lid":"x","qp_num":[1,"2",-3],"ready_ack":true}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHandshake(b)
		if err != nil {
			return
		}
		again, err := decodeHandshake(encodeHandshake(h))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(h, again) {
			t.Fatalf("round trip: %+v -> %+v", h, again)
		}
	})
}

// FuzzParseMatrix reads arbitrary text as a NIC priority matrix (the
// installTransport argument and the descriptor's priority_matrix).
func FuzzParseMatrix(f *testing.F) {
	f.Add(`{"cpu:0":[["mlx5_0"],["mlx5_1"]]}`)
	f.Add(`{"cpu:0":[["a"]]}`)
	f.Add(`{"x":[[],null]}`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMatrix(s)
		if err != nil {
			return
		}
		again, err := ParseMatrix(string(m.JSON()))
		if err != nil || !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip: %v -> %v (%v)", m, again, err)
		}
	})
}

func FuzzParseGID(f *testing.F) {
	f.Add("fe:80:00:00:00:00:00:00:02:00:00:ff:fe:00:00:01")
	f.Add("::")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ibv.ParseGID(s)
		if err != nil {
			return
		}
		again, err := ibv.ParseGID(g.String())
		if err != nil || again != g {
			t.Fatalf("round trip %q: %v -> %v (%v)", s, g, again, err)
		}
	})
}
