package samehost

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The session protocol runs over a SOCK_SEQPACKET Unix socket in the
// abstract namespace (one message per write). All integers are little
// endian. It is kvferry's own protocol: Mooncake has no equivalent.
//
// hello (initiator -> owner), helloSize bytes:
//
//	0  magic u32   4 version u16   6 kind u8   7 reserved
//	8  slots u32   (cma: worker slots wanted)
//	12 chunks u32  (shm: staging chunks wanted)
//	16 chunkBytes u64 (shm: bytes per chunk wanted)
//
// reply (owner -> initiator), replySize bytes, plus SCM_RIGHTS:
// cma: [control page fd, slot page fd]; shm: [staging fd]:
//
//	0  magic u32   4 status u32
//	8  nonce u64   16 probeAddr u64
//	24 slots u32   28 chunks u32
//	32 chunkBytes u64
//
// shm request (one per staging chunk): a reqHeader and count entries;
// shm response: a respHeader and count status bytes.
//
//	reqHeader:  0 chunk u32  4 count u32  8 seq u64
//	entry:      0 op u8  1..7 reserved  8 offset u64 (in the chunk)  16 addr u64  24 length u64
//	respHeader: 0 chunk u32  4 count u32  8 seq u64
const (
	wireMagic   = 0x6b766673 // "kvfs"
	wireVersion = 1

	kindCMA = 1
	kindShm = 2
	kindIPC = 3 // nvlink: the cma pages (no probe), then export requests

	helloSize      = 24
	replySize      = 40
	reqHeaderSize  = 16
	reqEntrySize   = 32
	respHeaderSize = 16
	// maxEntries caps the entries of one request (small pieces share a
	// chunk; more than this many get another chunk).
	maxEntries = 256
	maxReqSize = reqHeaderSize + maxEntries*reqEntrySize

	statusOK          = 0
	statusUnsupported = 1
	statusBusy        = 2
	statusInternal    = 3

	entryOK       = 0
	entryRejected = 1
	entryBad      = 2
	entryDevice   = 3 // the owner's copy to or from its device memory failed
)

// errProtocol marks a malformed or unexpected message; the session ends.
var errProtocol = errors.New("same-host session protocol error")

type hello struct {
	kind       uint8
	slots      uint32
	chunks     uint32
	chunkBytes uint64
}

func (h hello) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], wireMagic)
	binary.LittleEndian.PutUint16(b[4:], wireVersion)
	b[6] = h.kind
	b[7] = 0
	binary.LittleEndian.PutUint32(b[8:], h.slots)
	binary.LittleEndian.PutUint32(b[12:], h.chunks)
	binary.LittleEndian.PutUint64(b[16:], h.chunkBytes)
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize || binary.LittleEndian.Uint32(b) != wireMagic {
		return hello{}, fmt.Errorf("hello of %d bytes: %w", len(b), errProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != wireVersion {
		return hello{}, fmt.Errorf("hello version %d: %w", v, errProtocol)
	}
	return hello{kind: b[6], slots: binary.LittleEndian.Uint32(b[8:]), chunks: binary.LittleEndian.Uint32(b[12:]),
		chunkBytes: binary.LittleEndian.Uint64(b[16:])}, nil
}

type reply struct {
	status     uint32
	nonce      uint64
	probeAddr  uint64
	slots      uint32
	chunks     uint32
	chunkBytes uint64
}

func (r reply) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], wireMagic)
	binary.LittleEndian.PutUint32(b[4:], r.status)
	binary.LittleEndian.PutUint64(b[8:], r.nonce)
	binary.LittleEndian.PutUint64(b[16:], r.probeAddr)
	binary.LittleEndian.PutUint32(b[24:], r.slots)
	binary.LittleEndian.PutUint32(b[28:], r.chunks)
	binary.LittleEndian.PutUint64(b[32:], r.chunkBytes)
}

func decodeReply(b []byte) (reply, error) {
	if len(b) != replySize || binary.LittleEndian.Uint32(b) != wireMagic {
		return reply{}, fmt.Errorf("reply of %d bytes: %w", len(b), errProtocol)
	}
	return reply{status: binary.LittleEndian.Uint32(b[4:]), nonce: binary.LittleEndian.Uint64(b[8:]),
		probeAddr: binary.LittleEndian.Uint64(b[16:]), slots: binary.LittleEndian.Uint32(b[24:]),
		chunks: binary.LittleEndian.Uint32(b[28:]), chunkBytes: binary.LittleEndian.Uint64(b[32:])}, nil
}

// reqEntry is one piece of a shm request.
type reqEntry struct {
	op     uint8 // engine.OpRead or engine.OpWrite
	offset uint64
	addr   uint64
	length uint64
}

func putReqHeader(b []byte, chunk, count uint32, seq uint64) {
	binary.LittleEndian.PutUint32(b[0:], chunk)
	binary.LittleEndian.PutUint32(b[4:], count)
	binary.LittleEndian.PutUint64(b[8:], seq)
}

