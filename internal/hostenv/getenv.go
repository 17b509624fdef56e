// Package hostenv is the one place kvferry reads its environment. It reads
// variables with the C library's getenv, because inside a shared library
// Go's os.Getenv sees only the environment the process was started with and
// misses what a Python host sets later (specs/go-runtime.md §3.5).
//
// It holds the primitives only: Getenv, the Lookup seam, the typed readers
// of Env, the library's logger and the runtime and metrics knobs. Each
// layer turns variables into its own configuration with them
// (stack.ConfigFromEnv, rdma.ConfigFromEnv, gpu.ConfigFromEnv,
// tlsconf.FilesFromEnv), so this package imports no kvferry layer above
// internal/.
package hostenv

/*
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"
)

// Getenv returns the current value of the environment variable name and
// whether it is set, as the C library sees it.
func Getenv(name string) (string, bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}
