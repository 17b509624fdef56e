package samehost_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

const mooncakeFabricEnv = "KVFERRY_SAMEHOST_TEST_MC_FABRIC"

// mooncakeOwnerMain plays the owner side of a Mooncake nvlink or hip
// peer: no engine, just GPU memory and its handle as Mooncake's transports
// publish it (a cudaMalloc or hipMalloc allocation's legacy IPC handle;
// with KVFERRY_SAMEHOST_TEST_MC_FABRIC=1 a CUDA VMM allocation's fabric
// handle, or on HIP a hipMemCreate allocation's exported fd number and
// this process's pid, the fd kept open as Mooncake keeps it); the test
// publishes the descriptor. It answers fill, check and quit.
func mooncakeOwnerMain() int {
	rt, lib := gputest.FromEnv(os.LookupEnv)
	g := rt.ConfigFor(lib)
	const n = 4 << 20
	var p uint64
	var h []byte
	var d ranger
	var err error
	fabric := os.Getenv(mooncakeFabricEnv) == "1"
	if rt.Name == "hip" {
		var hr *hip.Runtime
		if hr, err = gpu.Shared(g).HIP(); err == nil {
			d = hr
			p, h, err = mooncakeHIPBuffer(hr, n, fabric)
		}
	} else {
		var cd *cuda.Driver
		if cd, err = gpu.Shared(g).Driver(); err == nil {
			d = cd
			p, h, err = mooncakeCUDABuffer(cd, n, fabric)
		}
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

// mooncakeCUDABuffer makes n bytes of device memory as Mooncake's CUDA
// transports publish it and returns its address and handle.
func mooncakeCUDABuffer(d *cuda.Driver, n uint64, fabric bool) (uint64, []byte, error) {
	if fabric {
		p, _, err := d.VMMAlloc(0, n)
		if err != nil {
			return 0, nil, err
		}
		f, err := d.ExportFabric(p)
		return p, f.Data[:], err
	}
	p, err := d.MemAlloc(0, n)
	if err != nil {
		return 0, nil, err
	}
	ih, err := d.IPCGetHandle(0, p)
	return p, ih.Reserved[:], err
}

// mooncakeHIPBuffer makes n bytes of device memory as Mooncake's hip
// transport publishes it: hipMalloc memory and its IPC handle, or (vmm)
// hipMemCreate memory and {exported fd, pid} as two little-endian ints.
func mooncakeHIPBuffer(h *hip.Runtime, n uint64, vmm bool) (uint64, []byte, error) {
	if vmm {
		p, _, err := h.VMMAlloc(0, n)
		if err != nil {
			return 0, nil, err
		}
		fd, _, _, err := h.ExportFDAt(p) // left open for the peers' pidfd_getfd
		if err != nil {
			return 0, nil, err
		}
		b := binary.LittleEndian.AppendUint32(nil, uint32(fd))
		return p, binary.LittleEndian.AppendUint32(b, uint32(os.Getpid())), nil
	}
	p, err := h.MemAlloc(0, n)
	if err != nil {
		return 0, nil, err
	}
	ih, err := h.IPCGetHandle(0, p)
	return p, ih.Reserved[:], err
}

// TestGPUMooncakeNVLinkPeer: a peer of Mooncake's nvlink transports (its
// descriptor as they publish it: protocol nvlink_intra or nvlink, buffers
// by location with the handle in shm_name, no kvferry fields, no host
// identity, no same-host socket) is reached over CUDA IPC: legacy handles
// with nvlink_intra, and with nvlink on a host whose GPUs all support
// fabric handles, fabric handles (as Mooncake's own initiator decides).
// Bytes cross both ways from device and host memory; ranges outside the
// published buffers are refused. The hip rows are Mooncake's ROCm build
// (protocol hip, buffers at hip:N): hipMalloc memory by its IPC handle,
// and hipMemCreate memory by the fd and pid of its shm_name, taken with
// pidfd_getfd, on the fake HIP.
func TestGPUMooncakeNVLinkPeer(t *testing.T) {
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	url := hs.URL + "/metadata"
	rts := gputest.Runtimes()
	for _, tc := range []struct {
		name, proto string
		rt          gputest.Runtime
		env         []string
		ipc         string // the initiator's IPC opens and VMM mappings after the transfers
	}{
		{"legacy", "nvlink_intra", rts[0], nil, "ipc 1 1"},
		{"fabric", "nvlink", rts[0], []string{"FAKECUDA_FABRIC=1", mooncakeFabricEnv + "=1"}, "ipc 0 3"},
		{"hip-ipc", "hip", rts[1], nil, "ipc 1 1"},
		{"hip-fd", "hip", rts[1], []string{mooncakeFabricEnv + "=1"}, "ipc 0 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := tc.rt.Path(t)
			if tc.name == "fabric" && fakecuda.Hardware() && !fabricHandles(t, lib) {
				t.Skip("the devices have no fabric handles (NVLink fabric, IMEX)")
			}
			env := append(tc.rt.Env(lib), tc.env...)
			owner := startChild(t, childOpts{role: "gpu-mooncake-owner", env: env})
			addr, n, handle := atou(owner.ready[0]), atou(owner.ready[1]), owner.ready[2]
			seg := "mooncake-" + tc.name
			desc := fmt.Sprintf(`{"name":%q,"protocol":%q,"tcp_data_port":0,"tcp_proto_version":2,"timestamp":"2026-12-01 10:00:00.000000",`+
				`"buffers":[{"name":%q,"addr":%d,"length":%d,"shm_name":%q}]}`, seg, tc.proto, tc.rt.Location(0), addr, n, handle)
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
