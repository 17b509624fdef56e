package handshake

import (
	"reflect"
	"testing"
)

// FuzzDecodeHandshake reads arbitrary bytes as a peer's Connection
// handshake (jsoncpp-lenient): no panic, and what decodes encodes and
// decodes again to the same value.
func FuzzDecodeHandshake(f *testing.F) {
	f.Add(Encode(&Desc{LocalNICPath: "10.0.0.1:15000@mlx5_0", PeerNICPath: "10.0.0.2:15001@mlx5_1", QPNum: []uint32{1, 2}, LocalGID: "00:00"}))
	f.Add([]byte(`{"local_lid":"x","qp_num":[1,"2",-3],"ready_ack":true}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(Encode(h))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(h, again) {
			t.Fatalf("round trip: %+v -> %+v", h, again)
		}
	})
}
