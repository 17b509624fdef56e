// The public C functions of store_c.h and the store part of kvferry.h. Each
// checks the fork guard and the pointer arguments Mooncake checks (returning
// -1), then calls one hidden Go export (store_exports.go).
#include <stdlib.h>

#include "store_c.h"
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define S(s) ((uintptr_t)(s))

int kvf_forked(void);

/* ---- Lifecycle ---- */

KVF_API mooncake_store_t mooncake_store_create() {
    if (kvf_forked()) return NULL;
    return (mooncake_store_t)kvf_store_create();
}

KVF_API void mooncake_store_destroy(mooncake_store_t store) {
    if (kvf_forked() || !store) return;
    kvf_store_destroy(S(store));
}

KVF_API int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                                 const char *metadata_server, uint64_t global_segment_size,
                                 uint64_t local_buffer_size, const char *protocol,
                                 const char *device_name, const char *master_server_addr) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_setup(S(store), (char *)local_hostname, (char *)metadata_server,
                           global_segment_size, local_buffer_size, (char *)protocol,
                           (char *)device_name, (char *)master_server_addr);
}

KVF_API int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
                                    const char *device_name, uint64_t mount_segment_size) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_setup(S(store), (char *)"localhost:12345", (char *)"127.0.0.1:2379", mount_segment_size,
                           1ULL << 30, (char *)protocol, (char *)device_name, NULL);
}

KVF_API int mooncake_store_health_check(mooncake_store_t store) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_health(S(store));
}

/* ---- Put ---- */

KVF_API int mooncake_store_put(mooncake_store_t store, const char *key, const void *value,
                               size_t size, const mooncake_replicate_config_t *config) {
    if (kvf_forked() || !store || !key) return -1;
    if (!value && size > 0) return -1;
    return kvf_store_put(S(store), (char *)key, (void *)value, size,
                         (mooncake_replicate_config_t *)config, 0);
}

KVF_API int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer,
                                    size_t size, const mooncake_replicate_config_t *config) {
    if (kvf_forked() || !store || !key) return -1;
    if (!buffer && size > 0) return -1;
    return kvf_store_put(S(store), (char *)key, buffer, size,
                         (mooncake_replicate_config_t *)config, 0);
}

/* check_batch validates a batch's arrays as Mooncake does: a NULL key, or a
 * NULL buffer with a non-zero size, fails the whole call. */
static int check_batch(const char **keys, void **buffers, const size_t *sizes, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (!keys[i]) return -1;
        if (buffers && sizes && !buffers[i] && sizes[i] > 0) return -1;
    }
    return 0;
}

KVF_API int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys,
                                          void **buffers, const size_t *sizes, size_t count,
                                          const mooncake_replicate_config_t *config,
                                          int *results_out) {
    if (kvf_forked() || !store || !keys || !buffers || !sizes || !results_out) return -1;
    if (check_batch(keys, buffers, sizes, count) != 0) return -1;
    return kvf_store_batch_put(S(store), (char **)keys, buffers, (size_t *)sizes, count,
                               (mooncake_replicate_config_t *)config, results_out, 0);
}

/* check_multi validates a multi-buffer batch: no NULL key, group id or
 * buffer count array, and buffers and sizes present when there are any. */
static int check_multi(const char **keys, size_t count, void **buffers, const size_t *sizes,
                       const size_t *buffer_counts, const char **group_ids) {
    if (count == 0) return 0;
    if (!keys || !buffer_counts) return -1;
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (!keys[i] || (group_ids && !group_ids[i])) return -1;
        total += buffer_counts[i];
    }
    if (total > 0 && (!buffers || !sizes)) return -1;
    return 0;
}

KVF_API int kvferry_store_batch_put_from_multi(mooncake_store_t store, const char **keys,
                                               size_t count, void **buffers, const size_t *sizes,
                                               const size_t *buffer_counts,
                                               const mooncake_replicate_config_t *config,
                                               const char **group_ids, int upsert,
                                               int *results_out) {
    if (kvf_forked() || !store || !results_out) return -1;
    if (check_multi(keys, count, buffers, sizes, buffer_counts, group_ids) != 0) return -1;
    return kvf_store_batch_put_multi(S(store), (char **)keys, count, buffers, (size_t *)sizes,
                                     (size_t *)buffer_counts, (mooncake_replicate_config_t *)config,
                                     (char **)group_ids, upsert, results_out);
}

KVF_API int kvferry_store_batch_get_into_multi(mooncake_store_t store, const char **keys,
                                               size_t count, void **buffers, const size_t *sizes,
                                               const size_t *buffer_counts, int64_t *results_out) {
    if (kvf_forked() || !store || !results_out) return -1;
    if (check_multi(keys, count, buffers, sizes, buffer_counts, NULL) != 0) return -1;
    return kvf_store_batch_get_multi(S(store), (char **)keys, count, buffers, (size_t *)sizes,
                                     (size_t *)buffer_counts, results_out);
}

/* ---- Get ---- */

