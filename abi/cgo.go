package abi

/*
#cgo CFLAGS: -I${SRCDIR}/../include -O2 -fvisibility=hidden -Wall -Werror
#include <stdlib.h>
#include "transfer_engine_c.h"
#include "kvferry.h"

int kvf_forked(void);
int kvf_audit_signals(char *buf, size_t len);
*/
import "C"

import "unsafe"

// forked reports whether this is a child created by fork() after load.
func forked() bool { return C.kvf_forked() != 0 }

// auditSignals returns the names of host signal handlers installed without
// SA_ONSTACK, which crash the Go runtime (specs/go-runtime.md §3.1).
func auditSignals() string {
	var buf [256]C.char
	n := C.kvf_audit_signals(&buf[0], C.size_t(len(buf)))
	if n <= 0 {
		return ""
	}
	return C.GoString(&buf[0])
}

// cstr copies a C string; NULL gives "" and false.
func cstr(p *C.char) (string, bool) {
	if p == nil {
		return "", false
	}
	return C.GoString(p), true
}

// putString copies s into the C buffer buf of size n (NUL-ended,
// truncated), as snprintf would, and returns len(s).
func putString(buf *C.char, n C.size_t, s string) int {
	if buf == nil || n == 0 {
		return len(s)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:n-1], s)
	dst[k] = 0
	return len(s)
}
