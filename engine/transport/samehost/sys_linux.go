package samehost

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// shmap is a shared mapping of a memfd. Its memory is off the Go heap; it
// is unmapped by Close.
type shmap struct {
	b []byte
}

// newMemfd creates a memfd of size bytes, sealed against shrinking and
// growing (so that no peer can truncate it under the other side's mapping,
// which would turn accesses into SIGBUS), maps it read-write and shared,
// and returns the mapping and the fd (which the caller closes after
// passing it on). futureWrite also seals it against new writable
// mappings: peers can map it read-only only.
func newMemfd(name string, size uint64, futureWrite bool) (*shmap, int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("memfd_create %s: %w", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("size memfd %s to %d bytes: %w", name, size, err)
	}
	m, err := mmapShared(fd, size, true)
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if futureWrite {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE|seals); err == nil {
			return m, fd, nil
		}
		// Kernels before 5.1 lack F_SEAL_FUTURE_WRITE: keep the size seals.
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		m.Close()
		unix.Close(fd)
		return nil, -1, fmt.Errorf("seal memfd %s: %w", name, err)
	}
	return m, fd, nil
}

// mapFd maps size bytes of fd shared, read-write or read-only. It checks
// that the file is at least that large and sealed against shrinking, so
// that the peer that owns it cannot make our accesses fault.
func mapFd(fd int, size uint64, writable bool) (*shmap, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat shared memory: %w", err)
	}
	if st.Size < 0 || uint64(st.Size) < size {
		return nil, fmt.Errorf("shared memory holds %d bytes, want %d: %w", st.Size, size, shwire.ErrProtocol)
	}
	if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err == nil && seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shared memory is not sealed against shrinking: %w", shwire.ErrProtocol)
	}
	return mmapShared(fd, size, writable)
}

func mmapShared(fd int, size uint64, writable bool) (*shmap, error) {
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(fd, 0, int(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of shared memory: %w", size, err)
	}
	return &shmap{b: b}, nil
}

// addr returns the mapping's start address.
func (m *shmap) addr() uintptr { return uintptr(unsafe.Pointer(&m.b[0])) }

// u64 returns the 8-byte aligned word at off as an atomic.
func (m *shmap) u64(off uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(cmem.Pointer(m.addr() + uintptr(off)))
}

// Close unmaps the memory; a second Close is harmless.
func (m *shmap) Close() error {
	if m == nil || m.b == nil {
		return nil
	}
	err := unix.Munmap(m.b)
	m.b = nil
	return err
}

// peerCred returns the pid and uid of the process at the other end of c,
// as seen in our pid namespace.
func peerCred(c *net.UnixConn) (pid, uid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return int(cred.Pid), int(cred.Uid), nil
}

// recvFds reads one message and the file descriptors sent with it.
func recvFds(c *net.UnixConn, b []byte, max int) (int, []int, error) {
	oob := make([]byte, unix.CmsgSpace(4*max))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return 0, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return 0, nil, fmt.Errorf("parse control message: %w", err)
		}
		for i := range msgs {
			got, err := unix.ParseUnixRights(&msgs[i])
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFds(fds)
		return 0, nil, fmt.Errorf("truncated message: %w", shwire.ErrProtocol)
	}
	return n, fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// pidfd refers to a process independently of pid reuse (Linux 5.3+).
type pidfd int

// openPidfd opens a pidfd for pid, or returns -1 when the kernel has none.
func openPidfd(pid int) pidfd {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1
	}
	return pidfd(fd)
}

// exited reports whether the process has exited (false when unknown).
func (p pidfd) exited() bool {
	if p < 0 {
		return false
	}
	fds := [1]unix.PollFd{{Fd: int32(p), Events: unix.POLLIN}}
	n, err := unix.Poll(fds[:], 0)
	return err == nil && n > 0
}

func (p pidfd) close() {
	if p >= 0 {
		unix.Close(int(p))
	}
}

// kernelRefused reports whether err is the kernel refusing cross-memory
// access for good (permissions, seccomp, a kernel without CMA), as opposed
// to a dead peer or a bad address.
func kernelRefused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS)
}

// refusalReason explains a kernel refusal for the log.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, unix.ENOSYS):
		return "kernel without cross-memory attach (CONFIG_CROSS_MEMORY_ATTACH) or a seccomp filter returning ENOSYS"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return "ptrace access to the peer denied: different user without CAP_SYS_PTRACE, yama ptrace_scope, a non-dumpable peer, or a seccomp/LSM policy"
	}
	return "unknown"
}
