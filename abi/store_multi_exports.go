package abi

/*
#include <stdlib.h>
#include <stdint.h>
#include "store_c.h"
#include "kvferry.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// The Go side of kvferry.h's multi-buffer store calls (Mooncake's
// batch_put_from_multi_buffers and batch_get_into_multi_buffers), called
// from store_c.c after the fork guard and the NULL checks.

// multiLists is one multi-buffer call's view of its buffer arrays: the
// flat list and each key's list over it. They are pooled: the store
// client's calls are synchronous and keep nothing of the lists after they
// return.
type multiLists struct {
	flat  []client.Buffer
	lists [][]client.Buffer
}

var multiPool = sync.Pool{New: func() any { return new(multiLists) }}

// maxPooledBuffers bounds the lists kept for reuse (a rare huge call does
// not pin its arrays).
const maxPooledBuffers = 1 << 14

func (m *multiLists) release() {
	if cap(m.flat) > maxPooledBuffers || cap(m.lists) > maxPooledBuffers {
		return
	}
	clear(m.lists) // no references into flat from a pooled value
	multiPool.Put(m)
}

// multiBuffers converts the flat buffer arrays of count keys: key i owns
// counts[i] consecutive entries of bufs and sizes. A total over maxBatch
// (or one that overflows) is INVALID_PARAMS. The caller releases the lists
// once the call is done with them.
func multiBuffers(bufs *unsafe.Pointer, sizes *C.size_t, counts *C.size_t, count C.size_t) (*multiLists, error) {
	cs := unsafe.Slice(counts, int(count))
	var total uint64
	for _, n := range cs {
		total += uint64(n)
		if uint64(n) > maxBatch || total > maxBatch {
			return nil, fmt.Errorf("multi-buffer batch of more than %d buffers: %w", maxBatch, wire.ErrInvalidParams)
		}
	}
	if total > 0 && (bufs == nil || sizes == nil) {
		return nil, fmt.Errorf("multi-buffer batch: NULL buffers or sizes: %w", wire.ErrInvalidParams)
	}
	m := multiPool.Get().(*multiLists)
	if uint64(cap(m.flat)) < total {
		m.flat = make([]client.Buffer, total)
	}
	flat := m.flat[:total]
	if total > 0 {
		ps, ns := unsafe.Slice(bufs, int(total)), unsafe.Slice(sizes, int(total))
		for i := range flat {
			flat[i] = client.Buffer{Addr: uintptr(ps[i]), Size: uint64(ns[i])}
		}
	}
	if cap(m.lists) < int(count) {
		m.lists = make([][]client.Buffer, count)
	}
	out := m.lists[:count]
	off := uint64(0)
	for i, n := range cs {
		out[i] = flat[off : off+uint64(n) : off+uint64(n)]
		off += uint64(n)
	}
	m.lists = out
	return m, nil
}

//export kvf_store_batch_put_multi
func kvf_store_batch_put_multi(h C.uintptr_t, keys **C.char, count C.size_t, bufs *unsafe.Pointer, sizes *C.size_t,
	counts *C.size_t, cfg *C.mooncake_replicate_config_t, groups **C.char, upsert C.int, results *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	fail := func(err error) C.int {
		code := C.int(s.fail(err))
		for i := range out {
			out[i] = code
		}
		return 0
	}
	c, err := s.ready()
	if err != nil {
		return fail(err)
	}
	rcfg, err := replicateConfig(cfg)
	if err != nil {
		return fail(err)
	}
	if groups != nil {
		rcfg.GroupIDs = goKeys(groups, count)
	}
	ml, err := multiBuffers(bufs, sizes, counts, count)
	if err != nil {
		return fail(err)
	}
	defer ml.release()
	ks := goKeys(keys, count)
	var errs []error
	if upsert != 0 {
		errs = c.BatchUpsertFromMulti(context.Background(), ks, ml.lists, rcfg)
	} else {
		errs = c.BatchPutFromMulti(context.Background(), ks, ml.lists, rcfg)
	}
	for i := range out {
		out[i] = C.int(s.fail(errs[i]))
	}
	return 0
}

//export kvf_store_batch_get_multi
func kvf_store_batch_get_multi(h C.uintptr_t, keys **C.char, count C.size_t, bufs *unsafe.Pointer, sizes *C.size_t,
	counts *C.size_t, results *C.int64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	c, err := s.ready()
	var ml *multiLists
	if err == nil {
		ml, err = multiBuffers(bufs, sizes, counts, count)
	}
	if err != nil {
		code := C.int64_t(s.fail(err))
		for i := range out {
			out[i] = code
		}
		return 0
	}
	defer ml.release()
	n, errs := c.BatchGetIntoMulti(context.Background(), goKeys(keys, count), ml.lists)
	for i := range out {
		if errs[i] != nil {
			out[i] = C.int64_t(s.fail(errs[i]))
		} else {
			out[i] = C.int64_t(n[i])
		}
	}
	return 0
}
