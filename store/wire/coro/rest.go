package coro

import (
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// The rest of the handlers mooncake_master 3b5a594 registers: replica
// clear, copy and move (user tasks and the client-driven copies), the SSD
// offload and promotion RPCs, disk-replica eviction and NVMe-oF segments.
// Argument tuples follow the server's handler signatures.

// Error codes of these methods.
const (
	// CodeUnavailableInCurrentMode is UNAVAILABLE_IN_CURRENT_MODE: what a
	// master built without NVMe-oF answers the NoF segment RPCs.
	CodeUnavailableInCurrentMode ErrorCode = -1011
	// CodeUnableOffload is UNABLE_OFFLOAD: what a master without
	// --enable_offload answers MountLocalDiskSegment.
	CodeUnableOffload ErrorCode = -1300
	// CodeReplicaNotFound is REPLICA_NOT_FOUND.
	CodeReplicaNotFound ErrorCode = -710
)

// Methods of this file.
var (
	MethodBatchReplicaClear        = method("BatchReplicaClear")
	MethodCreateCopyTask           = method("CreateCopyTask")
	MethodCreateMoveTask           = method("CreateMoveTask")
	MethodQueryTask                = method("QueryTask")
	MethodCopyStart                = method("CopyStart")
	MethodCopyEnd                  = method("CopyEnd")
	MethodCopyRevoke               = method("CopyRevoke")
	MethodDynamicReplicaCopyStart  = method("DynamicReplicaCopyStart")
	MethodDynamicReplicaCopyEnd    = method("DynamicReplicaCopyEnd")
	MethodDynamicReplicaCopyRevoke = method("DynamicReplicaCopyRevoke")
	MethodMoveStart                = method("MoveStart")
	MethodMoveEnd                  = method("MoveEnd")
	MethodMoveRevoke               = method("MoveRevoke")
	MethodMountLocalDiskSegment    = method("MountLocalDiskSegment")
	MethodUnmountLocalDiskSegment  = method("UnmountLocalDiskSegment")
	MethodOffloadObjectHeartbeat   = method("OffloadObjectHeartbeat")
	MethodPollRemoveAll            = method("PollRemoveAll")
	MethodReportSsdCapacity        = method("ReportSsdCapacity")
	MethodNotifyOffloadSuccess     = method("NotifyOffloadSuccess")
	MethodPromotionObjectHeartbeat = method("PromotionObjectHeartbeat")
	MethodPromotionAllocStart      = method("PromotionAllocStart")
	MethodNotifyPromotionSuccess   = method("NotifyPromotionSuccess")
	MethodNotifyPromotionFailure   = method("NotifyPromotionFailure")
	MethodEvictDiskReplica         = method("EvictDiskReplica")
	MethodBatchEvictDiskReplica    = method("BatchEvictDiskReplica")
	MethodMountNoFSegment          = method("MountNoFSegment")
	MethodReMountNoFSegment        = method("ReMountNoFSegment")
	MethodUnmountNoFSegment        = method("UnmountNoFSegment")
	MethodGetAllNoFSegments        = method("GetAllNoFSegments")
	MethodGetNoFSegmentsByName     = method("GetNoFSegmentsByName")
)

func init() {
	Methods = append(Methods, MethodBatchReplicaClear, MethodCreateCopyTask, MethodCreateMoveTask, MethodQueryTask,
		MethodCopyStart, MethodCopyEnd, MethodCopyRevoke, MethodDynamicReplicaCopyStart, MethodDynamicReplicaCopyEnd,
		MethodDynamicReplicaCopyRevoke, MethodMoveStart, MethodMoveEnd, MethodMoveRevoke,
		MethodMountLocalDiskSegment, MethodUnmountLocalDiskSegment, MethodOffloadObjectHeartbeat,
		MethodPollRemoveAll, MethodReportSsdCapacity, MethodNotifyOffloadSuccess,
		MethodPromotionObjectHeartbeat, MethodPromotionAllocStart, MethodNotifyPromotionSuccess,
		MethodNotifyPromotionFailure, MethodEvictDiskReplica, MethodBatchEvictDiskReplica,
		MethodMountNoFSegment, MethodReMountNoFSegment, MethodUnmountNoFSegment, MethodGetAllNoFSegments,
		MethodGetNoFSegmentsByName)
}

// ReplicaClearArgs are BatchReplicaClear's (object_keys, client_id,
// segment_name; an empty segment name clears whole objects).
type ReplicaClearArgs struct {
	Keys        []string
	ClientID    UUID
	SegmentName string
}

// CreateCopyTaskArgs are CreateCopyTask's.
type CreateCopyTaskArgs struct {
	Key      string
	TenantID string
	Targets  []string
}

// CreateMoveTaskArgs are CreateMoveTask's.
type CreateMoveTaskArgs struct {
	Key      string
	TenantID string
	Source   string
	Target   string
}

// QueryTaskResponse answers QueryTask.
type QueryTaskResponse struct {
	ID                   UUID
	Type                 TaskType
	Status               TaskStatus
	CreatedAtMsEpoch     int64
	LastUpdatedAtMsEpoch int64
	AssignedClient       UUID
	Message              string
}

// CopyStartArgs are CopyStart's (client_id, key, tenant_id, src_segment,
// tgt_segments).
type CopyStartArgs struct {
	ClientID UUID
	Key      string
	TenantID string
	Source   string
	Targets  []string
}

// DynamicCopyStartArgs are DynamicReplicaCopyStart's: CopyStart's and the
// dynamic replication lease id and version epoch.
type DynamicCopyStartArgs struct {
	CopyStartArgs
	LeaseID UUID
	Epoch   uint64
}

// ClientKeyArgs are (client_id, key, tenant_id): CopyEnd's, CopyRevoke's,
// MoveEnd's, MoveRevoke's, NotifyPromotionSuccess's and
// NotifyPromotionFailure's.
type ClientKeyArgs struct {
	ClientID UUID
	Key      string
	TenantID string
}

// DynamicCopyEndArgs are DynamicReplicaCopyEnd's and
// DynamicReplicaCopyRevoke's.
type DynamicCopyEndArgs struct {
	ClientKeyArgs
	LeaseID UUID
	Epoch   uint64
}

// MoveStartArgs are MoveStart's.
type MoveStartArgs struct {
	ClientID UUID
	Key      string
	TenantID string
	Source   string
	Target   string
}

// ClientFlagArgs are (client_id, enable_offloading):
// MountLocalDiskSegment's and OffloadObjectHeartbeat's.
type ClientFlagArgs struct {
	ClientID UUID
	Enable   bool
}

// ReportSsdCapacityArgs are ReportSsdCapacity's.
type ReportSsdCapacityArgs struct {
	ClientID   UUID
	TotalBytes int64
}

// OffloadTaskItem is an object the master asks a client to write to its
// SSD (also PromotionTaskItem, the same members).
type OffloadTaskItem struct {
	TenantID string
	Key      string
	Size     int64
}

// StorageObjectMetadata is where a client's SSD holds an offloaded object.
type StorageObjectMetadata struct {
	BucketID          int64
	Offset            int64
	KeySize           int64
	DataSize          int64
	TransportEndpoint string
}

// NotifyOffloadSuccessArgs are NotifyOffloadSuccess's.
type NotifyOffloadSuccessArgs struct {
	ClientID  UUID
	Tasks     []OffloadTaskItem
	Metadatas []StorageObjectMetadata
}

// PromotionAllocStartArgs are PromotionAllocStart's.
type PromotionAllocStartArgs struct {
	ClientID          UUID
	Key               string
	TenantID          string
	Size              uint64
	PreferredSegments []string
}

// EvictDiskReplicaArgs are EvictDiskReplica's.
type EvictDiskReplicaArgs struct {
	ClientID    UUID
	Key         string
	TenantID    string
	ReplicaType ReplicaType
}

// BatchEvictDiskReplicaArgs are BatchEvictDiskReplica's.
type BatchEvictDiskReplicaArgs struct {
	ClientID    UUID
	Keys        []string
	TenantID    string
	ReplicaType ReplicaType
}

// NoFSegment is an NVMe-oF SSD region a client offers.
type NoFSegment struct {
	ID         UUID
	Name       string
	Base       uint64
	Size       uint64
	TEEndpoint string
}

// NoFSegmentOwnerInfo is one segment GetNoFSegmentsByName finds.
type NoFSegmentOwnerInfo struct {
	SegmentID UUID
	ClientID  UUID
}

// MountNoFSegmentArgs are MountNoFSegment's.
type MountNoFSegmentArgs struct {
	Segment  NoFSegment
	ClientID UUID
}

// ReMountNoFSegmentArgs are ReMountNoFSegment's.
type ReMountNoFSegmentArgs struct {
	Segments []NoFSegment
	ClientID UUID
}

// Answers of this file.
type (
	// ExpStrings answers BatchReplicaClear (the keys cleared).
	ExpStrings = sp.Expected[[]string, ErrorCode]
	// ExpUUID answers CreateCopyTask and CreateMoveTask (the task id).
	ExpUUID = sp.Expected[UUID, ErrorCode]
	// ExpQueryTask answers QueryTask.
	ExpQueryTask = sp.Expected[QueryTaskResponse, ErrorCode]
	// ExpCopyStart answers CopyStart and DynamicReplicaCopyStart.
	ExpCopyStart = sp.Expected[CopyStartResponse, ErrorCode]
	// ExpMoveStart answers MoveStart.
	ExpMoveStart = sp.Expected[MoveStartResponse, ErrorCode]
	// ExpOffloadTasks answers OffloadObjectHeartbeat and
	// PromotionObjectHeartbeat.
	ExpOffloadTasks = sp.Expected[[]OffloadTaskItem, ErrorCode]
	// ExpPromotionAlloc answers PromotionAllocStart (the staged memory
	// replica).
	ExpPromotionAlloc = sp.Expected[ReplicaDescriptor, ErrorCode]
	// ExpNoFSegments answers GetAllNoFSegments.
	ExpNoFSegments = sp.Expected[[]NoFSegment, ErrorCode]
	// ExpNoFOwners answers GetNoFSegmentsByName.
	ExpNoFOwners = sp.Expected[[]NoFSegmentOwnerInfo, ErrorCode]
)

// CopyStartResponse is the source replica and the target replicas a copy
// writes.
type CopyStartResponse struct {
	Source  ReplicaDescriptor
	Targets []ReplicaDescriptor
}

// MoveStartResponse is the source replica and the target a move writes
// (nil: the target holds one already).
type MoveStartResponse struct {
	Source ReplicaDescriptor
	Target *ReplicaDescriptor
}

var (
	lU64    = sp.Uint64.Literal()
	lI64    = sp.Int64.Literal()
	optRepl = sp.Opt(ReplicaDescriptorCodec)
	minRepl = ReplicaDescriptorCodec.MinBytes()
)

// Codecs of this file.
var (
	ReplicaClearArgsCodec = sp.Define(sp.StructLit(lStrings, lUUID, lString), 1+16+1,
		func(e *sp.Encoder, v *ReplicaClearArgs) {
			vecString.Encode(e, &v.Keys)
			UUIDCodec.Encode(e, &v.ClientID)
			e.String(v.SegmentName)
		},
		func(d *sp.Decoder, v *ReplicaClearArgs) {
			vecString.Decode(d, &v.Keys)
			UUIDCodec.Decode(d, &v.ClientID)
			v.SegmentName = d.String()
		})

	CreateCopyTaskArgsCodec = sp.Define(sp.StructLit(lString, lString, lStrings), 3,
		func(e *sp.Encoder, v *CreateCopyTaskArgs) {
			e.String(v.Key)
			e.String(v.TenantID)
			vecString.Encode(e, &v.Targets)
		},
		func(d *sp.Decoder, v *CreateCopyTaskArgs) {
			v.Key = d.String()
			v.TenantID = d.String()
			vecString.Decode(d, &v.Targets)
		})

	CreateMoveTaskArgsCodec = sp.Define(sp.StructLit(lString, lString, lString, lString), 4,
		func(e *sp.Encoder, v *CreateMoveTaskArgs) {
			e.String(v.Key)
			e.String(v.TenantID)
			e.String(v.Source)
			e.String(v.Target)
		},
		func(d *sp.Decoder, v *CreateMoveTaskArgs) {
			v.Key = d.String()
			v.TenantID = d.String()
			v.Source = d.String()
			v.Target = d.String()
		})

	QueryTaskResponseCodec = sp.Define(sp.StructLit(lUUID, TaskTypeCodec.Literal(), TaskStatusCodec.Literal(), lI64, lI64, lUUID, lString),
		16+4+4+8+8+16+1,
		func(e *sp.Encoder, v *QueryTaskResponse) {
			UUIDCodec.Encode(e, &v.ID)
			e.U32(uint32(v.Type))
			e.U32(uint32(v.Status))
			e.U64(uint64(v.CreatedAtMsEpoch))
			e.U64(uint64(v.LastUpdatedAtMsEpoch))
			UUIDCodec.Encode(e, &v.AssignedClient)
			e.String(v.Message)
		},
		func(d *sp.Decoder, v *QueryTaskResponse) {
			UUIDCodec.Decode(d, &v.ID)
			v.Type = TaskType(int32(d.U32()))
			v.Status = TaskStatus(int32(d.U32()))
			v.CreatedAtMsEpoch = int64(d.U64())
			v.LastUpdatedAtMsEpoch = int64(d.U64())
			UUIDCodec.Decode(d, &v.AssignedClient)
			v.Message = d.String()
		})

	CopyStartArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString, lString, lStrings), 16+4,
		encCopyStart, decCopyStart)

	DynamicCopyStartArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString, lString, lStrings, lUUID, lU64), 16+4+16+8,
		func(e *sp.Encoder, v *DynamicCopyStartArgs) {
			encCopyStart(e, &v.CopyStartArgs)
			UUIDCodec.Encode(e, &v.LeaseID)
			e.U64(v.Epoch)
		},
		func(d *sp.Decoder, v *DynamicCopyStartArgs) {
			decCopyStart(d, &v.CopyStartArgs)
			UUIDCodec.Decode(d, &v.LeaseID)
			v.Epoch = d.U64()
		})

	ClientKeyArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString), 16+2, encClientKey, decClientKey)

	DynamicCopyEndArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString, lUUID, lU64), 16+2+16+8,
		func(e *sp.Encoder, v *DynamicCopyEndArgs) {
			encClientKey(e, &v.ClientKeyArgs)
			UUIDCodec.Encode(e, &v.LeaseID)
			e.U64(v.Epoch)
		},
		func(d *sp.Decoder, v *DynamicCopyEndArgs) {
			decClientKey(d, &v.ClientKeyArgs)
			UUIDCodec.Decode(d, &v.LeaseID)
			v.Epoch = d.U64()
		})

	MoveStartArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString, lString, lString), 16+4,
		func(e *sp.Encoder, v *MoveStartArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			e.String(v.Key)
			e.String(v.TenantID)
			e.String(v.Source)
			e.String(v.Target)
		},
		func(d *sp.Decoder, v *MoveStartArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			v.Key = d.String()
			v.TenantID = d.String()
			v.Source = d.String()
			v.Target = d.String()
		})

	ClientFlagArgsCodec = sp.Define(sp.StructLit(lUUID, lBool), 17,
		func(e *sp.Encoder, v *ClientFlagArgs) { UUIDCodec.Encode(e, &v.ClientID); e.Bool(v.Enable) },
		func(d *sp.Decoder, v *ClientFlagArgs) { UUIDCodec.Decode(d, &v.ClientID); v.Enable = d.Bool() })

	ReportSsdCapacityArgsCodec = sp.Define(sp.StructLit(lUUID, lI64), 24,
		func(e *sp.Encoder, v *ReportSsdCapacityArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			e.U64(uint64(v.TotalBytes))
		},
		func(d *sp.Decoder, v *ReportSsdCapacityArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			v.TotalBytes = int64(d.U64())
		})

	OffloadTaskItemCodec = sp.Define(sp.StructLit(lString, lString, lI64), 10,
		func(e *sp.Encoder, v *OffloadTaskItem) { e.String(v.TenantID); e.String(v.Key); e.U64(uint64(v.Size)) },
		func(d *sp.Decoder, v *OffloadTaskItem) {
			v.TenantID = d.String()
			v.Key = d.String()
			v.Size = int64(d.U64())
		})

	StorageObjectMetadataCodec = sp.Define(sp.StructLit(lI64, lI64, lI64, lI64, lString), 33,
		func(e *sp.Encoder, v *StorageObjectMetadata) {
			e.U64(uint64(v.BucketID))
			e.U64(uint64(v.Offset))
			e.U64(uint64(v.KeySize))
			e.U64(uint64(v.DataSize))
			e.String(v.TransportEndpoint)
		},
		func(d *sp.Decoder, v *StorageObjectMetadata) {
			v.BucketID = int64(d.U64())
			v.Offset = int64(d.U64())
			v.KeySize = int64(d.U64())
			v.DataSize = int64(d.U64())
			v.TransportEndpoint = d.String()
		})

	vecOffload  = sp.Vec(OffloadTaskItemCodec)
	vecStorMeta = sp.Vec(StorageObjectMetadataCodec)

	NotifyOffloadSuccessArgsCodec = sp.Define(sp.StructLit(lUUID, vecOffload.Literal(), vecStorMeta.Literal()), 18,
		func(e *sp.Encoder, v *NotifyOffloadSuccessArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecOffload.Encode(e, &v.Tasks)
			vecStorMeta.Encode(e, &v.Metadatas)
		},
		func(d *sp.Decoder, v *NotifyOffloadSuccessArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecOffload.Decode(d, &v.Tasks)
			vecStorMeta.Decode(d, &v.Metadatas)
		})

	PromotionAllocStartArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString, lU64, lStrings), 16+2+8+1,
		func(e *sp.Encoder, v *PromotionAllocStartArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			e.String(v.Key)
			e.String(v.TenantID)
			e.U64(v.Size)
			vecString.Encode(e, &v.PreferredSegments)
		},
		func(d *sp.Decoder, v *PromotionAllocStartArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			v.Key = d.String()
			v.TenantID = d.String()
			v.Size = d.U64()
			vecString.Decode(d, &v.PreferredSegments)
		})

	EvictDiskReplicaArgsCodec = sp.Define(sp.StructLit(lUUID, lString, lString, lRepType), 16+2+4,
		func(e *sp.Encoder, v *EvictDiskReplicaArgs) {
			encClientKey(e, &ClientKeyArgs{ClientID: v.ClientID, Key: v.Key, TenantID: v.TenantID})
			e.U32(uint32(v.ReplicaType))
		},
		func(d *sp.Decoder, v *EvictDiskReplicaArgs) {
			var a ClientKeyArgs
			decClientKey(d, &a)
			v.ClientID, v.Key, v.TenantID = a.ClientID, a.Key, a.TenantID
			v.ReplicaType = ReplicaType(int32(d.U32()))
		})

	BatchEvictDiskReplicaArgsCodec = sp.Define(sp.StructLit(lUUID, lStrings, lString, lRepType), 16+2+4,
		func(e *sp.Encoder, v *BatchEvictDiskReplicaArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			vecString.Encode(e, &v.Keys)
			e.String(v.TenantID)
			e.U32(uint32(v.ReplicaType))
		},
		func(d *sp.Decoder, v *BatchEvictDiskReplicaArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			vecString.Decode(d, &v.Keys)
			v.TenantID = d.String()
			v.ReplicaType = ReplicaType(int32(d.U32()))
		})

	NoFSegmentCodec = sp.Define(sp.StructLit(lUUID, lString, lU64, lU64, lString), 16+1+16+1,
		func(e *sp.Encoder, v *NoFSegment) {
			UUIDCodec.Encode(e, &v.ID)
			e.String(v.Name)
			e.U64(v.Base)
			e.U64(v.Size)
			e.String(v.TEEndpoint)
		},
		func(d *sp.Decoder, v *NoFSegment) {
			UUIDCodec.Decode(d, &v.ID)
			v.Name = d.String()
			v.Base = d.U64()
			v.Size = d.U64()
			v.TEEndpoint = d.String()
		})

	NoFSegmentOwnerInfoCodec = sp.Define(sp.StructLit(lUUID, lUUID), 32,
		func(e *sp.Encoder, v *NoFSegmentOwnerInfo) {
			UUIDCodec.Encode(e, &v.SegmentID)
			UUIDCodec.Encode(e, &v.ClientID)
		},
		func(d *sp.Decoder, v *NoFSegmentOwnerInfo) {
			UUIDCodec.Decode(d, &v.SegmentID)
			UUIDCodec.Decode(d, &v.ClientID)
		})

	vecNoF = sp.Vec(NoFSegmentCodec)

	MountNoFSegmentArgsCodec = sp.Define(sp.StructLit(NoFSegmentCodec.Literal(), lUUID), NoFSegmentCodec.MinBytes()+16,
		func(e *sp.Encoder, v *MountNoFSegmentArgs) {
			NoFSegmentCodec.Encode(e, &v.Segment)
			UUIDCodec.Encode(e, &v.ClientID)
		},
		func(d *sp.Decoder, v *MountNoFSegmentArgs) {
			NoFSegmentCodec.Decode(d, &v.Segment)
			UUIDCodec.Decode(d, &v.ClientID)
		})

	ReMountNoFSegmentArgsCodec = sp.Define(sp.StructLit(vecNoF.Literal(), lUUID), 1+16,
		func(e *sp.Encoder, v *ReMountNoFSegmentArgs) {
			vecNoF.Encode(e, &v.Segments)
			UUIDCodec.Encode(e, &v.ClientID)
		},
		func(d *sp.Decoder, v *ReMountNoFSegmentArgs) {
			vecNoF.Decode(d, &v.Segments)
			UUIDCodec.Decode(d, &v.ClientID)
		})

	CopyStartResponseCodec = sp.Define(sp.StructLit(ReplicaDescriptorCodec.Literal(), vecReplicas.Literal()), minRepl+1,
		func(e *sp.Encoder, v *CopyStartResponse) {
			ReplicaDescriptorCodec.Encode(e, &v.Source)
			vecReplicas.Encode(e, &v.Targets)
		},
		func(d *sp.Decoder, v *CopyStartResponse) {
			ReplicaDescriptorCodec.Decode(d, &v.Source)
			vecReplicas.Decode(d, &v.Targets)
		})

	MoveStartResponseCodec = sp.Define(sp.StructLit(ReplicaDescriptorCodec.Literal(), optRepl.Literal()), minRepl+1,
		func(e *sp.Encoder, v *MoveStartResponse) {
			ReplicaDescriptorCodec.Encode(e, &v.Source)
			optRepl.Encode(e, &v.Target)
		},
		func(d *sp.Decoder, v *MoveStartResponse) {
			ReplicaDescriptorCodec.Decode(d, &v.Source)
			optRepl.Decode(d, &v.Target)
		})

	// PromotionAllocStartResponseCodec is the one-member struct around
	// the staged replica.
	PromotionAllocStartResponseCodec = sp.Define(sp.StructLit(ReplicaDescriptorCodec.Literal()), minRepl,
		func(e *sp.Encoder, v *ReplicaDescriptor) { ReplicaDescriptorCodec.Encode(e, v) },
		func(d *sp.Decoder, v *ReplicaDescriptor) { ReplicaDescriptorCodec.Decode(d, v) })

	ExpStringsCodec        = sp.ExpectedOf(vecString, ErrorCodeCodec)
	ExpUUIDCodec           = sp.ExpectedOf(UUIDCodec, ErrorCodeCodec)
	ExpQueryTaskCodec      = sp.ExpectedOf(QueryTaskResponseCodec, ErrorCodeCodec)
	ExpCopyStartCodec      = sp.ExpectedOf(CopyStartResponseCodec, ErrorCodeCodec)
	ExpMoveStartCodec      = sp.ExpectedOf(MoveStartResponseCodec, ErrorCodeCodec)
	ExpOffloadTasksCodec   = sp.ExpectedOf(vecOffload, ErrorCodeCodec)
	ExpPromotionAllocCodec = sp.ExpectedOf(PromotionAllocStartResponseCodec, ErrorCodeCodec)
	ExpNoFSegmentsCodec    = sp.ExpectedOf(vecNoF, ErrorCodeCodec)
	ExpNoFOwnersCodec      = sp.ExpectedOf(sp.Vec(NoFSegmentOwnerInfoCodec), ErrorCodeCodec)
)

func encCopyStart(e *sp.Encoder, v *CopyStartArgs) {
	UUIDCodec.Encode(e, &v.ClientID)
	e.String(v.Key)
	e.String(v.TenantID)
	e.String(v.Source)
	vecString.Encode(e, &v.Targets)
}

func decCopyStart(d *sp.Decoder, v *CopyStartArgs) {
	UUIDCodec.Decode(d, &v.ClientID)
	v.Key = d.String()
	v.TenantID = d.String()
	v.Source = d.String()
	vecString.Decode(d, &v.Targets)
}

func encClientKey(e *sp.Encoder, v *ClientKeyArgs) {
	UUIDCodec.Encode(e, &v.ClientID)
	e.String(v.Key)
	e.String(v.TenantID)
}

func decClientKey(d *sp.Decoder, v *ClientKeyArgs) {
	UUIDCodec.Decode(d, &v.ClientID)
	v.Key = d.String()
	v.TenantID = d.String()
}
