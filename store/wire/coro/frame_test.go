package coro

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"gotest.tools/v3/assert"

	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// A request header laid out by hand from the protocol: magic 21, version
// 0, serialize type 0, msg type 0, then seq, function id, body length and
// attachment length as little-endian uint32s.
func TestRequestHeaderBytes(t *testing.T) {
	body := []byte{1, 2, 3}
	got := AppendRequest(nil, 7, MethodPing.ID, body, nil)
	want := []byte{21, 0, 0, 0, 7, 0, 0, 0}
	want = binary.LittleEndian.AppendUint32(want, 3603094245) // Ping's id
	want = append(want, 3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3)
	assert.DeepEqual(t, got, want)

	req, err := ReadRequest(bytes.NewReader(got), 0)
	assert.NilError(t, err)
	assert.Equal(t, req.Header.Seq, uint32(7))
	assert.Equal(t, req.Header.FuncID, MethodPing.ID)
	assert.DeepEqual(t, req.Body, body)
	assert.Equal(t, len(req.Attach), 0)
}

func TestResponseHeaderBytes(t *testing.T) {
	got := AppendResponse(nil, 9, []byte{0xaa})
	want := []byte{21, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xaa}
	assert.DeepEqual(t, got, want)
	resp, err := ReadResponse(bytes.NewReader(got), 0)
	assert.NilError(t, err)
	assert.Equal(t, resp.Header.Seq, uint32(9))
	assert.NilError(t, ResponseError(resp))
}

func TestErrorResponse(t *testing.T) {
	b := AppendError(nil, 3, ErrcFunctionNotRegistered, "function not registered")
	assert.Equal(t, b[2], uint8(ErrcFunctionNotRegistered))
	resp, err := ReadResponse(bytes.NewReader(b), 0)
	assert.NilError(t, err)
	var re *RPCError
	assert.Assert(t, errors.As(ResponseError(resp), &re))
	assert.Equal(t, re.Code, ErrcFunctionNotRegistered)
	assert.Equal(t, re.Msg, "function not registered")

	b = AppendError(nil, 4, 300, "user code")
	assert.Equal(t, b[2], uint8(255))
	resp, err = ReadResponse(bytes.NewReader(b), 0)
	assert.NilError(t, err)
	assert.Assert(t, errors.As(ResponseError(resp), &re))
	assert.Equal(t, re.Code, Errc(300))
	assert.Equal(t, re.Msg, "user code")
}

func TestFrameErrors(t *testing.T) {
	good := AppendRequest(nil, 1, 2, []byte{1, 2, 3, 4}, nil)
	mod := func(i int, v byte) []byte {
		b := append([]byte{}, good...)
		b[i] = v
		return b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"magic", mod(0, 22), 0, ErrFrame},
		{"version", mod(1, 1), 0, ErrFrame},
		{"serialize type", mod(2, 1), 0, ErrFrame},
		{"over limit", good, 3, ErrFrame},
		{"cut body", good[:len(good)-1], 0, ErrFrame},
		{"cut header", good[:10], 0, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadRequest(bytes.NewReader(tc.in), tc.max)
			assert.Assert(t, errors.Is(err, tc.want), "got %v", err)
		})
	}
	// A header announcing 4 GiB is refused before anything is allocated.
	huge := AppendRequest(nil, 1, 2, nil, nil)
	binary.LittleEndian.PutUint32(huge[12:], 0xffffffff)
	_, err := ReadRequest(bytes.NewReader(huge), 0)
	assert.Assert(t, errors.Is(err, ErrFrame))
}

func FuzzReadRequest(f *testing.F) {
	f.Add(AppendRequest(nil, 1, MethodExistKey.ID, sp.Marshal(KeyArgsCodec, &KeyArgs{Key: "k", TenantID: "default"}), nil))
	f.Add(AppendRequest(nil, 2, MethodServiceReady.ID, nil, []byte{9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ReadRequest(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		again := AppendRequest(nil, req.Header.Seq, req.Header.FuncID, req.Body, req.Attach)
		again[3] = req.Header.MsgType
		assert.DeepEqual(t, again, b[:len(again)])
	})
}

func FuzzReadResponse(f *testing.F) {
	f.Add(AppendResponse(nil, 1, []byte{1, 2}))
	f.Add(AppendError(nil, 2, ErrcInvalidRPCArguments, "invalid rpc arg"))
	f.Add(AppendError(nil, 2, 999, "wide"))
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := ReadResponse(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		rerr := ResponseError(resp)
		assert.Equal(t, rerr == nil, resp.Header.ErrCode == 0)
	})
}

func TestUUIDText(t *testing.T) {
	u := UUID{Hi: 0x1122334455667788, Lo: 0x99aabbccddeeff00}
	assert.Equal(t, u.String(), "11223344-5566-7788-99aa-bbccddeeff00")
	back, err := ParseUUID(u.String())
	assert.NilError(t, err)
	assert.Equal(t, back, u)
	for _, bad := range []string{"", "11223344556677889", "11223344-5566-7788-99aa-bbccddeeffzz"} {
		_, err := ParseUUID(bad)
		assert.Assert(t, err != nil, bad)
	}
}
