package master

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// Mooncake's store clients (MasterClient over yalantinglibs coro_rpc) are
// served on the RPC port beside mux and gRPC: serveConn sees the coro_rpc
// magic in the first byte and hands the connection here. Each request is
// answered in order on the same connection, by the same Service the
// kvferry clients use, so both kinds of client see the same objects
// (issue 36; docs/reports/coro-rpc.md lists the methods served).
const (
	// coroIdleTimeout closes a coro_rpc connection that sends no request
	// for this long (a live MasterClient pings every second).
	coroIdleTimeout = 5 * time.Minute
	// coroIOTimeout bounds reading a request's body once its header came,
	// and writing an answer.
	coroIOTimeout = 30 * time.Second
)

// coroHandler decodes one request body, runs it on svc and returns the
// struct_pack answer; an error means the arguments did not decode (the
// client is told invalid_rpc_arguments).
type coroHandler func(h *coroServer, svc *Service, body []byte) ([]byte, error)

// coroServer holds what serving one connection needs.
type coroServer struct {
	s   *Server
	lim sp.Limits
	// maxKey and maxBatch are the master's request limits (Config).
	maxKey, maxBatch int
}

// serveCoro serves one coro_rpc connection whose first bytes (fewer than a
// header) were already read by serveConn. Owned by the Server (its wg);
// ends when the peer closes, sends a malformed frame, idles past
// coroIdleTimeout, or Close closes the connection.
func (s *Server) serveCoro(conn net.Conn, first []byte, slot *netguard.Slot) {
	defer conn.Close()
	defer s.untrack(conn)
	lim := s.cfg.requestLimits()
	h := &coroServer{s: s, maxKey: lim.MaxKeyBytes, maxBatch: lim.MaxBatchKeys}
	if h.maxKey <= 0 {
		h.maxKey = wire.DefaultMaxKeyBytes
	}
	if h.maxBatch <= 0 {
		h.maxBatch = wire.DefaultMaxBatchKeys
	}
	h.lim = sp.Limits{MaxElements: 4 * h.maxBatch}
	maxBody := wire.DefaultMaxMuxRequest
	peer := conn.RemoteAddr().String()

	var hdr [coro.ReqHeaderBytes]byte
	n := copy(hdr[:], first)
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	if _, err := io.ReadFull(conn, hdr[n:]); err != nil {
		s.refuse(conn, hdr[:n], err)
		return
	}
	if _, err := coro.ParseReqHeader(hdr[:]); err != nil {
		s.refuse(conn, hdr[:], nil)
		return
	}
	slot.Frame()
	s.log.Debug("mooncake coro_rpc client connected", "peer", peer)
	out := make([]byte, 0, 4096)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(coroIOTimeout))
		req, err := coro.ReadRequestAfter(conn, hdr[:], maxBody)
		if err != nil {
			s.coroEnd(peer, err)
			return
		}
		out = h.call(out[:0], req)
		_ = conn.SetWriteDeadline(time.Now().Add(coroIOTimeout))
		if _, err := conn.Write(out); err != nil {
			s.coroEnd(peer, err)
			return
		}
		if cap(out) > 1<<20 {
			out = make([]byte, 0, 4096) // keep no huge answer buffer between calls
		}
		_ = conn.SetReadDeadline(time.Now().Add(coroIdleTimeout))
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			s.coroEnd(peer, err)
			return
		}
	}
}

// coroEnd logs why a coro_rpc connection ended (at Debug: a peer closing
// is ordinary; a malformed frame is rate-limited at Warn).
func (s *Server) coroEnd(peer string, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
		s.log.Debug("mooncake coro_rpc client disconnected", "peer", peer)
		return
	}
	if errors.Is(err, coro.ErrFrame) {
		if ok, n := s.logs.Allow("coro"); ok {
			s.log.Warn("mooncake coro_rpc connection closed", "peer", peer, "err", err, "suppressed", n)
		}
		return
	}
	s.log.Debug("mooncake coro_rpc connection ended", "peer", peer, "err", err)
}

