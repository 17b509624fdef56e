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

// FuzzDecodeHello: a frame decodes as a hello exactly when IsHello says
// so, and a decoded hello encodes back to the same bytes.
func FuzzDecodeHello(f *testing.F) {
	var b [HelloSize]byte
	EncodeHello(&b, [IncarnationSize]byte{1, 2, 3})
	f.Add(b[:])
	f.Add(b[:HeaderSize])
	var h [HeaderSize]byte
	Header{Size: 4096, Addr: 0x1000, V2: true}.Encode(&h)
	f.Add(h[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		inc, err := DecodeHello(in)
		if (err == nil) != (len(in) >= HelloSize && IsHello(in)) {
			t.Fatalf("DecodeHello(%x): %v, IsHello %v", in, err, IsHello(in))
		}
		if err != nil {
			return
		}
		var out [HelloSize]byte
		EncodeHello(&out, inc)
		if !bytes.Equal(out[:], in[:HelloSize]) {
			t.Fatalf("hello round trip: %x -> %x", in[:HelloSize], out)
		}
	})
}
