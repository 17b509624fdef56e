package cuda

/*
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Raw driver entry points (resolved by purego in Go) for the calls that
// run once per copy batch or per wait: no cuda.h, our own typedefs.
typedef struct {
	uintptr_t ctx_push, ctx_pop, memcpy_async, event_record, event_query, event_sync;
	uintptr_t pointer_attrs, stream_wait_event, launch_host_func;
} kvf_cu_fns;

typedef int (*kvf_fn_push)(uintptr_t);
typedef int (*kvf_fn_pop)(uintptr_t *);
typedef int (*kvf_fn_memcpy_async)(uint64_t, uint64_t, size_t, uintptr_t);
typedef int (*kvf_fn_event_record)(uintptr_t, uintptr_t);
typedef int (*kvf_fn_event)(uintptr_t);
typedef int (*kvf_fn_attrs)(unsigned int, int *, void **, uint64_t);

typedef struct { uint64_t dst, src, n; } kvf_cu_copy;

// kvf_cu_submit pushes ctx, queues the n copies on stream, records ev
// after them (when ev is set) and pops the context. It returns the first
// error, with *queued the copies queued before it; the event is recorded
// even then, so that it marks the end of what was queued.
static int kvf_cu_submit(const kvf_cu_fns *f, uintptr_t ctx, uintptr_t stream, const kvf_cu_copy *ops, size_t n,
                         uintptr_t ev, size_t *queued) {
	int rc = ((kvf_fn_push)f->ctx_push)(ctx);
	if (rc) { *queued = 0; return rc; }
	size_t i = 0;
	for (; i < n; i++) {
		rc = ((kvf_fn_memcpy_async)f->memcpy_async)(ops[i].dst, ops[i].src, (size_t)ops[i].n, stream);
		if (rc) break;
	}
	*queued = i;
	if (ev) {
		int r2 = ((kvf_fn_event_record)f->event_record)(ev, stream);
		if (!rc) rc = r2;
	}
	uintptr_t old;
	((kvf_fn_pop)f->ctx_pop)(&old);
	return rc;
}

// kvf_cu_event_call runs cuEventSynchronize (query = 0) or cuEventQuery
// on ev with ctx pushed.
static int kvf_cu_event_call(const kvf_cu_fns *f, uintptr_t ctx, uintptr_t ev, int query) {
	int rc = ((kvf_fn_push)f->ctx_push)(ctx);
	if (rc) return rc;
	rc = query ? ((kvf_fn_event)f->event_query)(ev) : ((kvf_fn_event)f->event_sync)(ev);
	uintptr_t old;
	((kvf_fn_pop)f->ctx_pop)(&old);
	return rc;
}

typedef struct {
	uint32_t memtype;
	int32_t ordinal;
	uint32_t managed, legacy_ipc;
	uint64_t start, size, handle_types, map_base, map_size, ctx;
} kvf_cu_ptrinfo;

// kvf_cu_pointer_info classifies p with cuPointerGetAttributes (which
// needs no current context). Handle types and VMM mapping extents are
// asked for separately: older drivers refuse those attributes.
static int kvf_cu_pointer_info(const kvf_cu_fns *f, uint64_t p, kvf_cu_ptrinfo *out) {
	uint64_t v[7];
	memset(v, 0, sizeof v);
	int attrs[7] = {2, 9, 8, 10, 11, 12, 1}; // MEMORY_TYPE, DEVICE_ORDINAL, IS_MANAGED, IS_LEGACY_CUDA_IPC_CAPABLE, RANGE_START_ADDR, RANGE_SIZE, CONTEXT
	void *data[7];
	for (int i = 0; i < 7; i++) data[i] = &v[i];
	int rc = ((kvf_fn_attrs)f->pointer_attrs)(7, attrs, data, p);
	if (rc) return rc;
	memset(out, 0, sizeof *out);
	out->memtype = (uint32_t)v[0];
	out->ordinal = (int32_t)(uint32_t)v[1];
	out->managed = (uint32_t)v[2] != 0;
	out->legacy_ipc = (uint32_t)v[3] != 0;
	out->start = v[4];
	out->size = v[5];
	out->ctx = v[6];
	uint64_t w[3];
	memset(w, 0, sizeof w);
	int attrs2[3] = {14, 19, 18}; // ALLOWED_HANDLE_TYPES, MAPPING_BASE_ADDR, MAPPING_SIZE
	void *data2[3] = {&w[0], &w[1], &w[2]};
	if (((kvf_fn_attrs)f->pointer_attrs)(3, attrs2, data2, p) == 0) {
		out->handle_types = w[0];
		out->map_base = w[1];
		out->map_size = w[2];
	}
	return 0;
}

// A gate holds a stream at a point: the host function below runs when the
// stream reaches it, tells Go so through ready_fd (an eventfd) and blocks
// until Go writes done_fd. Then it closes both and frees the gate.
typedef struct { int ready_fd, done_fd; } kvf_cu_gate;

static void kvf_cu_gate_fn(void *arg) {
	kvf_cu_gate *g = arg;
	uint64_t one = 1, v;
	while (write(g->ready_fd, &one, 8) < 0 && errno == EINTR) {}
	while (read(g->done_fd, &v, 8) < 0 && errno == EINTR) {}
	close(g->ready_fd);
	close(g->done_fd);
	free(g);
}

static uintptr_t kvf_cu_gate_fn_addr(void) { return (uintptr_t)&kvf_cu_gate_fn; }

static void kvf_cu_free(uintptr_t p) { free((void *)p); }

// kvf_cu_loaded reports whether an object whose path is want (absolute) or
// whose file name is want (bare) is loaded in the process, reading the
// loader's list in memory (dlopen with RTLD_NOLOAD of a bare name searches
// the file system: tens of microseconds). *adds receives the loader's count
// of objects ever loaded, so a caller can skip a scan when it is unchanged.
struct kvf_cu_find { const char *want; int bare, found; unsigned long long adds; };

static int kvf_cu_phdr(struct dl_phdr_info *info, size_t size, void *arg) {
	struct kvf_cu_find *f = arg;
	(void)size;
	f->adds = info->dlpi_adds;
	const char *name = info->dlpi_name;
	if (!name || !*name) return 0;
	if (f->bare) {
		const char *slash = strrchr(name, '/');
		if (slash) name = slash + 1;
	}
	if (strcmp(name, f->want) == 0) {
		f->found = 1;
		return 1;
	}
	return 0;
}

static int kvf_cu_first(struct dl_phdr_info *info, size_t size, void *arg) {
	(void)size;
	*(unsigned long long *)arg = info->dlpi_adds;
	return 1;
}

// kvf_cu_adds returns the loader's count of loads, reading one entry only.
static unsigned long long kvf_cu_adds(void) {
	unsigned long long adds = 0;
	dl_iterate_phdr(kvf_cu_first, &adds);
	return adds;
}

static int kvf_cu_loaded(const char *want, int bare, unsigned long long *adds) {
	struct kvf_cu_find f = {want, bare, 0, 0};
	dl_iterate_phdr(kvf_cu_phdr, &f);
	*adds = f.adds;
	return f.found;
}

static kvf_cu_gate *kvf_cu_gate_new(int ready_fd, int done_fd) {
	kvf_cu_gate *g = malloc(sizeof *g);
	if (g) { g->ready_fd = ready_fd; g->done_fd = done_fd; }
	return g;
}
*/
import "C"