// call answers one request, appending the response frame to out.
func (h *coroServer) call(out []byte, req coro.Request) []byte {
	if out, ok := h.coroKvferryCall(out, req); ok {
		return out
	}
	seq := req.Header.Seq
	m, ok := coro.MethodByID(req.Header.FuncID)
	if !ok {
		return coro.AppendError(out, seq, coro.ErrcFunctionNotRegistered, "the rpc function not registered")
	}
	f := coroHandlers[m.ID]
	svc := h.s.active.Load()
	if svc == nil {
		return coro.AppendError(out, seq, coro.ErrcRPCThrowException, "kvferry master: "+ErrNotLeader.Error())
	}
	t0 := time.Now()
	body, err := f(h, svc, req.Body)
	h.s.rpc.observe("coro/"+m.Name, time.Since(t0), err)
	if err != nil {
		return coro.AppendError(out, seq, coro.ErrcInvalidRPCArguments, "invalid rpc arg")
	}
	return coro.AppendResponse(out, seq, body)
}

// errorCode is a store error's Mooncake code (the wire codes are
// Mooncake's; an unknown error is INTERNAL_ERROR).
func errorCode(err error) coro.ErrorCode { return coro.ErrorCode(wire.CodeOf(err)) }

func expVoid(err error) coro.ExpVoid {
	if err != nil {
		return coro.Fail[struct{}](errorCode(err))
	}
	return coro.OK(struct{}{})
}

func (h *coroServer) keyErr(keys ...string) error {
	if len(keys) > h.maxBatch {
		return fmt.Errorf("batch of %d keys (at most %d): %w", len(keys), h.maxBatch, wire.ErrRequestLimit)
	}
	for _, k := range keys {
		if len(k) > h.maxKey {
			return fmt.Errorf("key of %d bytes (at most %d): %w", len(k), h.maxKey, wire.ErrRequestLimit)
		}
	}
	return nil
}

// segmentFromCoro is the kvferry segment a Mooncake Segment mounts: named
// by its transfer-engine endpoint (what Mooncake's replica descriptors
// carry as transport_endpoint), or by its name when it has none.
func segmentFromCoro(s coro.Segment) SegmentInfo {
	name := s.TEEndpoint
	if name == "" {
		name = s.Name
	}
	return SegmentInfo{ID: s.ID.String(), Name: name, Protocol: s.Protocol, Base: s.Base, Size: s.Size}
}

func configFromCoro(c coro.ReplicateConfig) ReplicateConfig {
	cfg := ReplicateConfig{
		ReplicaNum:        int(min(c.ReplicaNum, 1<<16)),
		SoftPin:           wire.SoftPinAction(c.SoftPinAction),
		HardPin:           c.WithHardPin,
		PreferredSegments: c.PreferredSegments,
	}
	if c.PreferredSegment != "" && len(cfg.PreferredSegments) == 0 {
		cfg.PreferredSegments = []string{c.PreferredSegment}
	}
	if c.SoftPinTTLMs != nil {
		cfg.SoftPinTTL = time.Duration(min(*c.SoftPinTTLMs, uint64(1<<40))) * time.Millisecond
	}
	if c.GroupIDs != nil {
		cfg.GroupIDs = append(make([]string, 0, len(*c.GroupIDs)), *c.GroupIDs...)
	}
	return cfg
}

// descriptorsToCoro are Mooncake replica descriptors of kvferry's memory
// replicas; disk-tier replicas have no Mooncake form a Mooncake client
// could read and are left out.
func descriptorsToCoro(rs []Replica) []coro.ReplicaDescriptor {
	out := make([]coro.ReplicaDescriptor, 0, len(rs))
	for _, r := range rs {
		if r.Kind != wire.ReplicaKind_REPLICA_KIND_MEMORY {
			continue
		}
		out = append(out, coro.ReplicaDescriptor{
			ID:     r.Tag,
			Kind:   coro.KindMemory,
			Buffer: coro.BufferDescriptor{Size: r.Size, BufferAddress: r.Addr, Protocol: r.Protocol, TransportEndpoint: r.SegmentName},
			Status: coro.ReplicaStatus(r.Status),
		})
	}
	return out
}

func replicaListToCoro(l ReplicaList) coro.GetReplicaListResponse {
	return coro.GetReplicaListResponse{Replicas: descriptorsToCoro(l.Replicas), LeaseTTLMs: uint64(l.LeaseTTL / time.Millisecond)}
}

// serve returns a coroHandler that decodes A with ac, runs f and encodes
// its R with rc.
func serve[A, R any](ac sp.Codec[A], rc sp.Codec[R], f func(h *coroServer, svc *Service, a *A) R) coroHandler {
	return func(h *coroServer, svc *Service, body []byte) ([]byte, error) {
		a, err := sp.Unmarshal(ac, body, h.lim)
		if err != nil {
			return nil, err
		}
		r := f(h, svc, &a)
		return sp.Marshal(rc, &r), nil
	}
}

