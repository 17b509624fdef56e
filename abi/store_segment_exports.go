package abi

/*
#include <stdint.h>
#include <stddef.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// Segments mounted after setup (kvferry.h, "Store segments"): Mooncake's
// RealClient mount_segment, allocate_and_mount_segment, unmount_segment,
// unmount_and_free_segment and unmount_local_disk_segment, and its
// get_offload_rpc_read_count. They need a store client of this process
// (a dummy client has none: INTERNAL_ERROR, as Mooncake's -1).

// errNeedsClient is the failure of a segment call on a handle that has no
// store client of its own.
var errNeedsClient = errors.New("segment calls need a store client set up in this process (not a dummy client)")

// realClient returns h's store client.
func realClient(h *storeHandle) (*client.Client, error) {
	if c := h.c.Load(); c != nil {
		return c, nil
	}
	if h.dummy.Load() != nil {
		return nil, fmt.Errorf("%w: %w", errNeedsClient, wire.ErrInternal)
	}
	return nil, fmt.Errorf("store is not set up: %w", wire.ErrInvalidParams)
}

// graceOf converts a grace period in seconds, capped like
// kvferry_store_set_drain's.
func graceOf(seconds C.uint64_t) time.Duration {
	return time.Duration(min(uint64(seconds), uint64(maxDrainMs/1000))) * time.Second
}

// putIDs writes ids, joined by ',', NUL-ended into buf (BUFFER_OVERFLOW
// when it does not fit).
func putIDs(s *storeHandle, ids []string, buf *C.char, n C.size_t) C.int {
	return putID(s, strings.Join(ids, ","), buf, n)
}

//export kvf_store_mount_segment
func kvf_store_mount_segment(h C.uintptr_t, path *C.char, offset, size C.uint64_t, protocol, location *C.char,
	ids *C.char, idsLen C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := realClient(s)
	if err != nil {
		return C.int(s.fail(err))
	}
	p, _ := cstr(path)
	proto, _ := cstr(protocol)
	loc, _ := cstr(location)
	id, err := c.MountFile(context.Background(), p, uint64(offset), uint64(size), proto, loc)
	if err != nil {
		return C.int(s.fail(err))
	}
	if rc := putIDs(s, []string{id}, ids, idsLen); rc != 0 {
		// The caller cannot name it: take it back.
		_ = c.UnmountSegment(context.Background(), id, client.SegmentFile, 0)
		return rc
	}
	return 0
}

//export kvf_store_allocate_and_mount_segment
func kvf_store_allocate_and_mount_segment(h C.uintptr_t, size C.uint64_t, protocol, location *C.char,
	allocated *C.uint64_t, ids *C.char, idsLen C.size_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := realClient(s)
	if err != nil {
		return C.int(s.fail(err))
	}
	proto, _ := cstr(protocol)
	loc, _ := cstr(location)
	id, n, err := c.AllocateAndMount(context.Background(), uint64(size), proto, loc)
	if err != nil {
		return C.int(s.fail(err))
	}
	if rc := putIDs(s, []string{id}, ids, idsLen); rc != 0 {
		_ = c.UnmountSegment(context.Background(), id, client.SegmentAllocated, 0)
		return rc
	}
	if allocated != nil {
		*allocated = C.uint64_t(n)
	}
	return 0
}

//export kvf_store_unmount_segment
func kvf_store_unmount_segment(h C.uintptr_t, ids **C.char, count C.size_t, graceSeconds C.uint64_t, freeMem C.int) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok || count > maxBatch {
		return storeErr
	}
	c, err := realClient(s)
	if err != nil {
		return C.int(s.fail(err))
	}
	kind := client.SegmentFile
	if freeMem != 0 {
		kind = client.SegmentAllocated
	}
	grace := graceOf(graceSeconds)
	first := 0
	for _, id := range goKeys(ids, count) {
		if code := s.fail(c.UnmountSegment(context.Background(), id, kind, grace)); code != 0 && first == 0 {
			first = code
		}
	}
	return C.int(first)
}

//export kvf_store_unmount_local_disk_segment
func kvf_store_unmount_local_disk_segment(h C.uintptr_t, graceSeconds C.uint64_t) (rc C.int) {
	defer recoverStoreInt(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c, err := realClient(s)
	if err != nil {
		return C.int(s.fail(err))
	}
	grace := graceOf(graceSeconds)
	ctx, cancel := context.WithTimeout(context.Background(), grace+time.Minute)
	defer cancel()
	return C.int(s.fail(c.DrainDiskSegment(ctx, grace)))
}

//export kvf_store_offload_read_count
func kvf_store_offload_read_count(h C.uintptr_t) (rc C.int64_t) {
	defer recoverStoreInt64(&rc)
	s, ok := lookupStore(h)
	if !ok {
		return storeErr
	}
	c := s.c.Load()
	if c == nil {
		return 0
	}
	m := c.Metrics()
	return C.int64_t(m.DiskReads + m.RemoteDiskReads + m.Promotions)
}
