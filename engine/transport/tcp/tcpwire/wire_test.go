package tcpwire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// Golden bytes written from specs/mooncake.md §4.2-4.3, not from our encoder.
func TestHeaderGolden(t *testing.T) {
	cases := []struct {
		name string
		h    Header
		hex  string
	}{
		{"v2 write 4 KiB at 0x7f0000001000", Header{Size: 4096, Addr: 0x7f0000001000, Write: true, V2: true},
			"0010000000000000" + "00100000007f0000" + "81" + "00000000000000"},
		{"v2 read 1 MiB", Header{Size: 1 << 20, Addr: 0x10, Write: false, V2: true},
			"0000100000000000" + "1000000000000000" + "80" + "00000000000000"},
		{"v1 write", Header{Size: 1, Addr: 0xffffffffffffffff, Write: true},
			"0100000000000000" + "ffffffffffffffff" + "01" + "00000000000000"},
		{"v1 read", Header{Size: 0x0102030405060708, Addr: 0x1112131415161718},
			"0807060504030201" + "1817161514131211" + "00" + "00000000000000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := hex.DecodeString(c.hex)
			if err != nil {
				t.Fatal(err)
			}
			var b [HeaderSize]byte
			c.h.Encode(&b)
			if got, want := b[:], want; !bytes.Equal(got, want) {
				t.Fatalf("b[:]: %x, want %x", got, want)
			}
			got, err := DecodeHeader(want)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := got, c.h; got != want {
				t.Fatalf("got: %v, want %v", got, want)
			}
		})
	}
}

func TestHeaderPaddingIgnoredAndBadOpcode(t *testing.T) {
	b, _ := hex.DecodeString("0010000000000000" + "00100000007f0000" + "81" + "deadbeefcafe01")
	h, err := DecodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h, (Header{Size: 4096, Addr: 0x7f0000001000, Write: true, V2: true}); got != want {
		t.Fatalf("h: %v, want %v", got, want)
	}
	for _, op := range []byte{2, 0x7f, 0x82, 0xff} {
		b[16] = op
		_, err := DecodeHeader(b)
		if !(errors.Is(err, ErrWire)) {
			t.Fatalf("opcode %#x", op)
		}
	}
	_, err = DecodeHeader(b[:23])
	if !(errors.Is(err, ErrWire)) {
		t.Fatal("errors.Is(err, ErrWire)")
	}
}

func TestStatusGolden(t *testing.T) {
	ok, _ := hex.DecodeString("0000000056544" + "34d")
	rej, _ := hex.DecodeString("0100000056544" + "34d")
	var b [StatusSize]byte
	EncodeStatus(b[:], StatusOK)
	if got, want := b[:], ok; !bytes.Equal(got, want) {
		t.Fatalf("b[:]: %x, want %x", got, want)
	}
	EncodeStatus(b[:], StatusRejected)
	if got, want := b[:], rej; !bytes.Equal(got, want) {
		t.Fatalf("b[:]: %x, want %x", got, want)
	}
	code, err := DecodeStatus(rej)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := code, uint32(StatusRejected); got != want {
		t.Fatalf("code: %v, want %v", got, want)
	}
	_, err = DecodeStatus(bytes.Repeat([]byte{0}, 8))
	if !(errors.Is(err, ErrWire)) {
		t.Fatalf("a frame without the magic is a legacy peer")
	}
}

func TestWireZeroAllocs(t *testing.T) {
	var b [HeaderSize]byte
	var st [StatusSize]byte
	n := testing.AllocsPerRun(1000, func() {
		Header{Size: 4096, Addr: 0x1000, Write: true, V2: true}.Encode(&b)
		_, _ = DecodeHeader(b[:])
		EncodeStatus(st[:], StatusOK)
		_, _ = DecodeStatus(st[:])
	})
	if got, want := n, 0.0; got != want {
		t.Fatalf("n: %v, want %v", got, want)
	}
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add([]byte("0010000000000000001000000000000081000000000000000"))
	var b [HeaderSize]byte
	Header{Size: 4096, Addr: 0x7f00, Write: true, V2: true}.Encode(&b)
	f.Add(b[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHeader(data)
		if err != nil {
			return
		}
		var out [HeaderSize]byte
		h.Encode(&out)
		h2, err := DecodeHeader(out[:])
		if err != nil || h2 != h {
			t.Fatalf("round trip: %+v -> %+v, %v", h, h2, err)
		}
		if !bytes.Equal(out[:17], data[:17]) {
			t.Fatalf("significant bytes differ: %x vs %x", out[:17], data[:17])
		}
		if code, err := DecodeStatus(data); err == nil {
			var st [StatusSize]byte
			EncodeStatus(st[:], code)
			if !bytes.Equal(st[:], data[:8]) {
				t.Fatalf("status round trip")
			}
		}
	})
}
