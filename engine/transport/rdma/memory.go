package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

// GPUDirect modes (Config.GPUDirect).
const (
	// GPUDirectAuto registers GPU memory through a dma-buf from the CUDA
	// driver (ibv_reg_dmabuf_mr), and where that is not possible with
	// ibv_reg_mr on the device pointer when a peer-memory module
	// (nvidia-peermem) is loaded.
	GPUDirectAuto = "auto"
	// GPUDirectDmaBuf uses dma-bufs only (Mooncake's WITH_NVIDIA_PEERMEM=0).
	GPUDirectDmaBuf = "dmabuf"
	// GPUDirectPeerMem uses ibv_reg_mr on the device pointer only, without
	// looking for the module (Mooncake's WITH_NVIDIA_PEERMEM=1).
	GPUDirectPeerMem = "peermem"
	// GPUDirectOff never registers GPU memory with the NICs.
	GPUDirectOff = "off"
)

// DefaultMaxMRSize is Mooncake's max_mr_size default (1 TiB), lowered to the
// smallest device max_mr_size.
const DefaultMaxMRSize = 1 << 40

// peerMemModules are the sysfs files present when a peer-memory client for
// NVIDIA GPUs is loaded (nvidia-peermem, or the older nv_peer_mem), as NCCL
// looks for them.
var peerMemModules = []string{
	"module/nvidia_peermem/version",
	"kernel/mm/memory_peers/nv_mem/version",
	"kernel/mm/memory_peers/nv_mem_nc/version",
}

// mrChunk is one memory region of a registration, on every NIC (mrs[i]
// belongs to nics[i]; nil where that NIC could not register it). A
// registration larger than the NICs' max_mr_size, or device memory spanning
// several driver allocations, is several chunks (Mooncake#2017: one MR and
// one published buffer per chunk).
type mrChunk struct {
	addr   uintptr
	length uint64
	mrs    []*ibv.MR
}

func (c *mrChunk) end() uint64 { return uint64(c.addr) + c.length }

// memReg is one registered region and its memory regions.
type memReg struct {
	addr     uintptr
	length   uint64
	location string
	remote   bool
	kind     engine.MemoryKind
	// how says how the region was registered: "host" (ibv_reg_mr), "dmabuf"
	// or "peermem" (GPU memory); chunks is empty when GPU memory could not
	// be registered (other transports carry it).
	how    string
	chunks []mrChunk
	gone   atomic.Bool // deregistered
}

func (m *memReg) end() uint64 { return uint64(m.addr) + m.length }

// chunk returns the chunk holding addr (nil when none does).
func (m *memReg) chunk(addr uint64) *mrChunk {
	i := sort.Search(len(m.chunks), func(i int) bool { return m.chunks[i].end() > addr })
	if i == len(m.chunks) || uint64(m.chunks[i].addr) > addr {
		return nil
	}
	return &m.chunks[i]
}

// gpuState counts the device-memory regions and how many of them the NICs
// could not register: the selector offers device memory to this transport
// only while every one is registered (Carries).
type gpuState struct {
	sync.Mutex
	registered, unregistered int
	how                      map[string]int // registered regions by how
	lastRefusal              string         // why the last unregistered one was refused
	warned                   map[string]bool
}

// chunkLimit is the largest memory region one registration may make: the
// configured max_mr_size, lowered to every NIC's.
func (t *Transport) chunkLimit() uint64 {
	limit := t.cfg.MaxMRSize
	for _, n := range t.nics {
		if n.attr.MaxMRSize > 0 && n.attr.MaxMRSize < limit {
			limit = n.attr.MaxMRSize
		}
	}
	return max(limit, 4096)
}

// split cuts [addr, addr+n) into pieces of at most limit bytes.
func split(addr uintptr, n, limit uint64) []mrChunk {
	var out []mrChunk
	for off := uint64(0); off < n; off += limit {
		out = append(out, mrChunk{addr: addr + uintptr(off), length: min(limit, n-off)})
	}
	return out
}

