// Package memfd allocates host memory that other processes of the host may
// map: a memfd, sealed against shrinking and growing, mapped shared in this
// process and listed in a process-wide table. The same-host transport hands
// the file descriptor of a registered range held here to a peer that has
// proved the kernel already lets it read and write this process's memory
// (process_vm_readv/writev); the peer then copies with memcpy instead of a
// system call per transfer.
//
// Memory allocated here is not inherited by fork() (MADV_DONTFORK): a child
// sees no mapping where a private anonymous mapping would have given it a
// copy-on-write one.
package memfd

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNotShared says that no memory of this package holds a range.
var ErrNotShared = errors.New("memory is not memfd-backed")

// Map is a shared mapping of a sealed memfd that this process allocated.
type Map struct {
	b  []byte
	fd int
}

// table lists the live maps of the process.
var table struct {
	sync.Mutex
	ms []*Map
}

// New allocates n bytes (a whole number of pages is mapped) of zeroed
// memory backed by a memfd named name. With populate every page is
// allocated now, so that no access by this process or a peer faults later.
func New(name string, n uint64, populate bool) (*Map, error) {
	if n == 0 {
		return nil, fmt.Errorf("memfd %s: zero bytes", name)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create %s: %w", name, err)
	}
	m, err := newMap(fd, name, n, populate)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	table.Lock()
	table.ms = append(table.ms, m)
	table.Unlock()
	return m, nil
}

func newMap(fd int, name string, n uint64, populate bool) (*Map, error) {
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, fmt.Errorf("size memfd %s to %d bytes: %w", name, n, err)
	}
	// Sealed against resizing, so that no holder of the fd can make
	// another's accesses fault (SIGBUS past the end).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, fmt.Errorf("seal memfd %s: %w", name, err)
	}
	b, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map memfd %s (%d bytes): %w", name, n, err)
	}
	_ = unix.Madvise(b, unix.MADV_DONTFORK)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // shmem THP only where the kernel enables it
	if populate && unix.Madvise(b, unix.MADV_POPULATE_WRITE) != nil {
		for i := 0; i < len(b); i += 4096 { // before Linux 5.14
			b[i] = 0
		}
	}
	return &Map{b: b, fd: fd}, nil
}

// Addr returns the mapping's start address.
func (m *Map) Addr() uintptr { return uintptr(unsafe.Pointer(&m.b[0])) }

// Len returns the mapping's size in bytes.
func (m *Map) Len() uint64 { return uint64(len(m.b)) }

// Bytes returns the mapping as a slice.
func (m *Map) Bytes() []byte { return m.b }

// Close takes the map out of the table, closes the memfd and unmaps the
// memory; a second Close is harmless. Peers that mapped it keep their own
// mapping (and so the pages) until they drop it: the same-host transport
// drops it when the range is unregistered.
func (m *Map) Close() error {
	table.Lock()
	defer table.Unlock()
	if m.b == nil {
		return nil
	}
	for i, x := range table.ms {
		if x == m {
			table.ms = append(table.ms[:i], table.ms[i+1:]...)
			break
		}
	}
	unix.Close(m.fd)
	err := unix.Munmap(m.b)
	m.b, m.fd = nil, -1
	return err
}

// Find returns a new file descriptor (close-on-exec; the caller closes it)
// of the memfd that holds all of [addr, addr+length), the range's offset
// in that file and the file's size; ErrNotShared when no map of this
// process holds the whole range.
func Find(addr, length uint64) (fd int, off, size uint64, err error) {
	end := addr + length
	if length == 0 || end < addr {
		return -1, 0, 0, fmt.Errorf("range %#x+%d: %w", addr, length, ErrNotShared)
	}
	table.Lock()
	defer table.Unlock()
	for _, m := range table.ms {
		base := uint64(m.Addr())
		if addr >= base && end <= base+m.Len() {
			d, err := unix.FcntlInt(uintptr(m.fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return -1, 0, 0, fmt.Errorf("duplicate memfd: %w", err)
			}
			return d, addr - base, m.Len(), nil
		}
	}
	return -1, 0, 0, fmt.Errorf("range %#x+%d: %w", addr, length, ErrNotShared)
}
