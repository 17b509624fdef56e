package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/stack"
)

// fakeClassifier classifies by address range, as a driver would.
type fakeClassifier struct {
	mu    sync.Mutex
	kinds map[uintptr]engine.MemoryInfo // by region start
	calls int
}

func (f *fakeClassifier) Classify(addr uintptr, length uint64, location string) (engine.MemoryInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	info, ok := f.kinds[addr]
	if !ok {
		return engine.MemoryInfo{}, nil
	}
	if info.Kind == engine.MemoryDevice && strings.HasPrefix(location, "cpu") {
		return engine.MemoryInfo{}, fmt.Errorf("device memory as %s: %w", location, engine.ErrInvalidArgument)
	}
	return info, nil
}

// carrier is a transport that records what it was given and carries only
// the kinds it is told to.
type carrier struct {
	name   string
	ok     func(l, r engine.MemoryKind) bool // nil: no MemoryCarrier (host only)
	mu     sync.Mutex
	slices []string
}

func (c *carrier) Name() string                 { return c.name }
func (c *carrier) Describe(*descriptor.Segment) {}
func (c *carrier) Reaches(p *engine.Peer) bool  { return p.Local() }
func (c *carrier) SliceSize() uint64            { return 0 }
func (c *carrier) Close() error                 { return nil }
func (c *carrier) Submit(p *engine.Peer, ss []*engine.Slice) {
	for _, s := range ss {
		c.mu.Lock()
		c.slices = append(c.slices, fmt.Sprintf("%s:%s", c.name, s.LocalKind()))
		c.mu.Unlock()
		s.Complete(nil)
	}
}

type gpuCarrier struct{ *carrier }

func (g gpuCarrier) Carries(_ *engine.Peer, e engine.Ends) bool { return g.ok(e.Local, e.Remote) }

