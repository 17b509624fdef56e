// fake_hip.c: a fake HIP runtime (libamdhip64.so) for kvferry's tests.
//
// It is a thin layer of HIP names over the fake CUDA driver: this file
// includes fake_cuda.c (whose cu* entry points it hides), so device memory
// the CPU cannot touch at the device address, IPC handles another process
// really maps, VMM memfds, dma-bufs, stream workers and fault injection are
// the fake CUDA driver's, unchanged. Built by the tests
// (internal/testutil/fakecuda.BuildHIP, tests/fakecuda/build.sh) and loaded
// by the real binding (internal/hip) through KVFERRY_HIP_LIB.
//
// What the layer adds is HIP's model: a current device per host thread
// (hipSetDevice, device 0 until set) instead of a context stack. Each call
// pushes the current device's primary context, runs the CUDA call and pops
// it. Its device memory lies at 0x7a0000000000 (+ 64 GiB a device). The HIP enums it translates are those of the ROCm 6 headers
// (docs/specs/hip.md): hipMemoryType (Unregistered 0, Host 1, Device 2,
// Managed 3) and hipDeviceAttribute_t ordinals; result codes, memory
// handle types, access descriptors and allocation properties have the
// values and layouts of their CUDA counterparts.
//
// Faults: FAKECUDA_FAIL and fakecuda_fail take HIP names too
// ("hipMemcpyAsync:1:700"); a HIP call checks its own name, then the CUDA
// call under it checks the CUDA name. FAKEHIP_NO_VMM=1 at build time
// (-DFAKEHIP_NO_VMM) leaves out the VMM and dma-buf symbols, as an older
// ROCm does, so a binding must report them missing instead of crashing.
// FAKEHIP_VERSION=N (run time) changes the HIP_VERSION it reports (ROCm
// 6.2's by default) and with it how hipMemImportFromShareableHandle takes
// a POSIX fd: by pointer before 7.1 (70100000), by value from then on.

// Device memory and mapping windows of their own (the fake CUDA's lie at
// 0x7d0000000000 and 0x7c0000000000), so that both fakes fit in one
// process.
#define DEV_BASE 0x7a0000000000ULL
#define WIN_BASE 0x790000000000ULL
#define EXPORT __attribute__((visibility("hidden")))
#define EXPORT_CTL __attribute__((visibility("default")))
#include "fake_cuda.c"

#define HIP_EXPORT __attribute__((visibility("default")))

typedef int hipError_t;

// hipMemoryType (ROCm 6).
enum { hipMemoryTypeUnregistered = 0, hipMemoryTypeHost = 1, hipMemoryTypeDevice = 2, hipMemoryTypeManaged = 3 };

// hipDeviceAttribute_t ordinals kvferry reads.
enum {
	hipDeviceAttributeComputeCapabilityMajor = 23,
	hipDeviceAttributeComputeCapabilityMinor = 61,
	hipDeviceAttributePciBusId = 67,
	hipDeviceAttributePciDeviceId = 68,
	hipDeviceAttributePciDomainID = 69,
	hipDeviceAttributeUnifiedAddressing = 85,
	hipDeviceAttributeVirtualMemoryManagementSupported = 89,
};

typedef struct {
	int type;
	int device;
	void *devicePointer;
	void *hostPointer;
	int isManaged;
	unsigned allocationFlags;
} hipPointerAttribute_t;

static __thread int tls_hip_dev;

// with_dev runs the CUDA call expression with the thread's current device's
// primary context pushed.
#define WITH_DEV(call)                                       \
	do {                                                     \
		struct fctx *_c;                                     \
		int _rc = cuDevicePrimaryCtxRetain(&_c, tls_hip_dev); \
		if (_rc) return _rc;                                 \
		_rc = cuCtxPushCurrent_v2(_c);                       \
		if (_rc) return _rc;                                 \
		_rc = (call);                                        \
		struct fctx *_old;                                   \
		cuCtxPopCurrent_v2(&_old);                           \
		return _rc;                                          \
	} while (0)

// Retaining a primary context counts a reference that the fake never
// needs back (the HIP runtime keeps one context per device for the
// process); WITH_DEV retains on every call, which the fake allows.

HIP_EXPORT hipError_t hipInit(unsigned int flags) {
	FAULT("hipInit");
	return cuInit(flags);
}

