package samehost

import (
	"bytes"
	"encoding/hex"
	"testing"

	"gotest.tools/v3/assert"
)

// Known answers written from the layout in wire.go's comment.
func TestWireGolden(t *testing.T) {
	var hb [helloSize]byte
	hello{kind: kindShm, slots: 2, chunks: 8, chunkBytes: 2 << 20}.encode(hb[:])
	assert.Equal(t, hex.EncodeToString(hb[:]),
		"7366766b"+"0100"+"02"+"00"+"02000000"+"08000000"+"0000200000000000")

	// A cma hello asks for a slot per worker and per inline copier (2 + 4).
	hello{kind: kindCMA, slots: 6}.encode(hb[:])
	assert.Equal(t, hex.EncodeToString(hb[:]),
		"7366766b"+"0100"+"01"+"00"+"06000000"+"00000000"+"0000000000000000")

	var rb [replySize]byte
	reply{status: statusBusy, nonce: 0x0102030405060708, probeAddr: 0x7f0000001008, slots: 2, chunks: 8, chunkBytes: 1 << 20}.encode(rb[:])
	assert.Equal(t, hex.EncodeToString(rb[:]),
		"7366766b"+"02000000"+"0807060504030201"+"08100000007f0000"+"02000000"+"08000000"+"0000100000000000")

	req := make([]byte, reqHeaderSize+reqEntrySize)
	putReqHeader(req, 3, 1, 9)
	putReqEntry(req[reqHeaderSize:], reqEntry{op: 1, offset: 0x40, addr: 0x7f0000000000, length: 0x1000})
	assert.Equal(t, hex.EncodeToString(req),
		"03000000"+"01000000"+"0900000000000000"+
			"01"+"00000000000000"+"4000000000000000"+"00000000007f0000"+"0010000000000000")

	resp := make([]byte, respHeaderSize+2)
	putRespHeader(resp, 3, 2, 9)
	resp[respHeaderSize], resp[respHeaderSize+1] = entryOK, entryRejected
	assert.Equal(t, hex.EncodeToString(resp), "03000000"+"02000000"+"0900000000000000"+"0001")
}

func TestWireRoundTrip(t *testing.T) {
	h := hello{kind: kindCMA, slots: 3}
	var hb [helloSize]byte
	h.encode(hb[:])
	got, err := decodeHello(hb[:])
	assert.NilError(t, err)
	assert.Equal(t, got, h)

	r := reply{status: statusOK, nonce: 77, probeAddr: 4096, slots: 3}
	var rb [replySize]byte
	r.encode(rb[:])
	gr, err := decodeReply(rb[:])
	assert.NilError(t, err)
	assert.Equal(t, gr, r)

	req := make([]byte, reqHeaderSize+2*reqEntrySize)
	putReqHeader(req, 1, 2, 5)
	es := []reqEntry{{op: 0, offset: 0, addr: 10, length: 20}, {op: 1, offset: 20, addr: 99, length: 1}}
	for i, e := range es {
		putReqEntry(req[reqHeaderSize+i*reqEntrySize:], e)
	}
	c, n, seq, err := decodeReq(req)
	assert.NilError(t, err)
	assert.Equal(t, [3]uint64{uint64(c), uint64(n), seq}, [3]uint64{1, 2, 5})
	for i, e := range es {
		assert.Equal(t, reqEntryAt(req, i), e)
	}
}

func TestWireRejects(t *testing.T) {
	var hb [helloSize]byte
	hello{kind: kindCMA, slots: 1}.encode(hb[:])
	for name, b := range map[string][]byte{
		"short":       hb[:10],
		"long":        append(hb[:], 0),
		"bad magic":   append([]byte{0, 0, 0, 0}, hb[4:]...),
		"bad version": append(append([]byte(nil), hb[:4]...), append([]byte{9, 0}, hb[6:]...)...),
	} {
		_, err := decodeHello(b)
		assert.ErrorIs(t, err, errProtocol, name)
	}
	req := make([]byte, reqHeaderSize+reqEntrySize)
	putReqHeader(req, 0, 2, 0) // claims 2 entries, holds 1
	_, _, _, err := decodeReq(req)
	assert.ErrorIs(t, err, errProtocol)
	putReqHeader(req, 0, 0, 0)
	_, _, _, err = decodeReq(req[:reqHeaderSize])
	assert.ErrorIs(t, err, errProtocol)
	_, _, _, err = decodeResp([]byte{1, 2, 3})
	assert.ErrorIs(t, err, errProtocol)
}

// FuzzWire: no decoder panics; what decodes re-encodes to the same bytes.
func FuzzWire(f *testing.F) {
	var hb [helloSize]byte
	hello{kind: kindShm, chunks: 8, chunkBytes: 1 << 20}.encode(hb[:])
	f.Add(hb[:])
	var rb [replySize]byte
	reply{nonce: 1}.encode(rb[:])
	f.Add(rb[:])
	req := make([]byte, reqHeaderSize+reqEntrySize)
	putReqHeader(req, 1, 1, 1)
	f.Add(req)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := decodeHello(b); err == nil {
			var out [helloSize]byte
			h.encode(out[:])
			if !bytes.Equal(out[:7], b[:7]) || !bytes.Equal(out[8:], b[8:]) {
				t.Fatalf("hello round trip: %x -> %x", b, out)
			}
		}
		if r, err := decodeReply(b); err == nil {
			var out [replySize]byte
			r.encode(out[:])
			if !bytes.Equal(out[:], b) {
				t.Fatalf("reply round trip: %x -> %x", b, out)
			}
		}
		if _, n, _, err := decodeReq(b); err == nil {
			for i := range int(n) {
				e := reqEntryAt(b, i)
				out := make([]byte, reqEntrySize)
				putReqEntry(out, e)
				p := b[reqHeaderSize+i*reqEntrySize:][:reqEntrySize]
				if out[0] != p[0] || !bytes.Equal(out[8:], p[8:]) {
					t.Fatalf("entry round trip: %x -> %x", p, out)
				}
			}
		}
		_, _, _, _ = decodeResp(b)
	})
}

// The map messages (hostmap.go): known answers, round trips, rejects.
func TestMapWire(t *testing.T) {
	var qb [mapReqSize]byte
	mapReq{seq: 1, addr: 0x1000, key: 0x0102030405060708}.encode(qb[:])
	assert.Equal(t, hex.EncodeToString(qb[:]),
		"6d66766b"+"00000000"+"0100000000000000"+"0010000000000000"+"0807060504030201")
	q, err := decodeMapReq(qb[:])
	assert.NilError(t, err)
	assert.Equal(t, q, mapReq{seq: 1, addr: 0x1000, key: 0x0102030405060708})
	_, err = decodeMapReq(qb[:mapReqSize-1])
	assert.ErrorIs(t, err, errProtocol)

	var rb [mapRespSize]byte
	want := mapResp{status: statusOK, seq: 9, base: 0x7f0000000000, size: 1 << 30, offs: 4096}
	want.encode(rb[:])
	r, err := decodeMapResp(rb[:])
	assert.NilError(t, err)
	assert.Equal(t, r, want)
	rb[0] ^= 1
	_, err = decodeMapResp(rb[:])
	assert.ErrorIs(t, err, errProtocol)

	var vb [revokeSize]byte
	encodeRevoke(vb[:], 7)
	assert.Equal(t, hex.EncodeToString(vb[:]), "7266766b"+"00000000"+"0700000000000000")
}
