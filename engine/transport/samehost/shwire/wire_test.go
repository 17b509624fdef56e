package shwire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// Known answers written from the layout in wire.go's comment.
func TestWireGolden(t *testing.T) {
	var hb [HelloSize]byte
	Hello{Kind: KindShm, Slots: 2, Chunks: 8, ChunkBytes: 2 << 20}.Encode(hb[:])
	if got, want := hex.EncodeToString(hb[:]), "7366766b"+"0100"+"02"+"00"+"02000000"+"08000000"+"0000200000000000"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}

	// A cma hello asks for a slot per worker and per inline copier (2 + 4).
	Hello{Kind: KindCMA, Slots: 6}.Encode(hb[:])
	if got, want := hex.EncodeToString(hb[:]), "7366766b"+"0100"+"01"+"00"+"06000000"+"00000000"+"0000000000000000"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}

	var rb [ReplySize]byte
	Reply{Status: StatusBusy, Nonce: 0x0102030405060708, ProbeAddr: 0x7f0000001008, Slots: 2, Chunks: 8, ChunkBytes: 1 << 20}.Encode(rb[:])
	if got, want := hex.EncodeToString(rb[:]), "7366766b"+"02000000"+"0807060504030201"+"08100000007f0000"+"02000000"+"08000000"+"0000100000000000"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}

	req := make([]byte, ReqHeaderSize+ReqEntrySize)
	PutReqHeader(req, 3, 1, 9)
	PutReqEntry(req[ReqHeaderSize:], ReqEntry{Op: 1, Offset: 0x40, Addr: 0x7f0000000000, Length: 0x1000})
	if got, want := hex.EncodeToString(req), "03000000"+"01000000"+"0900000000000000"+"01"+"00000000000000"+"4000000000000000"+"00000000007f0000"+"0010000000000000"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}

	resp := make([]byte, RespHeaderSize+2)
	PutRespHeader(resp, 3, 2, 9)
	resp[RespHeaderSize], resp[RespHeaderSize+1] = EntryOK, EntryRejected
	if got, want := hex.EncodeToString(resp), "03000000"+"02000000"+"0900000000000000"+"0001"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestWireRoundTrip(t *testing.T) {
	roundTrip(t, Hello{Kind: KindCMA, Slots: 3}, HelloSize, Hello.Encode, DecodeHello)
	roundTrip(t, Reply{Status: StatusOK, Nonce: 77, ProbeAddr: 4096, Slots: 3}, ReplySize, Reply.Encode, DecodeReply)

	req := make([]byte, ReqHeaderSize+2*ReqEntrySize)
	PutReqHeader(req, 1, 2, 5)
	es := []ReqEntry{{Op: 0, Offset: 0, Addr: 10, Length: 20}, {Op: 1, Offset: 20, Addr: 99, Length: 1}}
	for i, e := range es {
		PutReqEntry(req[ReqHeaderSize+i*ReqEntrySize:], e)
	}
	c, n, seq, err := DecodeReq(req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := [3]uint64{uint64(c), uint64(n), seq}, [3]uint64{1, 2, 5}; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i, e := range es {
		if got, want := ReqEntryAt(req, i), e; got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestWireRejects(t *testing.T) {
	var hb [HelloSize]byte
	Hello{Kind: KindCMA, Slots: 1}.Encode(hb[:])
	for name, b := range map[string][]byte{
		"short":       hb[:10],
		"long":        append(hb[:], 0),
		"bad magic":   append([]byte{0, 0, 0, 0}, hb[4:]...),
		"bad version": append(append([]byte(nil), hb[:4]...), append([]byte{9, 0}, hb[6:]...)...),
	} {
		_, err := DecodeHello(b)
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	req := make([]byte, ReqHeaderSize+ReqEntrySize)
	PutReqHeader(req, 0, 2, 0) // claims 2 entries, holds 1
	_, _, _, err := DecodeReq(req)
	if !errors.Is(err, ErrProtocol) {
		t.Fatal(err)
	}
	PutReqHeader(req, 0, 0, 0)
	_, _, _, err = DecodeReq(req[:ReqHeaderSize])
	if !errors.Is(err, ErrProtocol) {
		t.Fatal(err)
	}
	_, _, _, err = DecodeResp([]byte{1, 2, 3})
	if !errors.Is(err, ErrProtocol) {
		t.Fatal(err)
	}
}

// FuzzWire: no decoder of the session messages (hello, reply, shm request
// and response, map request and reply, revoke) panics; what decodes
// re-encodes to the same bytes.
func FuzzWire(f *testing.F) {
	var hb [HelloSize]byte
	Hello{Kind: KindShm, Chunks: 8, ChunkBytes: 1 << 20}.Encode(hb[:])
	f.Add(hb[:])
	var rb [ReplySize]byte
	Reply{Nonce: 1}.Encode(rb[:])
	f.Add(rb[:])
	req := make([]byte, ReqHeaderSize+ReqEntrySize)
	PutReqHeader(req, 1, 1, 1)
	f.Add(req)
	var qb [MapReqSize]byte
	MapReq{Seq: 1, Addr: 0x1000, Key: 7}.Encode(qb[:])
	f.Add(qb[:])
	var mb [MapRespSize]byte
	MapResp{Seq: 1, Base: 0x1000, Size: 1 << 20}.Encode(mb[:])
	f.Add(mb[:])
	var vb [RevokeSize]byte
	EncodeRevoke(vb[:], 3)
	f.Add(vb[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []struct {
			name   string
			lo, hi int // reserved bytes, written as zeros
			rt     func([]byte) ([]byte, bool)
		}{
			{"hello", 7, 8, func(b []byte) ([]byte, bool) { return reencode(b, HelloSize, DecodeHello, Hello.Encode) }},
			{"reply", 0, 0, func(b []byte) ([]byte, bool) { return reencode(b, ReplySize, DecodeReply, Reply.Encode) }},
			{"map request", 4, 8, func(b []byte) ([]byte, bool) { return reencode(b, MapReqSize, DecodeMapReq, MapReq.Encode) }},
			{"map reply", 0, 0, func(b []byte) ([]byte, bool) { return reencode(b, MapRespSize, DecodeMapResp, MapResp.Encode) }},
			{"revoke", 4, 8, func(b []byte) ([]byte, bool) {
				return reencode(b, RevokeSize, DecodeRevoke, func(ep uint64, out []byte) { EncodeRevoke(out, ep) })
			}},
		} {
			if out, ok := c.rt(b); ok && (!bytes.Equal(out[:c.lo], b[:c.lo]) || !bytes.Equal(out[c.hi:], b[c.hi:])) {
				t.Fatalf("%s round trip: %x -> %x", c.name, b, out)
			}
		}
		if _, n, _, err := DecodeReq(b); err == nil {
			for i := range int(n) {
				e := ReqEntryAt(b, i)
				out := make([]byte, ReqEntrySize)
				PutReqEntry(out, e)
				p := b[ReqHeaderSize+i*ReqEntrySize:][:ReqEntrySize]
				if out[0] != p[0] || !bytes.Equal(out[8:], p[8:]) {
					t.Fatalf("entry round trip: %x -> %x", p, out)
				}
			}
		}
		_, _, _, _ = DecodeResp(b)
	})
}

// reencode decodes b as a message of size bytes and encodes it again
// (false: b does not decode).
func reencode[M any](b []byte, size int, decode func([]byte) (M, error), encode func(M, []byte)) ([]byte, bool) {
	m, err := decode(b)
	if err != nil {
		return nil, false
	}
	out := make([]byte, size)
	encode(m, out)
	return out, true
}

// The map messages (samehost/hostmap.go): known answers, round trips, rejects.
func TestMapWire(t *testing.T) {
	var qb [MapReqSize]byte
	MapReq{Seq: 1, Addr: 0x1000, Key: 0x0102030405060708}.Encode(qb[:])
	if got, want := hex.EncodeToString(qb[:]), "6d66766b"+"00000000"+"0100000000000000"+"0010000000000000"+"0807060504030201"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	roundTrip(t, MapReq{Seq: 1, Addr: 0x1000, Key: 0x0102030405060708}, MapReqSize, MapReq.Encode, DecodeMapReq)
	_, err := DecodeMapReq(qb[:MapReqSize-1])
	if !errors.Is(err, ErrProtocol) {
		t.Fatal(err)
	}

	want := MapResp{Status: StatusOK, Seq: 9, Base: 0x7f0000000000, Size: 1 << 30, Offs: 4096}
	roundTrip(t, want, MapRespSize, MapResp.Encode, DecodeMapResp)
	var rb [MapRespSize]byte
	want.Encode(rb[:])
	rb[0] ^= 1
	_, err = DecodeMapResp(rb[:])
	if !errors.Is(err, ErrProtocol) {
		t.Fatal(err)
	}

	var vb [RevokeSize]byte
	EncodeRevoke(vb[:], 7)
	if got, want := hex.EncodeToString(vb[:]), "7266766b"+"00000000"+"0700000000000000"; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// roundTrip encodes m (size bytes) and decodes it back.
func roundTrip[M comparable](t *testing.T, m M, size int, encode func(M, []byte), decode func([]byte) (M, error)) {
	t.Helper()
	b := make([]byte, size)
	encode(m, b)
	got, err := decode(b)
	if err != nil || got != m {
		t.Fatalf("round trip of %+v: %+v, %v", m, got, err)
	}
}
