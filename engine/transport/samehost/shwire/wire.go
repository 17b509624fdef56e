// Package shwire is the same-host transport's session wire (samehost): the
// hello and reply that open a session, the shm requests and responses, the
// nvlink export messages, the cma map messages and revokes, and the 64-byte
// handles of a descriptor's shm_name. Pure data with the standard library
// only, so that its fuzz targets run alone.
package shwire

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// The session protocol runs over a SOCK_SEQPACKET Unix socket in the
// abstract namespace (one message per write). All integers are little
// endian. It is kvferry's own protocol: Mooncake has no equivalent.
//
// hello (initiator -> owner), HelloSize bytes:
//
//	0  magic u32   4 version u16   6 kind u8   7 flags u8 (FlagNotifyRing)
//	8  slots u32   (cma: worker slots wanted)
//	12 chunks u32  (shm: staging chunks wanted)
//	16 chunkBytes u64 (shm: bytes per chunk wanted)
//
// reply (owner -> initiator), ReplySize bytes, plus SCM_RIGHTS:
// cma: [control page fd, slot page fd] and, when the hello asked for it
// and the owner offers one, the notification ring's fd third (an owner
// that ignores the flag sends two); shm: [staging fd]:
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
//
// Magic opens hello and reply; Version is the hello's (and the owner's
// published peer information's); the Kind constants are a hello's session
// kinds, the Status constants a reply's (and the export and map replies'),
// the Entry constants an shm response's per-entry status.
const (
	Magic   = 0x6b766673 // "kvfs"
	Version = 1

	KindCMA = 1
	KindShm = 2
	KindIPC = 3 // nvlink: the cma pages (no probe), then export requests

	// FlagNotifyRing in a cma hello asks for a notification ring
	// (samehost/nring): the initiator writes notifications into it and
	// sends a wake message when the owner's application sleeps.
	FlagNotifyRing = 1

	HelloSize      = 24
	ReplySize      = 40
	ReqHeaderSize  = 16
	ReqEntrySize   = 32
	RespHeaderSize = 16
	// MaxEntries caps the entries of one request (small pieces share a
	// chunk; more than this many get another chunk).
	MaxEntries = 256
	MaxReqSize = ReqHeaderSize + MaxEntries*ReqEntrySize

	StatusOK          = 0
	StatusUnsupported = 1
	StatusBusy        = 2
	StatusInternal    = 3

	EntryOK       = 0
	EntryRejected = 1
	EntryBad      = 2
	EntryDevice   = 3 // the owner's copy to or from its device memory failed
)

// ErrProtocol marks a malformed or unexpected message; the session ends.
var ErrProtocol = errors.New("same-host session protocol error")

// Hello opens a session (initiator -> owner).
type Hello struct {
	Kind       uint8
	Flags      uint8
	Slots      uint32
	Chunks     uint32
	ChunkBytes uint64
}

// Encode writes h into b (HelloSize bytes).
func (h Hello) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	b[6] = h.Kind
	b[7] = h.Flags
	binary.LittleEndian.PutUint32(b[8:], h.Slots)
	binary.LittleEndian.PutUint32(b[12:], h.Chunks)
	binary.LittleEndian.PutUint64(b[16:], h.ChunkBytes)
}

// DecodeHello reads a hello; anything else is ErrProtocol.
func DecodeHello(b []byte) (Hello, error) {
	if len(b) != HelloSize || binary.LittleEndian.Uint32(b) != Magic {
		return Hello{}, fmt.Errorf("hello of %d bytes: %w", len(b), ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return Hello{}, fmt.Errorf("hello version %d: %w", v, ErrProtocol)
	}
	return Hello{Kind: b[6], Flags: b[7], Slots: binary.LittleEndian.Uint32(b[8:]), Chunks: binary.LittleEndian.Uint32(b[12:]),
		ChunkBytes: binary.LittleEndian.Uint64(b[16:])}, nil
}

// Reply answers a hello (owner -> initiator).
type Reply struct {
	Status     uint32
	Nonce      uint64
	ProbeAddr  uint64
	Slots      uint32
	Chunks     uint32
	ChunkBytes uint64
}

// Encode writes r into b (ReplySize bytes).
func (r Reply) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], Magic)
	binary.LittleEndian.PutUint32(b[4:], r.Status)
	binary.LittleEndian.PutUint64(b[8:], r.Nonce)
	binary.LittleEndian.PutUint64(b[16:], r.ProbeAddr)
	binary.LittleEndian.PutUint32(b[24:], r.Slots)
	binary.LittleEndian.PutUint32(b[28:], r.Chunks)
	binary.LittleEndian.PutUint64(b[32:], r.ChunkBytes)
}