// serveNoArgs is serve for a method without parameters: an empty body.
func serveNoArgs[R any](rc sp.Codec[R], f func(svc *Service) R) coroHandler {
	return func(_ *coroServer, svc *Service, body []byte) ([]byte, error) {
		if len(body) != 0 {
			return nil, fmt.Errorf("%w: %d body bytes for a call without arguments", sp.ErrMalformed, len(body))
		}
		r := f(svc)
		return sp.Marshal(rc, &r), nil
	}
}

// coroHandlers serve the methods of coro.Methods.
var coroHandlers = map[uint32]coroHandler{
	coro.MethodServiceReady.ID: serveNoArgs(coro.ExpStringCodec, func(*Service) coro.ExpString {
		return coro.OK(coro.StoreVersion)
	}),
	coro.MethodPing.ID: serve(coro.UUIDCodec, coro.ExpPingCodec, func(_ *coroServer, svc *Service, id *coro.UUID) coro.ExpPing {
		st, err := svc.Ping(id.String())
		if err != nil {
			return coro.Fail[coro.PingResponse](errorCode(err))
		}
		return coro.OK(coro.PingResponse{ViewVersionID: int64(svc.ViewVersion()), ClientStatus: coro.ClientStatus(st)})
	}),
	coro.MethodMountSegment.ID: serve(coro.MountSegmentArgsCodec, coro.ExpVoidCodec, func(_ *coroServer, svc *Service, a *coro.MountSegmentArgs) coro.ExpVoid {
		return expVoid(svc.MountSegment(a.ClientID.String(), segmentFromCoro(a.Segment)))
	}),
	coro.MethodReMountSegment.ID: serve(coro.ReMountSegmentArgsCodec, coro.ExpVoidCodec, func(_ *coroServer, svc *Service, a *coro.ReMountSegmentArgs) coro.ExpVoid {
		if len(a.Segments) > maxRemountSegments {
			return coro.Fail[struct{}](coro.CodeInvalidParams)
		}
		segs := make([]SegmentInfo, len(a.Segments))
		for i, s := range a.Segments {
			segs[i] = segmentFromCoro(s)
		}
		return expVoid(svc.ReMountSegments(a.ClientID.String(), segs))
	}),
	coro.MethodUnmountSegment.ID: serve(coro.UnmountSegmentArgsCodec, coro.ExpVoidCodec, func(_ *coroServer, svc *Service, a *coro.UnmountSegmentArgs) coro.ExpVoid {
		return expVoid(svc.UnmountSegment(a.ClientID.String(), a.SegmentID.String()))
	}),
	coro.MethodExistKey.ID: serve(coro.KeyArgsCodec, coro.ExpBoolCodec, func(h *coroServer, svc *Service, a *coro.KeyArgs) coro.ExpBool {
		if err := h.keyErr(a.Key); err != nil {
			return coro.Fail[bool](errorCode(err))
		}
		ok, err := svc.ExistKey(a.TenantID, a.Key)
		if err != nil {
			return coro.Fail[bool](errorCode(err))
		}
		return coro.OK(ok)
	}),
	coro.MethodBatchExistKey.ID: serve(coro.KeysArgsCodec, coro.BatchBoolCodec, func(h *coroServer, svc *Service, a *coro.KeysArgs) []coro.ExpBool {
		out := make([]coro.ExpBool, len(a.Keys))
		if err := h.keyErr(a.Keys...); err != nil {
			for i := range out {
				out[i] = coro.Fail[bool](errorCode(err))
			}
			return out
		}
		for i, c := range svc.BatchExistKey(a.TenantID, a.Keys) {
			if c < 0 {
				out[i] = coro.Fail[bool](coro.ErrorCode(c))
			} else {
				out[i] = coro.OK(c == 1)
			}
		}
		return out
	}),
	coro.MethodGetReplicaList.ID: serve(coro.KeyArgsCodec, coro.ExpReplicaListCodec, func(h *coroServer, svc *Service, a *coro.KeyArgs) coro.ExpReplicaList {
		if err := h.keyErr(a.Key); err != nil {
			return coro.Fail[coro.GetReplicaListResponse](errorCode(err))
		}
		l, err := svc.GetReplicaList(a.TenantID, a.Key)
		if err != nil {
			return coro.Fail[coro.GetReplicaListResponse](errorCode(err))
		}
		return coro.OK(replicaListToCoro(l))
	}),
	coro.MethodBatchGetReplicaList.ID: serve(coro.KeysArgsCodec, coro.BatchReplicaListCodec, func(h *coroServer, svc *Service, a *coro.KeysArgs) []coro.ExpReplicaList {
		out := make([]coro.ExpReplicaList, len(a.Keys))
		if err := h.keyErr(a.Keys...); err != nil {
			for i := range out {
				out[i] = coro.Fail[coro.GetReplicaListResponse](errorCode(err))
			}
			return out
		}
		lists, errs := svc.BatchGetReplicaList(a.TenantID, a.Keys)
		for i := range lists {
			if errs[i] != nil {
				out[i] = coro.Fail[coro.GetReplicaListResponse](errorCode(errs[i]))
			} else {
				out[i] = coro.OK(replicaListToCoro(lists[i]))
			}
		}
		return out
	}),
	coro.MethodPutStart.ID:    serve(coro.PutStartArgsCodec, coro.ExpDescriptorsCodec, putStart(false)),
	coro.MethodUpsertStart.ID: serve(coro.PutStartArgsCodec, coro.ExpDescriptorsCodec, putStart(true)),
	coro.MethodBatchPutStart.ID: serve(coro.BatchPutStartArgsCodec, coro.BatchDescriptorsCodec,
		batchPutStart(false)),
	coro.MethodBatchUpsertStart.ID: serve(coro.BatchPutStartArgsCodec, coro.BatchDescriptorsCodec,
		batchPutStart(true)),
	coro.MethodPutEnd.ID:       serve(coro.PutEndArgsCodec, coro.ExpVoidCodec, putEnd),
	coro.MethodUpsertEnd.ID:    serve(coro.PutEndArgsCodec, coro.ExpVoidCodec, putEnd),
	coro.MethodPutRevoke.ID:    serve(coro.PutRevokeArgsCodec, coro.ExpVoidCodec, putRevoke),
	coro.MethodUpsertRevoke.ID: serve(coro.PutRevokeArgsCodec, coro.ExpVoidCodec, putRevoke),
	coro.MethodBatchPutEnd.ID: serve(coro.BatchPutEndArgsCodec, coro.BatchVoidCodec, func(h *coroServer, svc *Service, a *coro.BatchPutEndArgs) []coro.ExpVoid {
		return batchEnd(h, svc, a.ClientID, a.TenantID, metaKeys(a.Metas), false)
	}),
	coro.MethodBatchUpsertEnd.ID: serve(coro.BatchUpsertEndArgsCodec, coro.BatchVoidCodec, func(h *coroServer, svc *Service, a *coro.BatchUpsertEndArgs) []coro.ExpVoid {
		return batchEnd(h, svc, a.ClientID, a.TenantID, metaKeys(a.Metas), false)
	}),
	coro.MethodBatchPutRevoke.ID: serve(coro.BatchPutRevokeArgsCodec, coro.BatchVoidCodec, func(h *coroServer, svc *Service, a *coro.BatchPutRevokeArgs) []coro.ExpVoid {
		return batchEnd(h, svc, a.ClientID, a.TenantID, a.Keys, true)
	}),
	coro.MethodBatchUpsertRevoke.ID: serve(coro.BatchUpsertRevokeArgsCodec, coro.BatchVoidCodec, func(h *coroServer, svc *Service, a *coro.BatchUpsertRevokeArgs) []coro.ExpVoid {
		return batchEnd(h, svc, a.ClientID, a.TenantID, a.Keys, true)
	}),
	coro.MethodRemove.ID: serve(coro.RemoveArgsCodec, coro.ExpVoidCodec, func(h *coroServer, svc *Service, a *coro.RemoveArgs) coro.ExpVoid {
		if err := h.keyErr(a.Key); err != nil {
			return expVoid(err)
		}
		return expVoid(svc.Remove(a.TenantID, a.Key, a.Force))
	}),
	coro.MethodRemoveByRegex.ID: serve(coro.RemoveArgsCodec, coro.ExpInt64Codec, func(h *coroServer, svc *Service, a *coro.RemoveArgs) coro.ExpInt64 {
		if err := h.keyErr(a.Key); err != nil {
			return coro.Fail[int64](errorCode(err))
		}
		n, err := svc.RemoveByRegex(a.TenantID, a.Key, a.Force)
		if err != nil {
			return coro.Fail[int64](errorCode(err))
		}
		return coro.OK(n)
	}),
	// RemoveAll answers a bare count: Mooncake's has no error slot, so a
	// failure answers 0.
	coro.MethodRemoveAll.ID: serve(coro.RemoveAllArgsCodec, sp.Int64, func(_ *coroServer, svc *Service, a *coro.RemoveAllArgs) int64 {
		n, err := svc.RemoveAll(a.TenantID, a.Force)
		if err != nil {
			return 0
		}
		return n
	}),
	coro.MethodBatchRemove.ID: serve(coro.BatchRemoveArgsCodec, coro.BatchVoidCodec, func(h *coroServer, svc *Service, a *coro.BatchRemoveArgs) []coro.ExpVoid {
		out := make([]coro.ExpVoid, len(a.Keys))
		if err := h.keyErr(a.Keys...); err != nil {
			for i := range out {
				out[i] = expVoid(err)
			}
			return out
		}
		for i, err := range svc.BatchRemove(a.TenantID, a.Keys, a.Force) {
			out[i] = expVoid(err)
		}
		return out
	}),
	coro.MethodGetReplicaListByRegex.ID: serve(coro.KeyArgsCodec, coro.ExpRegexReplicasCodec, func(h *coroServer, svc *Service, a *coro.KeyArgs) coro.ExpRegexReplicas {
		if err := h.keyErr(a.Key); err != nil {
			return coro.Fail[[]sp.KV[string, []coro.ReplicaDescriptor]](errorCode(err))
		}
		found, err := svc.GetReplicaListByRegex(a.TenantID, a.Key)
		if err != nil {
			return coro.Fail[[]sp.KV[string, []coro.ReplicaDescriptor]](errorCode(err))
		}
		out := make([]sp.KV[string, []coro.ReplicaDescriptor], len(found))
		for i, f := range found {
			out[i] = sp.KV[string, []coro.ReplicaDescriptor]{Key: f.Key, Value: descriptorsToCoro(f.Replicas)}
		}
		return coro.OK(out)
	}),
	// kvferry's master has no legacy root_fs_dir disk tier: no fsdir.
	coro.MethodGetFsdir.ID: serveNoArgs(coro.ExpStringCodec, func(*Service) coro.ExpString { return coro.OK("") }),
	coro.MethodGetStorageConfig.ID: serveNoArgs(coro.ExpStorageConfigCodec, func(*Service) coro.ExpStorageConfig {
		return coro.OK(coro.GetStorageConfigResponse{EnableDiskEviction: true})
	}),
	coro.MethodGracefulUnmountSegment.ID: serve(coro.GracefulUnmountSegmentArgsCodec, coro.ExpVoidCodec, func(h *coroServer, svc *Service, a *coro.GracefulUnmountSegmentArgs) coro.ExpVoid {
		grace := time.Duration(min(a.GracePeriodMs, uint64(maxDrainWait/time.Millisecond))) * time.Millisecond
		if grace <= 0 {
			grace = maxDrainWait
		}
		return expVoid(svc.DrainSegment(h.s.ctx, a.ClientID.String(), a.SegmentID.String(), grace))
	}),
	// kvferry-master runs no Mooncake copy/move tasks (its drains move
	// replicas master-side), so FetchTasks, which MasterClient sends from
	// its heartbeat, answers none, and MarkTaskToComplete TASK_NOT_FOUND.
	coro.MethodFetchTasks.ID: serve(coro.FetchTasksArgsCodec, coro.ExpTasksCodec, func(*coroServer, *Service, *coro.FetchTasksArgs) coro.ExpTasks {
		return coro.OK([]coro.TaskAssignment{})
	}),
	coro.MethodQuerySegmentStatus.ID: serve(sp.String, coro.ExpSegmentStatusCodec, func(h *coroServer, svc *Service, name *string) coro.ExpSegmentStatus {
		return segmentStatus(svc.SegmentStatusOf(*name))
	}),
	coro.MethodQuerySegmentStatusByID.ID: serve(coro.UUIDCodec, coro.ExpSegmentStatusCodec, func(h *coroServer, svc *Service, id *coro.UUID) coro.ExpSegmentStatus {
		return segmentStatus(svc.SegmentStatusByID(id.String()))
	}),
	coro.MethodBatchQueryIP.ID: serve(coro.UUIDsCodec, coro.ExpClientIPsCodec, func(h *coroServer, svc *Service, ids *[]coro.UUID) coro.ExpClientIPs {
		if len(*ids) > h.maxBatch {
			return coro.Fail[[]sp.KV[coro.UUID, []string]](coro.CodeInvalidParams)
		}
		names := make([]string, len(*ids))
		for i, id := range *ids {
			names[i] = id.String()
		}
		hosts := svc.ClientHosts(names)
		out := make([]sp.KV[coro.UUID, []string], 0, len(hosts))
		for i, id := range *ids {
			if hs, ok := hosts[names[i]]; ok {
				out = append(out, sp.KV[coro.UUID, []string]{Key: id, Value: hs})
				delete(hosts, names[i])
			}
		}
		return coro.OK(out)
	}),
	coro.MethodMarkTaskToComplete.ID: serve(coro.MarkTaskToCompleteArgsCodec, coro.ExpVoidCodec, func(*coroServer, *Service, *coro.MarkTaskToCompleteArgs) coro.ExpVoid {
		return coro.Fail[struct{}](coro.CodeTaskNotFound)
	}),
}

