/* cuda_app.h - the C and C++ suites' view of the fake CUDA driver
 * (tests/fakecuda), used as a CUDA application uses libcuda: dlopen'ed by
 * path (the same file the library loads through KVFERRY_CUDA_LIB), with the
 * primary context of a device made current on the calling thread. A test
 * fixture: our own declarations, no cuda.h. The same code drives a real
 * libcuda.so.1 (make hw-check): the fake's own entry points are then NULL,
 * and `second` is the device the suites use as "another GPU" (1, or 0 on a
 * machine with one).
 *
 * The same view drives a HIP runtime (the fake libamdhip64.so of
 * fake_hip.c, or ROCm's), so that the suites' GPU cases run on either by
 * table: cuda_open takes a file without cuInit but with hipInit as HIP
 * (c->hip), and the fields then hold HIP calls behind the CUDA-shaped
 * signatures (a "context" is the device: hipSetDevice; copies are
 * hipMemcpy). One runtime a process, as in the library. */
#ifndef KVF_TEST_CUDA_APP_H
#define KVF_TEST_CUDA_APP_H
#include <stdint.h>
#include <stdlib.h>

#include "../c/kvf_test.h"

typedef struct {
    int (*init)(unsigned);
    int (*retain)(void **, int);
    int (*set_current)(void *);
    int (*alloc)(uint64_t *, size_t);
    int (*free)(uint64_t);
    int (*h2d)(uint64_t, const void *, size_t);
    int (*d2h)(void *, uint64_t, size_t);
    int (*device_count)(int *);
    void *(*backing)(uint64_t); /* the fake's only; NULL on a real driver */
    int (*count)(int);          /* the fake's only; NULL on a real driver */
    int ndev;                   /* devices the driver reports */
    int second;                 /* "another device": 1, or 0 with one GPU */
    int dev; /* device current on the thread that called cuda_current, -1 none */
    int hip; /* the file is a HIP runtime (libamdhip64) */
} cuda_app;

/* The HIP runtime's calls behind cuda_app's CUDA-shaped fields (one HIP
 * runtime a process). */
static int (*cuda_app_hip_set_device)(int);
static int (*cuda_app_hip_malloc)(void **, size_t);
static int (*cuda_app_hip_free)(void *);
static int (*cuda_app_hip_memcpy)(void *, const void *, size_t, int);
static inline int cuda_app_hip_retain(void **ctx, int dev) {
    *ctx = (void *)(intptr_t)(dev + 1);
    return 0;
}
static inline int cuda_app_hip_set_current(void *ctx) { return cuda_app_hip_set_device((int)(intptr_t)ctx - 1); }
static inline int cuda_app_hip_alloc(uint64_t *p, size_t n) {
    void *v = NULL;
    int rc = cuda_app_hip_malloc(&v, n);
    *p = (uint64_t)(uintptr_t)v;
    return rc;
}
static inline int cuda_app_hip_free_dev(uint64_t p) { return cuda_app_hip_free((void *)(uintptr_t)p); }
/* hipMemcpyDefault (4): the runtime tells the kinds by address. */
static inline int cuda_app_hip_h2d(uint64_t dst, const void *src, size_t n) {
    return cuda_app_hip_memcpy((void *)(uintptr_t)dst, src, n, 4);
}
static inline int cuda_app_hip_d2h(void *dst, uint64_t src, size_t n) {
    return cuda_app_hip_memcpy(dst, (const void *)(uintptr_t)src, n, 4);
}

/* cuda_sym is the driver's function name; the program exits (status 2)
 * where the driver lacks it. */
static inline void *cuda_sym(void *h, const char *name) {
    void *p = kvf_dl_sym(h, name);
    if (!p) exit(2);
    return p;
}

/* cuda_fake reports whether c drives the fake driver. */
static inline int cuda_fake(const cuda_app *c) { return c->backing != NULL; }

/* cuda_open loads the driver at path and initializes it. */
static inline int cuda_open(cuda_app *c, const char *path) {
    void *h = kvf_dl_open(path, 0);
    if (!h) return -1;
    c->hip = !dlsym(h, "cuInit") && dlsym(h, "hipInit");
    if (c->hip) {
        *(void **)&c->init = cuda_sym(h, "hipInit");
        *(void **)&c->device_count = cuda_sym(h, "hipGetDeviceCount");
        *(void **)&cuda_app_hip_set_device = cuda_sym(h, "hipSetDevice");
        *(void **)&cuda_app_hip_malloc = cuda_sym(h, "hipMalloc");
        *(void **)&cuda_app_hip_free = cuda_sym(h, "hipFree");
        *(void **)&cuda_app_hip_memcpy = cuda_sym(h, "hipMemcpy");
        c->retain = cuda_app_hip_retain;
        c->set_current = cuda_app_hip_set_current;
        c->alloc = cuda_app_hip_alloc;
        c->free = cuda_app_hip_free_dev;
        c->h2d = cuda_app_hip_h2d;
        c->d2h = cuda_app_hip_d2h;
    } else {
        *(void **)&c->init = cuda_sym(h, "cuInit");
        *(void **)&c->retain = cuda_sym(h, "cuDevicePrimaryCtxRetain");
        *(void **)&c->set_current = cuda_sym(h, "cuCtxSetCurrent");
        *(void **)&c->alloc = cuda_sym(h, "cuMemAlloc_v2");
        *(void **)&c->free = cuda_sym(h, "cuMemFree_v2");
        *(void **)&c->h2d = cuda_sym(h, "cuMemcpyHtoD_v2");
        *(void **)&c->d2h = cuda_sym(h, "cuMemcpyDtoH_v2");
        *(void **)&c->device_count = cuda_sym(h, "cuDeviceGetCount");
    }
    *(void **)&c->backing = dlsym(h, "fakecuda_backing");
    *(void **)&c->count = dlsym(h, "fakecuda_count");
    c->dev = -1;
    int rc = c->init(0);
    if (rc == 0) rc = c->device_count(&c->ndev);
    if (rc == 0 && c->ndev < 1) rc = 100; /* CUDA_ERROR_NO_DEVICE */
    c->second = c->ndev > 1 ? 1 : 0;
    return rc;
}

/* cuda_current makes dev's primary context current on this thread. */
static inline int cuda_current(cuda_app *c, int dev) {
    void *ctx = NULL;
    int rc = c->retain(&ctx, dev);
    if (rc == 0) rc = c->set_current(ctx);
    if (rc == 0) c->dev = dev;
    return rc;
}

/* cuda_malloc is cudaMalloc-style device memory of dev (0 on failure). */
static inline uint64_t cuda_malloc(cuda_app *c, int dev, size_t n) {
    uint64_t p = 0;
    if (cuda_current(c, dev) != 0 || c->alloc(&p, n) != 0) return 0;
    return p;
}
#endif
