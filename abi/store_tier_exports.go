package abi

/*
#include <stdint.h>
#include <stddef.h>
#include "store_c.h"
*/
import "C"

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// The store's disk tier and copy/move tasks (kvferry.h, "Store tiers and
// tasks"): kvferry_store_set_ssd_offload and kvferry_store_set_drain
// before setup; kvferry_store_create_copy_task, _create_move_task and
// _query_task after.

// storeTierOpts are the options of the tier calls, applied at setup.
type storeTierOpts struct {
	ssdPath     string
	ssdCapacity uint64
	drain       time.Duration
}

// apply puts the options into cfg.
func (o storeTierOpts) apply(cfg *client.Config) {
	cfg.SSDOffloadPath, cfg.SSDCapacity, cfg.DrainOnClose = o.ssdPath, o.ssdCapacity, o.drain
}

// setOpt runs set on h's options before setup (INVALID_PARAMS after).
func setOpt(h C.uintptr_t, what string, set func(o *storeTierOpts)) C.int {
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setUp() {
		return C.int(s.fail(fmt.Errorf("store %s: already set up: %w", what, wire.ErrInvalidParams)))
	}
	set(&s.tier)
	return 0
}

//export kvf_store_set_ssd_offload
func kvf_store_set_ssd_offload(h C.uintptr_t, path *C.char, capacity C.uint64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	p, _ := cstr(path)
	return setOpt(h, "set ssd offload", func(o *storeTierOpts) { o.ssdPath, o.ssdCapacity = p, uint64(capacity) })
}

//export kvf_store_set_drain
func kvf_store_set_drain(h C.uintptr_t, graceMs C.uint64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	d := time.Duration(min(uint64(graceMs), uint64(maxDrainMs))) * time.Millisecond
	return setOpt(h, "set drain", func(o *storeTierOpts) { o.drain = d })
}

// maxDrainMs caps a graceful unmount's wait (the master's own cap).
const maxDrainMs = 5 * 60 * 1000

// putID copies a task id into the caller's buffer.
func putID(s *storeHandle, id string, buf *C.char, n C.size_t) C.int {
	if buf == nil || uint64(n) <= uint64(len(id)) {
		return C.int(s.fail(fmt.Errorf("task id of %d bytes: buffer of %d: %w", len(id), n, wire.ErrBufferOverflow)))
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(dst, id)
	dst[len(id)] = 0
	return 0
}

//export kvf_store_create_copy_task
func kvf_store_create_copy_task(h C.uintptr_t, key *C.char, targets **C.char, count C.size_t, idOut *C.char, idLen C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	k, _ := cstr(key)
	id, err := c.CreateCopyTask(context.Background(), k, goKeys(targets, count))
	if err != nil {
		return C.int(s.fail(err))
	}
	return putID(s, id, idOut, idLen)
}

//export kvf_store_create_move_task
func kvf_store_create_move_task(h C.uintptr_t, key, source, target *C.char, idOut *C.char, idLen C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	k, _ := cstr(key)
	src, _ := cstr(source)
	dst, _ := cstr(target)
	id, err := c.CreateMoveTask(context.Background(), k, src, dst)
	if err != nil {
		return C.int(s.fail(err))
	}
	return putID(s, id, idOut, idLen)
}

// Task types and states of kvferry_store_query_task (kvferry.h).
var taskStatusCodes = map[string]C.int{"PENDING": 0, "PROCESSING": 1, "SUCCESS": 2, "FAILED": 3}

//export kvf_store_query_task
func kvf_store_query_task(h C.uintptr_t, taskID *C.char, typ, status *C.int, createdMs, updatedMs *C.int64_t,
	assigned *C.char, assignedLen C.size_t, msg *C.char, msgLen C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	id, _ := cstr(taskID)
	t, err := c.QueryTask(context.Background(), id)
	if err != nil {
		return C.int(s.fail(err))
	}
	if typ != nil {
		*typ = 0
		if t.Move {
			*typ = 1
		}
	}
	if status != nil {
		*status = taskStatusCodes[t.Status]
	}
	if createdMs != nil {
		*createdMs = C.int64_t(t.Created.UnixMilli())
	}
	if updatedMs != nil {
		*updatedMs = C.int64_t(t.Updated.UnixMilli())
	}
	putTrunc(assigned, assignedLen, t.AssignedClient)
	putTrunc(msg, msgLen, t.Message)
	return 0
}

// putTrunc copies s into buf (NUL-ended, truncated to n).
func putTrunc(buf *C.char, n C.size_t, s string) {
	if buf == nil || n == 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:len(dst)-1], s)
	dst[k] = 0
}

//export kvf_store_publish
func kvf_store_publish(h C.uintptr_t, key *C.char, value unsafe.Pointer, size C.size_t, expected C.uint64_t,
	cfg *C.mooncake_replicate_config_t, versionOut *C.uint64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int(s.fail(err))
	}
	rcfg, err := replicateConfig(cfg)
	if err != nil {
		return C.int(s.fail(err))
	}
	v, err := c.PublishFrom(context.Background(), C.GoString(key), uintptr(value), uint64(size), uint64(expected), rcfg)
	if err != nil {
		return C.int(s.fail(err))
	}
	if versionOut != nil {
		*versionOut = C.uint64_t(v)
	}
	return 0
}

//export kvf_store_get_versioned
func kvf_store_get_versioned(h C.uintptr_t, key *C.char, minVersion, waitMs C.uint64_t, out *unsafe.Pointer,
	versionOut *C.uint64_t) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := s.ready()
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	wait := time.Duration(min(uint64(waitMs), uint64(time.Hour/time.Millisecond))) * time.Millisecond
	b, v, err := c.GetVersioned(context.Background(), C.GoString(key), uint64(minVersion), wait)
	if err != nil {
		return C.int64_t(s.fail(err))
	}
	p, err := cmem.Malloc(uint64(max(len(b), 1)))
	if err != nil {
		return C.int64_t(s.fail(fmt.Errorf("get versioned: %w: %w", err, wire.ErrBufferOverflow)))
	}
	copy(cmem.Bytes(p, uint64(len(b))), b)
	*out = cmem.Pointer(p)
	if versionOut != nil {
		*versionOut = C.uint64_t(v)
	}
	return C.int64_t(len(b))
}
