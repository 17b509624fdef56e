package trtllm

import (
	"context"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// TestVRAMRuntimes registers kVRAM on each GPU runtime: CUDA memory is
// taken, HIP memory is refused (TensorRT-LLM is CUDA-only) and left
// unregistered.
func TestVRAMRuntimes(t *testing.T) {
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) {
			gcfg, _ := rt.Config(t)
			cfg := stack.ConfigFromEnv(hostenv.Lookup)
			cfg.Engine.MetadataConn = "P2PHANDSHAKE"
			cfg.Engine.LocalServerName = "127.0.0.1"
			cfg.GPU = gcfg
			e, err := stack.New(context.Background(), cfg)
			assert.NilError(t, err)
			a, err := New(Config{Name: "vram-" + rt.Name, Engine: e})
			if err != nil {
				_ = e.Close()
			}
			assert.NilError(t, err)
			defer func() { assert.Check(t, a.Close()) }()

			al := rt.Allocator(t, gcfg)
			p, err := al.MemAlloc(0, 1<<20)
			assert.NilError(t, err)
			defer func() { assert.Check(t, al.MemFree(0, p)) }()
			d := Desc{Addr: p, Len: 1 << 20, DeviceID: 0}
			err = a.Register(VRAM, []Desc{d})
			if rt.Name == "hip" {
				assert.ErrorIs(t, err, ErrHIPMemory)
				assert.Assert(t, !a.e.Registered(d.Addr, d.Len))
				return
			}
			assert.NilError(t, err)
			assert.Assert(t, a.e.Registered(d.Addr, d.Len))
			assert.NilError(t, a.Deregister([]Desc{d}))
		})
	}
}
