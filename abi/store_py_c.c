// The public C functions of the "Python support" section of kvferry.h. Each
// checks the fork guard and its pointer arguments, then calls one hidden Go
// export (store_py_exports.go).
#include <stdlib.h>

#include "transfer_engine_c.h"
#include "store_c.h"
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define U(p) ((uintptr_t)(p))

int kvf_forked(void);

KVF_API int kvferry_engine_probe(transfer_engine_t engine, const char *peer_server_name) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    if (!engine || !peer_server_name) return KVFERRY_ERR_INVALID_ARGUMENT;
    return kvf_py_probe(U(engine), (char *)peer_server_name);
}

KVF_API int kvferry_segment_buffers(transfer_engine_t engine, segment_id_t segment_id,
                                    buffer_entry_t *out, size_t cap) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    if (!engine || (!out && cap > 0)) return KVFERRY_ERR_INVALID_ARGUMENT;
    return kvf_py_segment_buffers(U(engine), segment_id, out, cap);
}

KVF_API int kvferry_store_setup_with_engine(mooncake_store_t store, transfer_engine_t engine,
                                            uint64_t global_segment_size,
                                            uint64_t local_buffer_size, const char *protocol,
                                            const char *master_server_addr) {
    if (kvf_forked() || !store || !engine) return -1;
    return kvf_py_setup_with_engine(U(store), U(engine), global_segment_size, local_buffer_size,
                                    (char *)protocol, (char *)master_server_addr);
}

KVF_API int kvferry_store_setup_dummy(mooncake_store_t store, uint64_t mem_pool_size,
                                      uint64_t local_buffer_size, const char *server_address) {
    if (kvf_forked() || !store || !server_address) return -1;
    return kvf_store_setup_dummy(U(store), mem_pool_size, local_buffer_size, (char *)server_address);
}

KVF_API void *kvferry_host_mem_alloc(size_t size) {
    if (kvf_forked() || size == 0) return NULL;
    return kvf_host_mem_alloc(size);
}

KVF_API int kvferry_host_mem_free(void *ptr) {
    if (kvf_forked() || !ptr) return -1;
    return kvf_host_mem_free(ptr);
}

KVF_API int kvferry_store_master_addr(mooncake_store_t store, char *buf, size_t len) {
    if (kvf_forked() || !store) return -1;
    return kvf_py_master_addr(U(store), buf, len);
}

KVF_API int64_t kvferry_store_replica_desc(mooncake_store_t store, const char **keys,
                                           size_t count, char **json_out) {
    if (json_out) *json_out = NULL;
    if (kvf_forked() || !store || !json_out || (!keys && count > 0)) return -1;
    for (size_t i = 0; i < count; i++)
        if (!keys[i]) return -1;
    return kvf_py_replica_desc(U(store), (char **)keys, count, (void **)json_out);
}

KVF_API kvferry_store_queue_t kvferry_store_queue_create(mooncake_store_t store, int workers,
                                                         size_t depth) {
    if (kvf_forked() || !store) return NULL;
    return (kvferry_store_queue_t)kvf_py_queue_create(U(store), workers, depth);
}

KVF_API int kvferry_store_queue_fd(kvferry_store_queue_t queue) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    if (!queue) return -1;
    return kvf_py_queue_fd(U(queue));
}

KVF_API int kvferry_store_queue_submit(kvferry_store_queue_t queue, int op, uint64_t tag,
                                       const char *key, void *buffer, size_t size,
                                       const mooncake_replicate_config_t *config, int flags) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    if (!queue || !key) return -1;
    if ((op == KVFERRY_QOP_PUT || op == KVFERRY_QOP_GET_INTO) && !buffer && size > 0) return -1;
    return kvf_py_queue_submit(U(queue), op, tag, (char *)key, buffer, size,
                               (mooncake_replicate_config_t *)config, flags);
}

KVF_API int kvferry_store_queue_poll(kvferry_store_queue_t queue, uint64_t *tags, int64_t *results,
                                     void **data, size_t max) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    if (!queue || (max > 0 && (!tags || !results))) return -1;
    return kvf_py_queue_poll(U(queue), tags, results, data, max);
}

KVF_API void kvferry_store_queue_destroy(kvferry_store_queue_t queue) {
    if (kvf_forked() || !queue) return;
    kvf_py_queue_destroy(U(queue));
}