// RegisterRegions registers rs on every NIC (engine.MemoryRegistrar). A
// region whose location is "*" takes the NUMA node of its first page (GPU
// memory its device's "cuda:N"). Host memory that cannot be registered
// fails the registration; GPU memory that cannot (no dma-buf support, no
// peer-memory module, no CUDA driver) is kept off this transport with a log
// line, and other transports carry it.
func (t *Transport) RegisterRegions(rs []*engine.Region) error {
	if len(rs) == 0 {
		return nil
	}
	var added []*memReg
	undo := func() {
		for _, m := range added {
			t.release(m)
		}
	}
	for _, r := range rs {
		m := &memReg{addr: r.Addr, length: r.Length, location: resolveLocation(r), remote: r.RemoteAccessible, kind: r.Kind}
		access := ibv.AccessLocalWrite
		if r.RemoteAccessible {
			access |= ibv.AccessRemoteWrite | ibv.AccessRemoteRead
		}
		if r.Kind == engine.MemoryDevice {
			t.registerDevice(m, r, access)
			added = append(added, m)
			continue
		}
		m.how = "host"
		m.chunks = split(r.Addr, r.Length, t.chunkLimit())
		if len(m.chunks) > 1 {
			t.log.Warn("rdma registration split into several memory regions (device max_mr_size)", "addr", r.Addr,
				"length", r.Length, "regions", len(m.chunks), "max_mr_size", t.chunkLimit())
		}
		if err := t.regChunks(m, regMR(access)); err != nil {
			undo()
			return fmt.Errorf("rdma register: %w", err)
		}
		added = append(added, m)
	}
	sort.Slice(added, func(i, j int) bool { return added[i].addr < added[j].addr })
	t.regs.Lock()
	old := *t.regs.snap.Load()
	// Merge: O(n) per registration, not a sort of everything.
	next := make([]*memReg, 0, len(old)+len(added))
	i, j := 0, 0
	for i < len(old) || j < len(added) {
		if j == len(added) || (i < len(old) && old[i].addr < added[j].addr) {
			next = append(next, old[i])
			i++
		} else {
			next = append(next, added[j])
			j++
		}
	}
	t.regs.snap.Store(&next)
	t.regs.Unlock()
	t.gpu.Lock()
	for _, m := range added {
		if m.kind == engine.MemoryDevice {
			if len(m.chunks) > 0 {
				t.gpu.registered++
				if t.gpu.how == nil {
					t.gpu.how = map[string]int{}
				}
				t.gpu.how[m.how]++
			} else {
				t.gpu.unregistered++
			}
		}
	}
	t.gpu.Unlock()
	return nil
}

// GPUDirectStatus says how GPU memory is registered with the NICs: the
// mode, the device regions registered (by dma-buf or peer memory) and
// those left to other transports, with the last reason.
func (t *Transport) GPUDirectStatus() string {
	t.gpu.Lock()
	defer t.gpu.Unlock()
	s := fmt.Sprintf("GPUDirect %s: %d GPU regions registered (dmabuf %d, peermem %d), %d not registered",
		t.cfg.GPUDirect, t.gpu.registered, t.gpu.how["dmabuf"], t.gpu.how["peermem"], t.gpu.unregistered)
	if t.gpu.lastRefusal != "" {
		s += " (last: " + t.gpu.lastRefusal + ")"
	}
	return s
}

// registerDevice registers GPU memory (GPUDirect RDMA): per driver
// allocation a dma-buf imported into every NIC's PD (one export shared by
// all NICs, as Mooncake does), else ibv_reg_mr on the device pointer where
// a peer-memory module is loaded. It leaves m without chunks when neither
// works.
func (t *Transport) registerDevice(m *memReg, r *engine.Region, access int) {
	mode := t.cfg.GPUDirect
	var reasons []string
	if mode == GPUDirectOff {
		t.noGPUDirect(m, "GPUDirect RDMA is off (KVFERRY_RDMA_GPUDIRECT=off)")
		return
	}
	if mode == GPUDirectAuto || mode == GPUDirectDmaBuf {
		err := t.registerDmaBuf(m, r, access)
		if err == nil {
			m.how = "dmabuf"
			return
		}
		reasons = append(reasons, "dma-buf: "+err.Error())
	}
	if mode == GPUDirectPeerMem || mode == GPUDirectAuto {
		if mode == GPUDirectAuto && !peerMemLoaded(t.cfg.SysFS) {
			reasons = append(reasons, "peer memory: no nvidia-peermem module loaded")
		} else if err := t.registerPeerMem(m, access); err != nil {
			reasons = append(reasons, "peer memory: "+err.Error())
		} else {
			m.how = "peermem"
			if len(reasons) > 0 {
				t.log.Info("rdma GPU memory registered through peer memory", "addr", m.addr, "length", m.length, "why_not_dmabuf", reasons[0])
			}
			return
		}
	}
	t.noGPUDirect(m, strings.Join(reasons, "; "))
}

