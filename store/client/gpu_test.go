package client_test

import (
	"bytes"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
)

// TestGPUMemory: objects put from and read into GPU memory (on the fake
// CUDA driver), registered and not: through the transfer engine to another
// client's segment, and copied by the driver into and out of this client's
// own segment and staging buffer. Nothing memcpy's device memory (the fake
// faults on a CPU access to it).
func TestGPUMemory(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	lib := fakecuda.Path(t)
	fc := fakecuda.Open(lib)
	fc.Reset()
	d, err := gpu.Shared(gpu.Config{Library: lib}).Driver()
	assert.NilError(t, err)
	withGPU := stack.Config{GPU: gpu.Config{Library: lib}}
	srv := startMaster(t, master.Config{})
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 64 << 20, Stack: withGPU})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 1 << 20, Stack: withGPU})
	own := newClient(t, client.Config{GlobalSegmentSize: 64 << 20, MasterServerAddr: "embedded", Stack: withGPU})
	_ = holder

	const n = 3<<20 + 77
	val := pattern(n, 9)
	src, err := d.MemAlloc(0, n)
	assert.NilError(t, err)
	dst, err := d.MemAlloc(fakecuda.Second(t), n)
	assert.NilError(t, err)
	fc.Write(src, val)
	for _, tc := range []struct {
		name       string
		c          *client.Client
		registered bool
	}{
		{"remote holder, registered", user, true},
		{"remote holder, staged", user, false},
		{"own segment, registered", own, true},
		{"own segment, unregistered", own, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.registered {
				assert.NilError(t, tc.c.RegisterBuffer(uintptr(src), n))
				assert.NilError(t, tc.c.RegisterBuffer(uintptr(dst), n))
				defer func() {
					assert.NilError(t, tc.c.UnregisterBuffer(uintptr(src)))
					assert.NilError(t, tc.c.UnregisterBuffer(uintptr(dst)))
				}()
			}
			key := "gpu/" + tc.name
			assert.NilError(t, tc.c.PutFrom(ctx, key, uintptr(src), n, client.ReplicateConfig{}))
			got, err := tc.c.Get(ctx, key) // into host memory
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, val))
			fc.Zero(dst, n)
			m, err := tc.c.GetInto(ctx, key, uintptr(dst), n)
			assert.NilError(t, err)
			assert.Equal(t, m, uint64(n))
			assert.Assert(t, bytes.Equal(fc.Bytes(dst, n), val))

			// In pieces: a host header, then device data (a tensor
			// object), read back scattered the same way.
			head := pattern(304, 3)
			hm, err := cmem.MapAnon(4096)
			assert.NilError(t, err)
			defer hm.Close()
			hb, hbytes := hm.Addr(), hm.Bytes()[:len(head)]
			copy(hbytes, head)
			mkey := key + "/multi"
			errs := tc.c.BatchPutFromMulti(ctx, []string{mkey}, [][]client.Buffer{{{Addr: hb, Size: 304}, {Addr: uintptr(src), Size: n}}}, client.ReplicateConfig{})
			assert.NilError(t, errs[0])
			clear(hbytes)
			fc.Zero(dst, n)
			got2, gerrs := tc.c.BatchGetIntoMulti(ctx, []string{mkey}, [][]client.Buffer{{{Addr: hb, Size: 304}, {Addr: uintptr(dst), Size: n}}})
			assert.NilError(t, gerrs[0])
			assert.Equal(t, got2[0], uint64(304+n))
			assert.Assert(t, bytes.Equal(hbytes, head))
			assert.Assert(t, bytes.Equal(fc.Bytes(dst, n), val))
		})
	}
}
