package coro

import (
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// StoreVersion is what ServiceReady answers: the store version of the
// Mooncake release these types mirror (3b5a594's MooncakeStore project
// version). MasterClient refuses a master whose answer differs
// (INVALID_VERSION).
const StoreVersion = "2.0.0"

// ServicePrefix qualifies Mooncake's master handler names; a method's
// function id is FuncID(ServicePrefix + name).
const ServicePrefix = "mooncake::WrappedMasterService::"

// Method is one of Mooncake's master RPCs: its handler name and the
// function id a request carries.
type Method struct {
	Name string
	ID   uint32
}

func method(name string) Method { return Method{Name: name, ID: FuncID(ServicePrefix + name)} }

// Master methods MasterClient calls whose bodies this package models.
var (
	MethodServiceReady           = method("ServiceReady")
	MethodPing                   = method("Ping")
	MethodMountSegment           = method("MountSegment")
	MethodReMountSegment         = method("ReMountSegment")
	MethodUnmountSegment         = method("UnmountSegment")
	MethodGracefulUnmountSegment = method("GracefulUnmountSegment")
	MethodExistKey               = method("ExistKey")
	MethodBatchExistKey          = method("BatchExistKey")
	MethodGetReplicaList         = method("GetReplicaList")
	MethodBatchGetReplicaList    = method("BatchGetReplicaList")
	MethodPutStart               = method("PutStart")
	MethodPutEnd                 = method("PutEnd")
	MethodPutRevoke              = method("PutRevoke")
	MethodBatchPutStart          = method("BatchPutStart")
	MethodBatchPutEnd            = method("BatchPutEnd")
	MethodBatchPutRevoke         = method("BatchPutRevoke")
	MethodUpsertStart            = method("UpsertStart")
	MethodUpsertEnd              = method("UpsertEnd")
	MethodUpsertRevoke           = method("UpsertRevoke")
	MethodBatchUpsertStart       = method("BatchUpsertStart")
	MethodBatchUpsertEnd         = method("BatchUpsertEnd")
	MethodBatchUpsertRevoke      = method("BatchUpsertRevoke")
	MethodRemove                 = method("Remove")
	MethodRemoveByRegex          = method("RemoveByRegex")
	MethodRemoveAll              = method("RemoveAll")
	MethodBatchRemove            = method("BatchRemove")
	MethodGetReplicaListByRegex  = method("GetReplicaListByRegex")
	MethodGetFsdir               = method("GetFsdir")
	MethodGetStorageConfig       = method("GetStorageConfig")
)

// Methods lists the modelled methods.
var Methods = []Method{
	MethodServiceReady, MethodPing, MethodMountSegment, MethodReMountSegment, MethodUnmountSegment,
	MethodGracefulUnmountSegment, MethodExistKey, MethodBatchExistKey, MethodGetReplicaList,
	MethodBatchGetReplicaList, MethodPutStart, MethodPutEnd, MethodPutRevoke, MethodBatchPutStart,
	MethodBatchPutEnd, MethodBatchPutRevoke, MethodUpsertStart, MethodUpsertEnd, MethodUpsertRevoke,
	MethodBatchUpsertStart, MethodBatchUpsertEnd, MethodBatchUpsertRevoke, MethodRemove,
	MethodRemoveByRegex, MethodRemoveAll, MethodBatchRemove, MethodGetReplicaListByRegex, MethodGetFsdir,
	MethodGetStorageConfig, MethodFetchTasks, MethodMarkTaskToComplete,
	MethodQuerySegmentStatus, MethodQuerySegmentStatusByID, MethodBatchQueryIP,
}

// MethodByID returns the modelled method with the function id.
func MethodByID(id uint32) (Method, bool) {
	for _, m := range Methods {
		if m.ID == id {
			return m, true
		}
	}
	return Method{}, false
}

// Argument tuples. A method with several parameters sends them as one
// tuple (a struct literal of the parameter types); a method with one
// parameter sends that value alone (Ping sends a bare UUID); a method
// with none sends an empty body. Every parameter is sent, defaulted ones
// (tenant_id "default") included.

// KeyArgs are ExistKey's, GetReplicaList's and GetReplicaListByRegex's
// (key or regex, tenant_id).
type KeyArgs struct {
	Key      string
	TenantID string
}

// KeysArgs are BatchExistKey's and BatchGetReplicaList's.
type KeysArgs struct {
	Keys     []string
	TenantID string
}

// PutStartArgs are PutStart's and UpsertStart's.
type PutStartArgs struct {
	ClientID    UUID
	Key         string
	SliceLength uint64
	Config      ReplicateConfig
	TenantID    string
}

// BatchPutStartArgs are BatchPutStart's and BatchUpsertStart's.
type BatchPutStartArgs struct {
	ClientID     UUID
	Keys         []string
	SliceLengths []uint64
	Config       ReplicateConfig
	TenantID     string
}

// PutEndArgs are PutEnd's and UpsertEnd's.
type PutEndArgs struct {
	ClientID    UUID
	Meta        ObjectMeta
	ReplicaType ReplicaType
	TenantID    string
}

// BatchPutEndArgs are BatchPutEnd's.
type BatchPutEndArgs struct {
	ClientID    UUID
	Metas       []ObjectMeta
	ReplicaType ReplicaType
	TenantID    string
}

// BatchUpsertEndArgs are BatchUpsertEnd's (no replica type).
type BatchUpsertEndArgs struct {
	ClientID UUID
	Metas    []ObjectMeta
	TenantID string
}

// PutRevokeArgs are PutRevoke's and UpsertRevoke's.
type PutRevokeArgs struct {
	ClientID    UUID
	Key         string
	ReplicaType ReplicaType
	TenantID    string
}

// BatchPutRevokeArgs are BatchPutRevoke's.
type BatchPutRevokeArgs struct {
	ClientID    UUID
	Keys        []string
	ReplicaType ReplicaType
	TenantID    string
}

// BatchUpsertRevokeArgs are BatchUpsertRevoke's (no replica type).
type BatchUpsertRevokeArgs struct {
	ClientID UUID
	Keys     []string
	TenantID string
}

// RemoveArgs are Remove's and RemoveByRegex's.
type RemoveArgs struct {
	Key      string
	Force    bool
	TenantID string
}

// RemoveAllArgs are RemoveAll's.
type RemoveAllArgs struct {
	Force    bool
	TenantID string
}

// BatchRemoveArgs are BatchRemove's.
type BatchRemoveArgs struct {
	Keys     []string
	Force    bool
	TenantID string
}

// MountSegmentArgs are MountSegment's.
type MountSegmentArgs struct {
	Segment  Segment
	ClientID UUID
}

// ReMountSegmentArgs are ReMountSegment's.
type ReMountSegmentArgs struct {
	Segments []Segment
	ClientID UUID
}

// UnmountSegmentArgs are UnmountSegment's.
type UnmountSegmentArgs struct {
	SegmentID UUID
	ClientID  UUID
}

// GracefulUnmountSegmentArgs are GracefulUnmountSegment's.
type GracefulUnmountSegmentArgs struct {
	SegmentID     UUID
	ClientID      UUID
	GracePeriodMs uint64
}

var (
	lString   = sp.String.Literal()
	lUUID     = UUIDCodec.Literal()
	lStrings  = vecString.Literal()
	vecU64    = sp.Vec(sp.Uint64)
	vecMetas  = sp.Vec(ObjectMetaCodec)
	vecSegs   = sp.Vec(SegmentCodec)
	lRepType  = ReplicaTypeCodec.Literal()
	lBool     = sp.Bool.Literal()
	lRepCfg   = ReplicateConfigCodec.Literal()
	lObjMeta  = ObjectMetaCodec.Literal()
	minRepCfg = ReplicateConfigCodec.MinBytes()
)

// Argument codecs.
var (
	KeyArgsCodec = sp.Define(sp.StructLit(lString, lString), 2,
		func(e *sp.Encoder, v *KeyArgs) { e.String(v.Key); e.String(v.TenantID) },
		func(d *sp.Decoder, v *KeyArgs) { v.Key = d.String(); v.TenantID = d.String() })

	KeysArgsCodec = sp.Define(sp.StructLit(lStrings, lString), 2,
		func(e *sp.Encoder, v *KeysArgs) { vecString.Encode(e, &v.Keys); e.String(v.TenantID) },
		func(d *sp.Decoder, v *KeysArgs) { vecString.Decode(d, &v.Keys); v.TenantID = d.String() })

	PutStartArgsCodec = sp.Define(sp.StructLit(lUUID, lString, sp.Uint64.Literal(), lRepCfg, lString), 16+1+8+minRepCfg+1,
		func(e *sp.Encoder, v *PutStartArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			e.String(v.Key)
			e.U64(v.SliceLength)
			ReplicateConfigCodec.Encode(e, &v.Config)
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *PutStartArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			v.Key = d.String()
			v.SliceLength = d.U64()
			ReplicateConfigCodec.Decode(d, &v.Config)
			v.TenantID = d.String()
		})

	BatchPutStartArgsCodec = sp.Define(sp.StructLit(lUUID, lStrings, vecU64.Literal(), lRepCfg, lString), 16+1+1+minRepCfg+1,
		func(e *sp.Encoder, v *BatchPutStartArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecString.Encode(e, &v.Keys)
			vecU64.Encode(e, &v.SliceLengths)
			ReplicateConfigCodec.Encode(e, &v.Config)
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *BatchPutStartArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecString.Decode(d, &v.Keys)
			vecU64.Decode(d, &v.SliceLengths)
			ReplicateConfigCodec.Decode(d, &v.Config)
			v.TenantID = d.String()
		})

	PutEndArgsCodec = sp.Define(sp.StructLit(lUUID, lObjMeta, lRepType, lString), 16+2+4+1,
		func(e *sp.Encoder, v *PutEndArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			ObjectMetaCodec.Encode(e, &v.Meta)
			e.U32(uint32(v.ReplicaType))
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *PutEndArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			ObjectMetaCodec.Decode(d, &v.Meta)
			v.ReplicaType = ReplicaType(int32(d.U32()))
			v.TenantID = d.String()
		})

	BatchPutEndArgsCodec = sp.Define(sp.StructLit(lUUID, vecMetas.Literal(), lRepType, lString), 16+1+4+1,
		func(e *sp.Encoder, v *BatchPutEndArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecMetas.Encode(e, &v.Metas)
			e.U32(uint32(v.ReplicaType))
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *BatchPutEndArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecMetas.Decode(d, &v.Metas)
			v.ReplicaType = ReplicaType(int32(d.U32()))
			v.TenantID = d.String()
		})

	BatchUpsertEndArgsCodec = sp.Define(sp.StructLit(lUUID, vecMetas.Literal(), lString), 16+1+1,
		func(e *sp.Encoder, v *BatchUpsertEndArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecMetas.Encode(e, &v.Metas)
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *BatchUpsertEndArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecMetas.Decode(d, &v.Metas)
			v.TenantID = d.String()
		})

	PutRevokeArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lRepType, lString), 16+1+4+1,
		func(e *sp.Encoder, v *PutRevokeArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			e.String(v.Key)
			e.U32(uint32(v.ReplicaType))
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *PutRevokeArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			v.Key = d.String()
			v.ReplicaType = ReplicaType(int32(d.U32()))
			v.TenantID = d.String()
		})

	BatchPutRevokeArgsCodec = sp.Define(sp.StructLit(lUUID, lStrings, lRepType, lString), 16+1+4+1,
		func(e *sp.Encoder, v *BatchPutRevokeArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecString.Encode(e, &v.Keys)
			e.U32(uint32(v.ReplicaType))
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *BatchPutRevokeArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecString.Decode(d, &v.Keys)
			v.ReplicaType = ReplicaType(int32(d.U32()))
			v.TenantID = d.String()
		})

	BatchUpsertRevokeArgsCodec = sp.Define(sp.StructLit(lUUID, lStrings, lString), 16+1+1,
		func(e *sp.Encoder, v *BatchUpsertRevokeArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecString.Encode(e, &v.Keys)
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *BatchUpsertRevokeArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecString.Decode(d, &v.Keys)
			v.TenantID = d.String()
		})

	RemoveArgsCodec = sp.Define(sp.StructLit(lString, lBool, lString), 3,
		func(e *sp.Encoder, v *RemoveArgs) { e.String(v.Key); e.Bool(v.Force); e.String(v.TenantID) },
		func(d *sp.Decoder, v *RemoveArgs) { v.Key = d.String(); v.Force = d.Bool(); v.TenantID = d.String() })

	RemoveAllArgsCodec = sp.Define(sp.StructLit(lBool, lString), 2,
		func(e *sp.Encoder, v *RemoveAllArgs) { e.Bool(v.Force); e.String(v.TenantID) },
		func(d *sp.Decoder, v *RemoveAllArgs) { v.Force = d.Bool(); v.TenantID = d.String() })

	BatchRemoveArgsCodec = sp.Define(sp.StructLit(lStrings, lBool, lString), 3,
		func(e *sp.Encoder, v *BatchRemoveArgs) {
			vecString.Encode(e, &v.Keys)
			e.Bool(v.Force)
			e.String(v.TenantID)
		},
		func(d *sp.Decoder, v *BatchRemoveArgs) {
			vecString.Decode(d, &v.Keys)
			v.Force = d.Bool()
			v.TenantID = d.String()
		})

	MountSegmentArgsCodec = sp.Define(sp.StructLit(SegmentCodec.Literal(), lUUID), SegmentCodec.MinBytes()+16,
		func(e *sp.Encoder, v *MountSegmentArgs) {
			SegmentCodec.Encode(e, &v.Segment)
			UUIDCodec.Encode(e, &v.ClientID)
		},
		func(d *sp.Decoder, v *MountSegmentArgs) {
			SegmentCodec.Decode(d, &v.Segment)
			UUIDCodec.Decode(d, &v.ClientID)
		})

	ReMountSegmentArgsCodec = sp.Define(sp.StructLit(vecSegs.Literal(), lUUID), 1+16,
		func(e *sp.Encoder, v *ReMountSegmentArgs) {
			vecSegs.Encode(e, &v.Segments)
			UUIDCodec.Encode(e, &v.ClientID)
		},
		func(d *sp.Decoder, v *ReMountSegmentArgs) {
			vecSegs.Decode(d, &v.Segments)
			UUIDCodec.Decode(d, &v.ClientID)
		})

	UnmountSegmentArgsCodec = sp.Define(sp.StructLit(lUUID, lUUID), 32,
		func(e *sp.Encoder, v *UnmountSegmentArgs) {
			UUIDCodec.Encode(e, &v.SegmentID)
			UUIDCodec.Encode(e, &v.ClientID)
		},
		func(d *sp.Decoder, v *UnmountSegmentArgs) {
			UUIDCodec.Decode(d, &v.SegmentID)
			UUIDCodec.Decode(d, &v.ClientID)
		})

	GracefulUnmountSegmentArgsCodec = sp.Define(sp.StructLit(lUUID, lUUID, sp.Uint64.Literal()), 40,
		func(e *sp.Encoder, v *GracefulUnmountSegmentArgs) {
			UUIDCodec.Encode(e, &v.SegmentID)
			UUIDCodec.Encode(e, &v.ClientID)
			e.U64(v.GracePeriodMs)
		},
		func(d *sp.Decoder, v *GracefulUnmountSegmentArgs) {
			UUIDCodec.Decode(d, &v.SegmentID)
			UUIDCodec.Decode(d, &v.ClientID)
			v.GracePeriodMs = d.U64()
		})
)

