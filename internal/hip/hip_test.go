package hip

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

func TestMain(m *testing.M) {
	if role := os.Getenv("KVFERRY_HIP_CHILD"); role != "" {
		os.Exit(child(role))
	}
	os.Exit(m.Run())
}

func load(t *testing.T) (*Runtime, *fakecuda.Control) {
	t.Helper()
	path := fakecuda.HIPPath(t, false)
	r, err := Load(path)
	assert.NilError(t, err)
	c := fakecuda.Open(path)
	c.Reset()
	t.Cleanup(c.Reset)
	return r, c
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestUnavailable(t *testing.T) {
	_, err := Load("/nonexistent/libamdhip64.so")
	assert.Assert(t, errors.Is(err, ErrUnavailable), "%v", err)
	// A library without HIP's entry points (the fake CUDA driver) is not a
	// HIP runtime.
	_, err = Load(fakecuda.Path(t))
	assert.Assert(t, errors.Is(err, ErrUnavailable), "%v", err)
}

func TestDevices(t *testing.T) {
	r, _ := load(t)
	assert.Assert(t, r.DeviceCount() >= 2)
	assert.Assert(t, r.Version() > 0)
	info, err := r.Device(1)
	assert.NilError(t, err)
	assert.Equal(t, info.Ordinal, 1)
	assert.Assert(t, info.Name != "")
	assert.Assert(t, strings.Count(info.PCIBusID, ":") == 2, info.PCIBusID)
	assert.Assert(t, info.TotalMem > 0)
	assert.Assert(t, info.UnifiedAddressing && info.VMM && info.DmaBuf)
	bus, err := r.Attribute(1, AttrPCIBusID)
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(strings.ToLower(info.PCIBusID), fmt.Sprintf(":%02x:", bus)), "%s vs %d", info.PCIBusID, bus)
	_, err = r.Device(r.DeviceCount())
	assert.Equal(t, Code(err), ErrorInvalidDevice)
	ok, err := r.CanAccessPeer(0, 1)
	assert.NilError(t, err)
	if ok {
		assert.NilError(t, r.EnablePeerAccess(0, 1))
		assert.NilError(t, r.EnablePeerAccess(0, 1)) // twice is fine
	}
}

// TestPointers: every kind of memory is told apart, with the allocation's
// extent for device and managed memory.
func TestPointers(t *testing.T) {
	r, _ := load(t)
	pageable, err := cmem.Malloc(4096)
	assert.NilError(t, err)
	defer cmem.Free(pageable)
	pinned, err := r.HostAlloc(4096)
	assert.NilError(t, err)
	defer r.HostFree(pinned)
	registered, err := cmem.Malloc(8192)
	assert.NilError(t, err)
	defer cmem.Free(registered)
	assert.NilError(t, r.HostRegister(registered, 8192))
	defer r.HostUnregister(registered)
	dev, err := r.MemAlloc(1, 1<<20)
	assert.NilError(t, err)
	defer r.MemFree(1, dev)
	managed, err := r.MemAllocManaged(0, 1<<16)
	assert.NilError(t, err)
	defer r.MemFree(0, managed)

	for _, tc := range []struct {
		name   string
		p      uint64
		typ    uint32
		device int
		base   uint64
		size   uint64
	}{
		{"pageable", uint64(pageable), MemoryTypeUnregistered, -1, 0, 0},
		{"pinned", uint64(pinned), MemoryTypeHost, -1, 0, 0},
		{"registered", uint64(registered) + 100, MemoryTypeHost, -1, 0, 0},
		{"device", dev + 4096, MemoryTypeDevice, 1, dev, 1 << 20},
		{"managed", managed, MemoryTypeManaged, 0, managed, 1 << 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pi, err := r.Pointer(tc.p)
			assert.NilError(t, err)
			assert.Equal(t, pi.Type, tc.typ)
			if tc.typ != MemoryTypeHost {
				assert.Equal(t, pi.Device, tc.device)
			}
			assert.Equal(t, pi.Managed, tc.typ == MemoryTypeManaged)
			assert.Equal(t, pi.RangeStart, tc.base)
			assert.Equal(t, pi.RangeSize, tc.size)
		})
	}
}

