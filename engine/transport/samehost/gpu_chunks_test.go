package samehost_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

const chunkBytes = 2 << 20

// chunkOwnerMain owns device memory over several allocations and
// registers each as one region: chunked VMM memory shared as POSIX fds
// (device 0) and as fabric handles only (device 1), each three chunks of
// one reservation (PyTorch's expandable segments), and two adjacent
// cudaMalloc allocations (device 1; device 0 on a machine with one GPU).
// It answers "fill addr n seed", "check addr n seed", "unreg" and "quit".
// Its ready line gives 0 for what the driver cannot make: fabric handles
// where the devices have none (a real driver without NVLink fabric),
// adjacent cudaMalloc allocations where the driver placed none side by
// side. On HIP (the runtime gputest.FromEnv names) it has no fabric
// memory: HIP offers no fabric handles.
func chunkOwnerMain() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	rt, lib := gputest.FromEnv(os.LookupEnv)
	e, a, err := gpuChildEngineOn(rt, lib)
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	second := fakecuda.SecondOf(deviceCount(a))
	var fd, fdSize uint64
	d, isCUDA := a.(*cuda.Driver)
	if isCUDA {
		fd, fdSize, err = d.VMMAllocChunks(0, chunkBytes, 3, cuda.HandlePosixFD)
	} else {
		fd, fdSize, err = a.(*hip.Runtime).VMMAllocChunks(0, chunkBytes, 3)
	}
	if err != nil {
		return fail(err)
	}
	regs := [][3]uint64{{fd + 4096, fdSize - 8192, 0}}
	var fab, fabSize, legacy uint64
	if isCUDA && fabricDevice(d, second) {
		if fab, fabSize, err = d.VMMAllocChunks(second, chunkBytes, 3, cuda.HandleFabric); err != nil {
			return fail(err)
		}
		regs = append(regs, [3]uint64{fab, fabSize, uint64(second)})
	}
	// Two cudaMalloc allocations side by side: the fake places them so;
	// a real driver usually does, within a few tries.
	var prev uint64
	for range 8 {
		l, err := a.MemAlloc(second, chunkBytes)
		if err != nil {
			return fail(err)
		}
		if prev != 0 && l == prev+chunkBytes {
			legacy = prev
			break
		}
		prev = l
	}
	if legacy == 0 && !fakecuda.Hardware() {
		return fail(fmt.Errorf("no two adjacent cudaMalloc allocations"))
	}
	if legacy != 0 {
		regs = append(regs, [3]uint64{legacy + 4096, 2*chunkBytes - 8192, uint64(second)})
		legacy += 4096
	}
	for _, r := range regs {
		if err := e.RegisterMemory(uintptr(r[0]), r[1], rt.Location(int(r[2])), true); err != nil {
			return fail(err)
		}
	}
	host, err := cmem.MapAnon(fdSize)
	if err != nil {
		return fail(err)
	}
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	reply("ready %s %d %d %d", e.SegmentName(), fd+4096, fab, legacy)
	return deviceOwnerLoop(a.(ranger), host, reply, func() error {
		for _, r := range regs {
			if err := e.UnregisterMemory(uintptr(r[0])); err != nil {
				return err
			}
		}
		return nil
	})
}

// fabricDevice reports whether device dev of d exports fabric handles.
func fabricDevice(d *cuda.Driver, dev int) bool {
	info, err := d.Device(dev)
	return err == nil && info.Fabric
}

// ranger copies synchronously and tells a device address's allocation
// (both bindings).
type ranger interface {
	MemcpySync(dev int, dst, src, n uint64) error
	AddressRange(p uint64) (base, size uint64, err error)
}

var (
	_ ranger = (*cuda.Driver)(nil)
	_ ranger = (*hip.Runtime)(nil)
)

// deviceOwnerLoop answers "fill addr n seed" and "check addr n seed" (of
// device memory, through the driver and the host buffer), "unreg" (calls
// unreg) and "quit".
func deviceOwnerLoop(d ranger, host *cmem.Map, reply func(string, ...any), unreg func() error) int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && (f[0] == "fill" || f[0] == "check"):
			addr, n, seed := atou(f[1]), atou(f[2]), atou(f[3])
			var err error
			if f[0] == "fill" {
				copy(host.Bytes()[:n], patternAt(seed, n))
				err = copyPieces(d, addr, uint64(host.Addr()), n, true)
			} else {
				clear(host.Bytes()[:n])
				err = copyPieces(d, uint64(host.Addr()), addr, n, false)
				if err == nil && !bytes.Equal(host.Bytes()[:n], patternAt(seed, n)) {
					err = fmt.Errorf("bytes differ")
				}
			}
			if err != nil {
				reply("err %s", oneLine(err))
				continue
			}
			reply("ok")
		case len(f) == 1 && f[0] == "unreg":
			if err := unreg(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			reply("ok")
		case len(f) == 1 && f[0] == "quit":
			return 0
		}
	}
	return 0
}

