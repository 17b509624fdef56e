package abi

/*
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "transfer_engine_c.h"
#include "store_c.h"
#include "kvferry.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// The Go side of the "Python support" section of kvferry.h: what the
// Python binding (python/kvferry) needs beyond Mooncake's C headers. Every
// function here is called only from store_py_c.c, after the fork guard and
// the NULL checks, and recovers panics into an error code.

// Async queue limits (kvferry.h).
const (
	defaultQueueWorkers = 16
	maxQueueWorkers     = 256
	defaultQueueDepth   = 4096
	maxQueueDepth       = 1 << 20
)

// Queue operations and flags; the values are kvferry.h's KVFERRY_QOP_* and
// KVFERRY_QFLAG_*.
const (
	qopPut      = 1
	qopGetInto  = 2
	qopGetAlloc = 3
	qopIsExist  = 4
	qopGetSize  = 5
	qopRemove   = 6

	qflagUpsert = 1
	qflagForce  = 2
)

//export kvf_py_probe
func kvf_py_probe(h C.uintptr_t, name *C.char) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	if err := e.Probe(context.Background(), C.GoString(name)); err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	return 0
}

//export kvf_py_segment_buffers
func kvf_py_segment_buffers(h C.uintptr_t, id C.int32_t, out *C.buffer_entry_t, capacity C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	var bufs []struct{ addr, length uint64 }
	if engine.SegmentID(id) == engine.LocalSegment {
		for _, b := range e.LocalDescriptor().Buffers {
			bufs = append(bufs, struct{ addr, length uint64 }{b.Addr, b.Length})
		}
	} else {
		d, err := e.SegmentDescriptor(engine.SegmentID(id))
		if err != nil {
			engineFail(e, err)
			return C.int(resourceCode(err))
		}
		for _, b := range d.Buffers {
			bufs = append(bufs, struct{ addr, length uint64 }{b.Addr, b.Length})
		}
	}
	if capacity > 0 {
		dst := unsafe.Slice(out, int(min(uint64(capacity), uint64(len(bufs)))))
		for i := range dst {
			// The address may be in another process: store it as an
			// integer, never as a Go pointer.
			*(*uint64)(unsafe.Pointer(&dst[i].addr)) = bufs[i].addr
			dst[i].length = C.size_t(bufs[i].length)
		}
	}
	return C.int(len(bufs))
}

//export kvf_py_setup_with_engine
func kvf_py_setup_with_engine(h, eh C.uintptr_t, globalSegmentSize, localBufferSize C.uint64_t,
	protocol, masterAddr *C.char) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	e, err := lookupEngine(uintptr(eh))
	if err != nil {
		return C.int(s.fail(fmt.Errorf("store setup: %w: %w", err, wire.ErrInvalidParams)))
	}
	proto, ok := cstr(protocol)
	if !ok || proto == "" {
		proto = "tcp"
	}
	addr, ok := cstr(masterAddr)
	if !ok {
		addr = client.DefaultMasterAddr
	}
	cfg := client.Config{
		LocalHostname:     e.SegmentName(),
		MetadataServer:    e.Config().MetadataConn,
		GlobalSegmentSize: uint64(globalSegmentSize),
		LocalBufferSize:   uint64(localBufferSize),
		NoLocalBuffer:     localBufferSize == 0,
		Protocol:          proto,
		MasterServerAddr:  addr,
		Engine:            e,
		Stack:             hostenv.StackConfig(),
		Logger:            logger,
	}
	storeEnv(&cfg)
	if addr == "" || addr == client.EmbeddedMaster {
		cfg.StartEmbeddedMaster = embedded.StartMaster(master.Config{Logger: logger})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c.Load() != nil {
		return C.int(s.fail(fmt.Errorf("store setup: already set up: %w", wire.ErrInvalidParams)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RPCTimeout+time.Minute)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		return C.int(s.fail(fmt.Errorf("store setup with engine %s: %w", e.SegmentName(), err)))
	}
	s.c.Store(c)
	return 0
}

//export kvf_py_master_addr
func kvf_py_master_addr(h C.uintptr_t, buf *C.char, n C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	return C.int(putString(buf, n, c.MasterAddr()))
}

// replicaJSON is one replica in kvferry_store_replica_desc's answer.
type replicaJSON struct {
	SegmentName string `json:"segment_name"`
	Address     uint64 `json:"address"`
	Size        uint64 `json:"size"`
	Status      string `json:"status"`
	Protocol    string `json:"protocol"`
}

// keyReplicasJSON is one key in kvferry_store_replica_desc's answer.
type keyReplicasJSON struct {
	Code     int32         `json:"code"`
	Size     uint64        `json:"size"`
	Replicas []replicaJSON `json:"replicas"`
}

// replicaStatusName gives Mooncake's ReplicaStatus name of a wire status.
func replicaStatusName(s wire.ReplicaStatus) string {
	return strings.TrimPrefix(s.String(), "REPLICA_STATUS_")
}

//export kvf_py_replica_desc
func kvf_py_replica_desc(h C.uintptr_t, keys **C.char, count C.size_t, out *unsafe.Pointer) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	res, err := replicaLists(uintptr(h), c, goKeys(keys, count))
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	b, err := json.Marshal(res)
	if err != nil {
		return C.int64_t(s.fail(fmt.Errorf("replica desc: %w", err)))
	}
	p := C.malloc(C.size_t(len(b) + 1))
	if p == nil {
		return C.int64_t(s.fail(fmt.Errorf("replica desc: malloc %d bytes: %w", len(b)+1, wire.ErrBufferOverflow)))
	}
	dst := unsafe.Slice((*byte)(p), len(b)+1)
	copy(dst, b)
	dst[len(b)] = 0
	*out = p
	return C.int64_t(len(b))
}

// masterConns caches one gRPC connection per store handle for the replica
// lookups (the store client has no exported call for them). An entry is
// replaced when the client's master changes and dropped once its store
// handle is gone.
var masterConns struct {
	sync.Mutex
	m map[uintptr]*pyMasterConn // guarded
}

// pyMasterConn is a cached connection to one master address.
type pyMasterConn struct {
	addr string
	cc   *grpc.ClientConn
}

// masterFor returns a connection to the current master of store handle h.
func masterFor(h uintptr, c *client.Client) (*grpc.ClientConn, error) {
	addr := c.MasterAddr()
	masterConns.Lock()
	defer masterConns.Unlock()
	if masterConns.m == nil {
		masterConns.m = make(map[uintptr]*pyMasterConn)
	}
	for k, mc := range masterConns.m {
		if _, live := stores.get(k); !live {
			_ = mc.cc.Close()
			delete(masterConns.m, k)
		}
	}
	if mc := masterConns.m[h]; mc != nil {
		if mc.addr == addr {
			return mc.cc, nil
		}
		_ = mc.cc.Close()
		delete(masterConns.m, h)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("replica desc: dial master %s: %w: %w", addr, err, wire.ErrRPCFail)
	}
	masterConns.m[h] = &pyMasterConn{addr: addr, cc: cc}
	return cc, nil
}

// replicaLists asks the client's current master for the replica lists of
// keys in one BatchGetReplicaList call.
func replicaLists(h uintptr, c *client.Client, keys []string) ([]keyReplicasJSON, error) {
	out := make([]keyReplicasJSON, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	addr := c.MasterAddr()
	cc, err := masterFor(h, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), client.DefaultRPCTimeout)
	defer cancel()
	resp, err := wire.NewMasterClient(cc).BatchGetReplicaList(ctx, &wire.BatchKeyRequest{Keys: keys})
	if err != nil {
		return nil, fmt.Errorf("replica desc from master %s: %w", addr, wire.FromStatus(err))
	}
	results := resp.GetResults()
	if len(results) != len(keys) {
		return nil, fmt.Errorf("replica desc: master %s answered %d results for %d keys: %w", addr, len(results), len(keys), wire.ErrRPCFail)
	}
	for i, r := range results {
		out[i] = keyReplicasJSON{Code: r.GetCode(), Size: r.GetSize(), Replicas: []replicaJSON{}}
		for _, rep := range r.GetReplicas() {
			out[i].Replicas = append(out[i].Replicas, replicaJSON{
				SegmentName: rep.GetSegmentName(), Address: rep.GetAddress(), Size: rep.GetSize(),
				Status: replicaStatusName(rep.GetStatus()), Protocol: rep.GetProtocol(),
			})
		}
	}
	return out, nil
}

// ---- asynchronous completion queue ----

// queueJob is one submitted call.
type queueJob struct {
	op    int
	flags int
	tag   uint64
	key   string
	buf   uintptr
	size  uint64
	cfg   client.ReplicateConfig
}

// queueDone is one finished call, waiting for a poll.
type queueDone struct {
	tag    uint64
	result int64
	data   unsafe.Pointer // malloc'ed object of a GET_ALLOC, else nil
}

// storeQueue is one kvferry_store_queue_t: a fixed pool of workers that
// run store calls and an eventfd that signals completions.
type storeQueue struct {
	store uintptr // the store handle, looked up per call
	fd    int     // eventfd; readable while completions wait
	depth int64

	// outstanding counts calls submitted and not yet polled.
	outstanding atomic.Int64

	// submitMu orders submissions against destroy: submit holds it shared
	// while it sends, destroy exclusively while it closes jobs.
	submitMu sync.RWMutex
	closed   bool // guarded by submitMu
	jobs     chan queueJob

	done struct {
		sync.Mutex
		list []queueDone // guarded
	}
	wg sync.WaitGroup
}

// queues is the table of live completion queues.
var queues handles[*storeQueue]

//export kvf_py_queue_create
func kvf_py_queue_create(h C.uintptr_t, workers C.int, depth C.size_t) (q C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			q = 0
		}
	}()
	if _, ok := lookupStore(h); !ok {
		return 0
	}
	n := int(workers)
	switch {
	case n == 0:
		n = defaultQueueWorkers
	case n < 0 || n > maxQueueWorkers:
		return 0
	}
	d := int64(depth)
	switch {
	case depth == 0:
		d = defaultQueueDepth
	case uint64(depth) > maxQueueDepth:
		return 0
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		logger.Error("store queue: eventfd failed", "err", err)
		return 0
	}
	sq := &storeQueue{store: uintptr(h), fd: fd, depth: d, jobs: make(chan queueJob, d)}
	sq.wg.Add(n)
	for range n {
		go sq.runWorker() // owned by sq; stops when jobs is closed in destroy
	}
	return C.uintptr_t(queues.add(sq))
}

//export kvf_py_queue_fd
func kvf_py_queue_fd(q C.uintptr_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	sq, ok := queues.get(uintptr(q))
	if !ok {
		return storeErr
	}
	return C.int(sq.fd)
}

//export kvf_py_queue_submit
func kvf_py_queue_submit(q C.uintptr_t, op C.int, tag C.uint64_t, key *C.char, buf unsafe.Pointer, size C.size_t,
	cfg *C.mooncake_replicate_config_t, flags C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	sq, ok := queues.get(uintptr(q))
	if !ok {
		return storeErr
	}
	if op < qopPut || op > qopRemove {
		return storeErr
	}
	j := queueJob{op: int(op), flags: int(flags), tag: uint64(tag), key: C.GoString(key), buf: uintptr(buf), size: uint64(size)}
	if op == qopPut {
		rcfg, err := replicateConfig(cfg)
		if err != nil {
			return C.int(wire.CodeOf(err))
		}
		j.cfg = rcfg
	}
	sq.submitMu.RLock()
	defer sq.submitMu.RUnlock()
	if sq.closed {
		return errClosed
	}
	if sq.outstanding.Add(1) > sq.depth {
		sq.outstanding.Add(-1)
		return errTooManyRequests
	}
	// outstanding <= depth = cap(jobs), so the send never blocks.
	sq.jobs <- j
	return 0
}

//export kvf_py_queue_poll
func kvf_py_queue_poll(q C.uintptr_t, tags *C.uint64_t, results *C.int64_t, data *unsafe.Pointer, limit C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	sq, ok := queues.get(uintptr(q))
	if !ok {
		return storeErr
	}
	if limit == 0 {
		return 0
	}
	sq.done.Lock()
	n := min(len(sq.done.list), int(min(uint64(limit), 1<<20)))
	got := sq.done.list[:n:n]
	sq.done.list = append([]queueDone(nil), sq.done.list[n:]...)
	sq.done.Unlock()
	if n == 0 {
		return 0
	}
	ts := unsafe.Slice(tags, n)
	rs := unsafe.Slice(results, n)
	var ds []unsafe.Pointer
	if data != nil {
		ds = unsafe.Slice(data, n)
	}
	for i, d := range got {
		ts[i] = C.uint64_t(d.tag)
		rs[i] = C.int64_t(d.result)
		switch {
		case ds != nil:
			ds[i] = d.data
		case d.data != nil:
			C.free(d.data)
		}
	}
	sq.outstanding.Add(-int64(n))
	return C.int(n)
}

//export kvf_py_queue_destroy
func kvf_py_queue_destroy(q C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	sq, ok := queues.remove(uintptr(q))
	if !ok {
		return
	}
	sq.submitMu.Lock()
	sq.closed = true
	close(sq.jobs)
	sq.submitMu.Unlock()
	sq.wg.Wait()
	sq.done.Lock()
	for _, d := range sq.done.list {
		if d.data != nil {
			C.free(d.data)
		}
	}
	sq.done.list = nil
	sq.done.Unlock()
	_ = unix.Close(sq.fd)
}

// runWorker runs submitted calls until jobs is closed (by
// kvf_py_queue_destroy, which waits for it).
func (sq *storeQueue) runWorker() {
	defer sq.wg.Done()
	for j := range sq.jobs {
		d := sq.run(j)
		sq.done.Lock()
		sq.done.list = append(sq.done.list, d)
		sq.done.Unlock()
		var one [8]byte
		one[0] = 1 // native little-endian uint64 1
		_, _ = unix.Write(sq.fd, one[:])
	}
}

// run performs one call and returns its completion; a panic becomes -1.
func (sq *storeQueue) run(j queueJob) (d queueDone) {
	d.tag = j.tag
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			if d.data != nil {
				C.free(d.data)
				d.data = nil
			}
			d.result = storeErr
		}
	}()
	s, ok := stores.get(sq.store)
	if !ok {
		d.result = storeErr
		return d
	}
	c, err := s.ready()
	if err != nil {
		d.result = int64(s.fail(err))
		return d
	}
	ctx := context.Background()
	switch j.op {
	case qopPut:
		if j.flags&qflagUpsert != 0 {
			err = c.UpsertFrom(ctx, j.key, j.buf, j.size, j.cfg)
		} else {
			err = c.PutFrom(ctx, j.key, j.buf, j.size, j.cfg)
		}
		d.result = int64(s.fail(err))
	case qopGetInto:
		n, err := c.GetInto(ctx, j.key, j.buf, j.size)
		d.result = int64(n)
		if err != nil {
			d.result = int64(s.fail(err))
		}
	case qopGetAlloc:
		d.result, d.data = getAlloc(ctx, s, c, j.key)
	case qopIsExist:
		yes, err := c.IsExist(ctx, j.key)
		switch {
		case err != nil:
			d.result = int64(s.fail(err))
		case yes:
			d.result = 1
		}
	case qopGetSize:
		n, err := c.GetSize(ctx, j.key)
		d.result = int64(n)
		if err != nil {
			d.result = int64(s.fail(err))
		}
	case qopRemove:
		d.result = int64(s.fail(c.Remove(ctx, j.key, j.flags&qflagForce != 0)))
	default:
		d.result = storeErr
	}
	return d
}

// getAlloc reads key into malloc'ed memory (as kvferry_store_get_alloc):
// it returns the size and the memory, or a negative code and nil.
func getAlloc(ctx context.Context, s *storeHandle, c *client.Client, key string) (int64, unsafe.Pointer) {
	// The object may be replaced between the size query and the read; try
	// again with the new size a few times.
	for range 3 {
		size, err := c.GetSize(ctx, key)
		if err != nil {
			return int64(s.fail(err)), nil
		}
		p := C.malloc(C.size_t(max(size, 1)))
		if p == nil {
			return int64(s.fail(fmt.Errorf("get %q: malloc %d bytes: %w", key, size, wire.ErrBufferOverflow))), nil
		}
		n, err := c.GetInto(ctx, key, uintptr(p), size)
		if err == nil {
			return int64(n), p
		}
		C.free(p)
		if wire.CodeOf(err) != wire.ErrInvalidParams {
			return int64(s.fail(err)), nil
		}
	}
	return int64(s.fail(fmt.Errorf("get %q: object keeps changing size: %w", key, wire.ErrInvalidParams))), nil
}
