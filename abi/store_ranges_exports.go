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
	"unsafe"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// Ranged store IO and the put and get sessions (kvferry.h, "Store ranges
// and sessions", API version 10): Mooncake's RealClient get_into_ranges,
// batch_get_session_start/_end, batch_get_into_multi_buffer_ranges,
// batch_put_session_start/_end/_revoke and
// batch_put_from_multi_buffer_ranges. Called from store_ranges_c.c after
// the fork guard and the NULL checks. They need a store client of this
// process: a dummy client's handle gets INVALID_PARAMS for every key, as
// Mooncake's DummyClient answers its session calls.

// sessionClient returns h's store client, or INVALID_PARAMS.
func sessionClient(h *storeHandle) (*client.Client, error) {
	if c := h.c.Load(); c != nil {
		return c, nil
	}
	if h.dummy.Load() != nil {
		return nil, fmt.Errorf("ranged calls and sessions need a store client set up in this process: %w", wire.ErrInvalidParams)
	}
	return nil, fmt.Errorf("store is not set up: %w", wire.ErrInvalidParams)
}

// perKey runs one per-key call of an export over count keys: a bad
// handle or count is storeErr; when the store has no client here or call
// fails as a whole, every result is that error's code, else result i is
// key i's.
func perKey(h C.uintptr_t, keys **C.char, count C.size_t, results *C.int,
	call func(c *client.Client, ks []string) ([]error, error)) C.int {
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	c, err := sessionClient(s)
	var errs []error
	if err == nil {
		errs, err = call(c, goKeys(keys, count))
	}
	if err != nil {
		fillInt(out, s.fail(err))
		return 0
	}
	for i, err := range errs {
		out[i] = C.int(s.fail(err))
	}
	return 0
}

// rangeLists converts the flat range arrays of count keys: key i owns
// counts[i] consecutive entries of addrs, offsets and sizes. A total over
// maxBatch is INVALID_PARAMS.
func rangeLists(addrs *unsafe.Pointer, offsets, sizes *C.uint64_t, counts *C.size_t, count C.size_t) ([][]client.Range, int, error) {
	cs := unsafe.Slice(counts, int(count))
	var total uint64
	for _, n := range cs {
		total += uint64(n)
		if uint64(n) > maxBatch || total > maxBatch {
			return nil, 0, fmt.Errorf("ranged batch of more than %d ranges: %w", maxBatch, wire.ErrInvalidParams)
		}
	}
	if total > 0 && (addrs == nil || offsets == nil || sizes == nil) {
		return nil, 0, fmt.Errorf("ranged batch: NULL addresses, offsets or sizes: %w", wire.ErrInvalidParams)
	}
	flat := make([]client.Range, total)
	if total > 0 {
		ps, os, ns := unsafe.Slice(addrs, int(total)), unsafe.Slice(offsets, int(total)), unsafe.Slice(sizes, int(total))
		for i := range flat {
			flat[i] = client.Range{Addr: uintptr(ps[i]), Offset: uint64(os[i]), Size: uint64(ns[i])}
		}
	}
	out := make([][]client.Range, count)
	off := uint64(0)
	for i, n := range cs {
		out[i] = flat[off : off+uint64(n) : off+uint64(n)]
		off += uint64(n)
	}
	return out, int(total), nil
}

// fillInt writes code to every entry of out.
func fillInt[T C.int | C.int64_t](out []T, code int) {
	for i := range out {
		out[i] = T(code)
	}
}

//export kvf_store_get_into_ranges
func kvf_store_get_into_ranges(h C.uintptr_t, keys **C.char, count C.size_t, addrs *unsafe.Pointer, offsets, sizes *C.uint64_t,
	counts *C.size_t, results *C.int64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	ranges, total, err := rangeLists(addrs, offsets, sizes, counts, count)
	if err != nil {
		s.fail(err)
		return C.int(wire.ErrInvalidParams)
	}
	out := unsafe.Slice(results, total)
	c, err := sessionClient(s)
	if err != nil {
		fillInt(out, s.fail(err))
		return 0
	}
	errs := c.GetRanges(context.Background(), goKeys(keys, count), ranges)
	k := 0
	for i := range ranges {
		for j, g := range ranges[i] {
			if errs[i][j] != nil {
				out[k] = C.int64_t(s.fail(errs[i][j]))
			} else {
				out[k] = C.int64_t(g.Size)
			}
			k++
		}
	}
	return 0
}