// DecodeReply reads a reply; anything else is ErrProtocol.
func DecodeReply(b []byte) (Reply, error) {
	if len(b) != ReplySize || binary.LittleEndian.Uint32(b) != Magic {
		return Reply{}, fmt.Errorf("reply of %d bytes: %w", len(b), ErrProtocol)
	}
	return Reply{Status: binary.LittleEndian.Uint32(b[4:]), Nonce: binary.LittleEndian.Uint64(b[8:]),
		ProbeAddr: binary.LittleEndian.Uint64(b[16:]), Slots: binary.LittleEndian.Uint32(b[24:]),
		Chunks: binary.LittleEndian.Uint32(b[28:]), ChunkBytes: binary.LittleEndian.Uint64(b[32:])}, nil
}

// ReqEntry is one piece of a shm request.
type ReqEntry struct {
	Op     uint8 // engine.OpRead or engine.OpWrite
	Offset uint64
	Addr   uint64
	Length uint64
}

// PutReqHeader writes a request header into b (ReqHeaderSize bytes).
func PutReqHeader(b []byte, chunk, count uint32, seq uint64) {
	binary.LittleEndian.PutUint32(b[0:], chunk)
	binary.LittleEndian.PutUint32(b[4:], count)
	binary.LittleEndian.PutUint64(b[8:], seq)
}

// PutReqEntry writes e into b (ReqEntrySize bytes).
func PutReqEntry(b []byte, e ReqEntry) {
	b[0] = e.Op
	clear(b[1:8])
	binary.LittleEndian.PutUint64(b[8:], e.Offset)
	binary.LittleEndian.PutUint64(b[16:], e.Addr)
	binary.LittleEndian.PutUint64(b[24:], e.Length)
}

// DecodeReq checks a request's framing and returns its header fields.
func DecodeReq(b []byte) (chunk, count uint32, seq uint64, err error) {
	if len(b) < ReqHeaderSize {
		return 0, 0, 0, fmt.Errorf("request of %d bytes: %w", len(b), ErrProtocol)
	}
	chunk = binary.LittleEndian.Uint32(b[0:])
	count = binary.LittleEndian.Uint32(b[4:])
	seq = binary.LittleEndian.Uint64(b[8:])
	if count == 0 || count > MaxEntries || len(b) != ReqHeaderSize+int(count)*ReqEntrySize {
		return 0, 0, 0, fmt.Errorf("request with %d entries in %d bytes: %w", count, len(b), ErrProtocol)
	}
	return chunk, count, seq, nil
}

// ReqEntryAt reads entry i of a request DecodeReq accepted.
func ReqEntryAt(b []byte, i int) ReqEntry {
	p := b[ReqHeaderSize+i*ReqEntrySize:]
	return ReqEntry{Op: p[0], Offset: binary.LittleEndian.Uint64(p[8:]), Addr: binary.LittleEndian.Uint64(p[16:]),
		Length: binary.LittleEndian.Uint64(p[24:])}
}

// PutRespHeader writes a response header into b (RespHeaderSize bytes).
func PutRespHeader(b []byte, chunk, count uint32, seq uint64) {
	binary.LittleEndian.PutUint32(b[0:], chunk)
	binary.LittleEndian.PutUint32(b[4:], count)
	binary.LittleEndian.PutUint64(b[8:], seq)
}

