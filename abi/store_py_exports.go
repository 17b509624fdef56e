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
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/store/asyncq"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// The Go side of the "Python support" section of kvferry.h: what the
// Python binding (python/kvferry) needs beyond Mooncake's C headers. Every
// function here is called only from store_py_c.c, after the fork guard and
// the NULL checks, and recovers panics into an error code.

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
		Stack:             stack.ConfigFromEnv(hostenv.Lookup),
		Logger:            logger,
	}
	storeEnv(&cfg)
	if addr == "" || addr == client.EmbeddedMaster {
		cfg.StartEmbeddedMaster = embedded.StartMaster(embedded.WithClientAuth(master.Config{Logger: logger}, cfg))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setUp() {
		return C.int(s.fail(fmt.Errorf("store setup: already set up: %w", wire.ErrInvalidParams)))
	}
	cfg.TenantID = s.tenant
	s.tier.apply(&cfg)
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
	// Disk marks a LOCAL_DISK replica: a file under FilePath on the
	// holder named SegmentName.
	Disk     bool   `json:"disk,omitempty"`
	FilePath string `json:"file_path,omitempty"`
}

// keyReplicasJSON is one key in kvferry_store_replica_desc's answer.
type keyReplicasJSON struct {
	Code     int32         `json:"code"`
	Size     uint64        `json:"size"`
	Replicas []replicaJSON `json:"replicas"`
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
	res, err := replicaLists(c, goKeys(keys, count))
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

// replicaLists asks the client's master for the replica lists of keys in
// one call (client.ReplicaDescs) and converts them for the JSON answer.
func replicaLists(c storeBackend, keys []string) ([]keyReplicasJSON, error) {
	out := make([]keyReplicasJSON, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	res, err := c.ReplicaDescs(context.Background(), keys)
	if err != nil {
		return nil, fmt.Errorf("replica desc: %w", err)
	}
	for i, r := range res {
		out[i] = keyReplicasJSON{Code: int32(wire.CodeOf(r.Err)), Size: r.Size, Replicas: []replicaJSON{}}
		for _, rep := range r.Replicas {
			out[i].Replicas = append(out[i].Replicas, replicaJSON{
				SegmentName: rep.SegmentName, Address: rep.Address, Size: rep.Size,
				Status: rep.Status, Protocol: rep.Protocol, Disk: rep.Disk, FilePath: rep.FilePath,
			})
		}
	}
	return out, nil
}

// ---- asynchronous completion queue ----

// The queue itself is store/asyncq; here are its table, the conversion of
// the C arguments and the code tables.

// queues is the table of live completion queues.
var queues handles[*asyncq.Queue]

// queueCode maps an error of asyncq's Submit to kvferry_store_queue_submit's
// code; the one table of that call. Bad arguments and anything unknown are
// -1.
func queueCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, asyncq.ErrClosed):
		return errClosed
	case errors.Is(err, asyncq.ErrFull):
		return errTooManyRequests
	}
	return storeErr
}

// queueResult is a completion's result for kvferry_store_queue_poll: the
// value, or the store code of its error (wire's table).
func queueResult(d asyncq.Completion) int64 {
	if d.Err != nil {
		return int64(wire.CodeOf(d.Err))
	}
	return int64(d.Value)
}

// errStoreGone is a queued call's error once its store handle was
// destroyed (-1, as Mooncake's INTERNAL_ERROR).
var errStoreGone = fmt.Errorf("store handle destroyed: %w", wire.ErrInternal)

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
	if uint64(depth) > asyncq.MaxDepth {
		return 0
	}
	sh := uintptr(h)
	sq, err := asyncq.New(asyncq.Config{
		Workers: int(workers),
		Depth:   int(depth),
		// The store handle is looked up per call: it may be set up, or
		// destroyed, after the queue was made.
		Store: func() (asyncq.Store, error) {
			s, ok := stores.get(sh)
			if !ok {
				return nil, errStoreGone
			}
			c, err := s.ready()
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		OnError: func(err error) {
			if s, ok := stores.get(sh); ok {
				s.fail(err)
			}
		},
		Logger: logger,
	})
	if err != nil {
		if !errors.Is(err, asyncq.ErrInvalid) {
			logger.Error("store queue creation failed", "err", err)
		}
		return 0
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
	return C.int(sq.FD())
}

//export kvf_py_queue_submit
func kvf_py_queue_submit(q C.uintptr_t, op C.int, tag C.uint64_t, key *C.char, buf unsafe.Pointer, size C.size_t,
	cfg *C.mooncake_replicate_config_t, flags C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	sq, ok := queues.get(uintptr(q))
	if !ok {
		return storeErr
	}
	j := asyncq.Job{Op: asyncq.Op(op), Flags: asyncq.Flags(flags), Tag: uint64(tag), Key: C.GoString(key), Addr: uintptr(buf), Size: uint64(size)}
	if j.Op == asyncq.OpPut {
		rcfg, err := replicateConfig(cfg)
		if err != nil {
			return C.int(wire.CodeOf(err))
		}
		j.Config = rcfg
	}
	return C.int(queueCode(sq.Submit(j)))
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
	got := sq.Poll(int(min(uint64(limit), 1<<20)))
	n := len(got)
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
		ts[i] = C.uint64_t(d.Tag)
		rs[i] = C.int64_t(queueResult(d))
		switch {
		case ds != nil:
			ds[i] = cmem.Pointer(d.Data)
		case d.Data != 0:
			cmem.Free(d.Data)
		}
	}
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
	if err := sq.Close(); err != nil {
		logger.Warn("store queue destroy", "err", err)
	}
}

// queueCLayout reports kvferry.h's queue constants as the C compiler sees
// them, for the tests (cgo cannot appear in _test.go files).
func queueCLayout() map[string]int {
	return map[string]int{
		"KVFERRY_QOP_PUT":               C.KVFERRY_QOP_PUT,
		"KVFERRY_QOP_GET_INTO":          C.KVFERRY_QOP_GET_INTO,
		"KVFERRY_QOP_GET_ALLOC":         C.KVFERRY_QOP_GET_ALLOC,
		"KVFERRY_QOP_IS_EXIST":          C.KVFERRY_QOP_IS_EXIST,
		"KVFERRY_QOP_GET_SIZE":          C.KVFERRY_QOP_GET_SIZE,
		"KVFERRY_QOP_REMOVE":            C.KVFERRY_QOP_REMOVE,
		"KVFERRY_QFLAG_UPSERT":          C.KVFERRY_QFLAG_UPSERT,
		"KVFERRY_QFLAG_FORCE":           C.KVFERRY_QFLAG_FORCE,
		"KVFERRY_ERR_TOO_MANY_REQUESTS": C.KVFERRY_ERR_TOO_MANY_REQUESTS,
		"KVFERRY_ERR_CLOSED":            C.KVFERRY_ERR_CLOSED,
	}
}