// hip_version is the HIP_VERSION the fake reports: ROCm 6.2's, or the
// one FAKEHIP_VERSION gives (70100000 and up: ROCm 7.1's import of an fd
// by value).
static int hip_version(void) {
	const char *s = getenv("FAKEHIP_VERSION");
	return s && *s ? atoi(s) : 60241134;
}

HIP_EXPORT hipError_t hipRuntimeGetVersion(int *v) {
	FAULT("hipRuntimeGetVersion");
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	*v = hip_version();
	return 0;
}

HIP_EXPORT const char *hipGetErrorName(hipError_t e) {
	const char *s = err_name(e);
	static const char unknown[] = "hipErrorUnknown";
	return s ? s : unknown;
}

HIP_EXPORT hipError_t hipGetDeviceCount(int *n) {
	FAULT("hipGetDeviceCount");
	return cuDeviceGetCount(n);
}

HIP_EXPORT hipError_t hipSetDevice(int dev) {
	FAULT("hipSetDevice");
	NEED_INIT();
	int rc = check_dev(dev);
	if (rc) return rc;
	tls_hip_dev = dev;
	return 0;
}

HIP_EXPORT hipError_t hipGetDevice(int *dev) {
	if (!dev) return CUDA_ERROR_INVALID_VALUE;
	*dev = tls_hip_dev;
	return 0;
}

HIP_EXPORT hipError_t hipDeviceGetAttribute(int *v, int attr, int dev) {
	FAULT("hipDeviceGetAttribute");
	int cu;
	switch (attr) {
	case hipDeviceAttributeComputeCapabilityMajor: cu = 75; break;
	case hipDeviceAttributeComputeCapabilityMinor: cu = 76; break;
	case hipDeviceAttributePciBusId: cu = 33; break;
	case hipDeviceAttributePciDeviceId: cu = 34; break;
	case hipDeviceAttributePciDomainID: cu = 50; break;
	case hipDeviceAttributeUnifiedAddressing: cu = 41; break;
	case hipDeviceAttributeVirtualMemoryManagementSupported:
#ifdef FAKEHIP_NO_VMM
		if (!v) return CUDA_ERROR_INVALID_VALUE;
		*v = 0;
		return check_dev(dev);
#else
		cu = 102;
		break;
#endif
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return cuDeviceGetAttribute(v, cu, dev);
}

HIP_EXPORT hipError_t hipDeviceGetName(char *name, int len, int dev) { return cuDeviceGetName(name, len, dev); }

HIP_EXPORT hipError_t hipDeviceGetPCIBusId(char *s, int len, int dev) { return cuDeviceGetPCIBusId(s, len, dev); }

HIP_EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, int dev) { return cuDeviceTotalMem_v2(bytes, dev); }

HIP_EXPORT hipError_t hipDeviceCanAccessPeer(int *can, int dev, int peer) { return cuDeviceCanAccessPeer(can, dev, peer); }

HIP_EXPORT hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags) {
	FAULT("hipDeviceEnablePeerAccess");
	struct fctx *pc;
	int rc = cuDevicePrimaryCtxRetain(&pc, peer);
	if (rc) return rc;
	WITH_DEV(cuCtxEnablePeerAccess(pc, flags));
}

// ---- memory ----

HIP_EXPORT hipError_t hipMalloc(void **p, size_t n) {
	FAULT("hipMalloc");
	if (!p) return CUDA_ERROR_INVALID_VALUE;
	WITH_DEV(cuMemAlloc_v2((CUdeviceptr *)p, n));
}

HIP_EXPORT hipError_t hipFree(void *p) {
	FAULT("hipFree");
	if (!p) return 0;
	WITH_DEV(cuMemFree_v2((CUdeviceptr)p));
}

HIP_EXPORT hipError_t hipMallocManaged(void **p, size_t n, unsigned int flags) {
	FAULT("hipMallocManaged");
	if (!p) return CUDA_ERROR_INVALID_VALUE;
	WITH_DEV(cuMemAllocManaged((CUdeviceptr *)p, n, flags ? flags : 1));
}

HIP_EXPORT hipError_t hipHostMalloc(void **p, size_t n, unsigned int flags) {
	FAULT("hipHostMalloc");
	WITH_DEV(cuMemHostAlloc(p, n, flags));
}

HIP_EXPORT hipError_t hipHostFree(void *p) {
	FAULT("hipHostFree");
	WITH_DEV(cuMemFreeHost(p));
}