// TestCopies: host to device synchronously, device to device and device
// to host on a stream, completion seen through an event; the thread's
// current device is left as it was.
func TestCopies(t *testing.T) {
	r, c := load(t)
	const n = 64 << 10
	src, err := r.HostAlloc(n)
	assert.NilError(t, err)
	defer r.HostFree(src)
	dst, err := r.HostAlloc(n)
	assert.NilError(t, err)
	defer r.HostFree(dst)
	copy(cmem.Bytes(src, n), pattern(n, 1))
	a, err := r.MemAlloc(0, n)
	assert.NilError(t, err)
	defer r.MemFree(0, a)
	b, err := r.MemAlloc(1, n)
	assert.NilError(t, err)
	defer r.MemFree(1, b)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	assert.Equal(t, r.f.setDevice(1), Success)
	assert.NilError(t, r.MemcpySync(0, a, uint64(src), n))
	assert.Assert(t, bytes.Equal(c.Bytes(a, n), pattern(n, 1)))
	var cur int32
	assert.Equal(t, r.f.getDevice(&cur), Success)
	assert.Equal(t, cur, int32(1))
	assert.Equal(t, r.f.setDevice(0), Success)

	s, err := r.NewStream(0)
	assert.NilError(t, err)
	defer s.Close()
	ev, err := r.NewEvent(0)
	assert.NilError(t, err)
	defer ev.Close()
	queued, err := s.Submit([]Copy{{Dst: b, Src: a, N: n / 2}, {Dst: b + n/2, Src: a + n/2, N: n / 2}, {Dst: uint64(dst), Src: a, N: n}}, ev)
	assert.NilError(t, err)
	assert.Equal(t, queued, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	assert.NilError(t, ev.Wait(ctx))
	assert.Assert(t, bytes.Equal(cmem.Bytes(dst, n), pattern(n, 1)))
	assert.Assert(t, bytes.Equal(c.Bytes(b, n), pattern(n, 1)))
	assert.NilError(t, r.Memset(1, b, 0xab, 16))
	assert.Assert(t, bytes.Equal(c.Bytes(b, 16), bytes.Repeat([]byte{0xab}, 16)))
	assert.NilError(t, s.Synchronize())
	assert.NilError(t, s.Close())
	assert.NilError(t, s.Close()) // a second Close does nothing
}

// TestFaults: an injected error comes back as a runtime error with its
// code, after the copies queued before it; an event wait ends at its
// deadline.
func TestFaults(t *testing.T) {
	r, c := load(t)
	a, err := r.MemAlloc(0, 8192)
	assert.NilError(t, err)
	defer r.MemFree(0, a)
	s, err := r.NewStream(0)
	assert.NilError(t, err)
	defer s.Close()
	ev, err := r.NewEvent(0)
	assert.NilError(t, err)
	defer ev.Close()
	c.Fail("hipMemcpyAsync", 2, false, int(ErrorInvalidValue))
	queued, err := s.Submit([]Copy{{Dst: a, Src: a + 4096, N: 16}, {Dst: a, Src: a + 4096, N: 16}}, ev)
	assert.Equal(t, queued, 1)
	assert.Equal(t, Code(err), ErrorInvalidValue)
	var he *Error
	assert.Assert(t, errors.As(err, &he) && he.Call == "hipMemcpyAsync")

	c.SetCopyDelay(200000)
	_, err = s.Submit([]Copy{{Dst: a, Src: a + 4096, N: 16}}, ev)
	assert.NilError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	err = ev.Wait(ctx)
	assert.Assert(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	c.SetCopyDelay(0)
	assert.NilError(t, s.Synchronize())

	c.Fail("hipMalloc", 1, false, int(ErrorOutOfMemory))
	_, err = r.MemAlloc(0, 4096)
	assert.Equal(t, Code(err), ErrorOutOfMemory)
}

// TestVMMAndDmaBuf: physical memory exported as a POSIX fd and imported
// again maps the same bytes at a second address; a dma-buf of device
// memory is a descriptor.
func TestVMMAndDmaBuf(t *testing.T) {
	r, c := load(t)
	g, err := r.Granularity(0)
	assert.NilError(t, err)
	assert.Assert(t, g > 0)
	size := 2 * g
	h, err := r.MemCreate(0, size)
	assert.NilError(t, err)
	va, err := r.Reserve(size, 0)
	assert.NilError(t, err)
	assert.NilError(t, r.Map(0, va, size, h))
	host, err := r.HostAlloc(size)
	assert.NilError(t, err)
	defer r.HostFree(host)
	copy(cmem.Bytes(host, size), pattern(int(size), 4))
	assert.NilError(t, r.MemcpySync(0, va, uint64(host), size))

	fd, err := r.ExportFD(h)
	assert.NilError(t, err)
	h2, err := r.ImportFD(fd)
	unix.Close(fd)
	assert.NilError(t, err)
	va2, err := r.Reserve(size, 0)
	assert.NilError(t, err)
	assert.NilError(t, r.Map(1, va2, size, h2))
	assert.Assert(t, bytes.Equal(c.Bytes(va2, int(size)), pattern(int(size), 4)))
	pi, err := r.Pointer(va2 + 10)
	assert.NilError(t, err)
	assert.Equal(t, pi.Type, uint32(MemoryTypeDevice))

	_, err = r.ImportFD(-1)
	assert.Equal(t, Code(err), ErrorInvalidValue)

	dmabuf, err := r.DmaBufFD(0, va, size)
	assert.NilError(t, err)
	assert.Assert(t, dmabuf >= 0)
	unix.Close(dmabuf)

	for _, m := range []struct{ va, h uint64 }{{va2, h2}, {va, h}} {
		assert.NilError(t, r.Unmap(m.va, size))
		assert.NilError(t, r.MemRelease(m.h))
		assert.NilError(t, r.Free(m.va, size))
	}
}

// TestVMMAcrossProcesses: VMM memory exported by address (as the
// same-host transport's owner does) is mapped by another process through
// the fd alone, which reads the bytes and writes back; under both ways
// HIP runtimes take the fd at import (by pointer before ROCm 7.1, by value
// from 7.1). hipMalloc memory is not shareable by fd.
func TestVMMAcrossProcesses(t *testing.T) {
	r, c := load(t)
	p, size, err := r.VMMAlloc(0, 3<<20)
	assert.NilError(t, err)
	defer func() { assert.NilError(t, r.VMMFree(p, size)) }()
	assert.Assert(t, r.Shareable(p+size-1))
	legacy, err := r.MemAlloc(0, 4096)
	assert.NilError(t, err)
	defer r.MemFree(0, legacy)
	assert.Assert(t, !r.Shareable(legacy))
	_, _, _, err = r.ExportFDAt(legacy)
	assert.Assert(t, err != nil)
	host, err := r.HostAlloc(size)
	assert.NilError(t, err)
	defer r.HostFree(host)
	copy(cmem.Bytes(host, size), pattern(int(size), 9))
	assert.NilError(t, r.MemcpySync(0, p, uint64(host), size))
	for _, version := range []string{"60241134", "70100000"} {
		t.Run(version, func(t *testing.T) {
			fd, base, n, err := r.ExportFDAt(p + 4096)
			assert.NilError(t, err)
			assert.Equal(t, base, p)
			assert.Equal(t, n, size)
			f := os.NewFile(uintptr(fd), "vmm")
			defer f.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "KVFERRY_HIP_CHILD=vmm", "KVFERRY_HIP_LIB="+r.Path(),
				"FAKEHIP_VERSION="+version, fmt.Sprintf("KVFERRY_IPC_SIZE=%d", size))
			cmd.ExtraFiles = []*os.File{f} // fd 3 in the child
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			assert.NilError(t, err)
			assert.Equal(t, strings.TrimSpace(string(out)), "ok")
			assert.DeepEqual(t, c.Bytes(p, 16), []byte("written by peer!"))
			copy(cmem.Bytes(host, 16), pattern(16, 9))
			assert.NilError(t, r.MemcpySync(0, p, uint64(host), 16))
		})
	}
}

// ---- other processes ----

func runChild(t *testing.T, role, lib string, env ...string) (*bufio.Reader, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "KVFERRY_HIP_CHILD="+role, "KVFERRY_HIP_LIB="+lib), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	in, err := cmd.StdinPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	return bufio.NewReader(out), func() {
		in.Close()
		_ = cmd.Wait()
	}
}

