package samehost

import (
	"fmt"
	"sync"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
)

// Carries reports that cma moves host and pinned memory only: the
// kernel's cross-memory calls cannot reach device memory, nor, reliably,
// managed memory another process owns.
func (t *CMA) Carries(_ *engine.Peer, e engine.Ends) bool {
	plain := func(k engine.MemoryKind) bool { return k == engine.MemoryHost || k == engine.MemoryPinned }
	return plain(e.Local) && plain(e.Remote)
}

// Carries reports that shm moves every kind: device memory is copied
// between the staging chunk and the device (on the initiator for local
// device memory, on the owner for its own) when there is a GPU runtime.
func (t *Shm) Carries(_ *engine.Peer, e engine.Ends) bool {
	return (e.Local.HostAccessible() && e.Remote.HostAccessible()) || t.cfg.GPU != nil
}

// AlternativeTo reports that shm stands in for nvlink between host memory
// here and device memory of the owner: the engine measures whether
// mapping the owner's memory (one copy from possibly pageable host memory)
// or staging it through the session's pinned chunks (a memcpy, then the
// owner's device copy) is faster (engine.Alternative).
func (t *Shm) AlternativeTo(name string, e engine.Ends) bool {
	return name == NameNVLink && t.cfg.GPU != nil && e.Local.HostAccessible() && e.Remote == engine.MemoryDevice
}

// devOps collects copies to and from device memory, by device.
type devOps struct {
	devs []int
	ops  [][]cuda.Copy
}

func (d *devOps) reset() {
	d.devs = d.devs[:0]
	for i := range d.ops {
		d.ops[i] = d.ops[i][:0]
	}
	d.ops = d.ops[:0]
}

func (d *devOps) add(dev int, op cmem.Op) {
	c := cuda.Copy{Dst: uint64(op.Dst), Src: uint64(op.Src), N: op.N}
	for i, x := range d.devs {
		if x == dev {
			d.ops[i] = append(d.ops[i], c)
			return
		}
	}
	d.devs = append(d.devs, dev)
	if len(d.ops) < cap(d.ops) {
		d.ops = d.ops[:len(d.ops)+1]
		d.ops[len(d.ops)-1] = append(d.ops[len(d.ops)-1][:0], c)
	} else {
		d.ops = append(d.ops, []cuda.Copy{c})
	}
}

func (d *devOps) empty() bool { return len(d.devs) == 0 }

// copy runs the collected copies on each device's copier and waits; pin
// runs once first when there is something to copy.
func (d *devOps) copy(rt *gpu.Runtime, pin func()) error {
	if d.empty() {
		return nil
	}
	if rt == nil {
		return fmt.Errorf("device memory: %w", gpu.ErrNoGPU)
	}
	if pin != nil {
		pin()
	}
	var first error
	for i, dev := range d.devs {
		c, err := rt.Copier(dev)
		if err == nil {
			err = c.Copy(d.ops[i])
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// stagingPin registers a session's staging memory with the GPU runtime
// (once, when device memory first goes through it), so that the device
// copies to and from it run at pinned speed; best effort.
type stagingPin struct {
	once sync.Once
	rt   *gpu.Runtime // set once pinned
	addr uintptr
}

func (p *stagingPin) pin(rt *gpu.Runtime, m *shmap) {
	if rt == nil || m == nil {
		return
	}
	p.once.Do(func() {
		if err := rt.HostRegister(m.addr(), uint64(len(m.b))); err == nil {
			p.rt, p.addr = rt, m.addr()
		}
	})
}

func (p *stagingPin) unpin() {
	p.once.Do(func() {}) // no pin after this
	if p.rt != nil {
		_ = p.rt.HostUnregister(p.addr)
		p.rt = nil
	}
}

func (s *session) pinStaging(rt *gpu.Runtime) func() {
	return func() { s.pinned.pin(rt, s.staging) }
}

func (s *session) unpinStaging() { s.pinned.unpin() }

func (s *ownerSession) pinStaging(rt *gpu.Runtime) { s.pinned.pin(rt, s.staging) }

func (s *ownerSession) unpinStaging() { s.pinned.unpin() }