// maxRemountSegments caps the segments of one ReMountSegment (the mux's
// list limit).
const maxRemountSegments = 4096

func putStart(upsert bool) func(h *coroServer, svc *Service, a *coro.PutStartArgs) coro.ExpDescriptors {
	return func(h *coroServer, svc *Service, a *coro.PutStartArgs) coro.ExpDescriptors {
		if err := h.keyErr(a.Key); err != nil {
			return coro.Fail[[]coro.ReplicaDescriptor](errorCode(err))
		}
		reps, err := svc.PutStart(a.ClientID.String(), a.TenantID, a.Key, a.SliceLength, configFromCoro(a.Config), upsert)
		if err != nil {
			return coro.Fail[[]coro.ReplicaDescriptor](errorCode(err))
		}
		return coro.OK(descriptorsToCoro(reps))
	}
}

func batchPutStart(upsert bool) func(h *coroServer, svc *Service, a *coro.BatchPutStartArgs) []coro.ExpDescriptors {
	return func(h *coroServer, svc *Service, a *coro.BatchPutStartArgs) []coro.ExpDescriptors {
		out := make([]coro.ExpDescriptors, len(a.Keys))
		err := h.keyErr(a.Keys...)
		if err == nil && len(a.SliceLengths) != len(a.Keys) {
			err = fmt.Errorf("batch put start: %d keys, %d sizes: %w", len(a.Keys), len(a.SliceLengths), wire.ErrInvalidParams)
		}
		if err != nil {
			for i := range out {
				out[i] = coro.Fail[[]coro.ReplicaDescriptor](errorCode(err))
			}
			return out
		}
		reps, errs := svc.BatchPutStart(a.ClientID.String(), a.TenantID, a.Keys, a.SliceLengths, configFromCoro(a.Config), upsert)
		for i := range reps {
			if errs[i] != nil {
				out[i] = coro.Fail[[]coro.ReplicaDescriptor](errorCode(errs[i]))
			} else {
				out[i] = coro.OK(descriptorsToCoro(reps[i]))
			}
		}
		return out
	}
}

