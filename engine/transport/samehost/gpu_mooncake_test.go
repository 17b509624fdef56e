package samehost_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

const mooncakeFabricEnv = "KVFERRY_SAMEHOST_TEST_MC_FABRIC"

// mooncakeOwnerMain plays the owner side of a Mooncake nvlink peer: no
// engine, just GPU memory and its handle as Mooncake's transports publish
// it (a cudaMalloc allocation's legacy IPC handle, or with
// KVFERRY_SAMEHOST_TEST_MC_FABRIC=1 a VMM allocation's fabric handle);
// the test publishes the descriptor. It answers fill, check and quit.
func mooncakeOwnerMain() int {
	d, err := gpu.Shared(gpu.Config{Library: os.Getenv("KVFERRY_CUDA_LIB")}).Driver()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	const n = 4 << 20
	var p uint64
	var h []byte
	if os.Getenv(mooncakeFabricEnv) == "1" {
		if p, _, err = d.VMMAlloc(0, n); err == nil {
			var f cuda.FabricHandle
			f, err = d.ExportFabric(p)
			h = f.Data[:]
		}
	} else if p, err = d.MemAlloc(0, n); err == nil {
		ih, e := d.IPCGetHandle(0, p)
		h, err = ih.Reserved[:], e
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	host, err := cmem.MapAnon(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reply := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	reply("ready %d %d %s", p, n, strings.ToUpper(hex.EncodeToString(h)))
	return deviceOwnerLoop(d, host, reply, func() error { return nil })
}

// TestGPUMooncakeNVLinkPeer: a peer of Mooncake's nvlink transports (its
// descriptor as they publish it: protocol nvlink_intra or nvlink, buffers
// by location with the handle in shm_name, no kvferry fields, no host
// identity, no same-host socket) is reached over CUDA IPC: legacy handles
// with nvlink_intra, and with nvlink on a host whose GPUs all support
// fabric handles, fabric handles (as Mooncake's own initiator decides).
// Bytes cross both ways from device and host memory; ranges outside the
// published buffers are refused.
func TestGPUMooncakeNVLinkPeer(t *testing.T) {
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	url := hs.URL + "/metadata"
	lib := fakecuda.Path(t)
	for _, tc := range []struct {
		name, proto string
		env         []string
		ipc         string // the initiator's IPC opens and VMM mappings after the transfers
	}{
		{"legacy", "nvlink_intra", nil, "ipc 1 1"},
		{"fabric", "nvlink", []string{"FAKECUDA_FABRIC=1", mooncakeFabricEnv + "=1"}, "ipc 0 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "fabric" && fakecuda.Hardware() && !fabricHandles(t, lib) {
				t.Skip("the devices have no fabric handles (NVLink fabric, IMEX)")
			}
			env := append([]string{"KVFERRY_CUDA_LIB=" + lib}, tc.env...)
			owner := startChild(t, childOpts{role: "gpu-mooncake-owner", env: env})
			addr, n, handle := atou(owner.ready[0]), atou(owner.ready[1]), owner.ready[2]
			seg := "mooncake-" + tc.name
			desc := fmt.Sprintf(`{"name":%q,"protocol":%q,"tcp_data_port":0,"tcp_proto_version":2,"timestamp":"2026-12-01 10:00:00.000000",`+
				`"buffers":[{"name":"cuda:0","addr":%d,"length":%d,"shm_name":%q}]}`, seg, tc.proto, addr, n, handle)
			put := func(key, value string) {
				req, err := http.NewRequest(http.MethodPut, url+"?key="+key, bytes.NewBufferString(value))
				assert.NilError(t, err)
				resp, err := http.DefaultClient.Do(req)
				assert.NilError(t, err)
				resp.Body.Close()
				assert.Equal(t, resp.StatusCode, http.StatusOK)
			}
			put("mooncake/ram/"+seg, desc)
			put("mooncake/rpc_meta/"+seg, `{"ip_or_host_name":"127.0.0.1","rpc_port":9}`) // never dialled for transfers

			c := startChild(t, childOpts{role: "gpu-initiator", env: append(env, ownerEnv+"="+seg, metadataEnv+"="+url)})
			seed := uint64(500)
			for _, local := range []string{"dev", "vmm", "host"} {
				for _, span := range [][2]uint64{{0, 4096}, {12345, 3 << 20}} {
					off, k := span[0], span[1]
					seed++
					assert.Equal(t, c.do("xfer w %s %d %d %d", local, addr+off, k, seed), "ok nvlink", "write from %s", local)
					assert.Equal(t, owner.do("check %d %d %d", addr+off, k, seed), "ok", "write from %s", local)
					seed++
					assert.Equal(t, owner.do("fill %d %d %d", addr+off, k, seed), "ok")
					assert.Equal(t, c.do("xfer r %s %d %d %d", local, addr+off, k, seed), "ok nvlink", "read into %s", local)
				}
			}
			r := c.do("xfer w dev %d %d 1", addr+n-4096, 8192)
			assert.Assert(t, strings.HasPrefix(r, "err"), "past the published buffer: %s", r)
			if !fakecuda.Hardware() {
				assert.Equal(t, c.do("ipc"), tc.ipc)
			}
		})
	}
}

// fabricHandles reports whether every device of the driver at lib can
// export fabric handles.
func fabricHandles(t *testing.T, lib string) bool {
	t.Helper()
	d, err := gpu.Shared(gpu.Config{Library: lib}).Driver()
	assert.NilError(t, err)
	for i := range d.DeviceCount() {
		info, err := d.Device(i)
		assert.NilError(t, err)
		if !info.Fabric {
			return false
		}
	}
	return true
}
