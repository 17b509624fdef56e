package standalone

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/internal/cmem"
)

// A shared buffer: size bytes of a memfd mapped at addr in this process.
type shmBuffer struct {
	fd   int
	m    *cmem.Map
	addr uintptr
	size uint64
}

// HostMem is a process's allocator of shared host memory (Mooncake's
// ShmHelper behind MooncakeHostMemAllocator): every buffer is a memfd mapped
// shared, so a real client can map the same pages. Safe for concurrent use.
type HostMem struct {
	mu   sync.Mutex
	bufs map[uintptr]*shmBuffer // by address
}

// hostMem is the process's allocator: dummies of this process find the
// buffers it allocated.
var hostMem = &HostMem{bufs: make(map[uintptr]*shmBuffer)}

// ProcessHostMem returns the process's shared host memory allocator.
func ProcessHostMem() *HostMem { return hostMem }

// ErrNotShared: the memory was not allocated by the process's HostMem.
var ErrNotShared = errors.New("memory is not shared host memory (allocate it with MooncakeHostMemAllocator)")

// Alloc returns the address of size bytes of zeroed shared memory.
func (h *HostMem) Alloc(size uint64) (uintptr, error) {
	if size == 0 || size > 1<<48 {
		return 0, fmt.Errorf("allocate %d bytes of shared memory: bad size", size)
	}
	fd, err := unix.MemfdCreate("kvferry-host-mem", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("allocate %d bytes of shared memory: memfd_create: %w", size, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("allocate %d bytes of shared memory: ftruncate: %w", size, err)
	}
	m, err := cmem.MapShared(fd, size)
	if err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("allocate %d bytes of shared memory: %w", size, err)
	}
	b := &shmBuffer{fd: fd, m: m, addr: m.Addr(), size: size}
	h.mu.Lock()
	h.bufs[b.addr] = b
	h.mu.Unlock()
	return b.addr, nil
}

// Free releases a buffer Alloc returned. A real client that mapped it
// keeps its own mapping until the dummy unregisters it or goes away.
func (h *HostMem) Free(addr uintptr) error {
	h.mu.Lock()
	b, ok := h.bufs[addr]
	delete(h.bufs, addr)
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("free %#x: %w", addr, ErrNotShared)
	}
	err := b.m.Close()
	if cerr := unix.Close(b.fd); err == nil {
		err = cerr
	}
	return err
}

// find returns the buffer holding [addr, addr+n), or nil.
func (h *HostMem) find(addr uintptr, n uint64) *shmBuffer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.bufs[addr]; ok && n <= b.size {
		return b
	}
	for _, b := range h.bufs {
		if addr >= b.addr && uint64(addr-b.addr) <= b.size && n <= b.size-uint64(addr-b.addr) {
			return b
		}
	}
	return nil
}
