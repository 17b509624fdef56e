package client

import (
	"encoding/binary"
	"fmt"

	"github.com/kvferry/kvferry/store/wire"
)

// The disk-read requests between store clients (diskserve.go), carried in
// TypeStore frames on the engine's RPC port. Encoded by hand, little
// endian; the first byte of a request is its op.
//
//	read:    op=1 | lease_ms u32 | uid u64 | size u64 | tenant_len u16 |
//	         disk_len u16 | key_len u16 | tenant | disk id | key
//	release: op=2 | token u64
//	reply:   code i32 | token u64 | addr u64 | message (the rest)
//
// A read asks the holder to read the file of (tenant, key) at version uid
// (size bytes) from its disk tier disk id into its serve buffer; the reply
// names where (addr, a registered address of the holder's segment) and the
// grant (token) to release once the reader has pulled the bytes. The grant
// lapses after lease_ms anyway. A reply of no bytes is a holder that
// serves no disk reads (engine.HandleRPC has no handler there).
const (
	diskOpRead    = 1
	diskOpRelease = 2

	diskReadHeader = 1 + 4 + 8 + 8 + 2 + 2 + 2
	diskReplyLen   = 4 + 8 + 8
	// diskMaxName bounds each name of a read request.
	diskMaxName = 4096
	// diskMaxMessage bounds a reply's message.
	diskMaxMessage = 512
)

// diskRead is a read request.
type diskRead struct {
	leaseMs           uint32
	uid, size         uint64
	tenant, disk, key string
}

func (r diskRead) append(b []byte) []byte {
	b = append(b, diskOpRead)
	b = binary.LittleEndian.AppendUint32(b, r.leaseMs)
	b = binary.LittleEndian.AppendUint64(b, r.uid)
	b = binary.LittleEndian.AppendUint64(b, r.size)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.tenant)))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.disk)))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.key)))
	b = append(b, r.tenant...)
	b = append(b, r.disk...)
	return append(b, r.key...)
}

// decodeDiskRead decodes a read request (op byte included).
func decodeDiskRead(b []byte) (diskRead, error) {
	if len(b) < diskReadHeader || b[0] != diskOpRead {
		return diskRead{}, fmt.Errorf("disk read request of %d bytes: %w", len(b), wire.ErrInvalidParams)
	}
	r := diskRead{leaseMs: binary.LittleEndian.Uint32(b[1:]), uid: binary.LittleEndian.Uint64(b[5:]),
		size: binary.LittleEndian.Uint64(b[13:])}
	nt, nd, nk := int(binary.LittleEndian.Uint16(b[21:])), int(binary.LittleEndian.Uint16(b[23:])),
		int(binary.LittleEndian.Uint16(b[25:]))
	rest := b[diskReadHeader:]
	if nt > diskMaxName || nd > diskMaxName || nk > diskMaxName || nk == 0 || len(rest) != nt+nd+nk {
		return diskRead{}, fmt.Errorf("disk read request: names of %d+%d+%d bytes in %d: %w", nt, nd, nk, len(rest),
			wire.ErrInvalidParams)
	}
	r.tenant, r.disk, r.key = string(rest[:nt]), string(rest[nt:nt+nd]), string(rest[nt+nd:])
	return r, nil
}

func appendDiskRelease(b []byte, token uint64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, diskOpRelease), token)
}

func decodeDiskRelease(b []byte) (uint64, error) {
	if len(b) != 9 || b[0] != diskOpRelease {
		return 0, fmt.Errorf("disk release request of %d bytes: %w", len(b), wire.ErrInvalidParams)
	}
	return binary.LittleEndian.Uint64(b[1:]), nil
}

// diskReply is the answer to a read or a release.
type diskReply struct {
	code        wire.Code
	token, addr uint64
	msg         string
}

func (r diskReply) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(r.code)))
	b = binary.LittleEndian.AppendUint64(b, r.token)
	b = binary.LittleEndian.AppendUint64(b, r.addr)
	return append(b, r.msg[:min(len(r.msg), diskMaxMessage)]...)
}

// errNoDiskServer is a holder that serves no disk reads (an empty reply).
var errNoDiskServer = fmt.Errorf("the holder serves no disk reads: %w", wire.ErrNotSupported)

func decodeDiskReply(b []byte) (diskReply, error) {
	if len(b) == 0 {
		return diskReply{}, errNoDiskServer
	}
	if len(b) < diskReplyLen || len(b) > diskReplyLen+diskMaxMessage {
		return diskReply{}, fmt.Errorf("disk read reply of %d bytes: %w", len(b), wire.ErrRPCFail)
	}
	return diskReply{code: wire.Code(int32(binary.LittleEndian.Uint32(b))), token: binary.LittleEndian.Uint64(b[4:]),
		addr: binary.LittleEndian.Uint64(b[12:]), msg: string(b[diskReplyLen:])}, nil
}

// err returns the reply's error, nil for success.
func (r diskReply) err() error {
	if r.code == 0 {
		return nil
	}
	return fmt.Errorf("holder: %s: %w", r.msg, wire.ErrorOf(int32(r.code)))
}
