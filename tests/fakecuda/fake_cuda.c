// fake_cuda.c: a fake CUDA driver (libcuda.so.1) for kvferry's tests.
//
// It is a test fixture, built by the tests (internal/testutil/fakecuda,
// tests/fakecuda/build.sh) and loaded by the real binding (internal/cuda)
// through KVFERRY_CUDA_LIB. Nothing shipped knows it exists.
//
// What it models, so that the binding and the transports are checked the
// way a real GPU would check them:
//
//   - Device memory lives in a memfd per device, mapped PROT_NONE at the
//     device's own address range (0x7d0000000000 + dev * 64 GiB): the CPU
//     faults on it exactly as on a real GPU, so code that memcpy's device
//     memory crashes the test. The fake copies through a second, private
//     read-write mapping of the same memfd.
//   - Pinned host memory (cuMemHostAlloc, cuMemHostRegister) and managed
//     memory (cuMemAllocManaged) are host memory the fake classifies.
//   - cuPointerGetAttributes classifies every kind; unknown pointers get
//     default values and CUDA_SUCCESS, as the real driver does.
//   - Legacy IPC handles (64 bytes) carry the owner's pid, the memfd's fd
//     number and the allocation's offset: another process opens
//     /proc/<pid>/fd/<fd> and really maps the bytes. A magic trailer checks
//     that the handle travelled by value.
//   - VMM: cuMemCreate makes a memfd per allocation; POSIX-fd export dups
//     it (so it can cross a Unix socket with SCM_RIGHTS), fabric export
//     writes a 64-byte handle like a legacy one (FAKECUDA_FABRIC=1 to offer
//     it); address reservations, mappings and access rights are tracked.
//     One reservation may hold several mappings side by side (PyTorch's
//     expandable segments: one cuMemMap per cuMemCreate chunk): the fake
//     places each mapping's host view at its offset in one view of the
//     whole reservation, so a copy may run across the chunks of a
//     reservation, as on a GPU, and fails at a hole or at the end of the
//     reservation.
//   - cuMemGetHandleForAddressRange hands out a dma-buf: a small memfd
//     naming the exporter's pid, the backing memfd's number, the offset and
//     the size, which the fake verbs provider (tests/rdma/fakeverbs) maps in
//     ibv_reg_dmabuf_mr.
//   - Streams run their copies, memsets, event markers, host functions and
//     callbacks in order on a worker thread each; events complete (and take
//     their time stamp) when the worker reaches them, and outlive
//     cuEventDestroy until their queued uses have run. The legacy default
//     stream (0, CU_STREAM_LEGACY) synchronizes with the blocking streams
//     (flags 0, and the per-thread default stream CU_STREAM_PER_THREAD) as
//     on a GPU: work on one waits for the work queued before on the other;
//     synchronous copies and memsets run after the work queued before on
//     those streams. Non-blocking streams (flags 1) take no part.
//   - The current context is per thread (a stack): calls that need one fail
//     with CUDA_ERROR_INVALID_CONTEXT without it, and an async copy on a
//     stream of another context fails, so a binding that forgets to keep
//     CUDA work on a thread with its context is caught.
//   - cuGetProcAddress(_v2) resolves base names to the _v2 entry points;
//     the exported base names of versioned functions (cuMemAlloc,
//     cuIpcOpenMemHandle, ...) are the old ABI and refuse to work, so a
//     binding that dlsyms them instead of asking cuGetProcAddress fails.
//
// Faults: FAKECUDA_FAIL="name:n:code[:sticky],..." makes the n-th call of
// name (1-based) return code (every call from the n-th on when sticky is
// 1); name "copy" fails a stream copy on the worker, which loses the
// device's context (every later call on it returns 700, as after a real
// illegal-address fault). FAKECUDA_COPY_DELAY_US slows every stream copy.
// Copy speeds: FAKECUDA_PAGEABLE_MBPS, FAKECUDA_PINNED_MBPS and
// FAKECUDA_DEVICE_MBPS (default 0: as fast as memmove) make a copy with a
// pageable host end, with a pinned (or registered, or managed) host end,
// and between device memory take n / rate microseconds (the copying thread
// sleeps), as on a real GPU where pageable copies are the slow ones.
// In-process tests use the fakecuda_* control functions instead.
//
//   - It passes for an H100 to programs written for the real driver (numba's
//     CUDA binding runs on it, tests/python/test_numba.py): the attributes
//     of one, a UUID per device, CUDA_VISIBLE_DEVICES, primary-context
//     state, flags and reset, memory info that follows the allocations.
//     Every entry point numba binds exists; the device-code ones (modules,
//     kernels, the JIT linker) fail with CUDA_ERROR_NOT_SUPPORTED or
//     CUDA_ERROR_INVALID_HANDLE, as the fake runs no device code.
//
// Other settings: FAKECUDA_DEVICES (default 2), FAKECUDA_ARENA_MB (per
// device, default 64), FAKECUDA_DRIVER_VERSION (default 12080; below
// 12000 cuGetProcAddress_v2 reports itself missing), FAKECUDA_NO_VMM=1.
// CUDA_VISIBLE_DEVICES selects and orders the devices, as with the real
// driver; the suites built on the fake clear it.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// fake_hip.c includes this file with EXPORT defined as hidden, so that
// its HIP names are the only driver API it exports; EXPORT_CTL (the
// fakecuda_* control functions) stays visible in both.
#ifndef EXPORT
#define EXPORT __attribute__((visibility("default")))
#endif
#ifndef EXPORT_CTL
#define EXPORT_CTL __attribute__((visibility("default")))
#endif

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void (*CUhostFn)(void *);

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_ALREADY_MAPPED = 208,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

enum { MEMTYPE_HOST = 1, MEMTYPE_DEVICE = 2 };
enum { HANDLE_POSIX_FD = 1, HANDLE_FABRIC = 8 };

#define MAX_DEVICES 8
// fake_hip.c moves both ranges, so that a fake CUDA and a fake HIP can be
// loaded in one process (a test that runs on each in turn).
#ifndef DEV_BASE
#define DEV_BASE 0x7d0000000000ULL
#endif
#define DEV_STRIDE (1ULL << 36)
#ifndef WIN_BASE
#define WIN_BASE 0x7c0000000000ULL
#endif
#define WIN_SIZE (1ULL << 38)
#define GRANULARITY (2ULL << 20)
#define IPC_MAGIC 0x50494b46u /* "FKIP" */
#define FAB_MAGIC 0x42414b46u /* "FKAB" */
#define TRAILER 0x454c4f4857594256ULL

struct fctx {
	int dev;
	int refs;
};

struct device {
	int memfd;
	char *backing;
	uint64_t base, size;
	struct fctx ctx;
	unsigned int ctx_flags; // cuDevicePrimaryCtxSetFlags
	volatile int lost;
	int peer_enabled[MAX_DEVICES];
};

enum { R_DEVICE = 1, R_PINNED, R_REGISTERED, R_MANAGED, R_IPC, R_VMM };

struct range {
	uint64_t start, size;
	int kind;
	int dev;
	char *backing;    // host-accessible view of the bytes
	uint64_t id;      // allocation id (R_DEVICE), phys id (R_VMM)
	uint64_t arena_off; // offset in the backing memfd (R_DEVICE: the arena; R_VMM: the allocation)
	int accessible;   // R_VMM: cuMemSetAccess done
	int refs;         // R_IPC: opens
	uint64_t ipc_pid, ipc_id; // R_IPC: what was opened
	size_t map_len;   // bytes mapped at start and at backing
	int own_map;      // backing must be munmap'ed on removal
	unsigned int flags; // R_PINNED: cuMemHostAlloc flags; R_REGISTERED: cuMemHostRegister flags
};

struct phys {
	uint64_t id;
	int fd;
	uint64_t size;
	int dev;
	uint64_t handle_types;
	int refs;
	char *backing; // lazily mapped whole allocation (for fabric/posix import copies)
	int imported;  // made by cuMemImportFromShareableHandle
};

struct reservation {
	uint64_t start, size;
	char *shadow; // host view of the whole reservation: mappings are placed in it at their offsets
};

typedef void (*CUstreamCallback)(void *stream, CUresult status, void *user);

enum { OP_COPY = 1, OP_EVENT, OP_HOSTFN, OP_WAIT, OP_CALLBACK, OP_MEMSET };

struct op {
	int type; // OP_*
	int cls;  // copy: speed class (COPY_*)
	char *dst;
	const char *src;
	size_t n;
	unsigned char value; // memset
	struct fevent *ev;
	uint64_t seq;
	CUhostFn fn;
	CUstreamCallback cb;
	void *handle; // callback: the stream handle as the caller named it
	void *arg;
	struct op *next;
};

// Stream kinds: a stream made by cuStreamCreate (blocking, flags 0, or
// non-blocking, flags 1), the legacy default stream of a context (handle 0
// or CU_STREAM_LEGACY) and a thread's per-thread default stream
// (CU_STREAM_PER_THREAD), which is blocking.
enum { S_CREATED = 0, S_LEGACY, S_PER_THREAD };
#define CU_STREAM_NON_BLOCKING 1u

struct fstream {
	struct fctx *ctx;
	int kind;
	unsigned int flags;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct op *head, *tail;
	int busy, stop;
	int err;
	uint64_t enq, done; // ops queued, ops finished
	struct fstream *next_all; // g_streams
};

#define CU_EVENT_DISABLE_TIMING 2u

// Events are reference counted: the application's handle and every queued
// record or wait that names it, so cuEventDestroy returns at once (as on a
// GPU) and the event goes away when the last queued use of it has run.
struct fevent {
	struct fctx *ctx;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t recorded, completed;
	int err;
	int refs;
	unsigned int flags;
	struct timespec at; // when the last completed record ran
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
static int g_ndev = 2;
// g_hw[d]: which of the fake's FAKECUDA_DEVICES devices ordinal d is, after
// CUDA_VISIBLE_DEVICES; names, PCI ids and UUIDs follow it.
static int g_hw[MAX_DEVICES] = {0, 1, 2, 3, 4, 5, 6, 7};
static int g_version = 12080;
static uint64_t g_arena = 64ULL << 20;
static int g_vmm = 1, g_fabric;
static struct device g_dev[MAX_DEVICES];
static struct range *g_ranges;
static int g_nranges, g_capranges;
static struct phys *g_phys;
static int g_nphys, g_capphys;
static struct reservation *g_res;
static int g_nres, g_capres;
static uint64_t g_next_id = 1;
static uint64_t g_win_next = WIN_BASE;
static volatile int g_delay_us;
// Copy speed classes and their rates (MB/s, 0 = unthrottled).
enum { COPY_DEVICE = 0, COPY_PINNED = 1, COPY_PAGEABLE = 2 };
static volatile int g_mbps[3];
static void throttle(int cls, size_t n);

// Every stream, for the legacy default stream's implicit synchronization
// and cuCtxSynchronize (g_mu guards the list); the legacy default stream
// of each device's context; this thread's per-thread default streams.
static struct fstream *g_streams;
static struct fstream *g_null[MAX_DEVICES];
static __thread struct fstream *tls_per_thread[MAX_DEVICES];
static int drain_ctx(struct fctx *c, int all);

static __thread struct fctx *tls_ctx[16];
static __thread int tls_depth;

// ---- faults and counters ----

struct fault {
	char name[64];
	int nth, sticky, code;
	long count;
};
struct counter {
	char name[48];
	unsigned long long n;
};
static pthread_mutex_t f_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fault g_faults[32];
static int g_nfaults;
static struct counter g_counters[160];
static int g_ncounters;
static unsigned long long g_wrong_version;

static void count_call(const char *name) {
	for (int i = 0; i < g_ncounters; i++) {
		if (strcmp(g_counters[i].name, name) == 0) {
			g_counters[i].n++;
			return;
		}
	}
	if (g_ncounters < (int)(sizeof g_counters / sizeof g_counters[0])) {
		snprintf(g_counters[g_ncounters].name, sizeof g_counters[0].name, "%s", name);
		g_counters[g_ncounters++].n = 1;
	}
}

// fault_check counts the call and returns an injected error code, or 0.
static int fault_check(const char *name) {
	int rc = 0;
	pthread_mutex_lock(&f_mu);
	count_call(name);
	for (int i = 0; i < g_nfaults; i++) {
		struct fault *f = &g_faults[i];
		if (strcmp(f->name, name) != 0) continue;
		f->count++;
		if (f->count == f->nth || (f->sticky && f->count >= f->nth)) rc = f->code;
	}
	pthread_mutex_unlock(&f_mu);
	return rc;
}

static void add_fault(const char *name, int nth, int sticky, int code) {
	pthread_mutex_lock(&f_mu);
	if (g_nfaults < (int)(sizeof g_faults / sizeof g_faults[0])) {
		struct fault *f = &g_faults[g_nfaults++];
		snprintf(f->name, sizeof f->name, "%s", name);
		f->nth = nth;
		f->sticky = sticky;
		f->code = code;
		f->count = 0;
	}
	pthread_mutex_unlock(&f_mu);
}

static void parse_faults(const char *s) {
	char buf[1024];
	snprintf(buf, sizeof buf, "%s", s);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char name[64];
		int nth = 1, code = CUDA_ERROR_UNKNOWN, sticky = 0;
		if (sscanf(tok, "%63[^:]:%d:%d:%d", name, &nth, &code, &sticky) >= 1) add_fault(name, nth, sticky, code);
	}
}

