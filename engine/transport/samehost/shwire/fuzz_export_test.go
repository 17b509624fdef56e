package shwire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// FuzzExportWire reads arbitrary bytes as the nvlink export messages of
// the session socket (a VMM handle request and its answer) and as a
// descriptor's shm_name: what decodes encodes to the same bytes.
func FuzzExportWire(f *testing.F) {
	req := make([]byte, ExportReqSize)
	ExportReq{Seq: 1, Addr: 0x7f0000000000}.Encode(req)
	f.Add(req)
	resp := make([]byte, ExportRespSize)
	ExportResp{Seq: 1, Base: 0x1000, Size: 1 << 21, Device: 1}.Encode(resp)
	f.Add(resp)
	f.Add([]byte(hex.EncodeToString(make([]byte, 64))))
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, ok := reencode(b, ExportReqSize, DecodeExportReq, ExportReq.Encode); ok && (!bytes.Equal(out[:4], b[:4]) || !bytes.Equal(out[8:], b[8:])) {
			t.Fatalf("export request round trip: %x -> %x", b, out)
		}
		if out, ok := reencode(b, ExportRespSize, DecodeExportResp, ExportResp.Encode); ok && !bytes.Equal(out[:36], b[:36]) {
			t.Fatalf("export reply round trip: %x -> %x", b, out)
		}
		if h, err := ParseHandle(string(b)); err == nil && !bytes.EqualFold([]byte(hex.EncodeToString(h[:])), b) {
			t.Fatalf("handle round trip: %q", b)
		}
	})
}