// noGPUDirect logs (a warning once per kind of reason, then at debug
// level) that GPU memory stays off RDMA.
func (t *Transport) noGPUDirect(m *memReg, reason string) {
	kind := strings.Map(func(r rune) rune { // the same reason for other fds, sizes, addresses
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, reason)
	t.gpu.Lock()
	first := !t.gpu.warned[kind]
	if t.gpu.warned == nil {
		t.gpu.warned = map[string]bool{}
	}
	t.gpu.warned[kind] = true
	t.gpu.lastRefusal = reason
	t.gpu.Unlock()
	lvl := t.log.Debug
	if first {
		lvl = t.log.Warn
	}
	lvl("rdma: GPU memory not registered with the NICs; other transports (TCP, staged through host memory) carry it",
		"addr", m.addr, "length", m.length, "location", m.location, "reason", reason)
}

// registerDmaBuf registers device memory from dma-bufs of the CUDA driver.
func (t *Transport) registerDmaBuf(m *memReg, r *engine.Region, access int) error {
	if !ibv.HasDmabuf() {
		return errors.New("libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than v34)")
	}
	if t.cfg.GPU == nil {
		return errors.New("no CUDA driver in this process")
	}
	bufs, err := t.cfg.GPU.ExportDmaBufs(r.Device, uint64(r.Addr), r.Length)
	if err != nil {
		return err
	}
	defer func() {
		for _, b := range bufs {
			syscall.Close(b.FD)
		}
	}()
	limit := t.chunkLimit()
	var chunks []mrChunk
	var exports []gpu.DmaBuf // the dma-buf of each chunk
	for _, b := range bufs {
		for _, c := range split(uintptr(b.Addr), b.Length, limit) {
			chunks = append(chunks, c)
			exports = append(exports, b)
		}
	}
	m.chunks = chunks
	return t.regChunks(m, func(n *nic, ci int, c *mrChunk) (*ibv.MR, error) { // dma-buf ci's export
		b := exports[ci]
		return n.pd.RegDmabufMR(b.Offset+(uint64(c.addr)-b.Addr), c.length, uint64(c.addr), b.FD, access)
	})
}

// registerPeerMem registers device memory with ibv_reg_mr on the device
// pointer (the peer-memory module resolves it).
func (t *Transport) registerPeerMem(m *memReg, access int) error {
	m.chunks = split(m.addr, m.length, t.chunkLimit())
	return t.regChunks(m, regMR(access))
}

// regMR registers a chunk with ibv_reg_mr (host memory, or GPU memory a
// peer-memory module resolves).
func regMR(access int) func(n *nic, _ int, c *mrChunk) (*ibv.MR, error) {
	return func(n *nic, _ int, c *mrChunk) (*ibv.MR, error) { return n.pd.RegMR(c.addr, c.length, access) }
}

// regChunks registers every chunk of m (not published yet) on every NIC
// with reg; on an error it releases what it registered and leaves m
// without chunks.
func (t *Transport) regChunks(m *memReg, reg func(n *nic, ci int, c *mrChunk) (*ibv.MR, error)) error {
	for ci := range m.chunks {
		c := &m.chunks[ci]
		c.mrs = make([]*ibv.MR, len(t.nics))
		for i, n := range t.nics {
			mr, err := reg(n, ci, c)
			if err != nil {
				t.release(m)
				m.chunks = nil
				return fmt.Errorf("%#x+%d on %s: %w", c.addr, c.length, n.name, err)
			}
			c.mrs[i] = mr
		}
	}
	return nil
}

// peerMemLoaded reports whether a peer-memory module for NVIDIA GPUs is
// loaded (sysfs).
func peerMemLoaded(sys fs.FS) bool {
	for _, p := range peerMemModules {
		if _, err := fs.Stat(sys, p); err == nil {
			return true
		}
	}
	return false
}

// UnregisterRegions deregisters rs on every NIC: peers' work on them fails
// with remote access errors from then on.
func (t *Transport) UnregisterRegions(rs []*engine.Region) {
	drop := map[uintptr]bool{}
	for _, r := range rs {
		drop[r.Addr] = true
	}
	t.regs.Lock()
	old := *t.regs.snap.Load()
	next := make([]*memReg, 0, len(old))
	var gone []*memReg
	for _, m := range old {
		if drop[m.addr] {
			gone = append(gone, m)
		} else {
			next = append(next, m)
		}
	}
	t.regs.snap.Store(&next)
	t.regs.Unlock()
	t.gpu.Lock()
	for _, m := range gone {
		if m.kind == engine.MemoryDevice {
			if len(m.chunks) > 0 {
				t.gpu.registered--
				t.gpu.how[m.how]--
			} else {
				t.gpu.unregistered--
			}
		}
	}
	t.gpu.Unlock()
	for _, m := range gone {
		t.dereg(m)
	}
}

// dereg deregisters a published registration, once. Its chunks stay as
// they are: a descriptor being built may still read their keys.
func (t *Transport) dereg(m *memReg) {
	if m.gone.Swap(true) {
		return
	}
	for _, c := range m.chunks {
		for i, mr := range c.mrs {
			if mr != nil {
				if err := mr.Dereg(); err != nil {
					t.log.Warn("rdma deregister failed", "device", t.nics[i].name, "addr", c.addr, "err", err)
				}
			}
		}
	}
}

// release deregisters the memory regions of a registration not published
// yet (a failed or retried one), clearing them.
func (t *Transport) release(m *memReg) {
	for ci := range m.chunks {
		c := &m.chunks[ci]
		for i, mr := range c.mrs {
			if mr != nil {
				if err := mr.Dereg(); err != nil {
					t.log.Warn("rdma deregister failed", "device", t.nics[i].name, "addr", c.addr, "err", err)
				}
				c.mrs[i] = nil
			}
		}
	}
}

// region returns the registration holding [addr, addr+n), or nil.
func (t *Transport) region(addr uintptr, n uint64) *memReg {
	return regionIn(*t.regs.snap.Load(), addr, n)
}

// regionIn returns the registration of rs (sorted) holding [addr, addr+n).
func regionIn(rs []*memReg, addr uintptr, n uint64) *memReg {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].addr > addr }) - 1
	if i < 0 {
		return nil
	}
	m := rs[i]
	if uint64(addr)+n > m.end() || uint64(addr)+n < uint64(addr) {
		return nil
	}
	return m
}