// TestIPCAcrossProcesses: an IPC handle made here maps this process's
// device memory in another process, which reads its bytes and writes
// back through the mapping.
func TestIPCAcrossProcesses(t *testing.T) {
	r, c := load(t)
	const n = 8192
	p, err := r.MemAlloc(0, n)
	assert.NilError(t, err)
	defer r.MemFree(0, p)
	host, err := r.HostAlloc(n)
	assert.NilError(t, err)
	defer r.HostFree(host)
	copy(cmem.Bytes(host, n), pattern(n, 9))
	assert.NilError(t, r.MemcpySync(0, p, uint64(host), n))
	h, err := r.IPCGetHandle(0, p+100)
	assert.NilError(t, err)
	rd, stop := runChild(t, "ipc", r.Path(), "KVFERRY_IPC_HANDLE="+hex.EncodeToString(h.Reserved[:]), fmt.Sprintf("KVFERRY_IPC_SIZE=%d", n))
	defer stop()
	line, err := rd.ReadString('\n')
	assert.NilError(t, err)
	assert.Equal(t, strings.TrimSpace(line), "ok")
	assert.DeepEqual(t, c.Bytes(p, 16), []byte("written by peer!"))
}

// TestMissingVMM: a runtime without the VMM and dma-buf entry points (an
// older ROCm) loads, says so, and refuses those calls with
// ErrNotSupported. It runs in a child: two fakes in one process would
// share the device address range.
func TestMissingVMM(t *testing.T) {
	lib, err := fakecuda.BuildHIP(true)
	assert.NilError(t, err)
	rd, stop := runChild(t, "novmm", lib)
	defer stop()
	line, err := rd.ReadString('\n')
	assert.NilError(t, err)
	assert.Equal(t, strings.TrimSpace(line), "ok")
}