// Answer types and codecs: tl::expected<T, ErrorCode>, and vectors of them
// for the batch methods.
type (
	// ExpVoid answers PutEnd, PutRevoke, Remove, the segment calls.
	ExpVoid = sp.Expected[struct{}, ErrorCode]
	// ExpBool answers ExistKey.
	ExpBool = sp.Expected[bool, ErrorCode]
	// ExpString answers ServiceReady (the store version) and GetFsdir.
	ExpString = sp.Expected[string, ErrorCode]
	// ExpInt64 answers RemoveByRegex (the count removed).
	ExpInt64 = sp.Expected[int64, ErrorCode]
	// ExpPing answers Ping.
	ExpPing = sp.Expected[PingResponse, ErrorCode]
	// ExpDescriptors answers PutStart and UpsertStart.
	ExpDescriptors = sp.Expected[[]ReplicaDescriptor, ErrorCode]
	// ExpReplicaList answers GetReplicaList.
	ExpReplicaList = sp.Expected[GetReplicaListResponse, ErrorCode]
	// ExpRegexReplicas answers GetReplicaListByRegex: each matching key
	// with its replicas (an unordered_map on the wire).
	ExpRegexReplicas = sp.Expected[[]sp.KV[string, []ReplicaDescriptor], ErrorCode]
	// ExpStorageConfig answers GetStorageConfig.
	ExpStorageConfig = sp.Expected[GetStorageConfigResponse, ErrorCode]
)

