package master

import (
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// The handlers of coro.Methods beyond the put/get path (issue 36;
// docs/reports/coro-rpc.md gives each one's state):
//   - BatchReplicaClear, CreateCopyTask, CreateMoveTask and QueryTask run
//     on kvferry's Service. A copy or move task goes to the holder of the
//     source replica as a kvferry task (tasks.go); a Mooncake client never
//     gets one (FetchTasks answers none: Mooncake's client would run
//     CopyStart/CopyEnd itself, which kvferry's master does not model), so
//     a task whose source lies on a Mooncake client's segment fails at its
//     deadline and QueryTask says FAILED.
//   - The client-driven copy and move (CopyStart ... MoveRevoke, the
//     DynamicReplica forms) answer NOT_SUPPORTED with a log line.
//   - The SSD offload RPCs answer as mooncake_master without
//     --enable_offload: MountLocalDiskSegment and UnmountLocalDiskSegment
//     UNABLE_OFFLOAD, the rest SEGMENT_NOT_FOUND (no local-disk segment
//     is ever mounted; mooncake_master answers NotifyOffloadSuccess OK
//     and ignores it, kvferry-master refuses it, as Mooncake does for a
//     client whose local-disk segment is gone);
//     promotion finds no disk replica (OBJECT_NOT_FOUND or
//     REPLICA_NOT_FOUND); kvferry's own disk tier speaks its own RPCs.
//   - NVMe-oF segments answer as mooncake_master built without USE_NOF:
//     UNAVAILABLE_IN_CURRENT_MODE (with a log line), GetAllNoFSegments
//     none, GetNoFSegmentsByName SEGMENT_NOT_FOUND (as mooncake_master
//     answered them: store/wire/coro/testdata/mooncake-rest-verified.txt).

func init() {
	for id, f := range restHandlers {
		coroHandlers[id] = f
	}
}

// unsupported logs (rate-limited per method) a Mooncake RPC kvferry-master
// refuses.
func (h *coroServer) unsupported(method, why string) {
	if ok, n := h.s.logs.Allow("coro-unsupported/" + method); ok {
		h.s.log.Warn("mooncake coro_rpc call refused", "method", method, "why", why, "suppressed", n)
	}
}

// taskStatusToCoro numbers a task status as Mooncake does (its FAILED and
// SUCCESS are the other way round from kvferry's).
func taskStatusToCoro(st wire.TaskStatus) coro.TaskStatus {
	switch st {
	case wire.TaskStatus_TASK_STATUS_PROCESSING:
		return coro.TaskProcessing
	case wire.TaskStatus_TASK_STATUS_SUCCESS:
		return coro.TaskSuccess
	case wire.TaskStatus_TASK_STATUS_FAILED:
		return coro.TaskFailed
	default:
		return coro.TaskPending
	}
}

func taskUUID(id string, err error) coro.ExpUUID {
	if err != nil {
		return coro.Fail[coro.UUID](errorCode(err))
	}
	u, perr := coro.ParseUUID(id)
	if perr != nil {
		return coro.Fail[coro.UUID](coro.CodeInternalError)
	}
	return coro.OK(u)
}

// notSupportedCopy answers a client-driven copy or move call.
func notSupportedCopy[A, R any](ac sp.Codec[A], rc sp.Codec[sp.Expected[R, coro.ErrorCode]], name string) coroHandler {
	return serve(ac, rc, func(h *coroServer, _ *Service, _ *A) sp.Expected[R, coro.ErrorCode] {
		h.unsupported(name, "client-driven replica copy/move is not served: kvferry-master moves replicas with its own tasks")
		return coro.Fail[R](coro.CodeNotSupported)
	})
}

// noFSegments answers an NVMe-oF segment call.
func noFSegments[A, R any](ac sp.Codec[A], rc sp.Codec[sp.Expected[R, coro.ErrorCode]], name string) coroHandler {
	return serve(ac, rc, func(h *coroServer, _ *Service, _ *A) sp.Expected[R, coro.ErrorCode] {
		h.unsupported(name, "NVMe-oF segments are not supported")
		return coro.Fail[R](coro.CodeUnavailableInCurrentMode)
	})
}

// noDiskSegment answers an offload call of a client that mounted no local
// disk segment (none can be mounted here).
func noDiskSegment[A, R any](ac sp.Codec[A], rc sp.Codec[sp.Expected[R, coro.ErrorCode]]) coroHandler {
	return serve(ac, rc, func(*coroServer, *Service, *A) sp.Expected[R, coro.ErrorCode] {
		return coro.Fail[R](coro.CodeSegmentNotFound)
	})
}

// noDiskReplica is the answer of a call about key's Mooncake disk replica:
// none exists (OBJECT_NOT_FOUND when the object does not either).
func (h *coroServer) noDiskReplica(svc *Service, tenant, key string) coro.ErrorCode {
	if err := h.keyErr(key); err != nil {
		return errorCode(err)
	}
	ok, err := svc.ExistKey(tenant, key)
	switch {
	case err != nil:
		return errorCode(err)
	case !ok:
		return coro.CodeObjectNotFound
	default:
		return coro.CodeReplicaNotFound
	}
}

var restHandlers = map[uint32]coroHandler{
	// BatchReplicaClear has no tenant parameter: the default tenant.
	coro.MethodBatchReplicaClear.ID: serve(coro.ReplicaClearArgsCodec, coro.ExpStringsCodec, func(h *coroServer, svc *Service, a *coro.ReplicaClearArgs) coro.ExpStrings {
		if err := h.keyErr(a.Keys...); err != nil {
			return coro.Fail[[]string](errorCode(err))
		}
		cleared, err := svc.BatchReplicaClear(a.ClientID.String(), "", a.Keys, a.SegmentName)
		if err != nil {
			return coro.Fail[[]string](errorCode(err))
		}
		if cleared == nil {
			cleared = []string{}
		}
		return coro.OK(cleared)
	}),
	coro.MethodCreateCopyTask.ID: serve(coro.CreateCopyTaskArgsCodec, coro.ExpUUIDCodec, func(h *coroServer, svc *Service, a *coro.CreateCopyTaskArgs) coro.ExpUUID {
		if err := h.keyErr(append([]string{a.Key}, a.Targets...)...); err != nil {
			return coro.Fail[coro.UUID](errorCode(err))
		}
		return taskUUID(svc.CreateTask(a.TenantID, a.Key, wire.TaskKind_TASK_KIND_COPY, "", a.Targets))
	}),
	coro.MethodCreateMoveTask.ID: serve(coro.CreateMoveTaskArgsCodec, coro.ExpUUIDCodec, func(h *coroServer, svc *Service, a *coro.CreateMoveTaskArgs) coro.ExpUUID {
		if err := h.keyErr(a.Key, a.Source, a.Target); err != nil {
			return coro.Fail[coro.UUID](errorCode(err))
		}
		if a.Source == a.Target {
			return coro.Fail[coro.UUID](coro.CodeInvalidParams)
		}
		return taskUUID(svc.CreateTask(a.TenantID, a.Key, wire.TaskKind_TASK_KIND_MOVE, a.Source, []string{a.Target}))
	}),
	coro.MethodQueryTask.ID: serve(coro.UUIDCodec, coro.ExpQueryTaskCodec, func(_ *coroServer, svc *Service, id *coro.UUID) coro.ExpQueryTask {
		ti, err := svc.QueryTask(id.String())
		if err != nil {
			return coro.Fail[coro.QueryTaskResponse](errorCode(err))
		}
		r := coro.QueryTaskResponse{ID: *id, Type: coro.TaskReplicaCopy, Status: taskStatusToCoro(ti.Status),
			CreatedAtMsEpoch: ti.Created.UnixMilli(), LastUpdatedAtMsEpoch: ti.Updated.UnixMilli(), Message: ti.Message}
		if ti.Kind == wire.TaskKind_TASK_KIND_MOVE {
			r.Type = coro.TaskReplicaMove
		}
		if u, err := coro.ParseUUID(ti.AssignedClient); err == nil {
			r.AssignedClient = u // a kvferry client's id that is no UUID stays zero
		}
		return coro.OK(r)
	}),

	coro.MethodCopyStart.ID:                notSupportedCopy(coro.CopyStartArgsCodec, coro.ExpCopyStartCodec, "CopyStart"),
	coro.MethodDynamicReplicaCopyStart.ID:  notSupportedCopy(coro.DynamicCopyStartArgsCodec, coro.ExpCopyStartCodec, "DynamicReplicaCopyStart"),
	coro.MethodCopyEnd.ID:                  notSupportedCopy(coro.ClientKeyArgsCodec, coro.ExpVoidCodec, "CopyEnd"),
	coro.MethodCopyRevoke.ID:               notSupportedCopy(coro.ClientKeyArgsCodec, coro.ExpVoidCodec, "CopyRevoke"),
	coro.MethodDynamicReplicaCopyEnd.ID:    notSupportedCopy(coro.DynamicCopyEndArgsCodec, coro.ExpVoidCodec, "DynamicReplicaCopyEnd"),
	coro.MethodDynamicReplicaCopyRevoke.ID: notSupportedCopy(coro.DynamicCopyEndArgsCodec, coro.ExpVoidCodec, "DynamicReplicaCopyRevoke"),
	coro.MethodMoveStart.ID:                notSupportedCopy(coro.MoveStartArgsCodec, coro.ExpMoveStartCodec, "MoveStart"),
	coro.MethodMoveEnd.ID:                  notSupportedCopy(coro.ClientKeyArgsCodec, coro.ExpVoidCodec, "MoveEnd"),
	coro.MethodMoveRevoke.ID:               notSupportedCopy(coro.ClientKeyArgsCodec, coro.ExpVoidCodec, "MoveRevoke"),

	coro.MethodMountLocalDiskSegment.ID: serve(coro.ClientFlagArgsCodec, coro.ExpVoidCodec, func(h *coroServer, _ *Service, _ *coro.ClientFlagArgs) coro.ExpVoid {
		h.unsupported("MountLocalDiskSegment", "Mooncake's SSD offload is not enabled (kvferry's disk tier speaks its own RPCs)")
		return coro.Fail[struct{}](coro.CodeUnableOffload)
	}),
	coro.MethodUnmountLocalDiskSegment.ID: serve(coro.UUIDCodec, coro.ExpVoidCodec, func(*coroServer, *Service, *coro.UUID) coro.ExpVoid {
		return coro.Fail[struct{}](coro.CodeUnableOffload)
	}),
	coro.MethodOffloadObjectHeartbeat.ID:   noDiskSegment(coro.ClientFlagArgsCodec, coro.ExpOffloadTasksCodec),
	coro.MethodPollRemoveAll.ID:            noDiskSegment(coro.UUIDCodec, coro.ExpBoolCodec),
	coro.MethodReportSsdCapacity.ID:        noDiskSegment(coro.ReportSsdCapacityArgsCodec, coro.ExpVoidCodec),
	coro.MethodNotifyOffloadSuccess.ID:     noDiskSegment(coro.NotifyOffloadSuccessArgsCodec, coro.ExpVoidCodec),
	coro.MethodPromotionObjectHeartbeat.ID: noDiskSegment(coro.UUIDCodec, coro.ExpOffloadTasksCodec),
	coro.MethodPromotionAllocStart.ID: serve(coro.PromotionAllocStartArgsCodec, coro.ExpPromotionAllocCodec, func(h *coroServer, svc *Service, a *coro.PromotionAllocStartArgs) coro.ExpPromotionAlloc {
		return coro.Fail[coro.ReplicaDescriptor](h.noDiskReplica(svc, a.TenantID, a.Key))
	}),
	coro.MethodNotifyPromotionSuccess.ID: serve(coro.ClientKeyArgsCodec, coro.ExpVoidCodec, func(h *coroServer, svc *Service, a *coro.ClientKeyArgs) coro.ExpVoid {
		return coro.Fail[struct{}](h.noDiskReplica(svc, a.TenantID, a.Key))
	}),
	coro.MethodNotifyPromotionFailure.ID: serve(coro.ClientKeyArgsCodec, coro.ExpVoidCodec, func(h *coroServer, svc *Service, a *coro.ClientKeyArgs) coro.ExpVoid {
		return coro.Fail[struct{}](h.noDiskReplica(svc, a.TenantID, a.Key))
	}),
	coro.MethodEvictDiskReplica.ID: serve(coro.EvictDiskReplicaArgsCodec, coro.ExpVoidCodec, func(h *coroServer, svc *Service, a *coro.EvictDiskReplicaArgs) coro.ExpVoid {
		return coro.Fail[struct{}](h.noDiskReplica(svc, a.TenantID, a.Key))
	}),
	coro.MethodBatchEvictDiskReplica.ID: serve(coro.BatchEvictDiskReplicaArgsCodec, coro.BatchVoidCodec, func(h *coroServer, svc *Service, a *coro.BatchEvictDiskReplicaArgs) []coro.ExpVoid {
		out := make([]coro.ExpVoid, len(a.Keys))
		if err := h.keyErr(a.Keys...); err != nil {
			for i := range out {
				out[i] = expVoid(err)
			}
			return out
		}
		for i, k := range a.Keys {
			out[i] = coro.Fail[struct{}](h.noDiskReplica(svc, a.TenantID, k))
		}
		return out
	}),

	coro.MethodMountNoFSegment.ID:   noFSegments(coro.MountNoFSegmentArgsCodec, coro.ExpVoidCodec, "MountNoFSegment"),
	coro.MethodReMountNoFSegment.ID: noFSegments(coro.ReMountNoFSegmentArgsCodec, coro.ExpVoidCodec, "ReMountNoFSegment"),
	coro.MethodUnmountNoFSegment.ID: noFSegments(coro.UnmountSegmentArgsCodec, coro.ExpVoidCodec, "UnmountNoFSegment"),
	coro.MethodGetAllNoFSegments.ID: serveNoArgs(coro.ExpNoFSegmentsCodec, func(*Service) coro.ExpNoFSegments {
		return coro.OK([]coro.NoFSegment{})
	}),
	coro.MethodGetNoFSegmentsByName.ID: serve(sp.String, coro.ExpNoFOwnersCodec, func(*coroServer, *Service, *string) coro.ExpNoFOwners {
		return coro.Fail[[]coro.NoFSegmentOwnerInfo](coro.CodeSegmentNotFound)
	}),
}
