// The public C functions of the "Store ranges and sessions" section of
// kvferry.h. Each checks the fork guard and its pointer arguments, then
// calls one hidden Go export (store_ranges_exports.go).
#include <stdint.h>
#include <stdlib.h>

#include "store_c.h"
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define U(p) ((uintptr_t)(p))

int kvf_forked(void);

/* MAX_BATCH is the Go side's maxBatch (store_exports.go): a larger count
 * fails here, before the checks below walk that many entries of arrays a
 * garbage count does not describe. */
#define MAX_BATCH ((size_t)1 << 22)

/* check_keys: count keys (at most MAX_BATCH), none NULL (and no NULL group
 * id). */
static int check_keys(const char **keys, size_t count, const char **group_ids) {
    if (count == 0) return 0;
    if (count > MAX_BATCH || !keys) return -1;
    for (size_t i = 0; i < count; i++)
        if (!keys[i] || (group_ids && !group_ids[i])) return -1;
    return 0;
}

/* check_ranges: keys as check_keys, range_counts present, and the three
 * range arrays present when there are ranges. */
static int check_ranges(const char **keys, size_t count, void **addrs, const uint64_t *offsets,
                        const uint64_t *sizes, const size_t *range_counts) {
    if (count == 0) return 0;
    if (check_keys(keys, count, NULL) != 0 || !range_counts) return -1;
    size_t total = 0;
    int some = 0;
    for (size_t i = 0; i < count; i++) {
        total += range_counts[i];
        some |= range_counts[i] != 0;
    }
    if (some && (!addrs || !offsets || !sizes)) return -1;
    return 0;
}

KVF_API int kvferry_store_get_into_ranges(mooncake_store_t store, const char **keys, size_t count,
                                          void **addrs, const uint64_t *offsets,
                                          const uint64_t *sizes, const size_t *range_counts,
                                          int64_t *results_out) {
    if (kvf_forked() || !store || !results_out) return -1;
    if (check_ranges(keys, count, addrs, offsets, sizes, range_counts) != 0) return -1;
    return kvf_store_get_into_ranges(U(store), (char **)keys, count, addrs, (uint64_t *)offsets,
                                     (uint64_t *)sizes, (size_t *)range_counts, results_out);
}

KVF_API int kvferry_store_get_session_start(mooncake_store_t store, const char **keys,
                                            size_t count, int *results_out) {
    if (kvf_forked() || !store || (!results_out && count > 0)) return -1;
    if (check_keys(keys, count, NULL) != 0) return -1;
    return kvf_store_get_session_start(U(store), (char **)keys, count, results_out);
}

KVF_API int kvferry_store_get_session_ranges(mooncake_store_t store, const char **keys,
                                             size_t count, void **addrs, const uint64_t *offsets,
                                             const uint64_t *sizes, const size_t *range_counts,
                                             int64_t *results_out) {
    if (kvf_forked() || !store || (!results_out && count > 0)) return -1;
    if (check_ranges(keys, count, addrs, offsets, sizes, range_counts) != 0) return -1;
    return kvf_store_get_session_ranges(U(store), (char **)keys, count, addrs, (uint64_t *)offsets,
                                        (uint64_t *)sizes, (size_t *)range_counts, results_out);
}

KVF_API int kvferry_store_get_session_end(mooncake_store_t store, const char **keys,
                                          size_t count) {
    if (kvf_forked() || !store) return -1;
    if (check_keys(keys, count, NULL) != 0) return -1;
    return kvf_store_get_session_end(U(store), (char **)keys, count);
}

KVF_API int kvferry_store_put_session_start(mooncake_store_t store, const char **keys,
                                            size_t count, const uint64_t *sizes,
                                            const mooncake_replicate_config_t *config,
                                            const char **group_ids, int *results_out) {
    if (kvf_forked() || !store || (count > 0 && (!sizes || !results_out))) return -1;
    if (check_keys(keys, count, group_ids) != 0) return -1;
    return kvf_store_put_session_start(U(store), (char **)keys, count, (uint64_t *)sizes,
                                       (mooncake_replicate_config_t *)config, (char **)group_ids,
                                       results_out);
}

KVF_API int kvferry_store_put_session_ranges(mooncake_store_t store, const char **keys,
                                             size_t count, void **addrs, const uint64_t *offsets,
                                             const uint64_t *sizes, const size_t *range_counts,
                                             int64_t *results_out) {
    if (kvf_forked() || !store || (!results_out && count > 0)) return -1;
    if (check_ranges(keys, count, addrs, offsets, sizes, range_counts) != 0) return -1;
    return kvf_store_put_session_ranges(U(store), (char **)keys, count, addrs, (uint64_t *)offsets,
                                        (uint64_t *)sizes, (size_t *)range_counts, results_out);
}

KVF_API int kvferry_store_put_session_end(mooncake_store_t store, const char **keys, size_t count,
                                          int *results_out) {
    if (kvf_forked() || !store || (!results_out && count > 0)) return -1;
    if (check_keys(keys, count, NULL) != 0) return -1;
    return kvf_store_put_session_finish(U(store), (char **)keys, count, 0, results_out);
}

KVF_API int kvferry_store_put_session_revoke(mooncake_store_t store, const char **keys,
                                             size_t count, int *results_out) {
    if (kvf_forked() || !store || (!results_out && count > 0)) return -1;
    if (check_keys(keys, count, NULL) != 0) return -1;
    return kvf_store_put_session_finish(U(store), (char **)keys, count, 1, results_out);
}

KVF_API int kvferry_store_batch_replica_clear(mooncake_store_t store, const char **keys,
                                              size_t count, const char *segment_name,
                                              int *cleared_out) {
    if (kvf_forked() || !store || (count > 0 && !cleared_out)) return -1;
    if (check_keys(keys, count, NULL) != 0) return -1;
    return kvf_store_batch_replica_clear(U(store), (char **)keys, count, (char *)segment_name,
                                         cleared_out);
}
