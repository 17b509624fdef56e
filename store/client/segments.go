package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/wire"
)

// Segments mounted after setup (Mooncake's RealClient::mountSegment,
// allocateAndMountSegment, unmountSegment, unmountAndFreeSegment and
// drainLocalDiskSegment; specs/mooncake.md §6.2). Each is more memory this
// client lends to the store beside its global segment: registered with the
// engine under the client's segment name, mounted at the master under an
// id of its own, re-mounted with the others after a master restart, and
// unmounted, unregistered and unmapped by Close.

// SegmentAlignment is what AllocateAndMount rounds a size up to: the slab
// size of Mooncake's allocator (16 MiB), so that sizes mean the same.
const SegmentAlignment = 16 << 20

// SegmentKind says how a mounted segment's memory was made, and so which
// unmount call may take it away (Mooncake keeps the two apart the same way).
type SegmentKind int

const (
	// SegmentFile is a file's range mapped by MountFile.
	SegmentFile SegmentKind = iota + 1
	// SegmentAllocated is memory AllocateAndMount made.
	SegmentAllocated
)

// ErrNotMounted is returned for a segment id that no mount of the asked
// kind made.
var ErrNotMounted = errors.New("segment not mounted by this call family")

// extraSegment is one segment mounted after setup.
type extraSegment struct {
	seg  *wire.Segment
	mem  segmentMemory
	kind SegmentKind
	// unmounting is set while UnmountSegment waits for the master.
	unmounting bool
}

// MountFile maps size bytes of the file at path from offset (a multiple of
// the page size) shared and read-write, and lends them to the store as a
// segment of their own. location is the engine's memory location ("" for
// "*"). It returns the segment's id.
func (c *Client) MountFile(ctx context.Context, path string, offset, size uint64, protocol, location string) (string, error) {
	page := uint64(os.Getpagesize())
	if size == 0 || offset%page != 0 {
		return "", fmt.Errorf("mount %q [%d, +%d): size 0 or offset not a multiple of %d: %w", path, offset, size, page, wire.ErrInvalidParams)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("mount %q: %w: %w", path, err, wire.ErrInvalidParams)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("mount %q: %w", path, err)
	}
	if fs := uint64(st.Size()); offset > fs || size > fs-offset {
		return "", fmt.Errorf("mount %q: range [%d, +%d) exceeds the file's %d bytes: %w", path, offset, size, fs, wire.ErrInvalidParams)
	}
	m, err := cmem.MapFile(int(f.Fd()), offset, size)
	if err != nil {
		return "", fmt.Errorf("mount %q: %w", path, err)
	}
	return c.mountExtra(ctx, m, SegmentFile, protocol, location)
}

// AllocateAndMount maps size bytes (rounded up to SegmentAlignment) of
// anonymous memory and lends them to the store as a segment of their own.
// It returns the segment's id and the size mapped.
func (c *Client) AllocateAndMount(ctx context.Context, size uint64, protocol, location string) (string, uint64, error) {
	if size == 0 || size > 1<<62 {
		return "", 0, fmt.Errorf("allocate and mount %d bytes: %w", size, wire.ErrInvalidParams)
	}
	size = (size + SegmentAlignment - 1) &^ (SegmentAlignment - 1)
	m, err := mapSegment(size, false, !c.cfg.NoHugePages)
	if err != nil {
		return "", 0, fmt.Errorf("allocate and mount %d bytes: %w", size, err)
	}
	id, err := c.mountExtra(ctx, m, SegmentAllocated, protocol, location)
	if err != nil {
		return "", 0, err
	}
	return id, size, nil
}