func putReqEntry(b []byte, e reqEntry) {
	b[0] = e.op
	clear(b[1:8])
	binary.LittleEndian.PutUint64(b[8:], e.offset)
	binary.LittleEndian.PutUint64(b[16:], e.addr)
	binary.LittleEndian.PutUint64(b[24:], e.length)
}

// decodeReq checks a request's framing and returns its header fields.
func decodeReq(b []byte) (chunk, count uint32, seq uint64, err error) {
	if len(b) < reqHeaderSize {
		return 0, 0, 0, fmt.Errorf("request of %d bytes: %w", len(b), errProtocol)
	}
	chunk = binary.LittleEndian.Uint32(b[0:])
	count = binary.LittleEndian.Uint32(b[4:])
	seq = binary.LittleEndian.Uint64(b[8:])
	if count == 0 || count > maxEntries || len(b) != reqHeaderSize+int(count)*reqEntrySize {
		return 0, 0, 0, fmt.Errorf("request with %d entries in %d bytes: %w", count, len(b), errProtocol)
	}
	return chunk, count, seq, nil
}

func reqEntryAt(b []byte, i int) reqEntry {
	p := b[reqHeaderSize+i*reqEntrySize:]
	return reqEntry{op: p[0], offset: binary.LittleEndian.Uint64(p[8:]), addr: binary.LittleEndian.Uint64(p[16:]),
		length: binary.LittleEndian.Uint64(p[24:])}
}

func putRespHeader(b []byte, chunk, count uint32, seq uint64) {
	binary.LittleEndian.PutUint32(b[0:], chunk)
	binary.LittleEndian.PutUint32(b[4:], count)
	binary.LittleEndian.PutUint64(b[8:], seq)
}

func decodeResp(b []byte) (chunk, count uint32, seq uint64, err error) {
	if len(b) < respHeaderSize {
		return 0, 0, 0, fmt.Errorf("response of %d bytes: %w", len(b), errProtocol)
	}
	chunk = binary.LittleEndian.Uint32(b[0:])
	count = binary.LittleEndian.Uint32(b[4:])
	seq = binary.LittleEndian.Uint64(b[8:])
	if count == 0 || count > maxEntries || len(b) != respHeaderSize+int(count) {
		return 0, 0, 0, fmt.Errorf("response with %d entries in %d bytes: %w", count, len(b), errProtocol)
	}
	return chunk, count, seq, nil
}

// nvlink export request (initiator -> owner), exportReqSize bytes: the
// POSIX fd of the VMM allocation mapped at addr in the owner.
//
//	0 magic u32 ("kvfx")  4 reserved u32  8 seq u64  16 addr u64
//
// export reply (owner -> initiator), exportRespSize bytes, with the fd as
// SCM_RIGHTS when status is statusOK:
//
//	0 magic u32  4 status u32  8 seq u64  16 base u64  24 size u64
//	32 device u32  36 reserved u32
const (
	exportMagic    = 0x6b766678 // "kvfx"
	exportReqSize  = 24
	exportRespSize = 40
)

type exportReq struct {
	seq, addr uint64
}

func (r exportReq) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], exportMagic)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], r.seq)
	binary.LittleEndian.PutUint64(b[16:], r.addr)
}

func decodeExportReq(b []byte) (exportReq, error) {
	if len(b) != exportReqSize || binary.LittleEndian.Uint32(b) != exportMagic {
		return exportReq{}, fmt.Errorf("export request of %d bytes: %w", len(b), errProtocol)
	}
	return exportReq{seq: binary.LittleEndian.Uint64(b[8:]), addr: binary.LittleEndian.Uint64(b[16:])}, nil
}

type exportResp struct {
	status     uint32
	seq        uint64
	base, size uint64
	device     uint32
}

func (r exportResp) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], exportMagic)
	binary.LittleEndian.PutUint32(b[4:], r.status)
	binary.LittleEndian.PutUint64(b[8:], r.seq)
	binary.LittleEndian.PutUint64(b[16:], r.base)
	binary.LittleEndian.PutUint64(b[24:], r.size)
	binary.LittleEndian.PutUint32(b[32:], r.device)
	binary.LittleEndian.PutUint32(b[36:], 0)
}

func decodeExportResp(b []byte) (exportResp, error) {
	if len(b) != exportRespSize || binary.LittleEndian.Uint32(b) != exportMagic {
		return exportResp{}, fmt.Errorf("export reply of %d bytes: %w", len(b), errProtocol)
	}
	return exportResp{status: binary.LittleEndian.Uint32(b[4:]), seq: binary.LittleEndian.Uint64(b[8:]),
		base: binary.LittleEndian.Uint64(b[16:]), size: binary.LittleEndian.Uint64(b[24:]), device: binary.LittleEndian.Uint32(b[32:])}, nil
}
