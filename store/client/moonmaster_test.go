package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// TestMooncakeProtocol: two kvferry clients forced onto Mooncake's master
// protocol reach each other's objects through kvferry-master's coro_rpc
// service (the path they take to mooncake_master), and what that protocol
// lacks fails with ErrNotSupportedByMooncakeMaster.
func TestMooncakeProtocol(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	srv := startMaster(t, master.Config{})
	mc := client.Config{MasterServerAddr: srv.Addr(), MasterRPC: client.MasterRPCMooncake}
	hcfg, ucfg := mc, mc
	hcfg.GlobalSegmentSize = 64 << 20
	ucfg.LocalBufferSize = 1 << 20
	holder := newClient(t, hcfg)
	user := newClient(t, ucfg)
	assert.Equal(t, client.MasterRPCForTest(user), client.MasterRPCMooncake)
	assert.Equal(t, client.MasterRPCForTest(holder), client.MasterRPCMooncake)

	// Sizes from 1 KiB to a few MiB (larger than the staging buffer),
	// read back by both clients byte for byte.
	for i, n := range []int{1 << 10, 64<<10 + 7, 1 << 20, 3<<20 + 123} {
		key := fmt.Sprintf("obj-%d", i)
		val := pattern(n, byte(i))
		assert.NilError(t, user.Put(ctx, key, val, client.ReplicateConfig{}))
		for _, c := range []*client.Client{user, holder} {
			got, err := c.Get(ctx, key)
			assert.NilError(t, err, "key %s", key)
			assert.Assert(t, bytes.Equal(got, val), "key %s", key)
		}
		size, err := user.GetSize(ctx, key)
		assert.NilError(t, err)
		assert.Equal(t, size, uint64(n))
	}
	// A put of a key that exists keeps the object (Mooncake's rule).
	assert.NilError(t, user.Put(ctx, "obj-0", pattern(10, 1), client.ReplicateConfig{}))
	got, err := holder.Get(ctx, "obj-0")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(1<<10, 0)))
	assert.NilError(t, user.Upsert(ctx, "obj-0", pattern(2048, 9), client.ReplicateConfig{}))
	got, err = holder.Get(ctx, "obj-0")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(2048, 9)))
	_, err = user.Get(ctx, "absent")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)

	// Batch calls over registered memory.
	const n, sz = 6, 128 << 10
	src, dst := cbuf(t, n*sz), cbuf(t, n*sz)
	assert.NilError(t, user.RegisterBuffer(src.Addr(), src.Len()))
	assert.NilError(t, user.RegisterBuffer(dst.Addr(), dst.Len()))
	keys := make([]string, n)
	addrs, dsts, sizes := make([]uintptr, n), make([]uintptr, n), make([]uint64, n)
	for i := range n {
		keys[i] = fmt.Sprintf("batch-%d", i)
		addrs[i], dsts[i], sizes[i] = src.Addr()+uintptr(i*sz), dst.Addr()+uintptr(i*sz), sz
		copy(src.Bytes()[i*sz:(i+1)*sz], pattern(sz, byte(40+i)))
	}
	for i, e := range user.BatchPutFrom(ctx, keys, addrs, sizes, client.ReplicateConfig{}) {
		assert.NilError(t, e, "key %d", i)
	}
	keys2 := append(append([]string(nil), keys...), "absent")
	got2, errs := user.BatchGetInto(ctx, keys2, append(dsts, dst.Addr()), append(append([]uint64(nil), sizes...), sz))
	for i := range n {
		assert.NilError(t, errs[i])
		assert.Equal(t, got2[i], uint64(sz))
	}
	assert.Equal(t, code(errs[n]), wire.ErrObjectNotFound)
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()))
	ex, err := user.BatchIsExist(ctx, keys2)
	assert.NilError(t, err)
	assert.DeepEqual(t, ex, []bool{true, true, true, true, true, true, false})
	ok, err := holder.IsExist(ctx, "batch-0")
	assert.NilError(t, err)
	assert.Assert(t, ok)
	descs, err := user.ReplicaDescs(ctx, []string{"batch-1", "absent"})
	assert.NilError(t, err)
	assert.NilError(t, descs[0].Err)
	assert.Equal(t, descs[0].Size, uint64(sz))
	assert.Equal(t, descs[0].Replicas[0].SegmentName, holder.Hostname())
	assert.Equal(t, code(descs[1].Err), wire.ErrObjectNotFound)
	found, err := user.ReplicaListByRegex(ctx, "^batch-[0-2]$")
	assert.NilError(t, err)
	assert.Equal(t, len(found), 3)
	assert.Equal(t, found["batch-2"].Size, uint64(sz))
	assert.NilError(t, user.UnregisterBuffer(src.Addr()))
	assert.NilError(t, user.UnregisterBuffer(dst.Addr()))

	// Removes.
	// (The batch keys were just read: their read leases hold, so force.)
	assert.Equal(t, code(user.Remove(ctx, "batch-0", false)), wire.ErrObjectHasLease)
	assert.NilError(t, user.Remove(ctx, "batch-0", true))
	assert.Equal(t, code(user.Remove(ctx, "batch-0", true)), wire.ErrObjectNotFound)
	rerrs, err := user.BatchRemove(ctx, []string{"batch-1", "absent"}, true)
	assert.NilError(t, err)
	assert.NilError(t, rerrs[0])
	assert.Equal(t, code(rerrs[1]), wire.ErrObjectNotFound)
	removed, err := user.RemoveByRegex(ctx, "^batch-", true)
	assert.NilError(t, err)
	assert.Equal(t, removed, int64(n-2))
	removed, err = holder.RemoveAll(ctx, true)
	assert.NilError(t, err)
	assert.Equal(t, removed, int64(4))
	ok, err = user.IsExist(ctx, "obj-3")
	assert.NilError(t, err)
	assert.Assert(t, !ok)

	// What Mooncake's master lacks.
	_, err = user.Publish(ctx, "v", pattern(16, 1), 0, client.ReplicateConfig{})
	assert.Assert(t, errors.Is(err, client.ErrNotSupportedByMooncakeMaster), "got %v", err)
	assert.Equal(t, code(err), wire.ErrNotSupported)
	_, err = user.CalcCacheStats(ctx)
	assert.Assert(t, errors.Is(err, client.ErrNotSupportedByMooncakeMaster), "got %v", err)
	_, err = user.CreateDrainJob(ctx, client.DrainJobRequest{})
	assert.Assert(t, errors.Is(err, client.ErrNotSupportedByMooncakeMaster), "got %v", err)
	assert.NilError(t, user.HealthCheck(ctx))

	// Many goroutines at once: more than the connection pool holds.
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			key := fmt.Sprintf("par-%d", g)
			val := pattern(4096+g, byte(g))
			if err := user.Put(ctx, key, val, client.ReplicateConfig{}); err != nil {
				errc <- err
				return
			}
			got, err := holder.Get(ctx, key)
			if err == nil && !bytes.Equal(got, val) {
				err = fmt.Errorf("key %s: bytes differ", key)
			}
			if err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		assert.NilError(t, err)
	}
}

