package samehost_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// mooncakeHIPMapperMain plays the initiator side of Mooncake's hip
// transport in IPC mode: no engine, only the HIP runtime. For
// "map addr length shm_name remote seed n" it opens the 64-byte
// hipIpcMemHandle_t of shm_name (upper-case hex) with
// hipIpcOpenMemHandle, relocates remote as Mooncake does (remote - addr
// + the mapping), checks n bytes of the pattern there and writes "written
// by mooncake" over them, then closes the mapping.
func mooncakeHIPMapperMain() int {
	rt, lib := gputest.FromEnv(os.LookupEnv)
	h, err := gpu.Shared(rt.ConfigFor(lib)).HIP()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	reply("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "quit" {
			return 0
		}
		if len(f) != 7 || f[0] != "map" {
			reply("err bad command")
			continue
		}
		if err := mooncakeHIPMap(h, atou(f[1]), atou(f[2]), f[3], atou(f[4]), atou(f[5]), atou(f[6])); err != nil {
			reply("err %s", oneLine(err))
			continue
		}
		reply("ok")
	}
	return 0
}

func mooncakeHIPMap(h *hip.Runtime, addr, length uint64, shm string, remote, seed, n uint64) error {
	raw, err := hex.DecodeString(shm)
	if err != nil || len(raw) != 64 {
		return fmt.Errorf("shm_name %q is not a hipIpcMemHandle_t", shm)
	}
	if remote < addr || remote+n > addr+length {
		return fmt.Errorf("%#x+%d not found", remote, n) // as Mooncake's relocation refuses it
	}
	var ih hip.IPCHandle
	copy(ih.Reserved[:], raw)
	dev := fakecuda.SecondOf(h.DeviceCount())
	base, err := h.IPCOpen(dev, ih)
	if err != nil {
		return err
	}
	defer h.IPCClose(dev, base)
	host, err := cmem.MapAnon(n)
	if err != nil {
		return err
	}
	defer host.Close()
	at := remote - addr + base
	if err := h.MemcpySync(dev, uint64(host.Addr()), at, n); err != nil {
		return err
	}
	if !bytes.Equal(host.Bytes(), patternAt(seed, n)) {
		return fmt.Errorf("bytes differ")
	}
	copy(host.Bytes(), "written by mooncake")
	return h.MemcpySync(dev, at, uint64(host.Addr()), n)
}

// TestGPUMooncakeHIPMapsOurs: an engine on HIP started with Mooncake's
// protocol "hip" (what a ROCm build of Mooncake is initialized with)
// publishes what Mooncake's hip transport reads: the segment's protocol
// "hip", and for hipMalloc memory that starts its allocation a buffer
// with addr, length and shm_name, the 64-byte hipIpcMemHandle_t in
// upper-case hex. A process that reads only those fields, as Mooncake's
// initiator does, maps the memory with hipIpcOpenMemHandle and finds our
// bytes (and we find its). VMM memory, shared with kvferry peers by fd
// over the same-host socket, offers Mooncake no handle.
func TestGPUMooncakeHIPMapsOurs(t *testing.T) {
	rt := gputest.Runtimes()[1]
	g, lib := rt.Config(t)
	fc := fakecuda.Open(lib)
	fc.Reset()
	cfg := gpuStack(g)
	cfg.Protocol = "hip"
	e, _, own := gpuOwner(t, rt, g, cfg)

	raw, err := descriptor.Marshal(e.LocalDescriptor())
	assert.NilError(t, err)
	var mc struct { // the fields Mooncake's decoder reads for protocol hip
		Name     string `json:"name"`
		Protocol string `json:"protocol"`
		Buffers  []struct {
			Name    string `json:"name"`
			Addr    uint64 `json:"addr"`
			Length  uint64 `json:"length"`
			ShmName string `json:"shm_name"`
		} `json:"buffers"`
	}
	assert.NilError(t, json.Unmarshal(raw, &mc))
	assert.Equal(t, mc.Protocol, "hip", "%s", raw)
	h, err := gpu.Shared(g).HIP()
	assert.NilError(t, err)
	ih, err := h.IPCGetHandle(0, own.dev)
	assert.NilError(t, err)
	want := strings.ToUpper(hex.EncodeToString(ih.Reserved[:]))
	var found bool
	for _, b := range mc.Buffers {
		switch b.Addr {
		case own.dev:
			found = true
			assert.Equal(t, b.Length, uint64(gpuBufBytes))
			assert.Equal(t, b.ShmName, want)
		case own.vmm:
			assert.Equal(t, b.ShmName, "", "VMM memory offers Mooncake no handle")
		}
	}
	assert.Assert(t, found, "no buffer of our hipMalloc memory in %s", raw)

	c := startChild(t, childOpts{role: "gpu-mooncake-hip-mapper", env: rt.Env(lib)})
	const off, n = 12345, 1 << 20
	fc.Write(own.dev+off, patternAt(77, n))
	assert.Equal(t, c.do("map %d %d %s %d %d %d", own.dev, uint64(gpuBufBytes), want, own.dev+off, 77, n), "ok")
	assert.DeepEqual(t, fc.Bytes(own.dev+off, 19), []byte("written by mooncake"))
	r := c.do("map %d %d %s %d %d %d", own.dev, uint64(gpuBufBytes), want, own.dev+gpuBufBytes-4096, 1, 8192)
	assert.Assert(t, strings.HasPrefix(r, "err"), "past the published buffer: %s", r)
}
