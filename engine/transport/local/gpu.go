package local

import (
	"fmt"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
)

// Carries reports what the transport moves: host-accessible memory always
// (C memcpy), device memory too when it has a GPU runtime (cuMemcpyAsync
// on the device's stream pool, completion by events).
func (t *Transport) Carries(_ *engine.Peer, e engine.Ends) bool {
	return (e.Local.HostAccessible() && e.Remote.HostAccessible()) || t.cfg.GPU != nil
}

// gpuBatch is the part of a work item that involves device memory of one
// device.
type gpuBatch struct {
	dev    int
	ops    []cuda.Copy
	pins   []*engine.Region
	slices []*engine.Slice
}

type gpuBatches []*gpuBatch

// add files slice s (its target pinned by pin) under the device that owns
// the device memory of the copy: the local side's when it is device
// memory, the target's otherwise.
func (gb gpuBatches) add(s *engine.Slice, pin *engine.Region, op cmem.Op) gpuBatches {
	dev := pin.Device
	if s.LocalKind() == engine.MemoryDevice {
		dev = s.LocalRegion().Device
	}
	var b *gpuBatch
	for _, x := range gb {
		if x.dev == dev {
			b = x
		}
	}
	if b == nil {
		b = &gpuBatch{dev: dev}
		gb = append(gb, b)
	}
	b.ops = append(b.ops, cuda.Copy{Dst: uint64(op.Dst), Src: uint64(op.Src), N: op.N})
	b.pins = append(b.pins, pin)
	b.slices = append(b.slices, s)
	return gb
}

// submitGPU queues each device's copies on its copier; the slices complete
// when the batch's event does. The target stays pinned and its engine
// marked busy until then.
func (t *Transport) submitGPU(tgt *Transport, gb gpuBatches) {
	for _, b := range gb {
		fail := func(err error) {
			for i, s := range b.slices {
				b.pins[i].Release()
				s.Complete(&engine.TransferError{Op: s.Op, Peer: tgt.e.SegmentName(), Transport: Name, Addr: s.Remote, Length: s.Length, Err: err})
			}
		}
		if t.cfg.GPU == nil {
			fail(fmt.Errorf("device memory: %w", gpu.ErrNoGPU))
			continue
		}
		c, err := t.cfg.GPU.Copier(b.dev)
		if err != nil {
			fail(err)
			continue
		}
		if !tgt.served.enter() {
			fail(fmt.Errorf("local: target engine %q closed: %w", tgt.e.SegmentName(), engine.ErrClosed))
			continue
		}
		c.Submit(b.ops, func(err error) {
			tgt.served.exit()
			if err != nil {
				fail(err)
				return
			}
			for _, p := range b.pins {
				p.Release()
			}
			t.copies.Add(uint64(len(b.slices)))
			for _, s := range b.slices {
				s.Complete(nil)
			}
		})
	}
}