// mountExtra registers m, mounts it at the master and records it; on any
// failure m is unregistered and closed.
func (c *Client) mountExtra(ctx context.Context, m segmentMemory, kind SegmentKind, protocol, location string) (_ string, err error) {
	defer func() {
		if err != nil {
			_ = m.Close()
		}
	}()
	mc, err := c.master()
	if err != nil {
		return "", err
	}
	if location == "" {
		location = "*"
	}
	if protocol == "" {
		protocol = c.cfg.Protocol
	}
	if err := c.e.RegisterMemory(m.Addr(), m.Len(), location, true); err != nil {
		return "", fmt.Errorf("mount segment: register %d bytes: %w", m.Len(), err)
	}
	seg := &wire.Segment{Id: newUUID(), Name: c.segName, Base: uint64(m.Addr()), Size: m.Len(), Protocol: protocol}
	rctx, cancel := c.rpcCtx(ctx)
	_, err = mc.mc.MountSegment(rctx, &wire.MountSegmentRequest{ClientId: c.clientID, Segment: seg})
	cancel()
	if err != nil {
		_ = c.e.UnregisterMemory(m.Addr())
		return "", fmt.Errorf("mount segment at master %s: %w", mc.addr, c.rpcErr(err))
	}
	c.segMu.Lock()
	closed := c.closed.Load()
	if !closed {
		c.extra[seg.Id] = &extraSegment{seg: seg, mem: m, kind: kind}
		c.segments = append(c.segments, seg)
	}
	c.segMu.Unlock()
	if closed {
		// Close took its list of segments before this one was in it.
		c.unmountAtMaster(context.Background(), mc, seg.Id, 0)
		_ = c.e.UnregisterMemory(m.Addr())
		return "", ErrClosed
	}
	c.startTasks()
	c.log.Info("segment mounted", "segment", c.segName, "id", seg.Id, "bytes", seg.Size, "kind", int(kind))
	return seg.Id, nil
}

// UnmountSegment unmounts a segment MountFile (kind SegmentFile) or
// AllocateAndMount (SegmentAllocated) made, and unmaps its memory. The
// master drops the segment's replicas, and removes objects left with none
// (Mooncake's UnmountSegment); with grace > 0 it first moves the objects
// only this segment holds to other segments, waiting up to grace. An id
// the kind's calls did not mount is ErrNotMounted; after a failed master
// call the segment stays mounted.
func (c *Client) UnmountSegment(ctx context.Context, id string, kind SegmentKind, grace time.Duration) error {
	mc, err := c.master()
	if err != nil {
		return err
	}
	c.segMu.Lock()
	x, ok := c.extra[id]
	ok = ok && x.kind == kind && !x.unmounting
	if ok {
		// Out of the remount list at once; still this client's range for
		// the tasks of a graceful unmount until the master lets it go.
		x.unmounting = true
		c.dropSegmentLocked(id)
	}
	c.segMu.Unlock()
	if !ok {
		return fmt.Errorf("unmount segment %q: %w", id, ErrNotMounted)
	}
	// Put grants in the segment: no put places or writes anything in them
	// any more, and the puts writing into them now finish before the
	// memory goes (a grant put copies into its own segment directly, with
	// no engine pin to wait for).
	c.grants.retireSegment(id)
	err = c.unmountAtMaster(ctx, mc, id, grace)
	c.segMu.Lock()
	if err != nil {
		// Still lent: keep it (a remount announces it again).
		x.unmounting = false
		c.segments = append(c.segments, x.seg)
	} else {
		delete(c.extra, id)
	}
	c.segMu.Unlock()
	if err != nil {
		return err
	}
	if werr := c.grants.waitSegmentIdle(ctx, id); werr != nil {
		c.log.Warn("segment unmounted but puts still write into it; it is not unmapped", "segment", c.segName, "id", id, "err", werr)
		return fmt.Errorf("unmount segment %q: %w", id, werr)
	}
	// Transfers and tasks still using the memory hold the engine's pin;
	// the unregistration waits for them before the memory goes.
	uerr := c.e.UnregisterMemory(x.mem.Addr())
	if uerr != nil {
		c.log.Warn("segment memory still in use after unmount; it is not unmapped", "segment", c.segName, "id", id, "err", uerr)
		return fmt.Errorf("unmount segment %q: %w", id, uerr)
	}
	_ = x.mem.Close()
	c.log.Info("segment unmounted", "segment", c.segName, "id", id, "bytes", x.seg.GetSize())
	return nil
}