// TestMooncakeProtocolTasks: BatchReplicaClear, CreateCopyTask,
// CreateMoveTask and QueryTask sent in Mooncake's protocol reach
// kvferry-master's coro_rpc service. The holders speak kvferry's protocol,
// so kvferry-master hands them the copies (a holder on Mooncake's protocol
// gets no tasks: moonMaster.FetchTasks).
func TestMooncakeProtocolTasks(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	srv := startMaster(t, master.Config{})
	hcfg := client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 8 << 20}
	a, b, cc := newClient(t, hcfg), newClient(t, hcfg), newClient(t, hcfg)
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), MasterRPC: client.MasterRPCMooncake, LocalBufferSize: 1 << 20})
	assert.Equal(t, client.MasterRPCForTest(user), client.MasterRPCMooncake)
	segs := func(key string) map[string]bool {
		t.Helper()
		d, err := user.ReplicaDescs(ctx, []string{key})
		assert.NilError(t, err)
		assert.NilError(t, d[0].Err)
		out := map[string]bool{}
		for _, r := range d[0].Replicas {
			out[r.SegmentName] = true
		}
		return out
	}
	waitDone := func(id string) client.TaskInfo {
		t.Helper()
		var info client.TaskInfo
		waitUntil(t, "task "+id, func() bool {
			var err error
			info, err = user.QueryTask(ctx, id)
			assert.NilError(t, err)
			return info.Status == "SUCCESS" || info.Status == "FAILED"
		})
		return info
	}

	// Copy, then move; the replicas land where asked, with the bytes.
	v := pattern(300<<10, 7)
	assert.NilError(t, user.Put(ctx, "k", v, client.ReplicateConfig{PreferredSegments: []string{a.Hostname()}}))
	assert.DeepEqual(t, segs("k"), map[string]bool{a.Hostname(): true})
	id, err := user.CreateCopyTask(ctx, "k", []string{b.Hostname()})
	assert.NilError(t, err)
	info := waitDone(id)
	assert.Equal(t, info.Status, "SUCCESS", info.Message)
	assert.Equal(t, info.ID, id)
	assert.Assert(t, !info.Move)
	assert.Assert(t, !info.Created.After(info.Updated))
	assert.DeepEqual(t, segs("k"), map[string]bool{a.Hostname(): true, b.Hostname(): true})

	id, err = user.CreateMoveTask(ctx, "k", a.Hostname(), cc.Hostname())
	assert.NilError(t, err)
	info = waitDone(id)
	assert.Equal(t, info.Status, "SUCCESS", info.Message)
	assert.Assert(t, info.Move)
	assert.DeepEqual(t, segs("k"), map[string]bool{b.Hostname(): true, cc.Hostname(): true})
	for _, c := range []*client.Client{b, cc, user} {
		got, err := c.Get(ctx, "k")
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, v))
	}

	// Errors come back with their codes.
	_, err = user.CreateMoveTask(ctx, "k", a.Hostname(), cc.Hostname())
	assert.Equal(t, code(err), wire.ErrReplicaNotFound, "got %v", err)
	_, err = user.CreateMoveTask(ctx, "k", b.Hostname(), b.Hostname())
	assert.Equal(t, code(err), wire.ErrInvalidParams, "got %v", err)
	_, err = user.CreateCopyTask(ctx, "absent", []string{b.Hostname()})
	assert.Equal(t, code(err), wire.ErrObjectNotFound, "got %v", err)
	_, err = user.QueryTask(ctx, "00000000-0000-0000-0000-000000000001")
	assert.Equal(t, code(err), wire.ErrTaskNotFound, "got %v", err)
	_, err = user.QueryTask(ctx, "no-such-task")
	assert.Equal(t, code(err), wire.ErrInvalidParams, "got %v", err)

	// BatchReplicaClear: whole objects, then one segment's replica.
	two := client.ReplicateConfig{ReplicaNum: 2}
	for _, k := range []string{"c1", "c2", "c3"} {
		assert.NilError(t, user.Put(ctx, k, pattern(5000, 1), two))
	}
	got, err := a.BatchReplicaClear(ctx, []string{"c1"}, "") // not a's object
	assert.NilError(t, err)
	assert.Equal(t, len(got), 0)
	got, err = user.BatchReplicaClear(ctx, []string{"c1", "missing"}, "")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, []string{"c1"})
	_, err = user.Get(ctx, "c1")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	// c2 is never read (a read, or an exist check, leases it): one
	// segment at a time, cleared on the two that hold it, the object going
	// with its last replica; c3 stays.
	cleared := 0
	for _, h := range []*client.Client{a, b, cc} {
		got, err = user.BatchReplicaClear(ctx, []string{"c2"}, h.Hostname())
		assert.NilError(t, err)
		cleared += len(got)
	}
	assert.Equal(t, cleared, 2)
	ok, err := user.IsExist(ctx, "c2")
	assert.NilError(t, err)
	assert.Assert(t, !ok)
	ok, err = user.IsExist(ctx, "c3")
	assert.NilError(t, err)
	assert.Assert(t, ok)

	// Mooncake's BatchReplicaClear has no tenant: only the default maps.
	other := newClient(t, client.Config{MasterServerAddr: srv.Addr(), MasterRPC: client.MasterRPCMooncake, NoLocalBuffer: true,
		TenantID: "other"})
	_, err = other.BatchReplicaClear(ctx, []string{"c3"}, "")
	assert.Assert(t, errors.Is(err, client.ErrNotSupportedByMooncakeMaster), "got %v", err)
	assert.Equal(t, code(err), wire.ErrNotSupported)
}