#define FAULT(name)                            \
	do {                                       \
		int _rc = fault_check(name);           \
		if (_rc) return _rc;                   \
	} while (0)

#define NEED_INIT()                                       \
	do {                                                  \
		if (!__atomic_load_n(&g_init, __ATOMIC_ACQUIRE)) \
			return CUDA_ERROR_NOT_INITIALIZED;            \
	} while (0)

static struct fctx *current(void) { return tls_depth > 0 ? tls_ctx[tls_depth - 1] : NULL; }

// need_ctx returns 0 with *out set to the current context, or an error.
static int need_ctx(struct fctx **out) {
	struct fctx *c = current();
	if (!c || c->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
	if (g_dev[c->dev].lost) return CUDA_ERROR_ILLEGAL_ADDRESS;
	*out = c;
	return 0;
}

#define NEED_CTX(c)                   \
	struct fctx *c = NULL;            \
	do {                              \
		int _rc = need_ctx(&c);       \
		if (_rc) return _rc;          \
	} while (0)

// ---- ranges ----

static struct range *range_add(void) {
	if (g_nranges == g_capranges) {
		g_capranges = g_capranges ? 2 * g_capranges : 64;
		g_ranges = realloc(g_ranges, (size_t)g_capranges * sizeof *g_ranges);
	}
	struct range *r = &g_ranges[g_nranges++];
	memset(r, 0, sizeof *r);
	return r;
}

static void range_del(struct range *r) {
	int i = (int)(r - g_ranges);
	g_ranges[i] = g_ranges[--g_nranges];
}

static struct range *range_find(uint64_t p) {
	for (int i = 0; i < g_nranges; i++) {
		struct range *r = &g_ranges[i];
		if (p >= r->start && p - r->start < r->size) return r;
	}
	return NULL;
}

static struct reservation *res_find(uint64_t p, uint64_t size);

static int in_device_space(uint64_t p) {
	if (p >= WIN_BASE && p < WIN_BASE + WIN_SIZE) return 1;
	for (int d = 0; d < g_ndev; d++)
		if (p >= g_dev[d].base && p < g_dev[d].base + DEV_STRIDE) return 1;
	return 0;
}

static int is_device_kind(int k) { return k == R_DEVICE || k == R_IPC || k == R_VMM; }

// resolve maps [p, p+n) to host-accessible memory. *dev is set to the
// device of device memory, -1 for host memory. g_mu is held.
static int resolve(uint64_t p, size_t n, char **host, int *dev) {
	struct range *r = range_find(p);
	if (r && is_device_kind(r->kind)) {
		if (r->kind == R_VMM && !r->accessible) return CUDA_ERROR_ILLEGAL_ADDRESS;
		if (g_dev[r->dev].lost) return CUDA_ERROR_ILLEGAL_ADDRESS;
		if (n > r->size - (p - r->start)) {
			if (r->kind != R_VMM) return CUDA_ERROR_INVALID_VALUE;
			// The next mappings of the same reservation carry the rest
			// (their host views follow this one's in the reservation's).
			uint64_t end = p + n;
			if (end < p || !res_find(p, n)) return CUDA_ERROR_INVALID_VALUE;
			struct range *c = r;
			while (c->start + c->size < end) {
				struct range *nx = range_find(c->start + c->size);
				if (!nx || nx->kind != R_VMM || nx->backing != c->backing + c->size) return CUDA_ERROR_INVALID_VALUE;
				if (!nx->accessible || g_dev[nx->dev].lost) return CUDA_ERROR_ILLEGAL_ADDRESS;
				c = nx;
			}
		}
		*host = r->backing + (p - r->start);
		*dev = r->dev;
		return 0;
	}
	if (!r && in_device_space(p)) return CUDA_ERROR_INVALID_VALUE;
	if (p == 0) return CUDA_ERROR_INVALID_VALUE;
	*host = (char *)(uintptr_t)p;
	*dev = -1;
	return 0;
}

// ---- init ----

static int env_int(const char *name, int def) {
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

static void uuid_of(unsigned char *u, int hw);

// visible_devices applies CUDA_VISIBLE_DEVICES as the driver does: a comma
// separated list of device indices or UUIDs ("GPU-" and a prefix of the
// UUID's text); the list ends at the first entry that names no device (or
// one already listed), and an empty list hides every device. It fills g_hw
// and returns the number of visible devices.
static int visible_devices(int n) {
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	if (!v) return n;
	char buf[256];
	snprintf(buf, sizeof buf, "%s", v);
	int seen[MAX_DEVICES] = {0}, k = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t && k < n; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ') t++;
		int hw = -1;
		if (strncmp(t, "GPU-", 4) == 0 && t[4]) {
			for (int d = 0; d < n && hw < 0; d++) {
				unsigned char u[16];
				char text[64];
				uuid_of(u, d);
				snprintf(text, sizeof text,
				         "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
				         u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
				if (strncmp(text, t, strlen(t)) == 0) hw = d;
			}
		} else {
			char *end;
			long i = strtol(t, &end, 10);
			if (end != t && *end == '\0' && i >= 0 && i < n) hw = (int)i;
		}
		if (hw < 0 || seen[hw]) break;
		seen[hw] = 1;
		g_hw[k++] = hw;
	}
	return k;
}

EXPORT CUresult cuInit(unsigned int flags) {
	(void)flags;
	FAULT("cuInit");
	pthread_mutex_lock(&g_mu);
	if (g_init) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_SUCCESS;
	}
	g_ndev = env_int("FAKECUDA_DEVICES", 2);
	if (g_ndev > MAX_DEVICES) g_ndev = MAX_DEVICES;
	g_ndev = visible_devices(g_ndev);
	g_arena = (uint64_t)env_int("FAKECUDA_ARENA_MB", 64) << 20;
	g_version = env_int("FAKECUDA_DRIVER_VERSION", 12080);
	g_vmm = !env_int("FAKECUDA_NO_VMM", 0);
	g_fabric = env_int("FAKECUDA_FABRIC", 0);
	g_delay_us = env_int("FAKECUDA_COPY_DELAY_US", 0);
	g_mbps[COPY_DEVICE] = env_int("FAKECUDA_DEVICE_MBPS", 0);
	g_mbps[COPY_PINNED] = env_int("FAKECUDA_PINNED_MBPS", 0);
	g_mbps[COPY_PAGEABLE] = env_int("FAKECUDA_PAGEABLE_MBPS", 0);
	const char *f = getenv("FAKECUDA_FAIL");
	if (f && *f) parse_faults(f);
	if (g_ndev <= 0) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_NO_DEVICE;
	}
	for (int d = 0; d < g_ndev; d++) {
		struct device *dv = &g_dev[d];
		char name[32];
		snprintf(name, sizeof name, "fakecuda-dev%d", d);
		dv->memfd = memfd_create(name, MFD_CLOEXEC);
		if (dv->memfd < 0 || ftruncate(dv->memfd, (off_t)g_arena) != 0) goto fail;
		dv->base = DEV_BASE + (uint64_t)d * DEV_STRIDE;
		dv->size = g_arena;
		void *va = mmap((void *)(uintptr_t)dv->base, g_arena, PROT_NONE, MAP_SHARED | MAP_FIXED_NOREPLACE, dv->memfd, 0);
		if (va == MAP_FAILED || (uint64_t)(uintptr_t)va != dv->base) goto fail;
		dv->backing = mmap(NULL, g_arena, PROT_READ | PROT_WRITE, MAP_SHARED, dv->memfd, 0);
		if (dv->backing == MAP_FAILED) goto fail;
		dv->ctx.dev = d;
	}
	__atomic_store_n(&g_init, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
fail:
	fprintf(stderr, "fakecuda: cannot set up device memory: %s\n", strerror(errno));
	pthread_mutex_unlock(&g_mu);
	return CUDA_ERROR_UNKNOWN;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
	FAULT("cuDriverGetVersion");
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	*v = env_int("FAKECUDA_DRIVER_VERSION", g_version);
	return CUDA_SUCCESS;
}

static const char *err_name(int code) {
	switch (code) {
	case 0: return "CUDA_SUCCESS";
	case 1: return "CUDA_ERROR_INVALID_VALUE";
	case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
	case 3: return "CUDA_ERROR_NOT_INITIALIZED";
	case 100: return "CUDA_ERROR_NO_DEVICE";
	case 101: return "CUDA_ERROR_INVALID_DEVICE";
	case 201: return "CUDA_ERROR_INVALID_CONTEXT";
	case 208: return "CUDA_ERROR_ALREADY_MAPPED";
	case 400: return "CUDA_ERROR_INVALID_HANDLE";
	case 500: return "CUDA_ERROR_NOT_FOUND";
	case 600: return "CUDA_ERROR_NOT_READY";
	case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
	case 704: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
	case 712: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
	case 713: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
	case 800: return "CUDA_ERROR_NOT_PERMITTED";
	case 801: return "CUDA_ERROR_NOT_SUPPORTED";
	case 999: return "CUDA_ERROR_UNKNOWN";
	}
	return NULL;
}

EXPORT CUresult cuGetErrorName(CUresult code, const char **s) {
	if (!s) return CUDA_ERROR_INVALID_VALUE;
	*s = err_name(code);
	return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult code, const char **s) {
	if (!s) return CUDA_ERROR_INVALID_VALUE;
	const char *n = err_name(code);
	if (!n) {
		*s = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	*s = code == 700 ? "an illegal memory access was encountered (fake)" : "fake driver error";
	if (code == 0) *s = "no error";
	return CUDA_SUCCESS;
}

// ---- devices ----

static int check_dev(CUdevice d) { return d >= 0 && d < g_ndev ? 0 : CUDA_ERROR_INVALID_DEVICE; }

EXPORT CUresult cuDeviceGetCount(int *n) {
	FAULT("cuDeviceGetCount");
	NEED_INIT();
	if (!n) return CUDA_ERROR_INVALID_VALUE;
	*n = g_ndev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	FAULT("cuDeviceGet");
	NEED_INIT();
	if (!d) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

// The attributes of an H100 SXM (compute capability 9.0, what the fake
// claims to be), as the real driver reports them; the memory-related ones
// follow the fake's settings. Attributes the table does not name are 0, as
// on a device without the feature; numbers past the enum's end are refused.
#define ATTR_MAX 140
static int attr_of(int attr, CUdevice d) {
	switch (attr) {
	case 1: return 1024;                 // MAX_THREADS_PER_BLOCK
	case 2: case 3: return 1024;         // MAX_BLOCK_DIM_X, _Y
	case 4: return 64;                   // MAX_BLOCK_DIM_Z
	case 5: return 2147483647;           // MAX_GRID_DIM_X
	case 6: case 7: return 65535;        // MAX_GRID_DIM_Y, _Z
	case 8: return 49152;                // MAX_SHARED_MEMORY_PER_BLOCK
	case 9: return 65536;                // TOTAL_CONSTANT_MEMORY
	case 10: return 32;                  // WARP_SIZE
	case 11: return 2147483647;          // MAX_PITCH
	case 12: return 65536;               // MAX_REGISTERS_PER_BLOCK
	case 13: return 1980000;             // CLOCK_RATE (kHz)
	case 14: return 512;                 // TEXTURE_ALIGNMENT
	case 15: return 1;                   // GPU_OVERLAP
	case 16: return 132;                 // MULTIPROCESSOR_COUNT
	case 17: return 0;                   // KERNEL_EXEC_TIMEOUT
	case 18: return 0;                   // INTEGRATED
	case 19: return 1;                   // CAN_MAP_HOST_MEMORY
	case 20: return 0;                   // COMPUTE_MODE (default)
	case 30: return 512;                 // SURFACE_ALIGNMENT
	case 31: return 1;                   // CONCURRENT_KERNELS
	case 32: return 1;                   // ECC_ENABLED
	case 33: return g_hw[d] + 1;         // PCI_BUS_ID
	case 34: return 0;                   // PCI_DEVICE_ID
	case 35: return 0;                   // TCC_DRIVER
	case 36: return 2619000;             // MEMORY_CLOCK_RATE (kHz)
	case 37: return 5120;                // GLOBAL_MEMORY_BUS_WIDTH
	case 38: return 52428800;            // L2_CACHE_SIZE
	case 39: return 2048;                // MAX_THREADS_PER_MULTIPROCESSOR
	case 40: return 3;                   // ASYNC_ENGINE_COUNT
	case 41: return 1;                   // UNIFIED_ADDRESSING
	case 50: return 0;                   // PCI_DOMAIN_ID
	case 51: return 32;                  // TEXTURE_PITCH_ALIGNMENT
	case 75: return 9;                   // COMPUTE_CAPABILITY_MAJOR
	case 76: return 0;                   // COMPUTE_CAPABILITY_MINOR
	case 78: return 1;                   // STREAM_PRIORITIES_SUPPORTED
	case 79: case 80: return 1;          // GLOBAL_L1_CACHE_SUPPORTED, LOCAL_L1_CACHE_SUPPORTED
	case 81: return 233472;              // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
	case 82: return 65536;               // MAX_REGISTERS_PER_MULTIPROCESSOR
	case 83: return 1;                   // MANAGED_MEMORY
	case 85: return g_hw[d];             // MULTI_GPU_BOARD_GROUP_ID
	case 87: return 2;                   // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
	case 89: return 1;                   // CONCURRENT_MANAGED_ACCESS
	case 90: return 1;                   // COMPUTE_PREEMPTION_SUPPORTED
	case 91: return 1;                   // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
	case 95: case 96: return 1;          // COOPERATIVE_LAUNCH, _MULTI_DEVICE_LAUNCH
	case 97: return 232448;              // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	case 99: return 1;                   // HOST_REGISTER_SUPPORTED
	case 102: return g_vmm;              // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	case 103: return g_vmm;              // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
	case 106: return 32;                 // MAX_BLOCKS_PER_MULTIPROCESSOR
	case 110: return g_vmm;              // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
	case 111: return 1024;               // RESERVED_SHARED_MEMORY_PER_BLOCK
	case 113: return 1;                  // READ_ONLY_HOST_REGISTER_SUPPORTED
	case 115: return 1;                  // MEMORY_POOLS_SUPPORTED
	case 116: return 1;                  // GPU_DIRECT_RDMA_SUPPORTED
	case 120: return 1;                  // CLUSTER_LAUNCH
	case 124: return 1;                  // DMA_BUF_SUPPORTED
	case 128: return g_vmm && g_fabric;  // HANDLE_TYPE_FABRIC_SUPPORTED
	}
	return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	FAULT("cuDeviceGetAttribute");
	NEED_INIT();
	if (!v || attr < 1 || attr >= ATTR_MAX) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	*v = attr_of(attr, d);
	return CUDA_SUCCESS;
}

// cuDeviceComputeCapability is the deprecated form of the two attributes.
EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d) {
	FAULT("cuDeviceComputeCapability");
	NEED_INIT();
	if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	*major = attr_of(75, d);
	*minor = attr_of(76, d);
	return CUDA_SUCCESS;
}

// cuDeviceGetUuid(_v2): a fixed UUID per device, the same in every
// process (as a GPU's is), so two processes can tell they see one device.
static void uuid_of(unsigned char *u, int hw) {
	static const unsigned char base[16] = {0x6b, 0x76, 0x66, 0x72, 0x66, 0x61, 0x4b, 0x45,
	                                       0x83, 0x43, 0x55, 0x44, 0x41, 0x00, 0x00, 0x00};
	memcpy(u, base, 16);
	u[15] = (unsigned char)hw;
}

static int dev_uuid(unsigned char *u, CUdevice d) {
	if (!u) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	uuid_of(u, g_hw[d]);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(unsigned char *u, CUdevice d) {
	FAULT("cuDeviceGetUuid");
	NEED_INIT();
	return dev_uuid(u, d);
}

EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) {
	FAULT("cuDeviceGetUuid");
	NEED_INIT();
	return dev_uuid(u, d);
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	FAULT("cuDeviceGetName");
	NEED_INIT();
	if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "kvferry fake GPU %d", g_hw[d]);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) {
	FAULT("cuDeviceGetPCIBusId");
	NEED_INIT();
	if (!s || len <= 0) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	snprintf(s, (size_t)len, "0000:%02x:00.0", g_hw[d] + 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
	FAULT("cuDeviceTotalMem");
	NEED_INIT();
	if (!bytes) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	*bytes = g_arena;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) {
	FAULT("cuDeviceCanAccessPeer");
	NEED_INIT();
	if (!can) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d) || check_dev(peer)) return CUDA_ERROR_INVALID_DEVICE;
	*can = d != peer;
	return CUDA_SUCCESS;
}