HIP_EXPORT hipError_t hipHostRegister(void *p, size_t n, unsigned int flags) {
	FAULT("hipHostRegister");
	WITH_DEV(cuMemHostRegister_v2(p, n, flags));
}

HIP_EXPORT hipError_t hipHostUnregister(void *p) {
	FAULT("hipHostUnregister");
	WITH_DEV(cuMemHostUnregister(p));
}

HIP_EXPORT hipError_t hipMemGetAddressRange(void **base, size_t *size, void *p) {
	FAULT("hipMemGetAddressRange");
	return cuMemGetAddressRange_v2((CUdeviceptr *)base, size, (CUdeviceptr)p);
}

// hipPointerGetAttributes answers for any pointer: unknown (pageable host)
// memory is hipMemoryTypeUnregistered with hipSuccess, as ROCm 6 does.
HIP_EXPORT hipError_t hipPointerGetAttributes(hipPointerAttribute_t *a, const void *p) {
	FAULT("hipPointerGetAttributes");
	if (!a) return CUDA_ERROR_INVALID_VALUE;
	unsigned int memtype = 0, managed = 0;
	int ordinal = -1;
	unsigned long long devp = 0;
	void *hostp = NULL;
	int attrs[5] = {2, 9, 8, 3, 4}; // MEMORY_TYPE, DEVICE_ORDINAL, IS_MANAGED, DEVICE_POINTER, HOST_POINTER
	void *data[5] = {&memtype, &ordinal, &managed, &devp, &hostp};
	int rc = cuPointerGetAttributes(5, attrs, data, (CUdeviceptr)p);
	if (rc) return rc;
	memset(a, 0, sizeof *a);
	a->device = ordinal;
	a->isManaged = managed != 0;
	switch (memtype) {
	case 1: a->type = hipMemoryTypeHost; break;
	case 2: a->type = managed ? hipMemoryTypeManaged : hipMemoryTypeDevice; break;
	default: a->type = hipMemoryTypeUnregistered; a->device = -1; break;
	}
	a->devicePointer = (void *)(uintptr_t)devp;
	a->hostPointer = hostp;
	return 0;
}

HIP_EXPORT hipError_t hipMemset(void *p, int v, size_t n) {
	FAULT("hipMemset");
	WITH_DEV(cuMemsetD8_v2((CUdeviceptr)p, (unsigned char)v, n));
}

// hipMemcpy and hipMemcpyAsync take any kind; with unified addressing the
// fake classifies both ends itself (hipMemcpyDefault, 4).
HIP_EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
	FAULT("hipMemcpy");
	if (kind < 0 || kind > 4) return CUDA_ERROR_INVALID_VALUE;
	WITH_DEV(cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n));
}

HIP_EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, struct fstream *s) {
	FAULT("hipMemcpyAsync");
	if (kind < 0 || kind > 4) return CUDA_ERROR_INVALID_VALUE;
	WITH_DEV(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, s));
}

// ---- streams, events ----

HIP_EXPORT hipError_t hipStreamCreateWithFlags(struct fstream **s, unsigned int flags) {
	FAULT("hipStreamCreateWithFlags");
	WITH_DEV(cuStreamCreate(s, flags));
}

HIP_EXPORT hipError_t hipStreamDestroy(struct fstream *s) {
	FAULT("hipStreamDestroy");
	WITH_DEV(cuStreamDestroy_v2(s));
}

HIP_EXPORT hipError_t hipStreamSynchronize(struct fstream *s) {
	FAULT("hipStreamSynchronize");
	WITH_DEV(cuStreamSynchronize(s));
}

HIP_EXPORT hipError_t hipEventCreateWithFlags(struct fevent **e, unsigned int flags) {
	FAULT("hipEventCreateWithFlags");
	WITH_DEV(cuEventCreate(e, flags));
}

HIP_EXPORT hipError_t hipEventDestroy(struct fevent *e) {
	FAULT("hipEventDestroy");
	WITH_DEV(cuEventDestroy_v2(e));
}

HIP_EXPORT hipError_t hipEventRecord(struct fevent *e, struct fstream *s) {
	FAULT("hipEventRecord");
	WITH_DEV(cuEventRecord(e, s));
}

HIP_EXPORT hipError_t hipEventQuery(struct fevent *e) {
	FAULT("hipEventQuery");
	WITH_DEV(cuEventQuery(e));
}

HIP_EXPORT hipError_t hipEventSynchronize(struct fevent *e) {
	FAULT("hipEventSynchronize");
	WITH_DEV(cuEventSynchronize(e));
}

