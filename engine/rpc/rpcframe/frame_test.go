package rpcframe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"testing"
)

// Golden bytes from specs/mooncake.md §3.6: u64 LE length (JSON + type
// byte), the type byte, the JSON.
func TestGolden(t *testing.T) {
	cases := []struct {
		t    Type
		body string
		hex  string
	}{
		{TypeProbe, "{}", "0300000000000000" + "03" + "7b7d"},
		{TypeMetadata, `{"a":1}`, "0800000000000000" + "01" + hex.EncodeToString([]byte(`{"a":1}`))},
		{TypeProbe | KeepAlive, "{}", "0300000000000000" + "43" + "7b7d"},
		// kvferry's store request, plain and kept alive: not Mooncake's.
		{TypeStore, "\x01", "0200000000000000" + "04" + "01"},
		{TypeStore | KeepAlive, "\x02", "0200000000000000" + "44" + "02"},
		{TypeLegacy, `{"qp_num":[]}`, "0d00000000000000" + hex.EncodeToString([]byte(`{"qp_num":[]}`))},
	}
	for _, c := range cases {
		want, _ := hex.DecodeString(c.hex)
		if got := Append(nil, c.t, []byte(c.body)); !bytes.Equal(got, want) {
			t.Errorf("%s: encoded %x, want %x", c.t, got, want)
		}
		typ, body, n, err := Decode(want, DefaultMaxMessage)
		if err != nil || typ != c.t || string(body) != c.body || n != len(want) {
			t.Errorf("%s: decoded %s %q %d %v", c.t, typ, body, n, err)
		}
	}
}

func TestRejects(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want error
	}{
		{"0000000000000000", ErrFrame},
		{"0100100000000000", ErrFrame}, // 1 MiB + 1
		{"0500000000000000017b", io.ErrUnexpectedEOF},
		{"05000000", io.ErrUnexpectedEOF},
	} {
		b, _ := hex.DecodeString(c.hex)
		if _, _, _, err := Decode(b, DefaultMaxMessage); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.hex, err, c.want)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(Append(nil, TypeProbe, []byte("{}")))
	f.Add(Append(nil, TypeLegacy, []byte(`{"x":1}`)))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, body, n, err := Decode(data, 1<<16)
		if err != nil {
			if typ != 0 || body != nil || n != 0 {
				t.Fatal("error with a result")
			}
			return
		}
		if n > len(data) {
			t.Fatalf("used %d of %d bytes", n, len(data))
		}
		again := Append(nil, typ, body)
		if !bytes.Equal(again, data[:n]) {
			t.Fatalf("round trip: %x vs %x", again, data[:n])
		}
	})
}