// ---- contexts ----

EXPORT CUresult cuDevicePrimaryCtxRetain(struct fctx **pctx, CUdevice d) {
	FAULT("cuDevicePrimaryCtxRetain");
	NEED_INIT();
	if (!pctx) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g_mu);
	g_dev[d].ctx.refs++;
	pthread_mutex_unlock(&g_mu);
	*pctx = &g_dev[d].ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	FAULT("cuDevicePrimaryCtxRelease");
	NEED_INIT();
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g_mu);
	int rc = g_dev[d].ctx.refs > 0 ? (g_dev[d].ctx.refs--, 0) : CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_unlock(&g_mu);
	return rc;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
	FAULT("cuDevicePrimaryCtxGetState");
	NEED_INIT();
	if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g_mu);
	*flags = g_dev[d].ctx_flags;
	*active = g_dev[d].ctx.refs > 0;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

// cuDevicePrimaryCtxSetFlags_v2 takes a scheduling policy (AUTO 0, SPIN 1,
// YIELD 2, BLOCKING_SYNC 4), MAP_HOST 0x08, LMEM_RESIZE_TO_MAX 0x10,
// COREDUMP_ENABLE 0x20, USER_COREDUMP_ENABLE 0x40, SYNC_MEMOPS 0x80; the
// fake keeps them for cuDevicePrimaryCtxGetState.
EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
	FAULT("cuDevicePrimaryCtxSetFlags");
	NEED_INIT();
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	unsigned int sched = flags & 7u;
	if ((flags & ~0xffu) || (sched != 0 && sched != 1 && sched != 2 && sched != 4)) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	g_dev[d].ctx_flags = flags;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

static void unmap_range(struct range *r);

// cuDevicePrimaryCtxReset_v2 frees everything the device's primary context
// holds in this process: device and managed allocations, pinned host
// allocations and registrations, IPC mappings (VMM allocations are the
// application's, as on a GPU), peer access and flags, and clears a lost
// context (the way a real application recovers from a sticky error). It
// leaves retains alone: those that retained the context still release it.
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
	FAULT("cuDevicePrimaryCtxReset");
	NEED_INIT();
	if (check_dev(d)) return CUDA_ERROR_INVALID_DEVICE;
	drain_ctx(&g_dev[d].ctx, 1);
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_nranges;) {
		struct range *r = &g_ranges[i];
		if (r->dev != d || r->kind == R_VMM) {
			i++;
			continue;
		}
		switch (r->kind) {
		case R_DEVICE:
			memset(r->backing, 0xA5, r->size);
			madvise(g_dev[d].backing + (r->arena_off & ~4095ULL), (r->size + 4095) & ~4095ULL, MADV_REMOVE);
			break;
		case R_MANAGED:
		case R_PINNED:
			munmap((void *)(uintptr_t)r->start, r->map_len);
			break;
		case R_IPC:
			unmap_range(r);
			break;
		}
		range_del(r);
	}
	g_dev[d].ctx_flags = 0;
	memset(g_dev[d].peer_enabled, 0, sizeof g_dev[d].peer_enabled);
	g_dev[d].lost = 0;
	struct fstream *n = g_null[d];
	pthread_mutex_unlock(&g_mu);
	if (n) {
		pthread_mutex_lock(&n->mu);
		n->err = 0;
		pthread_mutex_unlock(&n->mu);
	}
	return CUDA_SUCCESS;
}

