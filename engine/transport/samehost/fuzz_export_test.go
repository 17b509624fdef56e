package samehost

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzExportWire reads arbitrary bytes as the nvlink export messages of
// the session socket (a VMM handle request and its answer) and as a
// descriptor's shm_name: what decodes encodes to the same bytes.
func FuzzExportWire(f *testing.F) {
	req := make([]byte, exportReqSize)
	exportReq{seq: 1, addr: 0x7f0000000000}.encode(req)
	f.Add(req)
	resp := make([]byte, exportRespSize)
	exportResp{seq: 1, base: 0x1000, size: 1 << 21, device: 1}.encode(resp)
	f.Add(resp)
	f.Add([]byte(hex.EncodeToString(make([]byte, 64))))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeExportReq(b); err == nil {
			out := make([]byte, exportReqSize)
			r.encode(out)
			if !bytes.Equal(out[:4], b[:4]) || !bytes.Equal(out[8:], b[8:]) {
				t.Fatalf("export request round trip: %x -> %x", b, out)
			}
		}
		if r, err := decodeExportResp(b); err == nil {
			out := make([]byte, exportRespSize)
			r.encode(out)
			if !bytes.Equal(out[:36], b[:36]) {
				t.Fatalf("export reply round trip: %x -> %x", b, out)
			}
		}
		if h, err := parseHandle(string(b)); err == nil && !bytes.EqualFold([]byte(hex.EncodeToString(h[:])), b) {
			t.Fatalf("handle round trip: %q", b)
		}
	})
}
