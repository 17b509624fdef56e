// Package futex blocks a thread in the kernel on a 32-bit word until
// another thread changes the word and wakes it (futex(2), private to the
// process). It is how a goroutine locked to its thread (a C caller of the
// library) waits for a completion without parking in the Go scheduler:
// a locked goroutine that parks is woken through the scheduler, which
// hands it to its own thread (two thread wake-ups, and on a loaded VM a
// tail of milliseconds), where a thread blocked here is woken by the
// kernel directly, the moment the completing goroutine calls Wake.
//
// The word must stay where it is: a field of a heap object (the Go heap
// does not move objects) that the waiter keeps alive while it waits.
package futex

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// Wait blocks the calling thread while *w holds val, for at most d: it
// returns when another thread's Wake woke it, at once when *w no longer
// holds val, after d, or on a signal (spuriously). Callers re-check their
// condition in a loop. It blocks as a system call (the runtime may hand
// the thread's P to others meanwhile); d <= 0 returns at once.
func Wait(w *atomic.Uint32, val uint32, d time.Duration) {
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake wakes every thread blocked in Wait on w. It does not block (a raw
// system call), so any goroutine may call it.
func Wake(w *atomic.Uint32) {
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, uintptr(1<<31-1), 0, 0, 0)
}
