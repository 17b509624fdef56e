package cuda

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

func TestMain(m *testing.M) {
	if role := os.Getenv("KVFERRY_CUDA_CHILD"); role != "" {
		os.Exit(child(role))
	}
	os.Exit(m.Run())
}

func driver(t *testing.T) (*Driver, *fakecuda.Control) {
	t.Helper()
	path := fakecuda.Path(t)
	d, err := Load(path)
	assert.NilError(t, err)
	c := fakecuda.Open(path)
	c.Reset()
	t.Cleanup(c.Reset)
	return d, c
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestUnavailable(t *testing.T) {
	_, err := Load("/nonexistent/libcuda.so.1")
	assert.Assert(t, errors.Is(err, ErrUnavailable), "%v", err)
	assert.Assert(t, !Loaded("/nonexistent/libcuda.so.1"))
}

func TestDevicesAndResolution(t *testing.T) {
	d, c := driver(t)
	assert.Assert(t, Loaded(d.Path()))
	_, err := d.Device(d.DeviceCount())
	assert.Equal(t, Code(err), ErrorInvalidDevice)
	if !c.Fake() {
		// The machine's driver: CUDA 12 or later, every device with
		// unified addressing and VMM memory that exports POSIX fds.
		assert.Assert(t, d.Version() >= 12000, "driver version %d", d.Version())
		for i := range d.DeviceCount() {
			info, err := d.Device(i)
			assert.NilError(t, err)
			assert.Assert(t, info.UnifiedAddressing && info.VMM && info.PosixFD, "%+v", info)
			assert.Equal(t, strings.Count(info.PCIBusID, ":"), 2, info.PCIBusID)
		}
		_, err = d.MemAlloc(0, 4096)
		assert.NilError(t, err)
		return
	}
	assert.Equal(t, d.Version(), 12080)
	assert.Equal(t, d.DeviceCount(), 2)
	info, err := d.Device(1)
	assert.NilError(t, err)
	assert.Equal(t, info.PCIBusID, "0000:02:00.0")
	assert.Assert(t, info.UnifiedAddressing && info.VMM && info.PosixFD && !info.Fabric)
	// Everything went through cuGetProcAddress_v2: no old-ABI export was
	// ever called.
	_, err = d.MemAlloc(0, 4096)
	assert.NilError(t, err)
	assert.Equal(t, c.WrongVersionCalls(), uint64(0))
	assert.Assert(t, c.Calls("cuGetProcAddress_v2") > 20)
}

func TestClassification(t *testing.T) {
	d, _ := driver(t)
	host, err := cmem.Malloc(1 << 16)
	assert.NilError(t, err)
	defer cmem.Free(host)
	pi, err := d.Pointer(uint64(host))
	assert.NilError(t, err)
	assert.Equal(t, pi.Type, uint32(0))

	pinned, err := d.HostAlloc(1 << 16)
	assert.NilError(t, err)
	defer d.HostFree(pinned)
	pi, err = d.Pointer(uint64(pinned) + 100)
	assert.NilError(t, err)
	assert.Equal(t, pi.Type, uint32(MemoryTypeHost))
	assert.Equal(t, pi.RangeStart, uint64(pinned))

	assert.NilError(t, d.HostRegister(host, 1<<16))
	pi, err = d.Pointer(uint64(host))
	assert.NilError(t, err)
	assert.Equal(t, pi.Type, uint32(MemoryTypeHost))
	assert.NilError(t, d.HostUnregister(host))

	second := fakecuda.Second(t)
	dev, err := d.MemAlloc(second, 1<<20)
	assert.NilError(t, err)
	defer d.MemFree(second, dev)
	pi, err = d.Pointer(dev + 4096)
	assert.NilError(t, err)
	assert.Equal(t, pi.Type, uint32(MemoryTypeDevice))
	assert.Equal(t, pi.Device, second)
	assert.Assert(t, pi.LegacyIPC && !pi.Managed)
	assert.Equal(t, pi.RangeStart, dev)
	assert.Equal(t, pi.RangeSize, uint64(1<<20))

	man, err := d.MemAllocManaged(0, 1<<16)
	assert.NilError(t, err)
	defer d.MemFree(0, man)
	pi, err = d.Pointer(man)
	assert.NilError(t, err)
	assert.Assert(t, pi.Managed && pi.Type == MemoryTypeDevice && !pi.LegacyIPC)

	v, size, err := d.VMMAlloc(0, 3<<20)
	assert.NilError(t, err)
	assert.Equal(t, size, uint64(4<<20))
	pi, err = d.Pointer(v + 1<<20)
	assert.NilError(t, err)
	assert.Assert(t, pi.Type == MemoryTypeDevice && !pi.LegacyIPC)
	assert.Equal(t, pi.HandleTypes, uint64(HandlePosixFD))
	assert.Equal(t, pi.MappingBase, v)
	assert.Equal(t, pi.MappingSize, size)
	assert.NilError(t, d.VMMFree(v))
}

// TestContextDiscipline: Do leaves the calling thread's own current
// context (a host thread's) as it found it, and work needs Do.
func TestContextDiscipline(t *testing.T) {
	d, _ := driver(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c1, err := d.primary(fakecuda.Second(t))
	assert.NilError(t, err)
	assert.Equal(t, d.f.ctxPushCurrent(c1), Success)
	defer func() {
		var old uintptr
		d.f.ctxPopCurrent(&old)
	}()
	p, err := d.MemAlloc(0, 4096)
	assert.NilError(t, err)
	pi, err := d.Pointer(p)
	assert.NilError(t, err)
	assert.Equal(t, pi.Device, 0) // allocated with device 0's context
	var cur uintptr
	assert.Equal(t, d.f.ctxGetCurrent(&cur), Success)
	assert.Equal(t, cur, c1) // the thread's own context is back
	// Without a context, driver calls that need one fail.
	var old uintptr
	d.f.ctxPopCurrent(&old)
	var q uint64
	assert.Equal(t, d.f.memAlloc(&q, 4096), ErrorInvalidContext)
	assert.Equal(t, d.f.ctxPushCurrent(c1), Success)
}

func TestCopierRoundTrip(t *testing.T) {
	d, c := driver(t)
	cp, err := d.NewCopier(0, 2)
	assert.NilError(t, err)
	defer cp.Close()
	const n = 3<<20 + 123
	src := pattern(n, 1)
	host, _ := cmem.Malloc(n)
	defer cmem.Free(host)
	copy(cmem.Bytes(host, n), src)
	a, _ := d.MemAlloc(0, n)
	b, _ := d.MemAlloc(0, n)
	defer d.MemFree(0, a)
	defer d.MemFree(0, b)
	back, _ := cmem.Malloc(n)
	defer cmem.Free(back)
	// H2D in pieces, D2D, D2H: each batch on some stream.
	var ops []Copy
	for off := uint64(0); off < n; off += 1 << 20 {
		ops = append(ops, Copy{Dst: a + off, Src: uint64(host) + off, N: min(1<<20, n-off)})
	}
	assert.NilError(t, cp.Copy(ops))
	assert.Assert(t, bytes.Equal(c.Bytes(a, n), src))
	assert.NilError(t, cp.Copy([]Copy{{Dst: b, Src: a, N: n}}))
	assert.NilError(t, cp.Copy([]Copy{{Dst: uint64(back), Src: b, N: n}}))
	assert.Assert(t, bytes.Equal(cmem.Bytes(back, n), src))

	// Many concurrent batches (slow copies on the fake): every completion
	// arrives.
	if c.Fake() {
		c.SetCopyDelay(200)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		off := uint64(i) * 4096
		cp.Submit([]Copy{{Dst: b + off, Src: uint64(host) + off, N: 4096}}, func(err error) {
			errs <- err
			wg.Done()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NilError(t, err)
	}
	if c.Fake() {
		assert.Assert(t, c.Calls("cuEventSynchronize") >= 64)
	}
}

func TestCopierFaults(t *testing.T) {
	fakecuda.FakeOnly(t, "injected driver errors and a lost context")
	d, c := driver(t)
	cp, err := d.NewCopier(1, 1)
	assert.NilError(t, err)
	defer cp.Close()
	a, _ := d.MemAlloc(1, 1<<16)
	defer d.MemFree(1, a)
	host, _ := cmem.Malloc(1 << 16)
	defer cmem.Free(host)
	// A bad address is refused when queued.
	err = cp.Copy([]Copy{{Dst: a, Src: uint64(host), N: 1 << 16}, {Dst: a + 1<<16, Src: uint64(host), N: 1}})
	assert.Equal(t, Code(err), ErrorInvalidValue, "%v", err)
	// An injected error from the driver.
	c.Fail("cuMemcpyAsync", 1, false, 2)
	err = cp.Copy([]Copy{{Dst: a, Src: uint64(host), N: 16}})
	assert.Equal(t, Code(err), ErrorOutOfMemory, "%v", err)
	assert.NilError(t, cp.Copy([]Copy{{Dst: a, Src: uint64(host), N: 16}}))
	// A copy failing on the device loses the context: 700 from then on.
	c.Fail("copy", 1, false, 700)
	err = cp.Copy([]Copy{{Dst: a, Src: uint64(host), N: 16}})
	assert.Equal(t, Code(err), ErrorIllegalAddress, "%v", err)
	err = cp.Copy([]Copy{{Dst: a, Src: uint64(host), N: 16}})
	assert.Equal(t, Code(err), ErrorIllegalAddress, "%v", err)
}

func TestStager(t *testing.T) {
	d, c := driver(t)
	st, err := d.NewStager(64<<10, 3)
	assert.NilError(t, err)
	defer st.Close()
	second := fakecuda.Second(t)
	for _, n := range []int{1, 64 << 10, 64<<10 + 1, 1<<20 + 4097} {
		src := pattern(n, byte(n))
		dev, _ := d.MemAlloc(second, uint64(n))
		off := 0
		err := st.ToDevice(second, dev, uint64(n), func(b []byte) error {
			off += copy(b, src[off:])
			return nil
		})
		assert.NilError(t, err)
		assert.Equal(t, off, n)
		assert.Assert(t, bytes.Equal(c.Bytes(dev, n), src), "n=%d", n)
		var got []byte
		assert.NilError(t, st.FromDevice(second, dev, uint64(n), func(b []byte) error {
			got = append(got, b...)
			return nil
		}))
		assert.Assert(t, bytes.Equal(got, src), "n=%d", n)
		d.MemFree(second, dev)
	}
	// A failing sink stops the pipeline and its error comes back.
	dev, _ := d.MemAlloc(0, 1<<20)
	defer d.MemFree(0, dev)
	boom := errors.New("socket gone")
	k := 0
	err = st.FromDevice(0, dev, 1<<20, func([]byte) error {
		if k++; k == 2 {
			return boom
		}
		return nil
	})
	assert.Assert(t, errors.Is(err, boom))
	assert.Equal(t, k, 2)
}

func TestGate(t *testing.T) {
	fakecuda.FakeOnly(t, "a copy slowed down to hold the stream")
	d, c := driver(t)
	s, err := d.newStream(0)
	assert.NilError(t, err)
	defer d.destroyStream(0, s)
	ctx, _ := d.primary(0)
	a, _ := d.MemAlloc(0, 4096)
	defer d.MemFree(0, a)
	host, _ := cmem.Malloc(4096)
	defer cmem.Free(host)
	hb := cmem.Bytes(host, 4096)
	hb[0] = 1
	c.SetCopyDelay(50000)
	_, r := d.submit(ctx, s, []Copy{{Dst: a, Src: uint64(host), N: 4096}}, 0)
	assert.Equal(t, r, Success)
	var g *StreamGate
	assert.NilError(t, d.Do(0, func() (err error) { g, err = d.Gate(s); return err }))
	defer g.Open()
	c.SetCopyDelay(0)
	// Queued after the gate: runs only once the gate opens.
	out, _ := cmem.Malloc(4096)
	defer cmem.Free(out)
	ob := cmem.Bytes(out, 4096)
	ob[0] = 0
	_, r = d.submit(ctx, s, []Copy{{Dst: uint64(out), Src: a, N: 4096}}, 0)
	assert.Equal(t, r, Success)
	assert.Assert(t, g.Wait(10*time.Second))
	assert.Equal(t, c.Bytes(a, 1)[0], byte(1)) // the work before the gate is done
	hb[0] = 2
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, ob[0], byte(0)) // the work after it waits
	assert.NilError(t, d.MemcpySync(0, a, uint64(host), 1))
	g.Open()
	assert.Equal(t, d.f.streamSynchronize(s), Success)
	assert.Equal(t, ob[0], byte(2))
}

// ---- other processes ----

func runChild(t *testing.T, role string, env []string, extra ...*os.File) (*exec.Cmd, *bufio.Reader, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "KVFERRY_CUDA_CHILD="+role, "KVFERRY_CUDA_LIB="+fakecuda.Path(t)), env...)
	cmd.ExtraFiles = extra
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	in, err := cmd.StdinPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	return cmd, bufio.NewReader(out), func() {
		in.Close()
		_ = cmd.Wait()
	}
}

// TestIPCAcrossProcesses: a legacy IPC handle and a VMM POSIX fd (over a
// Unix socket with SCM_RIGHTS) made by another process map its device
// memory here, with its bytes.
func TestIPCAcrossProcesses(t *testing.T) {
	d, c := driver(t)
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	assert.NilError(t, err)
	mine := os.NewFile(uintptr(sp[0]), "parent")
	theirs := os.NewFile(uintptr(sp[1]), "child")
	defer mine.Close()
	_, rd, stop := runChild(t, "owner", nil, theirs)
	theirs.Close()
	defer stop()
	line, err := rd.ReadString('\n')
	assert.NilError(t, err)
	var hs string
	var size uint64
	_, err = fmt.Sscanf(line, "ipc %s %d", &hs, &size)
	assert.NilError(t, err, line)
	raw, err := hex.DecodeString(hs)
	assert.NilError(t, err)
	var h IPCHandle
	copy(h.Reserved[:], raw)
	second := fakecuda.Second(t)
	p, err := d.IPCOpen(second, h)
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(c.Bytes(p, int(size)), pattern(int(size), 9)))
	if c.Fake() {
		assert.Equal(t, c.Count(fakecuda.KindIPCOpen), 1)
	}
	assert.NilError(t, d.IPCClose(second, p))
	if c.Fake() {
		assert.Equal(t, c.Count(fakecuda.KindIPCOpen), 0)
	}

	// VMM: the child sends the fd of its allocation.
	uc, err := net.FileConn(mine)
	assert.NilError(t, err)
	defer uc.Close()
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.(*net.UnixConn).ReadMsgUnix(buf, oob)
	assert.NilError(t, err)
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	assert.NilError(t, err)
	fds, err := unix.ParseUnixRights(&msgs[0])
	assert.NilError(t, err)
	fmt.Sscanf(string(buf[:n]), "%d", &size)
	v, err := d.ImportFD(0, fds[0], size)
	unix.Close(fds[0])
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(c.Bytes(v, int(size)), pattern(int(size), 5)))
	// Write through the mapping; the child checks and answers.
	host, _ := cmem.Malloc(16)
	defer cmem.Free(host)
	copy(cmem.Bytes(host, 16), "written by peer!")
	assert.NilError(t, d.MemcpySync(0, v, uint64(host), 16))
	_, err = uc.Write([]byte("check"))
	assert.NilError(t, err)
	line, err = rd.ReadString('\n')
	assert.NilError(t, err)
	assert.Equal(t, strings.TrimSpace(line), "ok")
	assert.NilError(t, d.UnmapImported(0, v, size))
}