// The fake has primary contexts only: cuCtxCreate fails with
// CUDA_ERROR_NOT_SUPPORTED.
EXPORT CUresult cuCtxCreate_v2(struct fctx **pctx, unsigned int flags, CUdevice d) {
	(void)flags, (void)d;
	FAULT("cuCtxCreate");
	NEED_INIT();
	if (!pctx) return CUDA_ERROR_INVALID_VALUE;
	return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuCtxDestroy_v2(struct fctx *c) {
	FAULT("cuCtxDestroy");
	NEED_INIT();
	// Only cuCtxCreate's contexts can be destroyed; the fake has none.
	return c ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
}

static int valid_ctx(struct fctx *c) {
	for (int d = 0; d < g_ndev; d++)
		if (c == &g_dev[d].ctx) return 1;
	return 0;
}

EXPORT CUresult cuCtxSetCurrent(struct fctx *c) {
	FAULT("cuCtxSetCurrent");
	NEED_INIT();
	if (c && !valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
	if (tls_depth == 0) {
		if (c) tls_ctx[tls_depth++] = c;
	} else if (c) {
		tls_ctx[tls_depth - 1] = c;
	} else {
		tls_depth--;
	}
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(struct fctx **c) {
	FAULT("cuCtxGetCurrent");
	NEED_INIT();
	if (!c) return CUDA_ERROR_INVALID_VALUE;
	*c = current();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(struct fctx *c) {
	FAULT("cuCtxPushCurrent");
	NEED_INIT();
	if (!c || !valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
	if (tls_depth >= 16) return CUDA_ERROR_UNKNOWN;
	tls_ctx[tls_depth++] = c;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(struct fctx **c) {
	FAULT("cuCtxPopCurrent");
	NEED_INIT();
	if (tls_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
	struct fctx *top = tls_ctx[--tls_depth];
	if (c) *c = top;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
	FAULT("cuCtxGetDevice");
	NEED_INIT();
	NEED_CTX(c);
	if (!d) return CUDA_ERROR_INVALID_VALUE;
	*d = c->dev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxEnablePeerAccess(struct fctx *peer, unsigned int flags) {
	FAULT("cuCtxEnablePeerAccess");
	NEED_INIT();
	NEED_CTX(c);
	if (flags || !peer || !valid_ctx(peer) || peer == c) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	int rc = g_dev[c->dev].peer_enabled[peer->dev] ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : 0;
	g_dev[c->dev].peer_enabled[peer->dev] = 1;
	pthread_mutex_unlock(&g_mu);
	return rc;
}

// ---- memory ----

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	FAULT("cuMemAlloc");
	NEED_INIT();
	NEED_CTX(c);
	if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
	uint64_t sz = (n + 4095) & ~4095ULL;
	struct device *dv = &g_dev[c->dev];
	pthread_mutex_lock(&g_mu);
	// First fit between the device's allocations, in address order.
	uint64_t at = dv->base;
	for (;;) {
		int moved = 0;
		for (int i = 0; i < g_nranges; i++) {
			struct range *r = &g_ranges[i];
			if (r->kind != R_DEVICE || r->dev != c->dev) continue;
			// Whole pages: a free gives its pages back (MADV_REMOVE), so
			// no two allocations may share one.
			uint64_t end = r->start + ((r->size + 4095) & ~4095ULL);
			if (at < end && r->start < at + sz) {
				at = end;
				moved = 1;
			}
		}
		if (!moved) break;
	}
	if (at + sz > dv->base + dv->size) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct range *r = range_add();
	r->start = at;
	r->size = n;
	r->kind = R_DEVICE;
	r->dev = c->dev;
	r->arena_off = at - dv->base;
	r->backing = dv->backing + r->arena_off;
	r->id = g_next_id++;
	r->accessible = 1;
	pthread_mutex_unlock(&g_mu);
	*p = at;
	return CUDA_SUCCESS;
}

// cuMemFree needs no current context: with unified addressing the pointer
// names its allocation, and the real driver frees it from any thread
// (numba frees its arrays after popping its context).
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
	FAULT("cuMemFree");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	int rc = CUDA_ERROR_INVALID_VALUE;
	if (r && g_dev[r->dev].lost && (r->kind == R_DEVICE || r->kind == R_MANAGED)) {
		rc = CUDA_ERROR_ILLEGAL_ADDRESS;
	} else if (r && (r->kind == R_DEVICE || r->kind == R_MANAGED) && r->start == p) {
		if (r->kind == R_DEVICE) {
			// Scrub, as a fresh allocation on a real GPU holds garbage.
			memset(r->backing, 0xA5, r->size);
			madvise(g_dev[r->dev].backing + (r->arena_off & ~4095ULL), (r->size + 4095) & ~4095ULL, MADV_REMOVE);
		} else {
			munmap((void *)(uintptr_t)r->start, r->map_len);
		}
		range_del(r);
		rc = 0;
	}
	pthread_mutex_unlock(&g_mu);
	return rc;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) {
	(void)flags;
	FAULT("cuMemAllocManaged");
	NEED_INIT();
	NEED_CTX(c);
	if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
	size_t len = (n + 4095) & ~4095UL;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_add();
	r->start = (uint64_t)(uintptr_t)m;
	r->size = n;
	r->kind = R_MANAGED;
	r->dev = c->dev;
	r->backing = m;
	r->map_len = len;
	r->id = g_next_id++;
	pthread_mutex_unlock(&g_mu);
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
	FAULT("cuMemHostAlloc");
	NEED_INIT();
	NEED_CTX(c);
	// PORTABLE 1, DEVICEMAP 2, WRITECOMBINED 4
	if (!pp || n == 0 || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
	size_t len = (n + 4095) & ~4095UL;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_add();
	r->start = (uint64_t)(uintptr_t)m;
	r->size = n;
	r->kind = R_PINNED;
	r->dev = c->dev;
	r->backing = m;
	r->map_len = len;
	r->flags = flags;
	pthread_mutex_unlock(&g_mu);
	*pp = m;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p) {
	FAULT("cuMemFreeHost");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find((uint64_t)(uintptr_t)p);
	int rc = CUDA_ERROR_INVALID_VALUE;
	if (r && r->kind == R_PINNED && r->start == (uint64_t)(uintptr_t)p) {
		munmap(p, r->map_len);
		range_del(r);
		rc = 0;
	}
	pthread_mutex_unlock(&g_mu);
	return rc;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
	FAULT("cuMemHostRegister");
	NEED_INIT();
	NEED_CTX(c);
	// PORTABLE 1, DEVICEMAP 2, IOMEMORY 4, READ_ONLY 8
	if (!p || n == 0 || (flags & ~15u)) return CUDA_ERROR_INVALID_VALUE;
	uint64_t a = (uint64_t)(uintptr_t)p;
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_nranges; i++) {
		struct range *r = &g_ranges[i];
		if (a < r->start + r->size && r->start < a + n) {
			pthread_mutex_unlock(&g_mu);
			return is_device_kind(r->kind) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	}
	if (in_device_space(a)) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct range *r = range_add();
	r->start = a;
	r->size = n;
	r->kind = R_REGISTERED;
	r->dev = c->dev;
	r->backing = p;
	r->flags = flags;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostUnregister(void *p) {
	FAULT("cuMemHostUnregister");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find((uint64_t)(uintptr_t)p);
	int rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	if (r && r->kind == R_REGISTERED && r->start == (uint64_t)(uintptr_t)p) {
		range_del(r);
		rc = 0;
	}
	pthread_mutex_unlock(&g_mu);
	return rc;
}

// cuMemHostGetDevicePointer: with unified addressing the device pointer
// of pinned, registered or managed host memory is its host address; other
// memory has none (CUDA_ERROR_INVALID_VALUE, as on a GPU).
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags) {
	FAULT("cuMemHostGetDevicePointer");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	if (!d || flags != 0) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find((uint64_t)(uintptr_t)p);
	int ok = r && (r->kind == R_PINNED || r->kind == R_REGISTERED || r->kind == R_MANAGED);
	pthread_mutex_unlock(&g_mu);
	if (!ok) return CUDA_ERROR_INVALID_VALUE;
	*d = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

// cuMemHostGetFlags returns the flags of a cuMemHostAlloc allocation.
EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p) {
	FAULT("cuMemHostGetFlags");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	if (!flags) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find((uint64_t)(uintptr_t)p);
	int rc = r && r->kind == R_PINNED ? (*flags = r->flags, 0) : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&g_mu);
	return rc;
}

// cuMemGetInfo reports the device's memory: the arena, less what its
// cuMemAlloc allocations (in pages) and VMM allocations take.
EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
	FAULT("cuMemGetInfo");
	NEED_INIT();
	NEED_CTX(c);
	uint64_t used = 0;
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_nranges; i++)
		if (g_ranges[i].kind == R_DEVICE && g_ranges[i].dev == c->dev) used += (g_ranges[i].size + 4095) & ~4095ULL;
	for (int i = 0; i < g_nphys; i++)
		if (g_phys[i].dev == c->dev && !g_phys[i].imported) used += g_phys[i].size;
	pthread_mutex_unlock(&g_mu);
	if (free_b) *free_b = used < g_arena ? g_arena - used : 0;
	if (total) *total = g_arena;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
	FAULT("cuMemGetAddressRange");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	int rc = CUDA_ERROR_NOT_FOUND;
	if (r && r->kind != R_REGISTERED) {
		if (base) *base = r->start;
		if (size) *size = r->size;
		rc = 0;
	}
	pthread_mutex_unlock(&g_mu);
	return rc;
}

// ---- pointer attributes ----

enum {
	PA_CONTEXT = 1, PA_MEMORY_TYPE = 2, PA_DEVICE_POINTER = 3, PA_HOST_POINTER = 4, PA_IS_MANAGED = 8,
	PA_DEVICE_ORDINAL = 9, PA_IS_LEGACY_IPC = 10, PA_RANGE_START = 11, PA_RANGE_SIZE = 12, PA_MAPPED = 13,
	PA_ALLOWED_HANDLE_TYPES = 14, PA_GDR_CAPABLE = 15, PA_MAPPING_SIZE = 18, PA_MAPPING_BASE = 19,
};

static uint64_t phys_types(uint64_t id);

static void attr_value(struct range *r, uint64_t p, int attr, void *data) {
	uint64_t v = 0;
	int kind = r ? r->kind : 0;
	switch (attr) {
	case PA_CONTEXT: v = r ? (uint64_t)(uintptr_t)&g_dev[r->dev].ctx : 0; break;
	case PA_MEMORY_TYPE:
		v = kind == R_PINNED || kind == R_REGISTERED ? MEMTYPE_HOST : kind ? MEMTYPE_DEVICE : 0;
		*(unsigned int *)data = (unsigned int)v;
		return;
	case PA_DEVICE_POINTER: v = r ? p : 0; break;
	case PA_HOST_POINTER: v = r && !is_device_kind(kind) ? p : 0; break;
	case PA_IS_MANAGED: *(int *)data = kind == R_MANAGED; return;
	case PA_DEVICE_ORDINAL: *(int *)data = r ? r->dev : -2; return;
	case PA_IS_LEGACY_IPC: *(int *)data = kind == R_DEVICE; return;
	case PA_RANGE_START: v = r ? r->start : 0; break;
	case PA_RANGE_SIZE: v = r ? r->size : 0; break;
	case PA_MAPPED: *(int *)data = r != NULL; return;
	case PA_ALLOWED_HANDLE_TYPES: v = kind == R_VMM ? phys_types(r->id) : 0; break;
	case PA_GDR_CAPABLE: *(int *)data = is_device_kind(kind); return;
	case PA_MAPPING_BASE: v = kind == R_VMM ? r->start : 0; break;
	case PA_MAPPING_SIZE: v = kind == R_VMM ? r->size : 0; break;
	default: break;
	}
	*(uint64_t *)data = v;
}

EXPORT CUresult cuPointerGetAttributes(unsigned int n, int *attrs, void **data, CUdeviceptr p) {
	FAULT("cuPointerGetAttributes");
	NEED_INIT();
	if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	if (r && g_dev[r->dev].lost && is_device_kind(r->kind)) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	}
	for (unsigned int i = 0; i < n; i++)
		if (data[i]) attr_value(r, p, attrs[i], data[i]);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
	FAULT("cuPointerGetAttribute");
	NEED_INIT();
	if (!data) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	if (!r) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	attr_value(r, p, attr, data);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

// ---- streams and events ----

static void ev_ref(struct fevent *e) { __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL); }

static void ev_unref(struct fevent *e) {
	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

static struct fevent *ev_new(struct fctx *c, unsigned int flags) {
	struct fevent *e = calloc(1, sizeof *e);
	if (!e) return NULL;
	e->ctx = c;
	e->flags = flags;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	return e;
}

static void *stream_main(void *arg) {
	struct fstream *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head) break;
		struct op *o = s->head;
		s->head = o->next;
		if (!s->head) s->tail = NULL;
		s->busy = 1;
		pthread_mutex_unlock(&s->mu);
		switch (o->type) {
		case OP_COPY: {
			int us = __atomic_load_n(&g_delay_us, __ATOMIC_RELAXED);
			if (us > 0) usleep((useconds_t)us);
			throttle(o->cls, o->n);
			int rc = fault_check("copy");
			if (rc || g_dev[s->ctx->dev].lost) {
				g_dev[s->ctx->dev].lost = 1;
				s->err = CUDA_ERROR_ILLEGAL_ADDRESS;
			} else if (!s->err) {
				memmove(o->dst, o->src, o->n);
			}
			break;
		}
		case OP_MEMSET:
			if (g_dev[s->ctx->dev].lost) s->err = CUDA_ERROR_ILLEGAL_ADDRESS;
			else if (!s->err) memset(o->dst, o->value, o->n);
			break;
		case OP_EVENT:
			pthread_mutex_lock(&o->ev->mu);
			if (o->seq > o->ev->completed) o->ev->completed = o->seq;
			o->ev->err = s->err;
			clock_gettime(CLOCK_MONOTONIC, &o->ev->at);
			pthread_cond_broadcast(&o->ev->cv);
			pthread_mutex_unlock(&o->ev->mu);
			ev_unref(o->ev);
			break;
		case OP_HOSTFN:
			o->fn(o->arg);
			break;
		case OP_CALLBACK:
			o->cb(o->handle, s->err, o->arg);
			break;
		case OP_WAIT:
			pthread_mutex_lock(&o->ev->mu);
			while (o->ev->completed < o->seq) pthread_cond_wait(&o->ev->cv, &o->ev->mu);
			pthread_mutex_unlock(&o->ev->mu);
			ev_unref(o->ev);
			break;
		}
		free(o);
		pthread_mutex_lock(&s->mu);
		s->busy = 0;
		s->done++;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void enqueue_raw(struct fstream *s, struct op *o) {
	o->next = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->tail) s->tail->next = o;
	else s->head = o;
	s->tail = o;
	s->enq++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static int stream_pending(struct fstream *s) {
	pthread_mutex_lock(&s->mu);
	int p = s->enq != s->done;
	pthread_mutex_unlock(&s->mu);
	return p;
}


static int is_blocking(const struct fstream *s) { return s->kind == S_PER_THREAD || (s->kind == S_CREATED && !(s->flags & CU_STREAM_NON_BLOCKING)); }

// barrier makes later work on `later` wait for the work queued on
// `earlier` so far: a record of a private event on earlier, a wait for it
// on later. g_mu is held.
static void barrier(struct fstream *earlier, struct fstream *later) {
	if (!stream_pending(earlier)) return;
	struct fevent *e = ev_new(earlier->ctx, CU_EVENT_DISABLE_TIMING);
	if (!e) return;
	struct op *rec = calloc(1, sizeof *rec), *w = calloc(1, sizeof *w);
	if (!rec || !w) {
		free(rec), free(w), free(e);
		return;
	}
	e->refs = 2;
	rec->type = OP_EVENT;
	rec->ev = e;
	rec->seq = e->recorded = 1;
	w->type = OP_WAIT;
	w->ev = e;
	w->seq = 1;
	enqueue_raw(earlier, rec);
	enqueue_raw(later, w);
}

// enqueue queues o on s, keeping the legacy default stream's semantics:
// work on it waits for the work queued before on every blocking stream of
// its context, and work on a blocking stream waits for the work queued
// before on the legacy stream. Non-blocking streams do not take part.
static void enqueue(struct fstream *s, struct op *o) {
	pthread_mutex_lock(&g_mu);
	if (s->kind == S_LEGACY) {
		for (struct fstream *b = g_streams; b; b = b->next_all)
			if (b != s && b->ctx == s->ctx && is_blocking(b)) barrier(b, s);
	} else if (is_blocking(s)) {
		struct fstream *n = g_null[s->ctx->dev];
		if (n && n->ctx == s->ctx) barrier(n, s);
	}
	pthread_mutex_unlock(&g_mu);
	enqueue_raw(s, o);
}

static int stream_start(struct fstream *s, struct fctx *c, int kind, unsigned int flags) {
	s->ctx = c;
	s->kind = kind;
	s->flags = flags;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->th, NULL, stream_main, s) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	s->next_all = g_streams;
	g_streams = s;
	pthread_mutex_unlock(&g_mu);
	return 0;
}

// Handles of the default streams (cuda.h's CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD; 0 is the legacy stream too).
#define H_LEGACY ((struct fstream *)0x1)
#define H_PER_THREAD ((struct fstream *)0x2)

// stream_of resolves a stream handle: 0 and CU_STREAM_LEGACY to the current
// context's legacy default stream, CU_STREAM_PER_THREAD to this thread's
// own default stream of the current context (each made on first use).
// NULL without a context.
static struct fstream *stream_of(struct fstream *s) {
	if (s && s != H_LEGACY && s != H_PER_THREAD) return s;
	struct fctx *c = current();
	if (!c) return NULL;
	struct fstream **slot = s == H_PER_THREAD ? &tls_per_thread[c->dev] : &g_null[c->dev];
	if (*slot) return *slot;
	struct fstream *n = calloc(1, sizeof *n);
	if (!n) return NULL;
	if (stream_start(n, c, s == H_PER_THREAD ? S_PER_THREAD : S_LEGACY, 0) != 0) {
		free(n);
		return NULL;
	}
	pthread_mutex_lock(&g_mu);
	struct fstream *got = *slot;
	if (!got) *slot = got = n;
	pthread_mutex_unlock(&g_mu);
	if (got != n) { // another thread made the legacy stream first
		pthread_mutex_lock(&g_mu);
		for (struct fstream **p = &g_streams; *p; p = &(*p)->next_all)
			if (*p == n) {
				*p = n->next_all;
				break;
			}
		pthread_mutex_unlock(&g_mu);
		pthread_mutex_lock(&n->mu);
		n->stop = 1;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		pthread_join(n->th, NULL);
		free(n);
	}
	return got;
}

// drain waits until s has run the work queued on it so far.
static int drain(struct fstream *s) {
	pthread_mutex_lock(&s->mu);
	uint64_t want = s->enq;
	while (s->done < want) pthread_cond_wait(&s->cv, &s->mu);
	int rc = s->err;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

// drain_ctx waits for the work queued so far on the streams of c: all of
// them (cuCtxSynchronize), or the legacy stream and the blocking ones (what
// a synchronous copy, or a synchronization of the legacy stream, waits
// for). It returns the first sticky stream error found.
static int drain_ctx(struct fctx *c, int all) {
	struct fstream *list[256];
	int n = 0;
	pthread_mutex_lock(&g_mu);
	for (struct fstream *s = g_streams; s && n < 256; s = s->next_all)
		if (s->ctx == c && (all || s->kind == S_LEGACY || is_blocking(s))) list[n++] = s;
	pthread_mutex_unlock(&g_mu);
	int rc = 0;
	for (int i = 0; i < n; i++) {
		int r = drain(list[i]);
		if (!rc && (list[i]->kind == S_LEGACY || all)) rc = r;
	}
	return rc;
}

EXPORT CUresult cuStreamCreate(struct fstream **ps, unsigned int flags) {
	FAULT("cuStreamCreate");
	NEED_INIT();
	NEED_CTX(c);
	if (!ps || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
	struct fstream *s = calloc(1, sizeof *s);
	if (!s || stream_start(s, c, S_CREATED, flags) != 0) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ps = s;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(struct fstream *s) {
	FAULT("cuStreamDestroy");
	NEED_INIT();
	if (!s || s == H_LEGACY || s == H_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&g_mu);
	for (struct fstream **p = &g_streams; *p; p = &(*p)->next_all)
		if (*p == s) {
			*p = s->next_all;
			break;
		}
	pthread_mutex_unlock(&g_mu);
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->th, NULL);
	free(s);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(struct fstream *h) {
	FAULT("cuStreamSynchronize");
	NEED_INIT();
	struct fstream *s = stream_of(h);
	if (!s) return CUDA_ERROR_INVALID_HANDLE;
	// The legacy stream synchronizes with the blocking streams: waiting
	// for it waits for them.
	if (s->kind == S_LEGACY) return drain_ctx(s->ctx, 0);
	return drain(s);
}

EXPORT CUresult cuStreamQuery(struct fstream *h) {
	FAULT("cuStreamQuery");
	NEED_INIT();
	struct fstream *s = stream_of(h);
	if (!s) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&s->mu);
	int rc = s->err ? s->err : (s->head || s->busy) ? CUDA_ERROR_NOT_READY : 0;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

EXPORT CUresult cuCtxSynchronize(void) {
	FAULT("cuCtxSynchronize");
	NEED_INIT();
	NEED_CTX(c);
	return drain_ctx(c, 1);
}

EXPORT CUresult cuEventCreate(struct fevent **pe, unsigned int flags) {
	FAULT("cuEventCreate");
	NEED_INIT();
	NEED_CTX(c);
	// CU_EVENT_BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (which
	// needs DISABLE_TIMING); the fake has no interprocess events.
	if (!pe || (flags & ~7u) || ((flags & 4u) && !(flags & CU_EVENT_DISABLE_TIMING))) return CUDA_ERROR_INVALID_VALUE;
	if (flags & 4u) return CUDA_ERROR_NOT_SUPPORTED;
	struct fevent *e = ev_new(c, flags);
	if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
	e->refs = 1;
	*pe = e;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(struct fevent *e) {
	FAULT("cuEventDestroy");
	NEED_INIT();
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	ev_unref(e); // queued records and waits keep it until they have run
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(struct fevent *e, struct fstream *h) {
	FAULT("cuEventRecord");
	NEED_INIT();
	struct fstream *s = stream_of(h);
	if (!e || !s) return CUDA_ERROR_INVALID_HANDLE;
	if (e->ctx != s->ctx) return CUDA_ERROR_INVALID_HANDLE;
	if (g_dev[s->ctx->dev].lost) return CUDA_ERROR_ILLEGAL_ADDRESS;
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	o->type = OP_EVENT;
	o->ev = e;
	ev_ref(e);
	pthread_mutex_lock(&e->mu);
	o->seq = ++e->recorded;
	pthread_mutex_unlock(&e->mu);
	enqueue(s, o);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(struct fevent *e) {
	FAULT("cuEventQuery");
	NEED_INIT();
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&e->mu);
	int rc = e->completed < e->recorded ? CUDA_ERROR_NOT_READY : e->err;
	pthread_mutex_unlock(&e->mu);
	return rc;
}

EXPORT CUresult cuEventSynchronize(struct fevent *e) {
	FAULT("cuEventSynchronize");
	NEED_INIT();
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&e->mu);
	while (e->completed < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
	int rc = e->err;
	pthread_mutex_unlock(&e->mu);
	return rc;
}

// cuEventElapsedTime gives the time between the completion of two
// records in milliseconds, as the real driver: both events must time
// (no CU_EVENT_DISABLE_TIMING) and have been recorded
// (CUDA_ERROR_INVALID_HANDLE), and both records must have run
// (CUDA_ERROR_NOT_READY).
EXPORT CUresult cuEventElapsedTime(float *ms, struct fevent *start, struct fevent *end) {
	FAULT("cuEventElapsedTime");
	NEED_INIT();
	if (!ms) return CUDA_ERROR_INVALID_VALUE;
	if (!start || !end) return CUDA_ERROR_INVALID_HANDLE;
	if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
	struct timespec a, b;
	int rc = 0;
	struct fevent *ev[2] = {start, end};
	struct timespec *at[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		pthread_mutex_lock(&ev[i]->mu);
		if (ev[i]->recorded == 0) rc = rc ? rc : CUDA_ERROR_INVALID_HANDLE;
		else if (ev[i]->completed < ev[i]->recorded) rc = rc ? rc : CUDA_ERROR_NOT_READY;
		*at[i] = ev[i]->at;
		pthread_mutex_unlock(&ev[i]->mu);
	}
	if (rc) return rc;
	*ms = (float)((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(struct fstream *h, struct fevent *e, unsigned int flags) {
	FAULT("cuStreamWaitEvent");
	NEED_INIT();
	struct fstream *s = stream_of(h);
	if (!s || !e) return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE; // CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_EXTERNAL
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	o->type = OP_WAIT;
	o->ev = e;
	ev_ref(e);
	pthread_mutex_lock(&e->mu);
	o->seq = e->recorded;
	pthread_mutex_unlock(&e->mu);
	enqueue(s, o);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchHostFunc(struct fstream *h, CUhostFn fn, void *arg) {
	FAULT("cuLaunchHostFunc");
	NEED_INIT();
	struct fstream *s = stream_of(h);
	if (!s || !fn) return CUDA_ERROR_INVALID_VALUE;
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	o->type = OP_HOSTFN;
	o->fn = fn;
	o->arg = arg;
	enqueue(s, o);
	return CUDA_SUCCESS;
}

// cuStreamAddCallback runs cb(stream, status, user) on the stream's thread
// once the work before it has run; status is the stream's error (0, or
// the sticky error of a failed copy), as the real driver reports it.
EXPORT CUresult cuStreamAddCallback(struct fstream *h, CUstreamCallback cb, void *user, unsigned int flags) {
	FAULT("cuStreamAddCallback");
	NEED_INIT();
	if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
	struct fstream *s = stream_of(h);
	if (!s) return CUDA_ERROR_INVALID_HANDLE;
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	o->type = OP_CALLBACK;
	o->cb = cb;
	o->handle = h;
	o->arg = user;
	enqueue(s, o);
	return CUDA_SUCCESS;
}

// ---- copies ----

// end_class is the speed class of one end of a copy; g_mu is held.
static int end_class(uint64_t p, int dev) {
	if (dev >= 0) return COPY_DEVICE;
	struct range *r = range_find(p);
	return r && (r->kind == R_PINNED || r->kind == R_REGISTERED || r->kind == R_MANAGED) ? COPY_PINNED : COPY_PAGEABLE;
}

// throttle sleeps as long as copying n bytes of class cls takes.
static void throttle(int cls, size_t n) {
	int rate = __atomic_load_n(&g_mbps[cls], __ATOMIC_RELAXED);
	if (rate > 0 && n / (size_t)rate > 0) usleep((useconds_t)(n / (size_t)rate));
}

// resolve_pair resolves both ends of a copy; want_dst/want_src are 1
// (device), 0 (host) or -1 (any). *cls is the copy's speed class: that
// of its slower end.
// mapped_host: p is host memory with a device address. g_mu is held.
static int mapped_host(uint64_t p) {
	struct range *r = range_find(p);
	return r && (r->kind == R_PINNED || r->kind == R_REGISTERED || r->kind == R_MANAGED);
}

static int resolve_pair(CUdeviceptr dst, CUdeviceptr src, size_t n, int want_dst, int want_src, char **hd, char **hs, int *cls) {
	int dd, ds;
	pthread_mutex_lock(&g_mu);
	int rc = resolve(dst, n, hd, &dd);
	if (!rc) rc = resolve(src, n, hs, &ds);
	if (!rc) {
		int a = end_class(dst, dd), b = end_class(src, ds);
		*cls = a > b ? a : b;
	}
	// The device end of cuMemcpyDtoH/HtoD/DtoD may be host memory that has
	// a device address: pinned, registered or managed memory (with unified
	// addressing its device pointer is its host address).
	if (!rc && want_dst == 1 && dd < 0 && mapped_host(dst)) dd = -2;
	if (!rc && want_src == 1 && ds < 0 && mapped_host(src)) ds = -2;
	pthread_mutex_unlock(&g_mu);
	if (rc) return rc;
	if ((want_dst == 1 && dd == -1) || (want_dst == 0 && dd >= 0) || (want_src == 1 && ds == -1) || (want_src == 0 && ds >= 0))
		return CUDA_ERROR_INVALID_VALUE;
	return 0;
}

// copy_async resolves both ends and queues the copy on s.
static int copy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, struct fstream *s, int want_dst, int want_src) {
	NEED_CTX(c);
	s = stream_of(s);
	if (!s) return CUDA_ERROR_INVALID_HANDLE;
	if (s->ctx != c) return CUDA_ERROR_INVALID_CONTEXT;
	if (n == 0) return CUDA_SUCCESS;
	char *hd, *hs;
	int cls;
	int rc = resolve_pair(dst, src, n, want_dst, want_src, &hd, &hs, &cls);
	if (rc) return rc;
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	o->type = OP_COPY;
	o->cls = cls;
	o->dst = hd;
	o->src = hs;
	o->n = n;
	enqueue(s, o);
	return CUDA_SUCCESS;
}

// copy_sync is a synchronous copy: like the real driver's, it runs on the
// legacy default stream, after the work queued before on it and on the
// blocking streams of the context, and returns when the bytes are there.
static int copy_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, int want_dst, int want_src) {
	NEED_CTX(c);
	if (n == 0) return CUDA_SUCCESS;
	char *hd, *hs;
	int cls;
	int rc = resolve_pair(dst, src, n, want_dst, want_src, &hd, &hs, &cls);
	if (rc) return rc;
	drain_ctx(c, 0);
	if (g_dev[c->dev].lost) return CUDA_ERROR_ILLEGAL_ADDRESS;
	int us = __atomic_load_n(&g_delay_us, __ATOMIC_RELAXED);
	if (us > 0) usleep((useconds_t)us);
	throttle(cls, n);
	memmove(hd, hs, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, struct fstream *st) {
	FAULT("cuMemcpyAsync");
	NEED_INIT();
	return copy_async(d, s, n, st, -1, -1);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, struct fstream *st) {
	FAULT("cuMemcpyHtoDAsync");
	NEED_INIT();
	return copy_async(d, (CUdeviceptr)(uintptr_t)s, n, st, 1, 0);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, struct fstream *st) {
	FAULT("cuMemcpyDtoHAsync");
	NEED_INIT();
	return copy_async((CUdeviceptr)(uintptr_t)d, s, n, st, 0, 1);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, struct fstream *st) {
	FAULT("cuMemcpyDtoDAsync");
	NEED_INIT();
	return copy_async(d, s, n, st, 1, 1);
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr d, struct fctx *dc, CUdeviceptr s, struct fctx *sc, size_t n, struct fstream *st) {
	FAULT("cuMemcpyPeerAsync");
	NEED_INIT();
	if (!dc || !sc || !valid_ctx(dc) || !valid_ctx(sc)) return CUDA_ERROR_INVALID_CONTEXT;
	return copy_async(d, s, n, st, 1, 1);
}
EXPORT CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
	FAULT("cuMemcpy");
	NEED_INIT();
	return copy_sync(d, s, n, -1, -1);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
	FAULT("cuMemcpyHtoD");
	NEED_INIT();
	return copy_sync(d, (CUdeviceptr)(uintptr_t)s, n, 1, 0);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
	FAULT("cuMemcpyDtoH");
	NEED_INIT();
	return copy_sync((CUdeviceptr)(uintptr_t)d, s, n, 0, 1);
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
	FAULT("cuMemcpyDtoD");
	NEED_INIT();
	return copy_sync(d, s, n, 1, 1);
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
	FAULT("cuMemsetD8");
	NEED_INIT();
	NEED_CTX(c);
	char *h;
	int dd;
	pthread_mutex_lock(&g_mu);
	int rc = resolve(d, n, &h, &dd);
	pthread_mutex_unlock(&g_mu);
	if (rc) return rc;
	drain_ctx(c, 0); // ordered on the legacy stream, as a copy
	if (g_dev[c->dev].lost) return CUDA_ERROR_ILLEGAL_ADDRESS;
	memset(h, v, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, struct fstream *st) {
	FAULT("cuMemsetD8Async");
	NEED_INIT();
	NEED_CTX(c);
	struct fstream *s = stream_of(st);
	if (!s) return CUDA_ERROR_INVALID_HANDLE;
	if (s->ctx != c) return CUDA_ERROR_INVALID_CONTEXT;
	if (n == 0) return CUDA_SUCCESS;
	char *h;
	int dd;
	pthread_mutex_lock(&g_mu);
	int rc = resolve(d, n, &h, &dd);
	pthread_mutex_unlock(&g_mu);
	if (rc) return rc;
	struct op *o = calloc(1, sizeof *o);
	if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
	o->type = OP_MEMSET;
	o->dst = h;
	o->value = v;
	o->n = n;
	enqueue(s, o);
	return CUDA_SUCCESS;
}

// ---- windows of the device address space (IPC opens, VMM reservations) ----

static uint64_t win_alloc(uint64_t size, uint64_t align) {
	if (align < GRANULARITY) align = GRANULARITY;
	uint64_t at = (g_win_next + align - 1) & ~(align - 1);
	if (at + size > WIN_BASE + WIN_SIZE) return 0;
	g_win_next = at + size;
	return at;
}

// ---- legacy IPC ----

struct ipc_handle {
	uint32_t magic;
	uint16_t version, dev;
	uint32_t pid;
	int32_t fd;
	uint64_t off, size, id;
	uint8_t pad[16];
	uint64_t trailer;
};
_Static_assert(sizeof(struct ipc_handle) == 64, "ipc handle is 64 bytes");

typedef struct {
	char reserved[64];
} CUipcMemHandle;

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
	FAULT("cuIpcGetMemHandle");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	if (!h) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	if (!r || r->kind != R_DEVICE) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct ipc_handle ih = {0};
	ih.magic = IPC_MAGIC;
	ih.version = 1;
	ih.dev = (uint16_t)r->dev;
	ih.pid = (uint32_t)getpid();
	ih.fd = g_dev[r->dev].memfd;
	ih.off = r->arena_off;
	ih.size = r->size;
	ih.id = r->id;
	ih.trailer = TRAILER;
	pthread_mutex_unlock(&g_mu);
	memcpy(h, &ih, sizeof ih);
	return CUDA_SUCCESS;
}

// map_foreign maps size bytes at offset off of another process's fd into a
// fresh window: PROT_NONE at the device address, read-write privately.
static int map_foreign(uint32_t pid, int32_t fd, uint64_t off, uint64_t size, uint64_t *va, char **backing, size_t *len, int *kept_fd) {
	char path[64];
	snprintf(path, sizeof path, "/proc/%u/fd/%d", pid, fd);
	int f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0) return CUDA_ERROR_INVALID_HANDLE;
	uint64_t pg = off & ~4095ULL;
	size_t l = (size_t)(((off - pg) + size + 4095) & ~4095ULL);
	uint64_t at = win_alloc(l, GRANULARITY);
	if (!at) {
		close(f);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *m = mmap((void *)(uintptr_t)at, l, PROT_NONE, MAP_SHARED | MAP_FIXED_NOREPLACE, f, (off_t)pg);
	void *b = mmap(NULL, l, PROT_READ | PROT_WRITE, MAP_SHARED, f, (off_t)pg);
	if (kept_fd) *kept_fd = f;
	else close(f);
	if (m == MAP_FAILED || b == MAP_FAILED) {
		if (m != MAP_FAILED) munmap(m, l);
		if (b != MAP_FAILED) munmap(b, l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*va = at + (off - pg);
	*backing = (char *)b + (off - pg);
	*len = l;
	return 0;
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
	(void)flags;
	FAULT("cuIpcOpenMemHandle");
	NEED_INIT();
	NEED_CTX(c);
	if (!p) return CUDA_ERROR_INVALID_VALUE;
	struct ipc_handle ih;
	memcpy(&ih, &h, sizeof ih);
	if (ih.magic != IPC_MAGIC || ih.trailer != TRAILER || ih.version != 1) return CUDA_ERROR_INVALID_HANDLE;
	if (ih.pid == (uint32_t)getpid()) return CUDA_ERROR_INVALID_CONTEXT; // own handle: not allowed
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_nranges; i++) {
		struct range *r = &g_ranges[i];
		if (r->kind == R_IPC && r->ipc_pid == ih.pid && r->ipc_id == ih.id) {
			r->refs++;
			*p = r->start;
			pthread_mutex_unlock(&g_mu);
			return CUDA_SUCCESS;
		}
	}
	uint64_t va;
	char *b;
	size_t len;
	int rc = map_foreign(ih.pid, ih.fd, ih.off, ih.size, &va, &b, &len, NULL);
	if (rc) {
		pthread_mutex_unlock(&g_mu);
		return rc;
	}
	struct range *r = range_add();
	r->start = va;
	r->size = ih.size;
	r->kind = R_IPC;
	r->dev = c->dev;
	r->backing = b;
	r->map_len = len;
	r->refs = 1;
	r->ipc_pid = ih.pid;
	r->ipc_id = ih.id;
	r->accessible = 1;
	r->own_map = 1;
	pthread_mutex_unlock(&g_mu);
	*p = va;
	return CUDA_SUCCESS;
}

// cuIpcOpenMemHandle is the pre-11.0 entry point; the fake refuses it.
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
	(void)p, (void)h, (void)flags;
	__atomic_add_fetch(&g_wrong_version, 1, __ATOMIC_RELAXED);
	return CUDA_ERROR_NOT_SUPPORTED;
}

static void unmap_range(struct range *r) {
	uint64_t pg = r->start & ~4095ULL;
	munmap((void *)(uintptr_t)pg, r->map_len);
	munmap((void *)(((uintptr_t)r->backing) & ~4095UL), r->map_len);
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
	FAULT("cuIpcCloseMemHandle");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	int rc = CUDA_ERROR_INVALID_VALUE;
	if (r && r->kind == R_IPC && r->start == p) {
		if (--r->refs == 0) {
			unmap_range(r);
			range_del(r);
		}
		rc = 0;
	}
	pthread_mutex_unlock(&g_mu);
	return rc;
}

// ---- VMM ----

typedef struct {
	int type;
	int requestedHandleTypes;
	struct {
		int type;
		int id;
	} location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType, gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes");

typedef struct {
	struct {
		int type;
		int id;
	} location;
	int flags;
} CUmemAccessDesc;

static struct phys *phys_get(uint64_t id) {
	for (int i = 0; i < g_nphys; i++)
		if (g_phys[i].id == id) return &g_phys[i];
	return NULL;
}

static uint64_t phys_types(uint64_t id) {
	struct phys *ph = phys_get(id);
	return ph ? ph->handle_types : 0;
}

static struct phys *phys_add(int fd, uint64_t size, int dev, uint64_t types) {
	if (g_nphys == g_capphys) {
		g_capphys = g_capphys ? 2 * g_capphys : 32;
		g_phys = realloc(g_phys, (size_t)g_capphys * sizeof *g_phys);
	}
	struct phys *ph = &g_phys[g_nphys++];
	memset(ph, 0, sizeof *ph);
	ph->id = g_next_id++;
	ph->fd = fd;
	ph->size = size;
	ph->dev = dev;
	ph->handle_types = types;
	ph->refs = 1;
	return ph;
}

static void phys_unref(struct phys *ph) {
	if (--ph->refs > 0) return;
	close(ph->fd);
	int i = (int)(ph - g_phys);
	g_phys[i] = g_phys[--g_nphys];
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option) {
	(void)option;
	FAULT("cuMemGetAllocationGranularity");
	NEED_INIT();
	if (!g || !prop) return CUDA_ERROR_INVALID_VALUE;
	if (!g_vmm) return CUDA_ERROR_NOT_SUPPORTED;
	*g = GRANULARITY;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
	(void)flags;
	FAULT("cuMemCreate");
	NEED_INIT();
	if (!h || !prop || size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
	if (!g_vmm) return CUDA_ERROR_NOT_SUPPORTED;
	if (prop->type != 1 || prop->location.type != 1 || check_dev(prop->location.id)) return CUDA_ERROR_INVALID_VALUE;
	uint64_t types = (uint64_t)prop->requestedHandleTypes;
	if ((types & HANDLE_FABRIC) && !g_fabric) return CUDA_ERROR_NOT_SUPPORTED;
	if (types & ~(uint64_t)(HANDLE_POSIX_FD | HANDLE_FABRIC)) return CUDA_ERROR_NOT_SUPPORTED;
	int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		if (fd >= 0) close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&g_mu);
	struct phys *ph = phys_add(fd, size, prop->location.id, types);
	*h = ph->id;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
	FAULT("cuMemRelease");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct phys *ph = phys_get(h);
	if (!ph) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	phys_unref(ph);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
	(void)addr, (void)flags;
	FAULT("cuMemAddressReserve");
	NEED_INIT();
	if (!p || size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	uint64_t at = win_alloc(size, align);
	void *m = at ? mmap((void *)(uintptr_t)at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) : MAP_FAILED;
	void *shadow = m != MAP_FAILED ? mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) : MAP_FAILED;
	if (m == MAP_FAILED || shadow == MAP_FAILED) {
		if (m != MAP_FAILED) munmap(m, size);
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (g_nres == g_capres) {
		g_capres = g_capres ? 2 * g_capres : 32;
		g_res = realloc(g_res, (size_t)g_capres * sizeof *g_res);
	}
	g_res[g_nres].start = at;
	g_res[g_nres].shadow = shadow;
	g_res[g_nres++].size = size;
	pthread_mutex_unlock(&g_mu);
	*p = at;
	return CUDA_SUCCESS;
}

static struct reservation *res_find(uint64_t p, uint64_t size) {
	for (int i = 0; i < g_nres; i++)
		if (p >= g_res[i].start && p + size <= g_res[i].start + g_res[i].size) return &g_res[i];
	return NULL;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
	FAULT("cuMemAddressFree");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct reservation *rs = res_find(p, size);
	if (!rs || rs->start != p || rs->size != size) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < g_nranges; i++) {
		struct range *r = &g_ranges[i];
		if (r->kind == R_VMM && r->start >= p && r->start < p + size) {
			pthread_mutex_unlock(&g_mu);
			return CUDA_ERROR_INVALID_VALUE; // still mapped
		}
	}
	munmap((void *)(uintptr_t)p, size);
	munmap(rs->shadow, size);
	*rs = g_res[--g_nres];
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
	(void)flags;
	FAULT("cuMemMap");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	struct phys *ph = phys_get(h);
	struct reservation *rs = res_find(p, size);
	int rc = 0;
	if (!ph || size == 0 || size % GRANULARITY || offset % GRANULARITY || offset + size > ph->size || !rs)
		rc = CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; !rc && i < g_nranges; i++) {
		struct range *r = &g_ranges[i];
		if (r->kind == R_VMM && p < r->start + r->size && r->start < p + size) rc = CUDA_ERROR_ALREADY_MAPPED;
	}
	if (rc) {
		pthread_mutex_unlock(&g_mu);
		return rc;
	}
	void *m = mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset);
	void *b = mmap(rs->shadow + (p - rs->start), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset);
	if (m == MAP_FAILED || b == MAP_FAILED) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ph->refs++;
	struct range *r = range_add();
	r->start = p;
	r->size = size;
	r->kind = R_VMM;
	r->dev = ph->dev;
	r->backing = b;
	r->map_len = size;
	r->id = ph->id;
	r->arena_off = offset; // where the mapping starts in the allocation's memfd
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count) {
	FAULT("cuMemSetAccess");
	NEED_INIT();
	if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (desc[i].location.type != 1 || check_dev(desc[i].location.id) || (desc[i].flags != 3 && desc[i].flags != 1))
			return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	int found = 0;
	for (int i = 0; i < g_nranges; i++) {
		struct range *r = &g_ranges[i];
		if (r->kind == R_VMM && r->start >= p && r->start + r->size <= p + size) {
			r->accessible = 1;
			found = 1;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
	FAULT("cuMemUnmap");
	NEED_INIT();
	pthread_mutex_lock(&g_mu);
	int found = 0;
	for (int i = 0; i < g_nranges;) {
		struct range *r = &g_ranges[i];
		if (r->kind == R_VMM && r->start >= p && r->start + r->size <= p + size) {
			// Both views go back to reserved, inaccessible address space.
			mmap(r->backing, r->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
			mmap((void *)(uintptr_t)r->start, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			struct phys *ph = phys_get(r->id);
			if (ph) phys_unref(ph);
			range_del(r);
			found = 1;
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&g_mu);
	return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
	FAULT("cuMemRetainAllocationHandle");
	NEED_INIT();
	if (!h) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find((uint64_t)(uintptr_t)addr);
	struct phys *ph = r && r->kind == R_VMM ? phys_get(r->id) : NULL;
	if (!ph) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	ph->refs++;
	*h = ph->id;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

struct fabric_handle {
	uint32_t magic;
	uint32_t pid;
	int32_t fd;
	int32_t dev;
	uint64_t size, id;
	uint8_t pad[24];
	uint64_t trailer;
};
_Static_assert(sizeof(struct fabric_handle) == 64, "fabric handle is 64 bytes");

EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags) {
	(void)flags;
	FAULT("cuMemExportToShareableHandle");
	NEED_INIT();
	if (!out) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct phys *ph = phys_get(h);
	int rc = 0;
	if (!ph) rc = CUDA_ERROR_INVALID_VALUE;
	else if (!(ph->handle_types & (uint64_t)type)) rc = CUDA_ERROR_NOT_PERMITTED;
	else if (type == HANDLE_POSIX_FD) {
		int fd = fcntl(ph->fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
		else *(int *)out = fd;
	} else if (type == HANDLE_FABRIC) {
		struct fabric_handle fh = {0};
		fh.magic = FAB_MAGIC;
		fh.pid = (uint32_t)getpid();
		fh.fd = ph->fd;
		fh.dev = ph->dev;
		fh.size = ph->size;
		fh.id = ph->id;
		fh.trailer = TRAILER;
		memcpy(out, &fh, sizeof fh);
	} else rc = CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_unlock(&g_mu);
	return rc;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
	FAULT("cuMemImportFromShareableHandle");
	NEED_INIT();
	if (!h) return CUDA_ERROR_INVALID_VALUE;
	int fd = -1, dev = 0;
	uint64_t types = (uint64_t)type;
	if (type == HANDLE_POSIX_FD) {
		fd = fcntl((int)(intptr_t)os, F_DUPFD_CLOEXEC, 0);
		if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
	} else if (type == HANDLE_FABRIC) {
		if (!g_fabric || !os) return CUDA_ERROR_NOT_SUPPORTED;
		struct fabric_handle fh;
		memcpy(&fh, os, sizeof fh);
		if (fh.magic != FAB_MAGIC || fh.trailer != TRAILER) return CUDA_ERROR_INVALID_HANDLE;
		char path[64];
		snprintf(path, sizeof path, "/proc/%u/fd/%d", fh.pid, fh.fd);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
		dev = fh.dev;
	} else return CUDA_ERROR_NOT_SUPPORTED;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size <= 0 || (uint64_t)st.st_size % GRANULARITY) {
		close(fd);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	pthread_mutex_lock(&g_mu);
	struct phys *ph = phys_add(fd, (uint64_t)st.st_size, dev, types);
	ph->imported = 1;
	*h = ph->id;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

// cuMemGetHandleForAddressRange exports a dma-buf for RDMA. The fake's
// dma-buf is a small memfd ("fakecuda-dmabuf") holding struct
// fake_dmabuf: the exporting process, the number of the memfd that backs the
// range there, where the range starts in it and its size. An importer (the
// fake verbs provider's ibv_reg_dmabuf_mr) opens /proc/<pid>/fd/<fd> and maps
// [offset, offset+size) itself, so closing the dma-buf after registration
// leaves the registration intact, as with a real one. The range must lie in
// one allocation.
#define DMABUF_MAGIC 0x46424d44u /* "DMBF" */
struct fake_dmabuf {
	uint32_t magic, pid;
	int32_t fd;
	uint32_t pad;
	uint64_t offset, size;
};

EXPORT CUresult cuMemGetHandleForAddressRange(void *out, CUdeviceptr p, size_t size, int type, unsigned long long flags) {
	(void)flags;
	FAULT("cuMemGetHandleForAddressRange");
	NEED_INIT();
	if (!out || type != 1 || size == 0) return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	struct fake_dmabuf h = {.magic = DMABUF_MAGIC, .pid = (uint32_t)getpid(), .fd = -1, .size = size};
	if (r && (r->kind == R_DEVICE || r->kind == R_VMM) && size <= r->size - (p - r->start)) {
		h.offset = r->arena_off + (p - r->start);
		if (r->kind == R_DEVICE) {
			h.fd = g_dev[r->dev].memfd;
		} else {
			struct phys *ph = phys_get(r->id);
			h.fd = ph ? ph->fd : -1;
		}
	}
	pthread_mutex_unlock(&g_mu);
	if (h.fd < 0) return CUDA_ERROR_INVALID_VALUE;
	int fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
	if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
	if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

// ---- modules, kernels, the JIT linker, the profiler ----
//
// The fake runs no device code. Loading a module or starting a link fails
// with CUDA_ERROR_NOT_SUPPORTED; every call that takes a module, function
// or link state fails with CUDA_ERROR_INVALID_HANDLE, as such a handle
// cannot exist. So a program finds each entry point it binds (numba binds
// them all at load) and gets a CUDA error, never a missing symbol.

typedef void *CUhandle;
typedef size_t (*CUoccupancyB2DSize)(int);

EXPORT CUresult cuModuleLoadDataEx(CUhandle *mod, const void *image, unsigned int n, int *opts, void **vals) {
	(void)image, (void)n, (void)opts, (void)vals;
	FAULT("cuModuleLoadDataEx");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	if (!mod) return CUDA_ERROR_INVALID_VALUE;
	return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuModuleUnload(CUhandle mod) {
	(void)mod;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuModuleGetFunction(CUhandle *fn, CUhandle mod, const char *name) {
	(void)fn, (void)mod, (void)name;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, CUhandle mod, const char *name) {
	(void)p, (void)n, (void)mod, (void)name;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuFuncSetCacheConfig(CUhandle fn, int config) {
	(void)fn, (void)config;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuFuncGetAttribute(int *v, int attr, CUhandle fn) {
	(void)v, (void)attr, (void)fn;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuLaunchKernel(CUhandle fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, struct fstream *s, void **params, void **extra) {
	(void)fn, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuLaunchCooperativeKernel(CUhandle fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                          unsigned bz, unsigned shmem, struct fstream *s, void **params) {
	(void)fn, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUhandle fn, int block, size_t shmem) {
	(void)n, (void)fn, (void)block, (void)shmem;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUhandle fn, int block, size_t shmem,
                                                                     unsigned flags) {
	(void)n, (void)fn, (void)block, (void)shmem, (void)flags;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *grid, int *block, CUhandle fn, CUoccupancyB2DSize b2d, size_t shmem,
                                                 int limit) {
	(void)grid, (void)block, (void)fn, (void)b2d, (void)shmem, (void)limit;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *grid, int *block, CUhandle fn, CUoccupancyB2DSize b2d,
                                                          size_t shmem, int limit, unsigned flags) {
	(void)grid, (void)block, (void)fn, (void)b2d, (void)shmem, (void)limit, (void)flags;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuLinkCreate_v2(unsigned n, int *opts, void **vals, CUhandle *state) {
	(void)n, (void)opts, (void)vals;
	FAULT("cuLinkCreate");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	if (!state) return CUDA_ERROR_INVALID_VALUE;
	return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuLinkAddData_v2(CUhandle state, int type, void *data, size_t size, const char *name, unsigned n, int *opts,
                                 void **vals) {
	(void)state, (void)type, (void)data, (void)size, (void)name, (void)n, (void)opts, (void)vals;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuLinkAddFile_v2(CUhandle state, int type, const char *path, unsigned n, int *opts, void **vals) {
	(void)state, (void)type, (void)path, (void)n, (void)opts, (void)vals;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuLinkComplete(CUhandle state, void **cubin, size_t *size) {
	(void)state, (void)cubin, (void)size;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuLinkDestroy(CUhandle state) {
	(void)state;
	NEED_INIT();
	return CUDA_ERROR_INVALID_HANDLE;
}

// Profiling of the current context: there is no profiler to start, as on
// a GPU without one attached, and the calls succeed.
EXPORT CUresult cuProfilerStart(void) {
	FAULT("cuProfilerStart");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuProfilerStop(void) {
	FAULT("cuProfilerStop");
	NEED_INIT();
	NEED_CTX(c);
	(void)c;
	return CUDA_SUCCESS;
}

// ---- entry point resolution ----

struct sym {
	const char *name;
	void *fn;
};

#define S(n) {#n, (void *)n}
#define V2(n) {#n, (void *)n##_v2}
static const struct sym g_syms[] = {
	S(cuInit), S(cuDriverGetVersion), S(cuGetErrorName), S(cuGetErrorString), S(cuDeviceGetCount),
	S(cuDeviceGet), S(cuDeviceGetAttribute), S(cuDeviceGetName), S(cuDeviceGetPCIBusId), V2(cuDeviceTotalMem),
	S(cuDeviceCanAccessPeer), S(cuDevicePrimaryCtxRetain), V2(cuDevicePrimaryCtxRelease), S(cuCtxSetCurrent),
	S(cuCtxGetCurrent), V2(cuCtxPushCurrent), V2(cuCtxPopCurrent), S(cuCtxGetDevice), S(cuCtxEnablePeerAccess),
	V2(cuMemAlloc), V2(cuMemFree), S(cuMemAllocManaged), S(cuMemHostAlloc), S(cuMemFreeHost),
	V2(cuMemHostRegister), S(cuMemHostUnregister), V2(cuMemHostGetDevicePointer), V2(cuMemGetInfo),
	V2(cuMemGetAddressRange), S(cuPointerGetAttributes), S(cuPointerGetAttribute), S(cuStreamCreate),
	V2(cuStreamDestroy), S(cuStreamSynchronize), S(cuStreamQuery), S(cuEventCreate), V2(cuEventDestroy),
	S(cuEventRecord), S(cuEventQuery), S(cuEventSynchronize), S(cuStreamWaitEvent), S(cuLaunchHostFunc),
	S(cuMemcpyAsync), V2(cuMemcpyHtoDAsync), V2(cuMemcpyDtoHAsync), V2(cuMemcpyDtoDAsync), S(cuMemcpyPeerAsync),
	S(cuMemcpy), V2(cuMemcpyHtoD), V2(cuMemcpyDtoH), V2(cuMemcpyDtoD), V2(cuMemsetD8), S(cuIpcGetMemHandle),
	V2(cuIpcOpenMemHandle), S(cuIpcCloseMemHandle), S(cuMemGetAllocationGranularity), S(cuMemCreate),
	S(cuMemRelease), S(cuMemAddressReserve), S(cuMemAddressFree), S(cuMemMap), S(cuMemSetAccess), S(cuMemUnmap),
	S(cuMemRetainAllocationHandle), S(cuMemExportToShareableHandle), S(cuMemImportFromShareableHandle),
	S(cuMemGetHandleForAddressRange), S(cuDeviceComputeCapability), V2(cuDeviceGetUuid),
	S(cuDevicePrimaryCtxGetState), V2(cuDevicePrimaryCtxSetFlags), V2(cuDevicePrimaryCtxReset), V2(cuCtxCreate),
	V2(cuCtxDestroy), S(cuCtxSynchronize), S(cuMemsetD8Async), S(cuStreamAddCallback), S(cuEventElapsedTime),
	S(cuMemHostGetFlags), S(cuModuleLoadDataEx), S(cuModuleUnload), S(cuModuleGetFunction), V2(cuModuleGetGlobal),
	S(cuFuncSetCacheConfig), S(cuFuncGetAttribute), S(cuLaunchKernel), S(cuLaunchCooperativeKernel),
	S(cuOccupancyMaxActiveBlocksPerMultiprocessor), S(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
	S(cuOccupancyMaxPotentialBlockSize), S(cuOccupancyMaxPotentialBlockSizeWithFlags), V2(cuLinkCreate),
	V2(cuLinkAddData), V2(cuLinkAddFile), S(cuLinkComplete), S(cuLinkDestroy), S(cuProfilerStart), S(cuProfilerStop),
};

static int lookup(const char *name, void **pfn) {
	for (size_t i = 0; i < sizeof g_syms / sizeof g_syms[0]; i++) {
		if (strcmp(g_syms[i].name, name) == 0) {
			*pfn = g_syms[i].fn;
			return 0;
		}
	}
	*pfn = NULL;
	return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress_v2(const char *name, void **pfn, int version, unsigned long long flags, int *status) {
	(void)version, (void)flags;
	FAULT("cuGetProcAddress_v2");
	if (env_int("FAKECUDA_DRIVER_VERSION", g_version) < 12000) {
		__atomic_add_fetch(&g_wrong_version, 1, __ATOMIC_RELAXED);
		return CUDA_ERROR_NOT_SUPPORTED; // not in an 11.x driver
	}
	if (!name || !pfn) return CUDA_ERROR_INVALID_VALUE;
	int rc = lookup(name, pfn);
	if (status) *status = rc ? 1 : 0;
	return rc;
}

EXPORT CUresult cuGetProcAddress(const char *name, void **pfn, int version, unsigned long long flags) {
	(void)version, (void)flags;
	FAULT("cuGetProcAddress");
	if (!name || !pfn) return CUDA_ERROR_INVALID_VALUE;
	return lookup(name, pfn);
}

// The old ABI of versioned names: a binding must never call these.
#define OLD(n)                                                       \
	EXPORT CUresult n(void) {                                        \
		__atomic_add_fetch(&g_wrong_version, 1, __ATOMIC_RELAXED);   \
		return CUDA_ERROR_NOT_SUPPORTED;                             \
	}
OLD(cuMemAlloc)
OLD(cuMemFree)
OLD(cuMemHostRegister)
OLD(cuStreamDestroy)
OLD(cuEventDestroy)
OLD(cuDevicePrimaryCtxRelease)
OLD(cuCtxPushCurrent)
OLD(cuCtxPopCurrent)
OLD(cuMemGetAddressRange)
OLD(cuMemcpyHtoD)
OLD(cuMemcpyDtoH)
OLD(cuMemcpyHtoDAsync)
OLD(cuMemcpyDtoHAsync)
OLD(cuDeviceTotalMem)
OLD(cuMemGetInfo)
OLD(cuMemcpyDtoD)
OLD(cuMemcpyDtoDAsync)
OLD(cuMemsetD8)
OLD(cuMemHostGetDevicePointer)
OLD(cuDevicePrimaryCtxSetFlags)
OLD(cuDevicePrimaryCtxReset)
OLD(cuCtxCreate)
OLD(cuCtxDestroy)
OLD(cuModuleGetGlobal)
OLD(cuLinkCreate)
OLD(cuLinkAddData)
OLD(cuLinkAddFile)

// ---- test control (not part of any CUDA ABI) ----

EXPORT_CTL int fakecuda_fail(const char *name, int nth, int sticky, int code) {
	add_fault(name, nth, sticky, code);
	return 0;
}

EXPORT_CTL void fakecuda_reset(void) {
	pthread_mutex_lock(&f_mu);
	g_nfaults = 0;
	pthread_mutex_unlock(&f_mu);
	__atomic_store_n(&g_delay_us, 0, __ATOMIC_RELAXED);
	for (int c = 0; c < 3; c++) __atomic_store_n(&g_mbps[c], 0, __ATOMIC_RELAXED);
	for (int d = 0; d < MAX_DEVICES; d++) g_dev[d].lost = 0;
}

EXPORT_CTL void fakecuda_set_copy_delay_us(int us) { __atomic_store_n(&g_delay_us, us, __ATOMIC_RELAXED); }

// fakecuda_set_copy_mbps sets the copy speeds (MB/s, 0 = unthrottled) of
// copies with a pageable host end, a pinned host end, and device to device.
EXPORT_CTL void fakecuda_set_copy_mbps(int pageable, int pinned, int device) {
	__atomic_store_n(&g_mbps[COPY_PAGEABLE], pageable, __ATOMIC_RELAXED);
	__atomic_store_n(&g_mbps[COPY_PINNED], pinned, __ATOMIC_RELAXED);
	__atomic_store_n(&g_mbps[COPY_DEVICE], device, __ATOMIC_RELAXED);
}

EXPORT_CTL void fakecuda_lose_context(int dev) {
	if (dev >= 0 && dev < MAX_DEVICES) g_dev[dev].lost = 1;
}

// fakecuda_backing returns a host pointer to the bytes of device address p
// (NULL when p is not device memory), for tests to check what arrived.
EXPORT_CTL void *fakecuda_backing(unsigned long long p) {
	pthread_mutex_lock(&g_mu);
	struct range *r = range_find(p);
	void *b = r && is_device_kind(r->kind) ? r->backing + (p - r->start) : NULL;
	pthread_mutex_unlock(&g_mu);
	return b;
}

EXPORT_CTL unsigned long long fakecuda_calls(const char *name) {
	unsigned long long n = 0;
	pthread_mutex_lock(&f_mu);
	for (int i = 0; i < g_ncounters; i++)
		if (strcmp(g_counters[i].name, name) == 0) n = g_counters[i].n;
	pthread_mutex_unlock(&f_mu);
	return n;
}

EXPORT_CTL unsigned long long fakecuda_wrong_version_calls(void) { return __atomic_load_n(&g_wrong_version, __ATOMIC_RELAXED); }

// fakecuda_count returns how many live ranges of a kind exist: 1 device,
// 2 pinned, 3 registered, 4 managed, 5 IPC opens, 6 VMM mappings; 0 for
// all; -1 for live VMM physical allocations.
EXPORT_CTL int fakecuda_count(int kind) {
	pthread_mutex_lock(&g_mu);
	int n = 0;
	if (kind == -1) n = g_nphys;
	else
		for (int i = 0; i < g_nranges; i++)
			if (kind == 0 || g_ranges[i].kind == kind) n++;
	pthread_mutex_unlock(&g_mu);
	return n;
}
