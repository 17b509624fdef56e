package samehost_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/internal/cmem"
)

// TestMirrorFollowsSingleRegistrations: the cma mirror follows single
// registrations and removals without a descriptor rebuild in between:
// a buffer registered after the initiator opened the owner (appended, in
// front of the others, or in the place of a removed one) is writable at
// once; a removed one is refused as soon as UnregisterMemory returned.
func TestMirrorFollowsSingleRegistrations(t *testing.T) {
	owner := newEngine(t, samehost.NameCMA)
	init := newEngine(t, samehost.NameCMA)
	src := newBuf(t, init, 1<<20)
	pattern(src.Bytes(), 5)
	area, err := cmem.MapAnon(64 << 12)
	assert.NilError(t, err)
	t.Cleanup(func() { area.Close() })
	page := func(i int) uintptr { return area.Addr() + uintptr(i)<<12 }
	assert.NilError(t, owner.RegisterMemory(page(32), 4096, "cpu:0", true))
	seg, err := init.OpenSegment(context.Background(), owner.SegmentName())
	assert.NilError(t, err)
	write := func(i int) error {
		return init.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(page(i)), Length: 4096}})
	}
	assert.NilError(t, write(32))
	for k, i := range []int{40, 50, 10, 5, 33} { // appended, in front, between
		assert.NilError(t, owner.RegisterMemory(page(i), 4096, "cpu:0", true))
		assert.NilError(t, write(i), "page %d (registration %d)", i, k)
		assert.Assert(t, bytes.Equal(area.Bytes()[i<<12:(i+1)<<12], src.Bytes()[:4096]))
	}
	assert.Equal(t, init.ChooseTransport(seg), samehost.NameCMA)
	for _, i := range []int{50, 10} {
		assert.NilError(t, owner.UnregisterMemory(page(i)))
		err := write(i)
		assert.Assert(t, errors.Is(err, engine.ErrRejected) || errors.Is(err, engine.ErrAddressNotRegistered), "page %d after unregister: %v", i, err)
		// Registered again at the same place (the tombstone reused).
		assert.NilError(t, owner.RegisterMemory(page(i), 4096, "cpu:0", true))
		assert.NilError(t, write(i), "page %d registered again", i)
	}
	// A descriptor rebuild (the publisher's, after its delay) compacts the
	// tombstones away; a region registered again in front of others after
	// that is mirrored at once too: the initiator's descriptor still lists
	// it, so nothing would make it refresh.
	for _, i := range []int{50, 10} {
		assert.NilError(t, owner.UnregisterMemory(page(i)))
		owner.LocalDescriptor()
		assert.NilError(t, owner.RegisterMemory(page(i), 4096, "cpu:0", true))
		assert.NilError(t, write(i), "page %d registered again after a rebuild", i)
	}
	assert.Equal(t, init.Metrics().SlicesByTransport[samehost.NameCMA] > 0, true)
}
