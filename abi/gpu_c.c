// The public C functions of kvferry.h for GPU memory. Each checks the fork
// guard and calls one hidden Go export; all logic is in Go.
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))

int kvf_forked(void);

KVF_API void *kvferry_cuda_malloc(ssize_t size, int device, void *stream) {
    (void)stream;
    if (kvf_forked() || size < 0) return NULL;
    return (void *)kvf_cuda_malloc((size_t)size, device);
}

KVF_API void kvferry_cuda_free(void *ptr, ssize_t size, int device, void *stream) {
    (void)size;
    (void)stream;
    if (kvf_forked() || !ptr) return;
    kvf_cuda_free((uintptr_t)ptr, device);
}

KVF_API void *mc_nvlink_malloc(ssize_t size, int device, void *stream) {
    return kvferry_cuda_malloc(size, device, stream);
}

KVF_API void mc_nvlink_free(void *ptr, ssize_t size, int device, void *stream) {
    kvferry_cuda_free(ptr, size, device, stream);
}

KVF_API int kvferry_cuda_probe(int device) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_cuda_probe(device, 0);
}

KVF_API int mc_probe_fabric_support(int device) {
    if (kvf_forked()) return -2;
    return kvf_cuda_probe(device, 1);
}

KVF_API int kvferry_transfer_on_stream(transfer_engine_t engine, void *stream, const char *target,
                                       void *const *buffers, const uint64_t *peer_addresses,
                                       const size_t *lengths, size_t n, int opcode) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_transfer_on_stream((uintptr_t)engine, (uintptr_t)stream, (char *)target, (uintptr_t *)buffers,
                                  (uint64_t *)peer_addresses, (size_t *)lengths, n, opcode);
}

KVF_API int kvferry_cuda_memcpy(void *dst, const void *src, size_t n) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_cuda_memcpy((uintptr_t)dst, (uintptr_t)src, n);
}

KVF_API int kvferry_memory_kind(const void *p, int *device) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_memory_kind((uintptr_t)p, device);
}
