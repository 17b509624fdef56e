package client

import (
	"bytes"
	"encoding/hex"
	"slices"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
)

// TestDiskWireGolden: the encodings of diskwire.go, byte by byte.
func TestDiskWireGolden(t *testing.T) {
	req := diskRead{leaseMs: 0x01020304, uid: 7, size: 0x100000, tenant: "t", disk: "d1", key: "k"}
	want := "01" + "04030201" + "0700000000000000" + "0000100000000000" + "0100" + "0200" + "0100" + "74" + "6431" + "6b"
	assert.Equal(t, hex.EncodeToString(req.append(nil)), want)
	got, err := decodeDiskRead(req.append(nil))
	assert.NilError(t, err)
	assert.Equal(t, got, req)
	assert.Equal(t, hex.EncodeToString(appendDiskRelease(nil, 0x0a0b)), "02"+"0b0a000000000000")
	r := diskReply{code: wire.ErrNoAvailableHandle, token: 9, addr: 0x1000, msg: "busy"}
	assert.Equal(t, hex.EncodeToString(r.append(nil)), "38ffffff"+"0900000000000000"+"0010000000000000"+hex.EncodeToString([]byte("busy")))
	back, err := decodeDiskReply(r.append(nil))
	assert.NilError(t, err)
	assert.Equal(t, back, r)
	assert.Equal(t, wire.CodeOf(back.err()), wire.ErrNoAvailableHandle)
	_, err = decodeDiskReply(nil)
	assert.Equal(t, wire.CodeOf(err), wire.ErrNotSupported)
}

// FuzzDiskWire: the decoders of requests and replies from peers never
// panic, fail without a result, and round-trip what they accept.
func FuzzDiskWire(f *testing.F) {
	f.Add(diskRead{leaseMs: 5, uid: 1, size: 2, tenant: "default", disk: "x", key: "k"}.append(nil))
	f.Add(appendDiskRelease(nil, 3))
	f.Add(diskReply{token: 1, addr: 2}.append(nil))
	f.Add([]byte{diskOpRead, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeDiskRead(b); err == nil {
			if !bytes.Equal(r.append(nil), b) {
				t.Fatalf("read request round trip: %x", b)
			}
		} else if r != (diskRead{}) {
			t.Fatal("read request: error with a result")
		}
		if tok, err := decodeDiskRelease(b); err == nil {
			if !bytes.Equal(appendDiskRelease(nil, tok), b) {
				t.Fatalf("release round trip: %x", b)
			}
		} else if tok != 0 {
			t.Fatal("release: error with a result")
		}
		if r, err := decodeDiskReply(b); err == nil {
			if !bytes.Equal(r.append(nil), b) {
				t.Fatalf("reply round trip: %x", b)
			}
		} else if r != (diskReply{}) {
			t.Fatal("reply: error with a result")
		}
	})
}

// TestDiskServeExtents: grants take and give back room first fit, merged,
// and never more than the buffer.
func TestDiskServeExtents(t *testing.T) {
	s := &diskServer{}
	s.mu.free = []extent{{0, 16 * diskServeAlign}}
	s.mu.grants = map[uint64]*diskGrant{}
	var offs []uint64
	for range 4 {
		off, ok := s.takeLocked(4 * diskServeAlign)
		assert.Assert(t, ok)
		offs = append(offs, off)
	}
	_, ok := s.takeLocked(diskServeAlign)
	assert.Assert(t, !ok, "took more than the buffer")
	s.putLocked(extent{offs[1], 4 * diskServeAlign})
	s.putLocked(extent{offs[3], 4 * diskServeAlign})
	_, ok = s.takeLocked(8 * diskServeAlign)
	assert.Assert(t, !ok, "two apart extents merged")
	s.putLocked(extent{offs[2], 4 * diskServeAlign})
	off, ok := s.takeLocked(12 * diskServeAlign)
	assert.Assert(t, ok, "free list %v", s.mu.free)
	assert.Equal(t, off, offs[1])
	s.putLocked(extent{off, 12 * diskServeAlign})
	s.putLocked(extent{offs[0], 4 * diskServeAlign})
	assert.Assert(t, slices.Equal(s.mu.free, []extent{{0, 16 * diskServeAlign}}), "free list %v", s.mu.free)
}