// TestOldDrivers: an 11.3-11.8 driver resolves through cuGetProcAddress,
// an older one through the versioned export names; neither calls an
// old-ABI export or cuGetProcAddress_v2.
func TestOldDrivers(t *testing.T) {
	fakecuda.FakeOnly(t, "driver versions 11.4 and 11.2")
	for _, v := range []string{"11040", "11020"} {
		_, rd, stop := runChild(t, "version", []string{"FAKECUDA_DRIVER_VERSION=" + v})
		line, err := rd.ReadString('\n')
		stop()
		assert.NilError(t, err)
		assert.Equal(t, strings.TrimSpace(line), "ok "+v+" wrong=0", "driver %s", v)
	}
}

// TestFabricHandles: VMM memory exported as a fabric handle by one process
// is imported and mapped by another (both on a fake that offers fabric).
func TestFabricHandles(t *testing.T) {
	if fakecuda.Hardware() {
		d, _ := driver(t)
		info, err := d.Device(0)
		assert.NilError(t, err)
		if !info.Fabric {
			t.Skip("device 0 has no fabric handles (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: NVLink fabric, IMEX)")
		}
	}
	env := []string{"FAKECUDA_FABRIC=1"}
	_, rd, stop := runChild(t, "fabric-owner", env)
	defer stop()
	line, err := rd.ReadString('\n')
	assert.NilError(t, err)
	var hs string
	var size uint64
	_, err = fmt.Sscanf(line, "fabric %s %d", &hs, &size)
	assert.NilError(t, err, line)
	_, rd2, stop2 := runChild(t, "fabric-importer", append(env, "KVFERRY_FABRIC_HANDLE="+hs, fmt.Sprintf("KVFERRY_FABRIC_SIZE=%d", size)))
	defer stop2()
	line, err = rd2.ReadString('\n')
	assert.NilError(t, err)
	assert.Equal(t, strings.TrimSpace(line), "ok")
}