// TestGPUChunksTwoProcesses: device memory registered over several
// allocations crosses processes through GPU IPC: the importer maps
// chunked VMM memory side by side in one reservation (POSIX fds the owner
// exports one per chunk, or, on CUDA, the fabric handles of the
// descriptor), and opens one legacy IPC handle per cudaMalloc/hipMalloc
// allocation. Requests run across the allocations' boundaries in both
// directions, from device and host memory; every byte is checked on the
// other side; the mappings close when the owner unregisters. It runs on
// each GPU runtime.
func TestGPUChunksTwoProcesses(t *testing.T) {
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) { testGPUChunksTwoProcesses(t, rt) })
	}
}

func testGPUChunksTwoProcesses(t *testing.T, rt gputest.Runtime) {
	lib := rt.Path(t)
	env := append(rt.Env(lib), "FAKECUDA_FABRIC=1")
	owner := startChild(t, childOpts{role: "gpu-chunk-owner", env: env})
	seg := owner.ready[0]
	targets := map[string]uint64{"fd": atou(owner.ready[1]), "fabric": atou(owner.ready[2]), "legacy": atou(owner.ready[3])}
	if rt.Name == "hip" {
		delete(targets, "fabric") // HIP has no fabric handles
	}
	for name, base := range targets {
		if base == 0 {
			// Only on a real driver (the owner fails on the fake).
			t.Logf("%s: the driver made none (no fabric handles, or no adjacent cudaMalloc allocations): not tested", name)
			delete(targets, name)
		}
	}
	c := startChild(t, childOpts{role: "gpu-initiator", env: append(env, ownerEnv+"="+seg, "KVFERRY_GPU_HOST_PATH=map")})
	seed := uint64(100)
	for name, base := range targets {
		for _, local := range []string{"dev", "vmm", "host"} {
			// From inside the first allocation to inside the last (two
			// boundaries for the VMM memory, one for the legacy pair).
			for _, span := range [][2]uint64{{chunkBytes - 8192, 8192 + 4096}, {1000, 2*chunkBytes + 5}} {
				off, n := span[0], span[1]
				if name == "legacy" && off+n > 2*chunkBytes-8192 {
					n = 2*chunkBytes - 8192 - off
				}
				seed++
				assert.Equal(t, c.do("xfer w %s %d %d %d", local, base+off, n, seed), "ok nvlink", "%s from %s: write %d at %d", name, local, n, off)
				assert.Equal(t, owner.do("check %d %d %d", base+off, n, seed), "ok", "%s from %s: write %d at %d", name, local, n, off)
				seed++
				assert.Equal(t, owner.do("fill %d %d %d", base+off, n, seed), "ok")
				assert.Equal(t, c.do("xfer r %s %d %d %d", local, base+off, n, seed), "ok nvlink", "%s into %s: read %d at %d", name, local, n, off)
			}
		}
	}
	// Mapped: two legacy allocations (the fake keeps one range per
	// allocation however many devices open it); the initiator's own VMM
	// buffer and, for each of its two devices (dev and host requests run
	// on device 0, vmm on 1), 3+3 imported chunks, each kind side by side
	// in one reservation (HIP: no fabric chunks).
	fake := !fakecuda.Hardware()
	if fake {
		want := "ipc 2 13"
		if rt.Name == "hip" {
			want = "ipc 2 7"
		}
		assert.Equal(t, c.do("ipc"), want)
	}
	assert.Equal(t, owner.do("unreg"), "ok")
	for name, base := range targets {
		r := c.do("xfer w dev %d %d 1", base, 4096)
		assert.Assert(t, strings.HasPrefix(r, "err"), "%s after unregister: %s", name, r)
	}
	if fake {
		assert.Equal(t, c.do("ipc"), "ipc 0 1")
	}
}

// copyPieces copies n bytes between host and device memory one driver
// allocation at a time (a copy may not run from one cudaMalloc allocation
// into the next); toDevice: dst is the device address.
func copyPieces(d ranger, dst, src, n uint64, toDevice bool) error {
	for off := uint64(0); off < n; {
		dev := src + off
		if toDevice {
			dev = dst + off
		}
		base, size, err := d.AddressRange(dev)
		if err != nil {
			return err
		}
		k := min(n-off, base+size-dev)
		if err := d.MemcpySync(0, dst+off, src+off, k); err != nil {
			return err
		}
		off += k
	}
	return nil
}