// DecodeResp checks a response's framing and returns its header fields.
func DecodeResp(b []byte) (chunk, count uint32, seq uint64, err error) {
	if len(b) < RespHeaderSize {
		return 0, 0, 0, fmt.Errorf("response of %d bytes: %w", len(b), ErrProtocol)
	}
	chunk = binary.LittleEndian.Uint32(b[0:])
	count = binary.LittleEndian.Uint32(b[4:])
	seq = binary.LittleEndian.Uint64(b[8:])
	if count == 0 || count > MaxEntries || len(b) != RespHeaderSize+int(count) {
		return 0, 0, 0, fmt.Errorf("response with %d entries in %d bytes: %w", count, len(b), ErrProtocol)
	}
	return chunk, count, seq, nil
}

// nvlink export request (initiator -> owner), ExportReqSize bytes: the
// POSIX fd of the VMM allocation mapped at addr in the owner.
//
//	0 magic u32 ("kvfx")  4 reserved u32  8 seq u64  16 addr u64
//
// export reply (owner -> initiator), ExportRespSize bytes, with the fd as
// SCM_RIGHTS when status is StatusOK:
//
//	0 magic u32  4 status u32  8 seq u64  16 base u64  24 size u64
//	32 device u32  36 reserved u32
const (
	ExportMagic    = 0x6b766678 // "kvfx"
	ExportReqSize  = 24
	ExportRespSize = 40
)

// ExportReq asks for the fd of the VMM allocation mapped at Addr.
type ExportReq struct {
	Seq, Addr uint64
}

// Encode writes r into b (ExportReqSize bytes).
func (r ExportReq) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], ExportMagic)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	binary.LittleEndian.PutUint64(b[16:], r.Addr)
}

// DecodeExportReq reads an export request; anything else is ErrProtocol.
func DecodeExportReq(b []byte) (ExportReq, error) {
	if len(b) != ExportReqSize || binary.LittleEndian.Uint32(b) != ExportMagic {
		return ExportReq{}, fmt.Errorf("export request of %d bytes: %w", len(b), ErrProtocol)
	}
	return ExportReq{Seq: binary.LittleEndian.Uint64(b[8:]), Addr: binary.LittleEndian.Uint64(b[16:])}, nil
}

// ExportResp answers an export request: the allocation Base+Size on Device.
type ExportResp struct {
	Status     uint32
	Seq        uint64
	Base, Size uint64
	Device     uint32
}

// Encode writes r into b (ExportRespSize bytes).
func (r ExportResp) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], ExportMagic)
	binary.LittleEndian.PutUint32(b[4:], r.Status)
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	binary.LittleEndian.PutUint64(b[16:], r.Base)
	binary.LittleEndian.PutUint64(b[24:], r.Size)
	binary.LittleEndian.PutUint32(b[32:], r.Device)
	binary.LittleEndian.PutUint32(b[36:], 0)
}

// DecodeExportResp reads an export reply; anything else is ErrProtocol.
func DecodeExportResp(b []byte) (ExportResp, error) {
	if len(b) != ExportRespSize || binary.LittleEndian.Uint32(b) != ExportMagic {
		return ExportResp{}, fmt.Errorf("export reply of %d bytes: %w", len(b), ErrProtocol)
	}
	return ExportResp{Status: binary.LittleEndian.Uint32(b[4:]), Seq: binary.LittleEndian.Uint64(b[8:]),
		Base: binary.LittleEndian.Uint64(b[16:]), Size: binary.LittleEndian.Uint64(b[24:]), Device: binary.LittleEndian.Uint32(b[32:])}, nil
}

// Map messages (samehost/hostmap.go), little endian, on the cma session once the
// initiator asks:
//
//	map request (initiator -> owner), MapReqSize bytes:
//	  0 magic u32 ("kvfm")  4 reserved u32  8 seq u64  16 addr u64  24 key u64
//	map reply (owner -> initiator), MapRespSize bytes, the fd as SCM_RIGHTS when status is StatusOK:
//	  0 magic u32  4 status u32  8 seq u64  16 base u64  24 size u64  32 offset u64 (of base in the file)
//	revoke (owner -> initiator), RevokeSize bytes: the epoch that ended mappings of older ones
//	  0 magic u32 ("kvfr")  4 reserved u32  8 epoch u64
const (
	MapMagic    = 0x6b76666d // "kvfm"
	RevokeMagic = 0x6b766672 // "kvfr"
	MapReqSize  = 32
	MapRespSize = 40
	RevokeSize  = 16
)