// TestMasterProtocolDetection: against kvferry-master, which speaks both,
// "auto" picks kvferry's own mux; against a coro_rpc-only master it picks
// Mooncake's protocol.
func TestMasterProtocolDetection(t *testing.T) {
	srv := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), NoLocalBuffer: true})
	assert.Equal(t, client.MasterRPCForTest(c), client.MasterRPCMux)

	// A coro_rpc-only master that answers an unknown function "not
	// registered", as mooncake_master does: the probe's answer alone
	// picks Mooncake's protocol, then ServiceReady checks the version.
	fake := startFakeMooncake(t, nil)
	c2 := newClient(t, client.Config{MasterServerAddr: fake.addr, NoLocalBuffer: true, RPCTimeout: 3 * time.Second})
	assert.Equal(t, client.MasterRPCForTest(c2), client.MasterRPCMooncake)
	calls := fake.calls()
	assert.Assert(t, len(calls) >= 2, "calls %v", calls)
	assert.Equal(t, calls[0], coro.MethodKvferryMasterInfo.ID)
	assert.Equal(t, calls[1], coro.MethodServiceReady.ID)
	ok, err := c2.IsExist(ctxT(t, 10*time.Second), "k")
	assert.NilError(t, err)
	assert.Assert(t, !ok)
}