func TestMemoryClassification(t *testing.T) {
	const dev, dev2, pinned, managed = 0x7d0000000000, 0x7d0000200000, 0x10000, 0x20000
	fc := &fakeClassifier{kinds: map[uintptr]engine.MemoryInfo{
		dev:     {Kind: engine.MemoryDevice, Device: 1, Share: engine.ShareLegacyIPC, AllocBase: dev - 4096, AllocSize: 1 << 20, Handle: []byte{0xab, 0x01}},
		dev2:    {Kind: engine.MemoryDevice, Device: 1, Share: engine.ShareLegacyIPC, AllocBase: dev2, AllocSize: 1 << 20, Handle: []byte{0xcd, 0x02}},
		pinned:  {Kind: engine.MemoryPinned},
		managed: {Kind: engine.MemoryManaged, Device: 0},
	}}
	host := &carrier{name: "cma"}
	gpu := gpuCarrier{&carrier{name: "nvlink", ok: func(l, r engine.MemoryKind) bool { return l == engine.MemoryDevice || r == engine.MemoryDevice }}}
	ts := map[string]engine.Transport{"cma": host, "nvlink": gpu}
	e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{
		LocalServerName: "127.0.0.1", Memory: fc, Transports: []string{"cma", "nvlink"}, TransferTimeout: 5 * time.Second,
		NewTransport: func(name string, _ *engine.Engine) (engine.Transport, error) { return ts[name], nil },
	}})
	assert.NilError(t, err)
	defer e.Close()

	assert.NilError(t, e.RegisterMemory(dev, 1<<16, "cuda:1", true))
	assert.NilError(t, e.RegisterMemory(dev2, 1<<16, "cuda:1", true))
	assert.NilError(t, e.RegisterMemoryBatch([]engine.Buffer{{Addr: pinned, Length: 4096}, {Addr: managed, Length: 4096}}, "*"))
	assert.NilError(t, e.RegisterMemory(0x30000, 4096, "cpu:0", true))
	err = e.RegisterMemory(dev+1<<16, 4096, "cpu:0", true)
	assert.NilError(t, err) // not in the fake's table: host memory
	fc.kinds[dev+1<<17] = engine.MemoryInfo{Kind: engine.MemoryDevice}
	err = e.RegisterMemory(dev+1<<17, 4096, "cpu:0", true)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	assert.Assert(t, e.HasDeviceMemory())

	kinds := map[uintptr]engine.MemoryInfo{}
	for _, r := range e.Regions() {
		kinds[r.Addr] = r.MemoryInfo
	}
	assert.Equal(t, kinds[dev].Kind, engine.MemoryDevice)
	assert.Equal(t, kinds[dev].Device, 1)
	assert.Equal(t, kinds[pinned].Kind, engine.MemoryPinned)
	assert.Equal(t, kinds[managed].Kind, engine.MemoryManaged)
	assert.Equal(t, kinds[0x30000].Kind, engine.MemoryHost)

	// The descriptor: GPU buffers by location with Mooncake's shm_name
	// when they start their allocation (Mooncake's peers map a shm_name at
	// the buffer's address), else with the allocation as their one chunk;
	// host buffers exactly as before.
	d := e.LocalDescriptor()
	byAddr := map[uint64]descriptor.Buffer{}
	for _, b := range d.Buffers {
		byAddr[b.Addr] = b
	}
	assert.DeepEqual(t, byAddr[dev], descriptor.Buffer{Name: "cuda:1", Addr: dev, Length: 1 << 16, Mem: "device", Share: "ipc",
		Chunks: []descriptor.Chunk{{Addr: dev - 4096, Size: 1 << 20, Handle: "AB01"}}})
	assert.DeepEqual(t, byAddr[dev2], descriptor.Buffer{Name: "cuda:1", Addr: dev2, Length: 1 << 16, ShmName: "CD02", Mem: "device", Share: "ipc"})
	assert.DeepEqual(t, byAddr[managed], descriptor.Buffer{Name: "cuda:0", Addr: managed, Length: 4096, Mem: "managed"})
	assert.DeepEqual(t, byAddr[pinned], descriptor.Buffer{Name: e.SegmentName(), Addr: pinned, Length: 4096})
	raw, err := descriptor.Marshal(d)
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(string(raw), `"name":"cuda:1","addr":`+fmt.Sprint(uint64(dev))+`,"length":65536,"kvferry_mem":"device","kvferry_share":"ipc","kvferry_chunks":[{"addr":`+fmt.Sprint(uint64(dev-4096))+`,"size":1048576,"handle":"AB01"}]`), "%s", raw)
	assert.Assert(t, strings.Contains(string(raw), `{"name":"`+e.SegmentName()+`","addr":`+fmt.Sprint(pinned)+`,"length":4096}`), "%s", raw)
	back, err := descriptor.Unmarshal(raw)
	assert.NilError(t, err)
	assert.Assert(t, back.Buffers[0].GPU() || back.Buffers[1].GPU())
	assert.Assert(t, strings.Contains(string(raw), `"name":"cuda:1","addr":`+fmt.Sprint(uint64(dev2))+`,"length":65536,"shm_name":"CD02","kvferry_mem":"device","kvferry_share":"ipc"}`), "%s", raw)

	// The selector: host to host goes to cma, anything with device memory
	// to the transport that carries it.
	reqs := []engine.Request{
		{Op: engine.OpWrite, Source: 0x30000, Target: engine.LocalSegment, TargetOffset: pinned, Length: 64},
		{Op: engine.OpWrite, Source: dev, Target: engine.LocalSegment, TargetOffset: pinned, Length: 64},
		{Op: engine.OpRead, Source: 0x30000, Target: engine.LocalSegment, TargetOffset: dev + 64, Length: 64},
		{Op: engine.OpRead, Source: managed, Target: engine.LocalSegment, TargetOffset: 0x30000, Length: 64},
	}
	assert.NilError(t, e.Transfer(context.Background(), reqs))
	assert.DeepEqual(t, host.slices, []string{"cma:host", "cma:managed"})
	assert.DeepEqual(t, gpu.slices, []string{"nvlink:device", "nvlink:host"})

	// No transport carries device to device when nvlink refuses it.
	gpu.ok = func(l, r engine.MemoryKind) bool { return false }
	err = e.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: dev, Target: engine.LocalSegment, TargetOffset: dev + 128, Length: 8}})
	assert.Assert(t, errors.Is(err, engine.ErrNotSupportedTransport), "%v", err)
	assert.NilError(t, e.UnregisterMemory(dev))
	assert.NilError(t, e.UnregisterMemory(dev2))
	assert.Assert(t, !e.HasDeviceMemory())
}

func TestCUDALocationWithoutDriver(t *testing.T) {
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", TransferTimeout: 5 * time.Second},
		GPU:    gpuOff(),
	})
	assert.NilError(t, err)
	defer e.Close()
	m := newBuf(t, nil, 4096)
	err = e.RegisterMemory(m.Addr(), 4096, "cuda:0", true)
	assert.Assert(t, errors.Is(err, engine.ErrNotSupported), "%v", err)
	assert.NilError(t, e.RegisterMemory(m.Addr(), 4096, "*", true))
	assert.Equal(t, e.Regions()[0].Kind, engine.MemoryHost)
}

// gpuOff is GPU support pointed at a driver that does not exist.
func gpuOff() gpu.Config { return gpu.Config{Library: "/nonexistent/libcuda.so.1"} }
