package coro

import (
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// CodeTaskNotFound is Mooncake's TASK_NOT_FOUND: MarkTaskToComplete of a
// task the master never assigned.
const CodeTaskNotFound ErrorCode = -1400

// TaskType is Mooncake's TaskType (an enum class without a base: int).
type TaskType int32

// Task types.
const (
	TaskReplicaCopy TaskType = 0
	TaskReplicaMove TaskType = 1
)

// TaskStatus is Mooncake's TaskStatus (int).
type TaskStatus int32

// Task statuses.
const (
	TaskPending    TaskStatus = 0
	TaskProcessing TaskStatus = 1
	TaskFailed     TaskStatus = 2
	TaskSuccess    TaskStatus = 3
)

// TaskAssignment is one task FetchTasks hands a client (copy or move a
// replica; the payload is the master's JSON).
type TaskAssignment struct {
	ID               UUID
	Type             TaskType
	Payload          string
	CreatedAtMsEpoch int64
	MaxRetryAttempts uint32
}

// TaskCompleteRequest is what MarkTaskToComplete reports.
type TaskCompleteRequest struct {
	ID      UUID
	Status  TaskStatus
	Message string
}

// FetchTasksArgs are FetchTasks' (client_id, batch_size): MasterClient
// sends it from its heartbeat loop, about once a second.
type FetchTasksArgs struct {
	ClientID  UUID
	BatchSize uint64
}

// MarkTaskToCompleteArgs are MarkTaskToComplete's.
type MarkTaskToCompleteArgs struct {
	ClientID UUID
	Request  TaskCompleteRequest
}

// ExpTasks answers FetchTasks.
type ExpTasks = sp.Expected[[]TaskAssignment, ErrorCode]

// Task methods.
var (
	MethodFetchTasks         = method("FetchTasks")
	MethodMarkTaskToComplete = method("MarkTaskToComplete")
)

// Task codecs.
var (
	TaskTypeCodec   = enumI32[TaskType]()
	TaskStatusCodec = enumI32[TaskStatus]()

	TaskAssignmentCodec = sp.Define(sp.StructLit(lUUID, TaskTypeCodec.Literal(), lString, sp.Int64.Literal(), sp.Uint32.Literal()), 16+4+1+8+4,
		func(e *sp.Encoder, v *TaskAssignment) {
			UUIDCodec.Encode(e, &v.ID)
			e.U32(uint32(v.Type))
			e.String(v.Payload)
			e.U64(uint64(v.CreatedAtMsEpoch))
			e.U32(v.MaxRetryAttempts)
		},
		func(d *sp.Decoder, v *TaskAssignment) {
			UUIDCodec.Decode(d, &v.ID)
			v.Type = TaskType(int32(d.U32()))
			v.Payload = d.String()
			v.CreatedAtMsEpoch = int64(d.U64())
			v.MaxRetryAttempts = d.U32()
		})

	TaskCompleteRequestCodec = sp.Define(sp.StructLit(lUUID, TaskStatusCodec.Literal(), lString), 16+4+1,
		func(e *sp.Encoder, v *TaskCompleteRequest) {
			UUIDCodec.Encode(e, &v.ID)
			e.U32(uint32(v.Status))
			e.String(v.Message)
		},
		func(d *sp.Decoder, v *TaskCompleteRequest) {
			UUIDCodec.Decode(d, &v.ID)
			v.Status = TaskStatus(int32(d.U32()))
			v.Message = d.String()
		})

	FetchTasksArgsCodec = sp.Define(sp.StructLit(lUUID, sp.Uint64.Literal()), 16+8,
		func(e *sp.Encoder, v *FetchTasksArgs) { UUIDCodec.Encode(e, &v.ClientID); e.U64(v.BatchSize) },
		func(d *sp.Decoder, v *FetchTasksArgs) { UUIDCodec.Decode(d, &v.ClientID); v.BatchSize = d.U64() })

	MarkTaskToCompleteArgsCodec = sp.Define(sp.StructLit(lUUID, TaskCompleteRequestCodec.Literal()), 16+16+4+1,
		func(e *sp.Encoder, v *MarkTaskToCompleteArgs) {
			UUIDCodec.Encode(e, &v.ClientID)
			TaskCompleteRequestCodec.Encode(e, &v.Request)
		},
		func(d *sp.Decoder, v *MarkTaskToCompleteArgs) {
			UUIDCodec.Decode(d, &v.ClientID)
			TaskCompleteRequestCodec.Decode(d, &v.Request)
		})

	ExpTasksCodec = sp.ExpectedOf(sp.Vec(TaskAssignmentCodec), ErrorCodeCodec)
)