//export kvf_store_get_session_start
func kvf_store_get_session_start(h C.uintptr_t, keys **C.char, count C.size_t, results *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	return perKey(h, keys, count, results, func(c *client.Client, ks []string) ([]error, error) {
		return c.StartGetSession(context.Background(), ks), nil
	})
}

//export kvf_store_get_session_end
func kvf_store_get_session_end(h C.uintptr_t, keys **C.char, count C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	c, err := sessionClient(s)
	if err != nil {
		return C.int(s.fail(err))
	}
	c.EndGetSession(goKeys(keys, count))
	return 0
}

// sessionRanges runs a get (put false) or put session's ranged call:
// results[i] is the bytes moved for keys[i] or its code. More than
// maxBatch ranges is INVALID_PARAMS, returned (as by
// kvf_store_get_into_ranges, kvferry.h) and in every result.
func sessionRanges(h C.uintptr_t, keys **C.char, count C.size_t, addrs *unsafe.Pointer, offsets, sizes *C.uint64_t,
	counts *C.size_t, results *C.int64_t, put bool) C.int {
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(results, int(count))
	ranges, _, err := rangeLists(addrs, offsets, sizes, counts, count)
	if err != nil {
		code := s.fail(err)
		fillInt(out, code)
		return C.int(code)
	}
	c, err := sessionClient(s)
	if err != nil {
		fillInt(out, s.fail(err))
		return 0
	}
	var n []uint64
	var errs []error
	if put {
		n, errs = c.PutSessionRanges(context.Background(), goKeys(keys, count), ranges)
	} else {
		n, errs = c.GetSessionRanges(context.Background(), goKeys(keys, count), ranges)
	}
	for i := range out {
		if errs[i] != nil {
			out[i] = C.int64_t(s.fail(errs[i]))
		} else {
			out[i] = C.int64_t(n[i])
		}
	}
	return 0
}

//export kvf_store_get_session_ranges
func kvf_store_get_session_ranges(h C.uintptr_t, keys **C.char, count C.size_t, addrs *unsafe.Pointer, offsets, sizes *C.uint64_t,
	counts *C.size_t, results *C.int64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	return sessionRanges(h, keys, count, addrs, offsets, sizes, counts, results, false)
}

//export kvf_store_put_session_ranges
func kvf_store_put_session_ranges(h C.uintptr_t, keys **C.char, count C.size_t, addrs *unsafe.Pointer, offsets, sizes *C.uint64_t,
	counts *C.size_t, results *C.int64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	return sessionRanges(h, keys, count, addrs, offsets, sizes, counts, results, true)
}

//export kvf_store_put_session_start
func kvf_store_put_session_start(h C.uintptr_t, keys **C.char, count C.size_t, sizes *C.uint64_t,
	cfg *C.mooncake_replicate_config_t, groups **C.char, results *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	return perKey(h, keys, count, results, func(c *client.Client, ks []string) ([]error, error) {
		rcfg, err := replicateConfig(cfg)
		if err != nil {
			return nil, err
		}
		if groups != nil {
			rcfg.GroupIDs = goKeys(groups, count)
		}
		ns := unsafe.Slice(sizes, int(count))
		sz := make([]uint64, count)
		for i := range sz {
			sz[i] = uint64(ns[i])
		}
		return c.StartPutSession(context.Background(), ks, sz, rcfg), nil
	})
}

//export kvf_store_put_session_finish
func kvf_store_put_session_finish(h C.uintptr_t, keys **C.char, count C.size_t, revoke C.int, results *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	return perKey(h, keys, count, results, func(c *client.Client, ks []string) ([]error, error) {
		if revoke != 0 {
			return c.RevokePutSession(context.Background(), ks), nil
		}
		return c.EndPutSession(context.Background(), ks), nil
	})
}

//export kvf_store_batch_replica_clear
func kvf_store_batch_replica_clear(h C.uintptr_t, keys **C.char, count C.size_t, segment *C.char, cleared *C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	if count == 0 {
		return 0
	}
	out := unsafe.Slice(cleared, int(count))
	fillInt(out, 0)
	c, err := sessionClient(s)
	if err != nil {
		return C.int(s.fail(err))
	}
	seg, _ := cstr(segment)
	ks := goKeys(keys, count)
	done, err := c.BatchReplicaClear(context.Background(), ks, seg)
	if err != nil {
		return C.int(s.fail(err))
	}
	set := make(map[string]bool, len(done))
	for _, k := range done {
		set[k] = true
	}
	n := 0
	for i, k := range ks {
		if set[k] {
			out[i] = 1
			n++
		}
	}
	return C.int(n)
}