KVF_API int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
                                        size_t size) {
    if (kvf_forked() || !store || !key) return -1;
    if (!buffer && size > 0) return -1;
    return kvf_store_get_into(S(store), (char *)key, buffer, size);
}

KVF_API int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys,
                                          void **buffers, const size_t *sizes, size_t count,
                                          int64_t *results_out) {
    if (kvf_forked() || !store || !keys || !buffers || !sizes || !results_out) return -1;
    if (check_batch(keys, buffers, sizes, count) != 0) return -1;
    return kvf_store_batch_get_into(S(store), (char **)keys, buffers, (size_t *)sizes, count,
                                    results_out);
}

/* ---- Existence, size, hostname ---- */

KVF_API int mooncake_store_is_exist(mooncake_store_t store, const char *key) {
    if (kvf_forked() || !store || !key) return -1;
    return kvf_store_is_exist(S(store), (char *)key);
}

KVF_API int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys,
                                          size_t count, int *results_out) {
    if (kvf_forked() || !store || !keys || !results_out) return -1;
    if (check_batch(keys, NULL, NULL, count) != 0) return -1;
    return kvf_store_batch_is_exist(S(store), (char **)keys, count, results_out);
}

KVF_API int64_t mooncake_store_get_size(mooncake_store_t store, const char *key) {
    if (kvf_forked() || !store || !key) return -1;
    return kvf_store_get_size(S(store), (char *)key);
}

KVF_API int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len) {
    if (kvf_forked() || !store || !buf_out || buf_len == 0) return -1;
    return kvf_store_hostname(S(store), buf_out, buf_len);
}

/* ---- Remove ---- */

KVF_API int mooncake_store_remove(mooncake_store_t store, const char *key, int force) {
    if (kvf_forked() || !store || !key) return -1;
    return kvf_store_remove(S(store), (char *)key, force);
}

KVF_API int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern,
                                               int force) {
    if (kvf_forked() || !store || !pattern) return -1;
    return kvf_store_remove_regex(S(store), (char *)pattern, force);
}

KVF_API int64_t mooncake_store_remove_all(mooncake_store_t store, int force) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_remove_all(S(store), force);
}

/* ---- Buffer registration ---- */

KVF_API int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size) {
    if (kvf_forked() || !store || !buffer || size == 0) return -1;
    return kvf_store_register(S(store), buffer, size);
}

KVF_API int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer) {
    if (kvf_forked() || !store || !buffer) return -1;
    return kvf_store_unregister(S(store), buffer);
}

/* ---- kvferry.h store additions ---- */

KVF_API int kvferry_store_upsert(mooncake_store_t store, const char *key, const void *value,
                                 size_t size, const mooncake_replicate_config_t *config) {
    if (kvf_forked() || !store || !key) return -1;
    if (!value && size > 0) return -1;
    return kvf_store_put(S(store), (char *)key, (void *)value, size,
                         (mooncake_replicate_config_t *)config, 1);
}

KVF_API int kvferry_store_upsert_from(mooncake_store_t store, const char *key, void *buffer,
                                      size_t size, const mooncake_replicate_config_t *config) {
    if (kvf_forked() || !store || !key) return -1;
    if (!buffer && size > 0) return -1;
    return kvf_store_put(S(store), (char *)key, buffer, size,
                         (mooncake_replicate_config_t *)config, 1);
}

KVF_API int kvferry_store_batch_upsert_from(mooncake_store_t store, const char **keys,
                                            void **buffers, const size_t *sizes, size_t count,
                                            const mooncake_replicate_config_t *config,
                                            int *results_out) {
    if (kvf_forked() || !store || !keys || !buffers || !sizes || !results_out) return -1;
    if (check_batch(keys, buffers, sizes, count) != 0) return -1;
    return kvf_store_batch_put(S(store), (char **)keys, buffers, (size_t *)sizes, count,
                               (mooncake_replicate_config_t *)config, results_out, 1);
}

KVF_API int kvferry_store_batch_remove(mooncake_store_t store, const char **keys, size_t count,
                                       int force, int *results_out) {
    if (kvf_forked() || !store || !keys || !results_out) return -1;
    if (check_batch(keys, NULL, NULL, count) != 0) return -1;
    return kvf_store_batch_remove(S(store), (char **)keys, count, force, results_out);
}

KVF_API int64_t kvferry_store_get_alloc(mooncake_store_t store, const char *key,
                                        void **data_out) {
    if (data_out) *data_out = NULL;
    if (kvf_forked() || !store || !key || !data_out) return -1;
    return kvf_store_get_alloc(S(store), (char *)key, data_out);
}

KVF_API void kvferry_store_free(void *data) {
    /* Pure C: works even after fork, never enters Go. */
    free(data);
}

KVF_API int kvferry_store_set_tenant(mooncake_store_t store, const char *tenant_id) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_set_tenant(S(store), (char *)tenant_id);
}

KVF_API int kvferry_store_last_error(mooncake_store_t store, char *buf, size_t len) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_last_error(S(store), buf, len);
}