import (
	"strings"
	"unsafe"
)

// cfuncs holds the raw entry points the C trampolines call.
type cfuncs struct{ tab C.kvf_cu_fns }

func (t *cfuncs) ptr(p *C.uintptr_t) *uintptr { return (*uintptr)(unsafe.Pointer(p)) }

// Copy is one copy of a batch: N bytes from Src to Dst, either of which may
// be device, pinned, managed or pageable host memory (unified addressing).
type Copy struct {
	Dst, Src uint64
	N        uint64
}

// submit queues ops on stream with dev's context and records ev after them.
func (d *Driver) submit(ctx, stream uintptr, ops []Copy, ev uintptr) (int, Result) {
	if len(ops) == 0 && ev == 0 {
		return 0, Success
	}
	var queued C.size_t
	var p *C.kvf_cu_copy
	if len(ops) > 0 {
		p = (*C.kvf_cu_copy)(unsafe.Pointer(&ops[0]))
	}
	r := C.kvf_cu_submit(&d.tab.tab, C.uintptr_t(ctx), C.uintptr_t(stream), p, C.size_t(len(ops)), C.uintptr_t(ev), &queued)
	return int(queued), Result(r)
}

// eventWait blocks in cuEventSynchronize (query false) or asks
// cuEventQuery (query true).
func (d *Driver) eventCall(ctx, ev uintptr, query bool) Result {
	q := C.int(0)
	if query {
		q = 1
	}
	return Result(C.kvf_cu_event_call(&d.tab.tab, C.uintptr_t(ctx), C.uintptr_t(ev), q))
}