func putEnd(h *coroServer, svc *Service, a *coro.PutEndArgs) coro.ExpVoid {
	if err := h.keyErr(a.Meta.Key); err != nil {
		return expVoid(err)
	}
	return expVoid(svc.PutEnd(a.ClientID.String(), a.TenantID, a.Meta.Key))
}

func putRevoke(h *coroServer, svc *Service, a *coro.PutRevokeArgs) coro.ExpVoid {
	if err := h.keyErr(a.Key); err != nil {
		return expVoid(err)
	}
	return expVoid(svc.PutRevoke(a.ClientID.String(), a.TenantID, a.Key))
}

func metaKeys(ms []coro.ObjectMeta) []string {
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = m.Key
	}
	return keys
}

func batchEnd(h *coroServer, svc *Service, client coro.UUID, tenant string, keys []string, revoke bool) []coro.ExpVoid {
	out := make([]coro.ExpVoid, len(keys))
	if err := h.keyErr(keys...); err != nil {
		for i := range out {
			out[i] = expVoid(err)
		}
		return out
	}
	for i, err := range svc.BatchPutEnd(client.String(), tenant, keys, revoke) {
		out[i] = expVoid(err)
	}
	return out
}

// segmentStatus is a segment state's answer (kvferry's states and
// Mooncake's SegmentStatus share their numbering).
func segmentStatus(st SegmentStatus, err error) coro.ExpSegmentStatus {
	if err != nil {
		return coro.Fail[coro.SegmentStatus](errorCode(err))
	}
	return coro.OK(coro.SegmentStatus(st))
}