// dropSegmentLocked removes id from the segments re-mounted with the
// client (segMu held).
func (c *Client) dropSegmentLocked(id string) {
	for i, s := range c.segments {
		if s.GetId() == id {
			c.segments = append(c.segments[:i:i], c.segments[i+1:]...)
			return
		}
	}
}

// unmountAtMaster asks the master to unmount segment id (gracefully when
// grace > 0, bounded by the master's own cap).
func (c *Client) unmountAtMaster(ctx context.Context, mc *masterConn, id string, grace time.Duration) error {
	timeout, req := c.cfg.RPCTimeout, &wire.UnmountSegmentRequest{ClientId: c.clientID, SegmentId: id}
	if grace > 0 {
		timeout, req.Graceful, req.GraceMs = grace+timeout, true, uint64(grace/time.Millisecond)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := mc.mc.UnmountSegment(rctx, req); err != nil {
		return fmt.Errorf("unmount segment %q at master %s: %w", id, mc.addr, c.rpcErr(err))
	}
	return nil
}

// Segments returns the ids of the segments this client lends, the global
// one first.
func (c *Client) Segments() []string {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	out := make([]string, len(c.segments))
	for i, s := range c.segments {
		out[i] = s.GetId()
	}
	return out
}

// segmentList returns a copy of the segments to (re-)mount.
func (c *Client) segmentList() []*wire.Segment {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	return append([]*wire.Segment(nil), c.segments...)
}

// DrainDiskSegment takes this client's disk tier off the master (Mooncake's
// drainLocalDiskSegment: a planned shutdown stops being named as a holder
// of offloaded objects before it stops serving them), then waits out grace
// (bounded by ctx). The tier is not announced again by later remounts.
// Without a disk tier, or drained already, it does nothing.
func (c *Client) DrainDiskSegment(ctx context.Context, grace time.Duration) error {
	if c.disk == nil {
		c.log.Warn("drain disk segment: no disk tier")
		return nil
	}
	mc, err := c.master()
	if err != nil {
		return err
	}
	if c.diskDrained.Swap(true) {
		return nil // drained already
	}
	if err := c.unmountAtMaster(ctx, mc, c.disk.ID(), 0); err != nil {
		c.diskDrained.Store(false)
		return err
	}
	c.log.Info("disk segment drained", "segment", c.segName, "id", c.disk.ID(), "grace", grace)
	if grace <= 0 {
		return nil
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// ownRange returns the bytes [addr, addr+n) of one of this client's
// segments, pinned (Release unpins), or an error when they are not all
// inside one. The pin keeps an unmount from unmapping them meanwhile.
func (c *Client) ownRange(addr, n uint64) ([]byte, func(), error) {
	in := func(base, size uint64) bool { return addr >= base && n <= size && addr-base <= size-n }
	c.segMu.Lock()
	ok := false
	for _, s := range c.segments {
		ok = ok || in(s.GetBase(), s.GetSize())
	}
	for _, x := range c.extra {
		ok = ok || in(x.seg.GetBase(), x.seg.GetSize())
	}
	c.segMu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("range [%#x, +%d) outside this client's segments: %w", addr, n, wire.ErrInvalidParams)
	}
	if n == 0 {
		return nil, func() {}, nil
	}
	r := c.e.Pin(addr, n)
	if r == nil {
		return nil, nil, fmt.Errorf("range [%#x, +%d): segment unmounted: %w", addr, n, wire.ErrInvalidParams)
	}
	return cmem.Bytes(uintptr(addr), n), r.Release, nil
}

// closeExtras unregisters and unmaps the segments mounted after setup
// (teardown; the engine still runs).
func (c *Client) closeExtras() {
	c.segMu.Lock()
	xs := c.extra
	c.extra = map[string]*extraSegment{}
	c.segMu.Unlock()
	for _, x := range xs {
		if c.e != nil {
			if err := c.e.UnregisterMemory(x.mem.Addr()); err != nil {
				continue // still in use: leaked rather than unmapped under a transfer
			}
		}
		_ = x.mem.Close()
	}
}