// TestMasterProtocolDetectionSlowProbe: a kvferry-master whose answer to
// the coro_rpc probe does not come within the probe's deadline is still
// called in kvferry's protocol, never in Mooncake's.
func TestMasterProtocolDetectionSlowProbe(t *testing.T) {
	srv := startMaster(t, master.Config{})
	p := startCoroStall(t, srv.Addr())
	c := newClient(t, client.Config{MasterServerAddr: p.addr, NoLocalBuffer: true, RPCTimeout: time.Second})
	assert.Equal(t, client.MasterRPCForTest(c), client.MasterRPCMux)
	assert.Assert(t, p.stalled.Load() >= 1, "the client sent no coro_rpc probe")
	ok, err := c.IsExist(ctxT(t, 10*time.Second), "k")
	assert.NilError(t, err)
	assert.Assert(t, !ok)
}

// coroStall forwards connections to a master, except that one opening
// with a coro_rpc header gets no answer: it is held until the client
// closes it (a master too loaded to answer the probe).
type coroStall struct {
	addr    string
	stalled atomic.Int32
}

func startCoroStall(t *testing.T, target string) *coroStall {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	p := &coroStall{addr: lis.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn) {
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			track(conn)
			wg.Go(func() {
				defer conn.Close()
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				var first [1]byte
				if _, err := io.ReadFull(conn, first[:]); err != nil {
					return
				}
				_ = conn.SetReadDeadline(time.Time{})
				if first[0] == coro.Magic {
					p.stalled.Add(1)
					_, _ = io.Copy(io.Discard, conn) // until the client gives up
					return
				}
				up, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				track(up)
				defer up.Close()
				if _, err := up.Write(first[:]); err != nil {
					return
				}
				wg.Go(func() { _, _ = io.Copy(conn, up); conn.Close() }) // ends when up closes
				_, _ = io.Copy(up, conn)
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// TestMooncakeMasterDies: a Mooncake-protocol master that closes the
// connection in the middle of a call, or stops answering, turns the call
// into an error within the configured deadline, and the next call dials
// again.
func TestMooncakeMasterDies(t *testing.T) {
	var mu sync.Mutex
	mode := "ok"
	fake := startFakeMooncake(t, func(m coro.Method) string {
		mu.Lock()
		defer mu.Unlock()
		if m == coro.MethodExistKey {
			return mode
		}
		return "ok"
	})
	c := newClient(t, client.Config{MasterServerAddr: fake.addr, NoLocalBuffer: true, MasterRPC: client.MasterRPCMooncake,
		RPCTimeout: 500 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	set := func(m string) {
		mu.Lock()
		mode = m
		mu.Unlock()
	}

	set("close")
	_, err := c.IsExist(ctx, "k")
	assert.Equal(t, code(err), wire.ErrRPCFail, "got %v", err)
	set("hang")
	_, err = c.IsExist(ctx, "k")
	assert.Equal(t, code(err), wire.ErrRPCTimeout, "got %v", err)
	set("ok")
	ok, err := c.IsExist(ctx, "k")
	assert.NilError(t, err)
	assert.Assert(t, !ok)

	fake.close()
	_, err = c.IsExist(ctx, "k")
	assert.Assert(t, err != nil)
	assert.Assert(t, code(err) == wire.ErrRPCFail || code(err) == wire.ErrRPCTimeout, "got %v", err)
}

// fakeMooncake is a coro_rpc master with Mooncake's answers to the calls a
// client makes at start and to ExistKey; behave says, per call, whether
// to answer ("ok"), close the connection ("close") or say nothing ("hang").
type fakeMooncake struct {
	addr  string
	lis   net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	once  sync.Once
	seen  []uint32 // function ids called, in order (under mu)
	// extra, when set, answers a call before the fake's own answers
	// (ok false: not answered).
	extra func(m coro.Method, body []byte) (resp []byte, ok bool)
}

// calls returns the function ids the fake was called with, in order.
func (f *fakeMooncake) calls() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.seen...)
}

func startFakeMooncake(t *testing.T, behave func(coro.Method) string) *fakeMooncake {
	t.Helper()
	return startFakeMooncakeWith(t, behave, nil)
}

func startFakeMooncakeWith(t *testing.T, behave func(coro.Method) string, extra func(coro.Method, []byte) ([]byte, bool)) *fakeMooncake {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	f := &fakeMooncake{addr: lis.Addr().String(), lis: lis, conns: map[net.Conn]struct{}{}, extra: extra}
	f.wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns[conn] = struct{}{}
			f.mu.Unlock()
			f.wg.Go(func() { f.serve(conn, behave) })
		}
	})
	t.Cleanup(f.close)
	return f
}

func (f *fakeMooncake) close() {
	f.once.Do(func() {
		f.lis.Close()
		f.mu.Lock()
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
}

func (f *fakeMooncake) serve(conn net.Conn, behave func(coro.Method) string) {
	defer conn.Close()
	for {
		req, err := coro.ReadRequest(conn, coro.DefaultMaxBody)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.seen = append(f.seen, req.Header.FuncID)
		f.mu.Unlock()
		m, _ := coro.MethodByID(req.Header.FuncID)
		if behave != nil {
			switch behave(m) {
			case "close":
				return
			case "hang":
				// Read on (the client gives up and closes) without answering.
				_, _ = io.Copy(io.Discard, conn)
				return
			}
		}
		var body []byte
		if f.extra != nil {
			if resp, ok := f.extra(m, req.Body); ok {
				if _, err := conn.Write(coro.AppendResponse(nil, req.Header.Seq, resp)); err != nil {
					return
				}
				continue
			}
		}
		switch m {
		case coro.MethodServiceReady:
			r := coro.OK(coro.StoreVersion)
			body = sp.Marshal(coro.ExpStringCodec, &r)
		case coro.MethodPing:
			r := coro.OK(coro.PingResponse{ViewVersionID: 1, ClientStatus: coro.ClientOK})
			body = sp.Marshal(coro.ExpPingCodec, &r)
		case coro.MethodReMountSegment, coro.MethodUnmountSegment:
			r := coro.OK(struct{}{})
			body = sp.Marshal(coro.ExpVoidCodec, &r)
		case coro.MethodExistKey:
			r := coro.OK(false)
			body = sp.Marshal(coro.ExpBoolCodec, &r)
		default:
			if _, err := conn.Write(coro.AppendError(nil, req.Header.Seq, coro.ErrcFunctionNotRegistered, "the rpc function not registered")); err != nil {
				return
			}
			continue
		}
		if _, err := conn.Write(coro.AppendResponse(nil, req.Header.Seq, body)); err != nil {
			return
		}
	}
}

// TestMooncakeMasterRunsTasks: a kvferry client holding the source of a
// Mooncake copy task runs it as mooncake_master expects: FetchTasks hands
// it the task (a JSON payload), CopyStart names the source and target
// replicas, the client copies and calls CopyEnd, then MarkTaskToComplete
// SUCCESS; a copy that cannot be written is revoked (CopyRevoke) and
// reported FAILED. (Checked against the real mooncake_master too:
// docs/reports/coro-rpc.md, "Tasks".)
func TestMooncakeMasterRunsTasks(t *testing.T) {
	const n = 4096
	ok := coro.OK(struct{}{})
	okVoid := sp.Marshal(coro.ExpVoidCodec, &ok)
	good := coro.UUID{Hi: 1, Lo: 1}
	bad := coro.UUID{Hi: 2, Lo: 2}
	var mu sync.Mutex
	var seg coro.Segment
	var fetched int
	var calls []string
	done := map[coro.UUID]coro.TaskCompleteRequest{}
	reported := make(chan struct{}, 2)
	extra := func(m coro.Method, body []byte) ([]byte, bool) {
		mu.Lock()
		defer mu.Unlock()
		switch m {
		case coro.MethodReMountSegment:
			a, err := sp.Unmarshal(coro.ReMountSegmentArgsCodec, body, sp.Limits{})
			assert.Check(t, err)
			if len(a.Segments) > 0 {
				seg = a.Segments[0]
			}
			return okVoid, true
		case coro.MethodFetchTasks:
			var ts []coro.TaskAssignment
			if fetched == 0 && seg.Name != "" {
				payload := fmt.Sprintf(`{"tenant_id":"default","key":"k","source":%q,"targets":[%q],`+
					`"dynamic_replication_lease_id_high":0,"dynamic_replication_lease_id_low":0,"dynamic_replication_version_epoch":0}`,
					seg.Name, seg.Name)
				ts = []coro.TaskAssignment{{ID: good, Type: coro.TaskReplicaCopy, Payload: payload},
					{ID: bad, Type: coro.TaskReplicaCopy, Payload: strings.Replace(payload, `"k"`, `"bad"`, 1)}}
				fetched++
			}
			r := coro.OK(ts)
			return sp.Marshal(coro.ExpTasksCodec, &r), true
		case coro.MethodCopyStart:
			a, err := sp.Unmarshal(coro.CopyStartArgsCodec, body, sp.Limits{})
			assert.Check(t, err)
			calls = append(calls, "CopyStart "+a.Key)
			desc := func(addr uint64) coro.ReplicaDescriptor {
				return coro.ReplicaDescriptor{Kind: coro.KindMemory, Buffer: coro.BufferDescriptor{Size: n, BufferAddress: addr,
					Protocol: "tcp", TransportEndpoint: seg.Name}}
			}
			src := desc(seg.Base)
			if a.Key == "bad" {
				src = desc(seg.Base + seg.Size) // outside the holder's segment
			}
			r := coro.OK(coro.CopyStartResponse{Source: src, Targets: []coro.ReplicaDescriptor{desc(seg.Base + n)}})
			return sp.Marshal(coro.ExpCopyStartCodec, &r), true
		case coro.MethodCopyEnd, coro.MethodCopyRevoke:
			a, err := sp.Unmarshal(coro.ClientKeyArgsCodec, body, sp.Limits{})
			assert.Check(t, err)
			calls = append(calls, m.Name+" "+a.Key)
			return okVoid, true
		case coro.MethodMarkTaskToComplete:
			a, err := sp.Unmarshal(coro.MarkTaskToCompleteArgsCodec, body, sp.Limits{})
			assert.Check(t, err)
			done[a.Request.ID] = a.Request
			reported <- struct{}{}
			return okVoid, true
		}
		return nil, false
	}
	fake := startFakeMooncakeWith(t, nil, extra)
	newClient(t, client.Config{MasterServerAddr: fake.addr, MasterRPC: client.MasterRPCMooncake, GlobalSegmentSize: 1 << 20,
		NoLocalBuffer: true, RPCTimeout: 3 * time.Second})
	timeout := time.After(10 * time.Second)
	for range 2 {
		select {
		case <-reported:
		case <-timeout:
			ids := fake.calls()
			names := make([]string, len(ids))
			for i, id := range ids {
				m, _ := coro.MethodByID(id)
				names[i] = m.Name
			}
			t.Fatalf("the tasks were not reported within 10 s (calls %v)", names)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, done[good].Status, coro.TaskSuccess, done[good].Message)
	assert.Equal(t, done[bad].Status, coro.TaskFailed)
	assert.Assert(t, done[bad].Message != "")
	assert.Assert(t, slices.Contains(calls, "CopyEnd k"), "calls %v", calls)
	assert.Assert(t, slices.Contains(calls, "CopyRevoke bad"), "calls %v", calls)
	assert.Assert(t, !slices.Contains(calls, "CopyEnd bad"), "calls %v", calls)
}
