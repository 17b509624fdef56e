package tcpwire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// Golden bytes of the identity hello and its answer, written from the
// layout in hello.go; a Mooncake server reads the hello's first 24 bytes as
// a READ v2 header of size 0 at address 0 (specs/mooncake.md §4.2), which
// it refuses.
func TestHelloGolden(t *testing.T) {
	inc := [IncarnationSize]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	want, _ := hex.DecodeString("0000000000000000" + "0000000000000000" + "80" + "4b564649444831" + "000102030405060708090a0b0c0d0e0f")
	var b [HelloSize]byte
	for i := range b {
		b[i] = 0xee // Encode overwrites every byte
	}
	EncodeHello(&b, inc)
	if !bytes.Equal(b[:], want) {
		t.Fatalf("hello %x, want %x", b, want)
	}
	if !IsHello(b[:HeaderSize]) {
		t.Fatal("IsHello false on a hello")
	}
	h, err := DecodeHeader(b[:HeaderSize])
	if err != nil || h.Size != 0 || h.Addr != 0 || h.Write || !h.V2 {
		t.Fatalf("as a Mooncake header: %+v, %v", h, err)
	}
	got, err := DecodeHello(b[:])
	if err != nil || got != inc {
		t.Fatalf("DecodeHello: %x, %v", got, err)
	}
	// Not hellos: a real request, a size or address, another padding.
	for _, c := range []string{
		"0000100000000000" + "1000000000000000" + "80" + "00000000000000",
		"0100000000000000" + "0000000000000000" + "80" + "4b564649444831",
		"0000000000000000" + "0100000000000000" + "80" + "4b564649444831",
		"0000000000000000" + "0000000000000000" + "81" + "4b564649444831",
		"0000000000000000" + "0000000000000000" + "80" + "4b564649444832",
	} {
		raw, _ := hex.DecodeString(c)
		if IsHello(raw) {
			t.Errorf("IsHello(%s)", c)
		}
	}
	if _, err := DecodeHello(b[:HeaderSize]); !errors.Is(err, ErrWire) {
		t.Errorf("short hello: %v", err)
	}

	var r [HelloReplySize]byte
	EncodeHelloReply(&r, HelloStale, inc)
	wantR, _ := hex.DecodeString("01010000" + "5654434d" + "000102030405060708090a0b0c0d0e0f")
	if !bytes.Equal(r[:], wantR) {
		t.Fatalf("answer %x, want %x", r, wantR)
	}
	code, err := DecodeStatus(r[:StatusSize])
	if err != nil || code != HelloStale {
		t.Fatalf("answer status %#x, %v", code, err)
	}
	if got, err := DecodeHelloReply(r[StatusSize:]); err != nil || got != inc {
		t.Fatalf("DecodeHelloReply: %x, %v", got, err)
	}
	if _, err := DecodeHelloReply(r[StatusSize : StatusSize+3]); !errors.Is(err, ErrWire) {
		t.Errorf("short answer: %v", err)
	}
}
