package rpc

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// Golden bytes from specs/mooncake.md §3.6: u64 LE length (JSON + type
// byte), the type byte, the JSON.
func TestFrameGolden(t *testing.T) {
	cases := []struct {
		t    Type
		body string
		hex  string
	}{
		{TypeProbe, "{}", "0300000000000000" + "03" + "7b7d"},
		{TypeMetadata, `{"a":1}`, "0800000000000000" + "01" + hex.EncodeToString([]byte(`{"a":1}`))},
		{TypeNotify, `{"name":"x","notify_msg":"y"}`, "1e00000000000000" + "02" + hex.EncodeToString([]byte(`{"name":"x","notify_msg":"y"}`))},
		{TypeLegacy, `{"qp_num":[]}`, "0d00000000000000" + hex.EncodeToString([]byte(`{"qp_num":[]}`))},
	}
	for _, c := range cases {
		want, err := hex.DecodeString(c.hex)
		assert.NilError(t, err)
		got := AppendFrame(nil, c.t, []byte(c.body))
		assert.DeepEqual(t, got, want)
		typ, body, n, err := DecodeFrame(want, DefaultMaxMessage)
		assert.NilError(t, err)
		assert.Equal(t, typ, c.t)
		assert.Equal(t, string(body), c.body)
		assert.Equal(t, n, len(want))
		typ, body, err = ReadFrame(bytes.NewReader(want), DefaultMaxMessage)
		assert.NilError(t, err)
		assert.Equal(t, typ, c.t)
		assert.Equal(t, string(body), c.body)
	}
}

func TestFrameRejects(t *testing.T) {
	zero, _ := hex.DecodeString("0000000000000000")
	_, _, _, err := DecodeFrame(zero, DefaultMaxMessage)
	assert.Assert(t, errors.Is(err, ErrFrame))
	big, _ := hex.DecodeString("0100100000000000") // 1 MiB + 1
	_, _, _, err = DecodeFrame(big, DefaultMaxMessage)
	assert.Assert(t, errors.Is(err, ErrFrame))
	_, _, err = ReadFrame(bytes.NewReader(big), DefaultMaxMessage)
	assert.Assert(t, errors.Is(err, ErrFrame))
	short, _ := hex.DecodeString("0500000000000000017b")
	_, _, _, err = DecodeFrame(short, DefaultMaxMessage)
	assert.Assert(t, errors.Is(err, io.ErrUnexpectedEOF))
	_, _, err = ReadFrame(bytes.NewReader(short), DefaultMaxMessage)
	assert.Assert(t, err != nil)
}

func TestServerClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	srv := NewServer(ln, func(_ context.Context, typ Type, body []byte, _ net.Addr) ([]byte, error) {
		if typ == TypeProbe {
			return []byte(`{"status":"success"}`), nil
		}
		if typ == TypeNotify {
			return nil, errors.New("refused")
		}
		if string(body) == "panic" {
			panic("handler bug")
		}
		return append([]byte("echo:"), body...), nil
	}, ServerConfig{RecvTimeout: time.Second})
	defer srv.Close()
	addr := srv.Addr().String()
	ctx := context.Background()
	r, err := Call(ctx, addr, TypeProbe, []byte("{}"), ClientConfig{})
	assert.NilError(t, err)
	assert.Equal(t, string(r), `{"status":"success"}`)
	r, err = Call(ctx, addr, TypeMetadata, []byte("x"), ClientConfig{})
	assert.NilError(t, err)
	assert.Equal(t, string(r), "echo:x")
	// A refused request closes the connection without a reply.
	_, err = Call(ctx, addr, TypeNotify, []byte("{}"), ClientConfig{Timeout: 2 * time.Second})
	var ce *CallError
	assert.Assert(t, errors.As(err, &ce) && ce.Stage == "receive", "%v", err)
	// A panicking handler does not take the server down.
	_, err = Call(ctx, addr, TypeMetadata, []byte("panic"), ClientConfig{Timeout: 2 * time.Second})
	assert.Assert(t, err != nil)
	_, err = Call(ctx, addr, TypeProbe, []byte("{}"), ClientConfig{})
	assert.NilError(t, err)
	// A client that sends garbage and stalls is dropped after RecvTimeout.
	c, err := net.Dial("tcp", addr)
	assert.NilError(t, err)
	_, _ = c.Write([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.Assert(t, errors.Is(err, io.EOF), "%v", err)
	c.Close()
	// Unreachable peer: a clear dial error within the connect timeout.
	start := time.Now()
	_, err = Call(ctx, "127.0.0.1:1", TypeProbe, []byte("{}"), ClientConfig{ConnectTimeout: time.Second})
	assert.Assert(t, errors.As(err, &ce) && ce.Stage == "dial")
	assert.Assert(t, time.Since(start) < 3*time.Second)
}