func child(role string) int {
	d, err := Load(os.Getenv("KVFERRY_CUDA_LIB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch role {
	case "fabric-owner":
		v, size, err := d.VMMAlloc(0, 2<<20)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		host, _ := cmem.Malloc(size)
		copy(cmem.Bytes(host, size), pattern(int(size), 3))
		if err := d.MemcpySync(0, v, uint64(host), size); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fh, err := d.ExportFabric(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("fabric %s %d\n", hex.EncodeToString(fh.Data[:]), size)
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	case "fabric-importer":
		raw, _ := hex.DecodeString(os.Getenv("KVFERRY_FABRIC_HANDLE"))
		var fh FabricHandle
		copy(fh.Data[:], raw)
		var size uint64
		fmt.Sscan(os.Getenv("KVFERRY_FABRIC_SIZE"), &size)
		second := fakecuda.SecondOf(d.DeviceCount())
		p, err := d.ImportFabric(second, fh, size)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ctl := fakecuda.Open(d.Path())
		if bytes.Equal(ctl.Bytes(p, int(size)), pattern(int(size), 3)) {
			fmt.Println("ok")
		} else {
			fmt.Println("bad bytes")
		}
		_ = d.UnmapImported(second, p, size)
	case "version":
		p, err := d.MemAlloc(0, 4096)
		if err == nil {
			err = d.Memset(0, p, 1, 4096)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ctl := fakecuda.Open(d.Path())
		fmt.Printf("ok %d wrong=%d\n", d.Version(), ctl.WrongVersionCalls())
	case "owner":
		const n = 1<<20 + 17
		p, _ := d.MemAlloc(0, n)
		host, _ := cmem.Malloc(n)
		copy(cmem.Bytes(host, n), pattern(n, 9))
		if err := d.MemcpySync(0, p, uint64(host), n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		h, err := d.IPCGetHandle(0, p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("ipc %s %d\n", hex.EncodeToString(h.Reserved[:]), n)
		second := fakecuda.SecondOf(d.DeviceCount())
		v, size, err := d.VMMAlloc(second, 2<<20)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		vh, _ := cmem.Malloc(size)
		copy(cmem.Bytes(vh, size), pattern(int(size), 5))
		d.MemcpySync(second, v, uint64(vh), size)
		fd, _, _, err := d.ExportFD(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		sock, _ := net.FileConn(os.NewFile(3, "sock"))
		uc := sock.(*net.UnixConn)
		uc.WriteMsgUnix([]byte(fmt.Sprint(size)), unix.UnixRights(fd), nil)
		unix.Close(fd)
		buf := make([]byte, 16)
		uc.Read(buf)
		d.MemcpySync(second, uint64(vh), v, 16)
		if string(cmem.Bytes(vh, 16)) == "written by peer!" {
			fmt.Println("ok")
		} else {
			fmt.Println("bad", string(cmem.Bytes(vh, 16)))
		}
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent is done
	}
	return 0
}