// MapReq asks for the memfd of the registration holding Addr, with the owner's proof Key.
type MapReq struct{ Seq, Addr, Key uint64 }

// Encode writes r into b (MapReqSize bytes).
func (r MapReq) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], MapMagic)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	binary.LittleEndian.PutUint64(b[16:], r.Addr)
	binary.LittleEndian.PutUint64(b[24:], r.Key)
}

// DecodeMapReq reads a map request; anything else is ErrProtocol.
func DecodeMapReq(b []byte) (MapReq, error) {
	if len(b) != MapReqSize || binary.LittleEndian.Uint32(b) != MapMagic {
		return MapReq{}, fmt.Errorf("map request of %d bytes: %w", len(b), ErrProtocol)
	}
	return MapReq{Seq: binary.LittleEndian.Uint64(b[8:]), Addr: binary.LittleEndian.Uint64(b[16:]), Key: binary.LittleEndian.Uint64(b[24:])}, nil
}

// MapResp answers a map request: Base+Size lies at Offs in the file.
type MapResp struct {
	Status           uint32
	Seq              uint64
	Base, Size, Offs uint64
}

// Encode writes r into b (MapRespSize bytes).
func (r MapResp) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], MapMagic)
	binary.LittleEndian.PutUint32(b[4:], r.Status)
	binary.LittleEndian.PutUint64(b[8:], r.Seq)
	binary.LittleEndian.PutUint64(b[16:], r.Base)
	binary.LittleEndian.PutUint64(b[24:], r.Size)
	binary.LittleEndian.PutUint64(b[32:], r.Offs)
}

// DecodeMapResp reads a map reply; anything else is ErrProtocol.
func DecodeMapResp(b []byte) (MapResp, error) {
	if len(b) != MapRespSize || binary.LittleEndian.Uint32(b) != MapMagic {
		return MapResp{}, fmt.Errorf("map reply of %d bytes: %w", len(b), ErrProtocol)
	}
	return MapResp{Status: binary.LittleEndian.Uint32(b[4:]), Seq: binary.LittleEndian.Uint64(b[8:]),
		Base: binary.LittleEndian.Uint64(b[16:]), Size: binary.LittleEndian.Uint64(b[24:]), Offs: binary.LittleEndian.Uint64(b[32:])}, nil
}

// EncodeRevoke writes a revoke of the epochs before ep into b (RevokeSize bytes).
func EncodeRevoke(b []byte, ep uint64) {
	binary.LittleEndian.PutUint32(b[0:], RevokeMagic)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], ep)
}

// DecodeRevoke reads a revoke: the epoch that ended mappings of older ones.
func DecodeRevoke(b []byte) (uint64, error) {
	if len(b) != RevokeSize || binary.LittleEndian.Uint32(b) != RevokeMagic {
		return 0, fmt.Errorf("revoke of %d bytes: %w", len(b), ErrProtocol)
	}
	return binary.LittleEndian.Uint64(b[8:]), nil
}

// ErrBadHandle marks a shm_name or chunk handle that is not a 64-byte handle in hex.
var ErrBadHandle = errors.New("not a 64-byte handle")

// ParseHandle reads a descriptor's shm_name (or a chunk's handle): 64 bytes in hex.
func ParseHandle(shm string) ([64]byte, error) {
	var h [64]byte
	raw, err := hex.DecodeString(shm)
	if err != nil || len(raw) != len(h) {
		return h, fmt.Errorf("shm_name %q: %w", shm, ErrBadHandle)
	}
	copy(h[:], raw)
	return h, nil
}

// The wake message (cma initiator -> owner), WakeSize bytes: the initiator
// wrote a notification into the ring while the owner's application slept
// for one.
//
//	0  magic u32   4 reserved u32
const (
	WakeMagic = 0x776b766b // "kvkw"
	WakeSize  = 8
)

// EncodeWake writes a wake message into b (WakeSize bytes).
func EncodeWake(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], WakeMagic)
	binary.LittleEndian.PutUint32(b[4:], 0)
}

// IsWake reports whether b is a wake message.
func IsWake(b []byte) bool { return len(b) == WakeSize && binary.LittleEndian.Uint32(b) == WakeMagic }