// carriesDevice reports whether local device memory may go over this
// transport: every device region is registered with the NICs.
func (t *Transport) carriesDevice() bool {
	t.gpu.Lock()
	defer t.gpu.Unlock()
	return t.gpu.registered > 0 && t.gpu.unregistered == 0
}

// Carries reports which memory the transport moves (engine.MemoryCarrier):
// host-accessible memory on both ends; local device memory while every
// local device region is registered with the NICs (GPUDirect RDMA); device
// memory of a peer whose GPU buffers all carry rkeys.
func (t *Transport) Carries(p *engine.Peer, e engine.Ends) bool {
	if e.Local == engine.MemoryDevice && !t.carriesDevice() {
		return false
	}
	if e.Remote == engine.MemoryDevice {
		d := p.Descriptor()
		return d != nil && t.peerInfo(d).gpuKeys
	}
	return true
}

var (
	_ engine.MemoryCarrier   = (*Transport)(nil)
	_ engine.MemoryRegistrar = (*Transport)(nil)
)

// resolveLocation is the priority-matrix row of a region: its location;
// for "*" (or none), GPU memory takes its device's "cuda:N" and host memory
// "cpu:<NUMA node of its first page>", as Mooncake resolves them.
func resolveLocation(r *engine.Region) string {
	loc := r.Location
	if loc != "*" && loc != "" {
		return loc
	}
	if r.Kind.GPU() {
		return fmt.Sprintf("cuda:%d", r.Device)
	}
	page := r.Addr &^ 4095
	status := int32(-1)
	pages := [1]uintptr{page}
	_, _, errno := unix.Syscall6(unix.SYS_MOVE_PAGES, 0, 1, uintptr(unsafePointer(&pages[0])), 0, uintptr(unsafePointer(&status)), 0)
	if errno != 0 || status < 0 {
		return "*"
	}
	return fmt.Sprintf("cpu:%d", status)
}

// describeBuffers sets each registered buffer's location and keys in
// device order; a registration of several memory regions becomes one
// buffer per region (as Mooncake publishes them), the later ones marked as
// continuing the first (descriptor.Buffer.Continues).
func (t *Transport) describeBuffers(seg *descriptor.Segment) {
	regs := *t.regs.snap.Load() // one snapshot for the count and the lookups
	extra := 0
	for _, m := range regs {
		extra += max(len(m.chunks)-1, 0)
	}
	out := seg.Buffers[:0] // in place unless a registration is several regions
	if extra > 0 {
		out = make([]descriptor.Buffer, 0, len(seg.Buffers)+extra)
	}
	for _, b := range seg.Buffers {
		m := regionIn(regs, uintptr(b.Addr), b.Length)
		if m == nil || uint64(m.addr) != b.Addr || len(m.chunks) == 0 {
			out = append(out, b)
			continue
		}
		for ci, c := range m.chunks {
			cb := b
			cb.Name = m.location
			cb.Addr, cb.Length = uint64(c.addr), c.length
			if ci > 0 {
				cb.Continues = true
				cb.ShmName, cb.IPCOffset = "", 0 // the first buffer names the whole allocation
			}
			cb.LKey = make([]uint64, len(c.mrs))
			for j, mr := range c.mrs {
				if mr != nil {
					cb.LKey[j] = uint64(mr.LKey)
				}
			}
			if m.remote {
				cb.RKey = make([]uint64, len(c.mrs))
				for j, mr := range c.mrs {
					if mr != nil {
						cb.RKey[j] = uint64(mr.RKey)
					}
				}
			}
			out = append(out, cb)
		}
	}
	seg.Buffers = out
}
