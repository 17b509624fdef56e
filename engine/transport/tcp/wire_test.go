package tcp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"gotest.tools/v3/assert"
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
			assert.NilError(t, err)
			var b [HeaderSize]byte
			c.h.Encode(&b)
			assert.DeepEqual(t, b[:], want)
			got, err := DecodeHeader(want)
			assert.NilError(t, err)
			assert.Equal(t, got, c.h)
		})
	}
}

func TestHeaderPaddingIgnoredAndBadOpcode(t *testing.T) {
	b, _ := hex.DecodeString("0010000000000000" + "00100000007f0000" + "81" + "deadbeefcafe01")
	h, err := DecodeHeader(b)
	assert.NilError(t, err)
	assert.Equal(t, h, Header{Size: 4096, Addr: 0x7f0000001000, Write: true, V2: true})
	for _, op := range []byte{2, 0x7f, 0x82, 0xff} {
		b[16] = op
		_, err := DecodeHeader(b)
		assert.Assert(t, errors.Is(err, ErrWire), "opcode %#x", op)
	}
	_, err = DecodeHeader(b[:23])
	assert.Assert(t, errors.Is(err, ErrWire))
}

func TestStatusGolden(t *testing.T) {
	ok, _ := hex.DecodeString("0000000056544" + "34d")
	rej, _ := hex.DecodeString("0100000056544" + "34d")
	var b [StatusSize]byte
	EncodeStatus(b[:], StatusOK)
	assert.DeepEqual(t, b[:], ok)
	EncodeStatus(b[:], StatusRejected)
	assert.DeepEqual(t, b[:], rej)
	code, err := DecodeStatus(rej)
	assert.NilError(t, err)
	assert.Equal(t, code, uint32(StatusRejected))
	_, err = DecodeStatus(bytes.Repeat([]byte{0}, 8))
	assert.Assert(t, errors.Is(err, ErrWire), "a frame without the magic is a legacy peer")
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
	assert.Equal(t, n, 0.0)
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
