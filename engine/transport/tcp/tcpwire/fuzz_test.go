package tcpwire

import (
	"bytes"
	"testing"
)

func FuzzDecodeStatus(f *testing.F) {
	var b [StatusSize]byte
	EncodeStatus(b[:], StatusOK)
	f.Add(b[:])
	EncodeStatus(b[:], StatusRejected)
	f.Add(b[:])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		code, err := DecodeStatus(in)
		if err != nil {
			return
		}
		var out [StatusSize]byte
		EncodeStatus(out[:], code)
		if !bytes.Equal(out[:], in[:StatusSize]) {
			t.Fatalf("status round trip: %x -> %x", in[:StatusSize], out)
		}
	})
}