HIP_EXPORT hipError_t hipStreamWaitEvent(struct fstream *s, struct fevent *e, unsigned int flags) {
	FAULT("hipStreamWaitEvent");
	WITH_DEV(cuStreamWaitEvent(s, e, flags));
}

HIP_EXPORT hipError_t hipLaunchHostFunc(struct fstream *s, CUhostFn fn, void *arg) {
	FAULT("hipLaunchHostFunc");
	WITH_DEV(cuLaunchHostFunc(s, fn, arg));
}

// ---- legacy IPC ----

HIP_EXPORT hipError_t hipIpcGetMemHandle(CUipcMemHandle *h, void *p) {
	FAULT("hipIpcGetMemHandle");
	WITH_DEV(cuIpcGetMemHandle(h, (CUdeviceptr)p));
}

HIP_EXPORT hipError_t hipIpcOpenMemHandle(void **p, CUipcMemHandle h, unsigned int flags) {
	FAULT("hipIpcOpenMemHandle");
	WITH_DEV(cuIpcOpenMemHandle_v2((CUdeviceptr *)p, h, flags));
}

HIP_EXPORT hipError_t hipIpcCloseMemHandle(void *p) {
	FAULT("hipIpcCloseMemHandle");
	WITH_DEV(cuIpcCloseMemHandle((CUdeviceptr)p));
}

#ifndef FAKEHIP_NO_VMM
// ---- virtual memory management, dma-buf ----

HIP_EXPORT hipError_t hipMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option) {
	FAULT("hipMemGetAllocationGranularity");
	return cuMemGetAllocationGranularity(g, prop, option);
}

HIP_EXPORT hipError_t hipMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
	FAULT("hipMemCreate");
	WITH_DEV(cuMemCreate(h, size, prop, flags));
}

HIP_EXPORT hipError_t hipMemRelease(CUmemGenericAllocationHandle h) {
	FAULT("hipMemRelease");
	return cuMemRelease(h);
}

HIP_EXPORT hipError_t hipMemAddressReserve(void **p, size_t size, size_t align, void *addr, unsigned long long flags) {
	FAULT("hipMemAddressReserve");
	return cuMemAddressReserve((CUdeviceptr *)p, size, align, (CUdeviceptr)addr, flags);
}

HIP_EXPORT hipError_t hipMemAddressFree(void *p, size_t size) {
	FAULT("hipMemAddressFree");
	return cuMemAddressFree((CUdeviceptr)p, size);
}

HIP_EXPORT hipError_t hipMemMap(void *p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
	FAULT("hipMemMap");
	return cuMemMap((CUdeviceptr)p, size, offset, h, flags);
}

HIP_EXPORT hipError_t hipMemSetAccess(void *p, size_t size, const CUmemAccessDesc *desc, size_t count) {
	FAULT("hipMemSetAccess");
	return cuMemSetAccess((CUdeviceptr)p, size, desc, count);
}

HIP_EXPORT hipError_t hipMemUnmap(void *p, size_t size) {
	FAULT("hipMemUnmap");
	return cuMemUnmap((CUdeviceptr)p, size);
}

HIP_EXPORT hipError_t hipMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags) {
	FAULT("hipMemExportToShareableHandle");
	return cuMemExportToShareableHandle(out, h, type, flags);
}

// hipMemImportFromShareableHandle takes a POSIX fd as the version it
// reports does: by value cast to a pointer from 7.1 on, before that a
// pointer to the int holding it (Mooncake's HIP transport passes it both
// ways by the runtime's version).
HIP_EXPORT hipError_t hipMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
	FAULT("hipMemImportFromShareableHandle");
	if (type == HANDLE_POSIX_FD && hip_version() < 70100000) {
		if (!os) return CUDA_ERROR_INVALID_VALUE;
		os = (void *)(intptr_t)*(const int *)os;
	}
	return cuMemImportFromShareableHandle(h, os, type);
}

HIP_EXPORT hipError_t hipMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
	FAULT("hipMemRetainAllocationHandle");
	return cuMemRetainAllocationHandle(h, addr);
}

HIP_EXPORT hipError_t hipMemGetHandleForAddressRange(void *out, void *p, size_t size, int type, unsigned long long flags) {
	FAULT("hipMemGetHandleForAddressRange");
	WITH_DEV(cuMemGetHandleForAddressRange(out, (CUdeviceptr)p, size, type, flags));
}
#endif