func child(role string) int {
	r, err := Load(os.Getenv("KVFERRY_HIP_LIB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, role+": "+format+"\n", args...)
		return 1
	}
	switch role {
	case "ipc":
		raw, _ := hex.DecodeString(os.Getenv("KVFERRY_IPC_HANDLE"))
		var h IPCHandle
		copy(h.Reserved[:], raw)
		var n uint64
		fmt.Sscan(os.Getenv("KVFERRY_IPC_SIZE"), &n)
		second := fakecuda.SecondOf(r.DeviceCount())
		p, err := r.IPCOpen(second, h)
		if err != nil {
			return fail("%v", err)
		}
		host, err := r.HostAlloc(n)
		if err != nil {
			return fail("%v", err)
		}
		if err := r.MemcpySync(second, uint64(host), p, n); err != nil {
			return fail("%v", err)
		}
		if !bytes.Equal(cmem.Bytes(host, n), pattern(int(n), 9)) {
			return fail("bytes differ")
		}
		copy(cmem.Bytes(host, 16), "written by peer!")
		if err := r.MemcpySync(second, p, uint64(host), 16); err != nil {
			return fail("%v", err)
		}
		if err := r.IPCClose(second, p); err != nil {
			return fail("%v", err)
		}
	case "vmm":
		var n uint64
		fmt.Sscan(os.Getenv("KVFERRY_IPC_SIZE"), &n)
		second := fakecuda.SecondOf(r.DeviceCount())
		m, err := r.ReserveShared(second, n)
		if err != nil {
			return fail("%v", err)
		}
		defer m.Close()
		if err := m.MapFD(0, n, 3); err != nil {
			return fail("map: %v", err)
		}
		if err := m.Finish(); err != nil {
			return fail("%v", err)
		}
		host, err := r.HostAlloc(n)
		if err != nil {
			return fail("%v", err)
		}
		if err := r.MemcpySync(second, uint64(host), m.Addr(), n); err != nil {
			return fail("%v", err)
		}
		if !bytes.Equal(cmem.Bytes(host, n), pattern(int(n), 9)) {
			return fail("bytes differ")
		}
		copy(cmem.Bytes(host, 16), "written by peer!")
		if err := r.MemcpySync(second, m.Addr(), uint64(host), 16); err != nil {
			return fail("%v", err)
		}
		if err := m.Close(); err != nil {
			return fail("%v", err)
		}
	case "novmm":
		info, err := r.Device(0)
		if err != nil {
			return fail("%v", err)
		}
		if info.VMM || info.DmaBuf {
			return fail("device says VMM %v, dma-buf %v", info.VMM, info.DmaBuf)
		}
		if _, err := r.MemCreate(0, 2<<20); !errors.Is(err, ErrNotSupported) {
			return fail("MemCreate: %v", err)
		}
		if _, err := r.ImportFD(3); !errors.Is(err, ErrNotSupported) {
			return fail("ImportFD: %v", err)
		}
		p, err := r.MemAlloc(0, 4096)
		if err != nil {
			return fail("%v", err)
		}
		if _, err := r.DmaBufFD(0, p, 4096); !errors.Is(err, ErrNotSupported) {
			return fail("DmaBufFD: %v", err)
		}
	default:
		return fail("unknown role")
	}
	fmt.Println("ok")
	return 0
}

// TestLayouts pins the Go mirrors of HIP's structs to the sizes and
// offsets of docs/specs/hip.md.
func TestLayouts(t *testing.T) {
	var a pointerAttrs
	assert.Equal(t, unsafe.Sizeof(a), uintptr(32))
	assert.Equal(t, unsafe.Offsetof(a.isManaged), uintptr(24))
	var p allocProp
	assert.Equal(t, unsafe.Sizeof(p), uintptr(32))
	assert.Equal(t, unsafe.Offsetof(p.locID), uintptr(12))
	assert.Equal(t, unsafe.Sizeof(accessDesc{}), uintptr(12))
	assert.Equal(t, unsafe.Sizeof(IPCHandle{}), uintptr(64))
}

// TestCopierAndStager: batches on the copier's streams land and complete
// through their events; the stager moves device memory to and from a
// byte stream through its pinned ring, across several pieces.
func TestCopierAndStager(t *testing.T) {
	r, c := load(t)
	const n = 1<<20 + 333
	a, err := r.MemAlloc(0, n)
	assert.NilError(t, err)
	defer r.MemFree(0, a)
	b, err := r.MemAlloc(1, n)
	assert.NilError(t, err)
	defer r.MemFree(1, b)

	st, err := r.NewStager(64<<10, 3)
	assert.NilError(t, err)
	defer st.Close()
	want := pattern(n, 6)
	off := 0
	assert.NilError(t, st.ToDevice(0, a, n, func(p []byte) error {
		off += copy(p, want[off:])
		return nil
	}))
	assert.Assert(t, bytes.Equal(c.Bytes(a, n), want))

	cp, err := r.NewCopier(0, 2)
	assert.NilError(t, err)
	defer cp.Close()
	assert.Equal(t, cp.Device(), 0)
	for range 3 {
		assert.NilError(t, cp.Copy([]Copy{{Dst: b, Src: a, N: n / 2}, {Dst: b + n/2, Src: a + n/2, N: n - n/2}}))
	}
	var got []byte
	assert.NilError(t, st.FromDevice(1, b, n, func(p []byte) error {
		got = append(got, p...)
		return nil
	}))
	assert.Assert(t, bytes.Equal(got, want))

	c.Fail("hipMemcpyAsync", 1, false, int(ErrorIllegalAddress))
	err = cp.Copy([]Copy{{Dst: b, Src: a, N: 16}})
	assert.Equal(t, Code(err), ErrorIllegalAddress)
	cp.Close()
	assert.Assert(t, errors.Is(cp.Copy([]Copy{{Dst: b, Src: a, N: 16}}), ErrClosed))
}
