package coro

import (
	"encoding/hex"
	"fmt"

	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// The types below mirror, field for field and in order, the C++ types
// Mooncake's master and MasterClient exchange (mooncake-store types.h,
// replica.h, allocator.h, rpc_types.h at 3b5a594; specs/mooncake.md §6.5,
// §7). Field order is the wire order; their Go names follow Go style.

// UUID is Mooncake's UUID, std::pair<uint64_t, uint64_t>: a trivially
// copyable pair, so its literal carries its packing and alignment (8, 8).
type UUID struct {
	Hi, Lo uint64
}

// ErrorCode is Mooncake's store error code (int32; specs/mooncake.md §6.6).
type ErrorCode int32

// Mooncake store error codes used by the master's answers.
const (
	CodeOK                  ErrorCode = 0
	CodeInternalError       ErrorCode = -1
	CodeSegmentNotFound     ErrorCode = -101
	CodeSegmentExists       ErrorCode = -102
	CodeClientNotFound      ErrorCode = -103
	CodeNoAvailableHandle   ErrorCode = -200
	CodeInvalidVersion      ErrorCode = -300
	CodeInvalidKey          ErrorCode = -400
	CodeInvalidParams       ErrorCode = -600
	CodeIllegalClient       ErrorCode = -601
	CodeInvalidWrite        ErrorCode = -700
	CodeInvalidRead         ErrorCode = -701
	CodeInvalidReplica      ErrorCode = -702
	CodeReplicaIsNotReady   ErrorCode = -703
	CodeObjectNotFound      ErrorCode = -704
	CodeObjectAlreadyExists ErrorCode = -705
	CodeObjectHasLease      ErrorCode = -706
	CodeLeaseExpired        ErrorCode = -707
	CodeRPCFail             ErrorCode = -900
	CodeNotSupported        ErrorCode = -1012
)

// ReplicaType is Mooncake's ReplicaType (an int enum).
type ReplicaType int32

// Replica types.
const (
	ReplicaMemory    ReplicaType = 0
	ReplicaDisk      ReplicaType = 1
	ReplicaLocalDisk ReplicaType = 2
	ReplicaNoFSSD    ReplicaType = 3
	ReplicaAll       ReplicaType = 4
	ReplicaDFS       ReplicaType = 100
)

// ReplicaStatus is Mooncake's ReplicaStatus (an int enum).
type ReplicaStatus int32

// Replica states.
const (
	StatusUndefined ReplicaStatus = iota
	StatusInitialized
	StatusProcessing
	StatusComplete
	StatusRemoved
	StatusFailed
)

// ClientStatus is Mooncake's ClientStatus (an int enum), the answer to Ping.
type ClientStatus int32

// Client states.
const (
	ClientUndefined   ClientStatus = 0
	ClientOK          ClientStatus = 1
	ClientNeedRemount ClientStatus = 2
)

// SoftPinAction is Mooncake's SoftPinAction (uint8).
type SoftPinAction uint8

// ObjectDataType is Mooncake's ObjectDataType (uint8).
type ObjectDataType uint8

// Segment is Mooncake's Segment: what MountSegment registers.
type Segment struct {
	ID         UUID
	Name       string
	Base       uint64 // uintptr_t
	Size       uint64 // size_t
	TEEndpoint string
	Protocol   string
	HostID     string
}

// BufferDescriptor is AllocatedBuffer::Descriptor: where a memory (or NoF)
// replica lives.
type BufferDescriptor struct {
	Size              uint64
	BufferAddress     uint64
	Protocol          string
	TransportEndpoint string
}

// DiskDescriptor is a disk replica: a file on the master's root_fs_dir.
type DiskDescriptor struct {
	FilePath   string
	ObjectSize uint64
}

// LocalDiskDescriptor is a replica on a client's own SSD.
type LocalDiskDescriptor struct {
	ClientID          UUID
	ObjectSize        uint64
	TransportEndpoint string
}

// DFSDescriptor is DistributedFSDescriptor: a page-offset replica on a
// distributed filesystem.
type DFSDescriptor struct {
	FilePath    string
	Offset      uint64
	ObjectSize  uint64
	AlignedSize uint64
	ShardIdx    int32
}

// DescriptorKind is the index of Replica::Descriptor's variant.
type DescriptorKind uint8

// Descriptor variant alternatives, in the variant's order.
const (
	KindMemory DescriptorKind = iota
	KindNoF
	KindDisk
	KindLocalDisk
	KindDFS
	numKinds
)

// ReplicaDescriptor is Replica::Descriptor: a replica id, one of five
// descriptor kinds (Kind says which field is meaningful), and its status.
type ReplicaDescriptor struct {
	ID        uint64
	Kind      DescriptorKind
	Buffer    BufferDescriptor // KindMemory and KindNoF
	Disk      DiskDescriptor
	LocalDisk LocalDiskDescriptor
	DFS       DFSDescriptor
	Status    ReplicaStatus
}

// ReplicateConfig is Mooncake's ReplicateConfig (specs/mooncake.md §6.5).
type ReplicateConfig struct {
	ReplicaNum            uint64
	NoFReplicaNum         uint64
	DFSReplicaNum         uint64
	SoftPinAction         SoftPinAction
	SoftPinTTLMs          *uint64
	WithHardPin           bool
	PreferredSegments     []string
	PreferredSegment      string
	PreferredNoFSegments  []string
	PreferAllocInSameNode bool
	DataType              ObjectDataType
	HostID                string
	GroupIDs              *[]string
}

// ObjectMeta is what PutEnd commits: the key and an optional checksum.
type ObjectMeta struct {
	Key            string
	ObjectChecksum *uint64
}

// PingResponse answers Ping.
type PingResponse struct {
	ViewVersionID int64
	ClientStatus  ClientStatus
}

// GetReplicaListResponse answers GetReplicaList.
type GetReplicaListResponse struct {
	Replicas       []ReplicaDescriptor
	LeaseTTLMs     uint64
	ObjectChecksum *uint64
}

// GetStorageConfigResponse answers GetStorageConfig.
type GetStorageConfigResponse struct {
	FSDir              string
	EnableDiskEviction bool
	QuotaBytes         uint64
}

func enumI32[T ~int32]() sp.Codec[T] {
	return sp.Define([]byte{sp.IDInt32}, 4,
		func(e *sp.Encoder, v *T) { e.U32(uint32(*v)) },
		func(d *sp.Decoder, v *T) { *v = T(int32(d.U32())) })
}

func enumU8[T ~uint8]() sp.Codec[T] {
	return sp.Define([]byte{sp.IDUint8}, 1,
		func(e *sp.Encoder, v *T) { e.U8(uint8(*v)) },
		func(d *sp.Decoder, v *T) { *v = T(d.U8()) })
}

// Codecs of the Mooncake types.
var (
	UUIDCodec = sp.Define(sp.TrivialStructLit(8, 8, sp.Uint64.Literal(), sp.Uint64.Literal()), 16,
		func(e *sp.Encoder, v *UUID) { e.U64(v.Hi); e.U64(v.Lo) },
		func(d *sp.Decoder, v *UUID) { v.Hi = d.U64(); v.Lo = d.U64() })
	ErrorCodeCodec      = enumI32[ErrorCode]()
	ReplicaTypeCodec    = enumI32[ReplicaType]()
	ReplicaStatusCodec  = enumI32[ReplicaStatus]()
	ClientStatusCodec   = enumI32[ClientStatus]()
	SoftPinActionCodec  = enumU8[SoftPinAction]()
	ObjectDataTypeCodec = enumU8[ObjectDataType]()

	SegmentCodec = sp.Define(sp.StructLit(UUIDCodec.Literal(), sp.String.Literal(), sp.Uint64.Literal(),
		sp.Uint64.Literal(), sp.String.Literal(), sp.String.Literal(), sp.String.Literal()), 16+1+8+8+1+1+1,
		func(e *sp.Encoder, v *Segment) {
			UUIDCodec.Encode(e, &v.ID)
			e.String(v.Name)
			e.U64(v.Base)
			e.U64(v.Size)
			e.String(v.TEEndpoint)
			e.String(v.Protocol)
			e.String(v.HostID)
		},
		func(d *sp.Decoder, v *Segment) {
			UUIDCodec.Decode(d, &v.ID)
			v.Name = d.String()
			v.Base = d.U64()
			v.Size = d.U64()
			v.TEEndpoint = d.String()
			v.Protocol = d.String()
			v.HostID = d.String()
		})

	BufferDescriptorCodec = sp.Define(sp.StructLit(sp.Uint64.Literal(), sp.Uint64.Literal(), sp.String.Literal(), sp.String.Literal()), 8+8+1+1,
		func(e *sp.Encoder, v *BufferDescriptor) {
			e.U64(v.Size)
			e.U64(v.BufferAddress)
			e.String(v.Protocol)
			e.String(v.TransportEndpoint)
		},
		func(d *sp.Decoder, v *BufferDescriptor) {
			v.Size = d.U64()
			v.BufferAddress = d.U64()
			v.Protocol = d.String()
			v.TransportEndpoint = d.String()
		})

	// memoryDescriptorLit and noFDescriptorLit are one-member structs
	// around a BufferDescriptor (MemoryDescriptor, NoFDescriptor).
	memoryDescriptorLit = sp.StructLit(BufferDescriptorCodec.Literal())

	DiskDescriptorCodec = sp.Define(sp.StructLit(sp.String.Literal(), sp.Uint64.Literal()), 9,
		func(e *sp.Encoder, v *DiskDescriptor) { e.String(v.FilePath); e.U64(v.ObjectSize) },
		func(d *sp.Decoder, v *DiskDescriptor) { v.FilePath = d.String(); v.ObjectSize = d.U64() })

	LocalDiskDescriptorCodec = sp.Define(sp.StructLit(UUIDCodec.Literal(), sp.Uint64.Literal(), sp.String.Literal()), 16+8+1,
		func(e *sp.Encoder, v *LocalDiskDescriptor) {
			UUIDCodec.Encode(e, &v.ClientID)
			e.U64(v.ObjectSize)
			e.String(v.TransportEndpoint)
		},
		func(d *sp.Decoder, v *LocalDiskDescriptor) {
			UUIDCodec.Decode(d, &v.ClientID)
			v.ObjectSize = d.U64()
			v.TransportEndpoint = d.String()
		})

	DFSDescriptorCodec = sp.Define(sp.StructLit(sp.String.Literal(), sp.Uint64.Literal(), sp.Uint64.Literal(), sp.Uint64.Literal(), sp.Int32.Literal()), 1+8+8+8+4,
		func(e *sp.Encoder, v *DFSDescriptor) {
			e.String(v.FilePath)
			e.U64(v.Offset)
			e.U64(v.ObjectSize)
			e.U64(v.AlignedSize)
			e.U32(uint32(v.ShardIdx))
		},
		func(d *sp.Decoder, v *DFSDescriptor) {
			v.FilePath = d.String()
			v.Offset = d.U64()
			v.ObjectSize = d.U64()
			v.AlignedSize = d.U64()
			v.ShardIdx = int32(d.U32())
		})

	descriptorVariantLit = sp.VariantLit(memoryDescriptorLit, memoryDescriptorLit,
		DiskDescriptorCodec.Literal(), LocalDiskDescriptorCodec.Literal(), DFSDescriptorCodec.Literal())

	ReplicaDescriptorCodec = sp.Define(sp.StructLit(sp.Uint64.Literal(), descriptorVariantLit, ReplicaStatusCodec.Literal()), 8+1+9+4,
		func(e *sp.Encoder, v *ReplicaDescriptor) {
			e.U64(v.ID)
			e.U8(uint8(v.Kind))
			switch v.Kind {
			case KindMemory, KindNoF:
				BufferDescriptorCodec.Encode(e, &v.Buffer)
			case KindDisk:
				DiskDescriptorCodec.Encode(e, &v.Disk)
			case KindLocalDisk:
				LocalDiskDescriptorCodec.Encode(e, &v.LocalDisk)
			case KindDFS:
				DFSDescriptorCodec.Encode(e, &v.DFS)
			}
			e.U32(uint32(v.Status))
		},
		func(d *sp.Decoder, v *ReplicaDescriptor) {
			v.ID = d.U64()
			k := d.U8()
			if d.Err() == nil && k >= uint8(numKinds) {
				d.Fail("replica descriptor variant index %d", k)
				return
			}
			v.Kind = DescriptorKind(k)
			switch v.Kind {
			case KindMemory, KindNoF:
				BufferDescriptorCodec.Decode(d, &v.Buffer)
			case KindDisk:
				DiskDescriptorCodec.Decode(d, &v.Disk)
			case KindLocalDisk:
				LocalDiskDescriptorCodec.Decode(d, &v.LocalDisk)
			case KindDFS:
				DFSDescriptorCodec.Decode(d, &v.DFS)
			}
			v.Status = ReplicaStatus(int32(d.U32()))
		})

	optU64     = sp.Opt(sp.Uint64)
	vecString  = sp.Vec(sp.String)
	optStrings = sp.Opt(vecString)

	ReplicateConfigCodec = sp.Define(sp.StructLit(sp.Uint64.Literal(), sp.Uint64.Literal(), sp.Uint64.Literal(),
		SoftPinActionCodec.Literal(), optU64.Literal(), sp.Bool.Literal(), vecString.Literal(), sp.String.Literal(),
		vecString.Literal(), sp.Bool.Literal(), ObjectDataTypeCodec.Literal(), sp.String.Literal(), optStrings.Literal()),
		8*3+1+1+1+1+1+1+1+1+1+1,
		func(e *sp.Encoder, v *ReplicateConfig) {
			e.U64(v.ReplicaNum)
			e.U64(v.NoFReplicaNum)
			e.U64(v.DFSReplicaNum)
			e.U8(uint8(v.SoftPinAction))
			optU64.Encode(e, &v.SoftPinTTLMs)
			e.Bool(v.WithHardPin)
			vecString.Encode(e, &v.PreferredSegments)
			e.String(v.PreferredSegment)
			vecString.Encode(e, &v.PreferredNoFSegments)
			e.Bool(v.PreferAllocInSameNode)
			e.U8(uint8(v.DataType))
			e.String(v.HostID)
			optStrings.Encode(e, &v.GroupIDs)
		},
		func(d *sp.Decoder, v *ReplicateConfig) {
			v.ReplicaNum = d.U64()
			v.NoFReplicaNum = d.U64()
			v.DFSReplicaNum = d.U64()
			v.SoftPinAction = SoftPinAction(d.U8())
			optU64.Decode(d, &v.SoftPinTTLMs)
			v.WithHardPin = d.Bool()
			vecString.Decode(d, &v.PreferredSegments)
			v.PreferredSegment = d.String()
			vecString.Decode(d, &v.PreferredNoFSegments)
			v.PreferAllocInSameNode = d.Bool()
			v.DataType = ObjectDataType(d.U8())
			v.HostID = d.String()
			optStrings.Decode(d, &v.GroupIDs)
		})

	ObjectMetaCodec = sp.Define(sp.StructLit(sp.String.Literal(), optU64.Literal()), 2,
		func(e *sp.Encoder, v *ObjectMeta) { e.String(v.Key); optU64.Encode(e, &v.ObjectChecksum) },
		func(d *sp.Decoder, v *ObjectMeta) { v.Key = d.String(); optU64.Decode(d, &v.ObjectChecksum) })

	PingResponseCodec = sp.Define(sp.StructLit(sp.Int64.Literal(), ClientStatusCodec.Literal()), 12,
		func(e *sp.Encoder, v *PingResponse) { e.U64(uint64(v.ViewVersionID)); e.U32(uint32(v.ClientStatus)) },
		func(d *sp.Decoder, v *PingResponse) {
			v.ViewVersionID = int64(d.U64())
			v.ClientStatus = ClientStatus(int32(d.U32()))
		})

	vecReplicas = sp.Vec(ReplicaDescriptorCodec)

	GetReplicaListResponseCodec = sp.Define(sp.StructLit(vecReplicas.Literal(), sp.Uint64.Literal(), optU64.Literal()), 1+8+1,
		func(e *sp.Encoder, v *GetReplicaListResponse) {
			vecReplicas.Encode(e, &v.Replicas)
			e.U64(v.LeaseTTLMs)
			optU64.Encode(e, &v.ObjectChecksum)
		},
		func(d *sp.Decoder, v *GetReplicaListResponse) {
			vecReplicas.Decode(d, &v.Replicas)
			v.LeaseTTLMs = d.U64()
			optU64.Decode(d, &v.ObjectChecksum)
		})

	GetStorageConfigResponseCodec = sp.Define(sp.StructLit(sp.String.Literal(), sp.Bool.Literal(), sp.Uint64.Literal()), 10,
		func(e *sp.Encoder, v *GetStorageConfigResponse) {
			e.String(v.FSDir)
			e.Bool(v.EnableDiskEviction)
			e.U64(v.QuotaBytes)
		},
		func(d *sp.Decoder, v *GetStorageConfigResponse) {
			v.FSDir = d.String()
			v.EnableDiskEviction = d.Bool()
			v.QuotaBytes = d.U64()
		})
)

// String formats u as a textual UUID (8-4-4-4-12 hex digits, Hi's bytes
// then Lo's, big endian): the form kvferry's master keys clients and
// segments by, so a Mooncake client's ids and a kvferry client's share
// one namespace.
func (u UUID) String() string {
	var b [16]byte
	for i := range 8 {
		b[i] = byte(u.Hi >> (56 - 8*i))
		b[8+i] = byte(u.Lo >> (56 - 8*i))
	}
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// ParseUUID is the inverse of UUID.String.
func ParseUUID(s string) (UUID, error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return UUID{}, fmt.Errorf("parse uuid %q: not 8-4-4-4-12 hex digits", s)
	}
	b, err := hex.DecodeString(s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:])
	if err != nil {
		return UUID{}, fmt.Errorf("parse uuid %q: %w", s, err)
	}
	var u UUID
	for i := range 8 {
		u.Hi = u.Hi<<8 | uint64(b[i])
		u.Lo = u.Lo<<8 | uint64(b[8+i])
	}
	return u, nil
}