// PointerInfo is what the driver says about an address.
type PointerInfo struct {
	// Type is the CUmemorytype: 0 unknown to the driver (pageable host
	// memory), 1 host (pinned or registered), 2 device (also managed).
	Type uint32
	// Managed reports managed (unified) memory.
	Managed bool
	// Device is the ordinal of the device the memory belongs to.
	Device int
	// LegacyIPC reports memory cuIpcGetMemHandle can share (cuMemAlloc).
	LegacyIPC bool
	// RangeStart and RangeSize give the driver allocation holding the
	// address (for VMM memory: the mapped allocation).
	RangeStart, RangeSize uint64
	// HandleTypes are the shareable handle types the allocation allows
	// (VMM memory: HandlePosixFD, HandleFabric).
	HandleTypes uint64
	// MappingBase and MappingSize give the VMM mapping holding the address.
	MappingBase, MappingSize uint64
	// Context is the context the memory belongs to (0 for none).
	Context uintptr
}

// Memory types of PointerInfo.Type.
const (
	MemoryTypeHost   = 1
	MemoryTypeDevice = 2
)

// Shareable handle types (CUmemAllocationHandleType).
const (
	HandleNone    = 0
	HandlePosixFD = 1
	HandleFabric  = 8
)

// Pointer classifies address p. Pageable host memory and addresses the
// driver does not know come back with Type 0.
func (d *Driver) Pointer(p uint64) (PointerInfo, error) {
	var out C.kvf_cu_ptrinfo
	if r := Result(C.kvf_cu_pointer_info(&d.tab.tab, C.uint64_t(p), &out)); r != Success {
		return PointerInfo{}, d.err("cuPointerGetAttributes", r)
	}
	return PointerInfo{
		Type: uint32(out.memtype), Managed: out.managed != 0, Device: int(out.ordinal), LegacyIPC: out.legacy_ipc != 0,
		RangeStart: uint64(out.start), RangeSize: uint64(out.size), HandleTypes: uint64(out.handle_types),
		MappingBase: uint64(out.map_base), MappingSize: uint64(out.map_size), Context: uintptr(out.ctx),
	}, nil
}

// gateFn is the address of the C host function behind StreamGate.
func gateFn() uintptr { return uintptr(C.kvf_cu_gate_fn_addr()) }

// freeC frees C memory from malloc.
func freeC(p uintptr) { C.kvf_cu_free(C.uintptr_t(p)) }

// newGate allocates a gate in C memory (freed by the host function).
func newGate(readyFd, doneFd int) uintptr {
	return uintptr(unsafe.Pointer(C.kvf_cu_gate_new(C.int(readyFd), C.int(doneFd))))
}

// loadedObject reports whether an object named name (a path, or a bare file
// name matched against the loaded objects' file names) is loaded, and the
// loader's count of loads so far.
func loadedObject(name string) (bool, uint64) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	bare := C.int(1)
	if strings.Contains(name, "/") {
		bare = 0
	}
	var adds C.ulonglong
	found := C.kvf_cu_loaded(cs, bare, &adds) != 0
	return found, uint64(adds)
}

// loadCount returns the loader's count of objects ever loaded (cheap).
func loadCount() uint64 { return uint64(C.kvf_cu_adds()) }