// Answer codecs. RemoveAll answers a bare long (Int64), not an expected.
var (
	ExpVoidCodec          = sp.ExpectedOf(sp.Void, ErrorCodeCodec)
	ExpBoolCodec          = sp.ExpectedOf(sp.Bool, ErrorCodeCodec)
	ExpStringCodec        = sp.ExpectedOf(sp.String, ErrorCodeCodec)
	ExpInt64Codec         = sp.ExpectedOf(sp.Int64, ErrorCodeCodec)
	ExpPingCodec          = sp.ExpectedOf(PingResponseCodec, ErrorCodeCodec)
	ExpDescriptorsCodec   = sp.ExpectedOf(vecReplicas, ErrorCodeCodec)
	ExpReplicaListCodec   = sp.ExpectedOf(GetReplicaListResponseCodec, ErrorCodeCodec)
	ExpStorageConfigCodec = sp.ExpectedOf(GetStorageConfigResponseCodec, ErrorCodeCodec)
	ExpRegexReplicasCodec = sp.ExpectedOf(sp.MapOf(sp.String, vecReplicas), ErrorCodeCodec)

	BatchVoidCodec        = sp.Vec(ExpVoidCodec)
	BatchBoolCodec        = sp.Vec(ExpBoolCodec)
	BatchDescriptorsCodec = sp.Vec(ExpDescriptorsCodec)
	BatchReplicaListCodec = sp.Vec(ExpReplicaListCodec)
)

// OK returns a successful expected holding v.
func OK[T any](v T) sp.Expected[T, ErrorCode] { return sp.Expected[T, ErrorCode]{OK: true, Value: v} }

// Fail returns a failed expected carrying code.
func Fail[T any](code ErrorCode) sp.Expected[T, ErrorCode] {
	return sp.Expected[T, ErrorCode]{Err: code}
}
