// The public C functions of the "Store tiers and tasks" section of
// kvferry.h. Each checks the fork guard and its pointer arguments, then
// calls one hidden Go export (store_tier_exports.go).
#include <stdlib.h>

#include "store_c.h"
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define U(p) ((uintptr_t)(p))

int kvf_forked(void);

KVF_API int kvferry_store_set_ssd_offload(mooncake_store_t store, const char *path,
                                          uint64_t capacity_bytes) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_set_ssd_offload(U(store), (char *)path, capacity_bytes);
}

KVF_API int kvferry_store_set_drain(mooncake_store_t store, uint64_t grace_ms) {
    if (kvf_forked() || !store) return -1;
    return kvf_store_set_drain(U(store), grace_ms);
}

KVF_API int kvferry_store_create_copy_task(mooncake_store_t store, const char *key,
                                           const char **targets, size_t count, char *task_id,
                                           size_t task_id_len) {
    if (kvf_forked() || !store || !key || !task_id || (!targets && count > 0)) return -1;
    for (size_t i = 0; i < count; i++)
        if (!targets[i]) return -1;
    return kvf_store_create_copy_task(U(store), (char *)key, (char **)targets, count, task_id,
                                      task_id_len);
}

KVF_API int kvferry_store_create_move_task(mooncake_store_t store, const char *key,
                                           const char *source, const char *target, char *task_id,
                                           size_t task_id_len) {
    if (kvf_forked() || !store || !key || !source || !target || !task_id) return -1;
    return kvf_store_create_move_task(U(store), (char *)key, (char *)source, (char *)target,
                                      task_id, task_id_len);
}

KVF_API int kvferry_store_query_task(mooncake_store_t store, const char *task_id, int *type,
                                     int *status, int64_t *created_ms, int64_t *updated_ms,
                                     char *assigned_client, size_t assigned_len, char *message,
                                     size_t message_len) {
    if (kvf_forked() || !store || !task_id) return -1;
    return kvf_store_query_task(U(store), (char *)task_id, type, status, created_ms, updated_ms,
                                assigned_client, assigned_len, message, message_len);
}

KVF_API int kvferry_store_publish(mooncake_store_t store, const char *key, const void *value,
                                  size_t size, uint64_t expected_version,
                                  const mooncake_replicate_config_t *config,
                                  uint64_t *version_out) {
    if (kvf_forked() || !store || !key || !value || size == 0) return -1;
    return kvf_store_publish(U(store), (char *)key, (void *)value, size, expected_version,
                             (mooncake_replicate_config_t *)config, version_out);
}

KVF_API int64_t kvferry_store_get_versioned(mooncake_store_t store, const char *key,
                                            uint64_t min_version, uint64_t wait_ms,
                                            void **data_out, uint64_t *version_out) {
    if (data_out) *data_out = NULL;
    if (kvf_forked() || !store || !key || !data_out) return -1;
    return kvf_store_get_versioned(U(store), (char *)key, min_version, wait_ms, data_out,
                                   version_out);
}
