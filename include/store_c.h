/*
 * store_c.h - the Mooncake Store C API, as implemented by kvferry.
 *
 * ABI-identical to Mooncake's mooncake-store/include/store_c.h: the same
 * names, types, struct layout and return conventions (specs/mooncake.md
 * §6.1), so a program built against Mooncake's header links and runs
 * against libkvferry.so. This text is kvferry's own.
 *
 * Return convention: every function returns -1 for a NULL store handle, a
 * NULL pointer argument it needs, or an internal failure; otherwise 0 (or a
 * count, size or flag where documented) on success and a negative Mooncake
 * store ErrorCode on failure (-704 OBJECT_NOT_FOUND, -200
 * NO_AVAILABLE_HANDLE, -706 OBJECT_HAS_LEASE, -600 INVALID_PARAMS, -900
 * RPC_FAIL, ...). Calls on a store that was created but not set up return
 * -600. In a child process created by fork() every call returns -1.
 *
 * Strings passed in are copied before the call returns; the caller may free
 * them afterwards. Data buffers are read or written only during the call.
 *
 * kvferry additions (upsert, batch remove, get into a malloc'ed buffer,
 * last error) are in kvferry.h.
 */
#ifndef MOONCAKE_STORE_C_H
#define MOONCAKE_STORE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque store handle. */
typedef void *mooncake_store_t;

/* Replication of a put. A NULL config means one replica and no pins. */
struct mooncake_replicate_config {
    size_t replica_num;              /* memory replicas, each on a different segment */
    int with_soft_pin;               /* non-zero: soft-pin the object */
    int with_hard_pin;               /* non-zero: never evict the object */
    const char **preferred_segments; /* segment names tried first (may be NULL) */
    size_t preferred_segments_count;
};
typedef struct mooncake_replicate_config mooncake_replicate_config_t;

/* ---- Lifecycle ---- */

/* Creates a store handle (not yet set up). Returns NULL on failure. */
mooncake_store_t mooncake_store_create();

/* Unmounts, unregisters, frees the memory and releases the handle. */
void mooncake_store_destroy(mooncake_store_t store);

/* Sets the store up: starts a transfer engine named local_hostname with the
 * metadata connection string metadata_server ("P2PHANDSHAKE", "http://...",
 * "etcd://..."), lends global_segment_size bytes to the store (0: none),
 * registers a local_buffer_size staging buffer (0: none), and connects to
 * master_server_addr ("host:port", "etcd://h1:2379;h2:2379" for HA, or ""
 * / "embedded" for a master inside this process). NULL protocol means
 * "tcp"; NULL master_server_addr means "127.0.0.1:50051". */
int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                         const char *metadata_server,
                         uint64_t global_segment_size,
                         uint64_t local_buffer_size, const char *protocol,
                         const char *device_name,
                         const char *master_server_addr);

/* Test helper: setup with "localhost:12345", etcd metadata at
 * 127.0.0.1:2379, a 1 GiB local buffer and the default master. */
int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
                            const char *device_name,
                            uint64_t mount_segment_size);

/* Returns 0 when healthy, 1 when not set up (or closed), 2 when the master
 * is unreachable. */
int mooncake_store_health_check(mooncake_store_t store);

/* ---- Put ---- */

/* Stores size bytes at value under key. An existing key is left unchanged
 * and 0 is returned (objects are immutable; see kvferry_store_upsert). */
int mooncake_store_put(mooncake_store_t store, const char *key,
                       const void *value, size_t size,
                       const mooncake_replicate_config_t *config);

/* As mooncake_store_put; a registered buffer is sent without a copy. */
int mooncake_store_put_from(mooncake_store_t store, const char *key,
                            void *buffer, size_t size,
                            const mooncake_replicate_config_t *config);

/* Puts count objects; results_out[i] receives 0 or a negative code for
 * keys[i]. Returns 0 when the call itself ran. */
int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys,
                                  void **buffers, const size_t *sizes,
                                  size_t count,
                                  const mooncake_replicate_config_t *config,
                                  int *results_out);

/* ---- Get ---- */

/* Reads the object under key into buffer (size bytes of room). Returns the
 * object size, or a negative code; a buffer smaller than the object is
 * -600 and nothing is written. */
int64_t mooncake_store_get_into(mooncake_store_t store, const char *key,
                                void *buffer, size_t size);

/* Reads count objects; results_out[i] receives the bytes read or a negative
 * code for keys[i]. Returns 0 when the call itself ran. */
int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys,
                                  void **buffers, const size_t *sizes,
                                  size_t count, int64_t *results_out);

/* ---- Existence, size, hostname ---- */

/* Returns 1 when key exists, 0 when not, or a negative code. A 1 grants a
 * read lease that keeps the object from removal and eviction. */
int mooncake_store_is_exist(mooncake_store_t store, const char *key);

/* results_out[i] receives 1, 0 or a negative code for keys[i]. */
int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys,
                                  size_t count, int *results_out);

/* Returns the size of the object under key, or a negative code. */
int64_t mooncake_store_get_size(mooncake_store_t store, const char *key);

/* Copies the client's name (its transfer-engine segment name, "host:port")
 * into buf_out. Returns 0, or -1 when buf_len <= the name's length. */
int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out,
                                size_t buf_len);

/* ---- Remove ---- */

/* Removes key; a leased object fails with -706 unless force is non-zero. */
int mooncake_store_remove(mooncake_store_t store, const char *key, int force);

/* Removes every object whose key matches pattern (RE2 syntax, unanchored
 * search). Returns the number removed, or a negative code. */
int64_t mooncake_store_remove_by_regex(mooncake_store_t store,
                                       const char *pattern, int force);

/* Removes every object (leased ones only with force). Returns the number
 * removed, or a negative code. */
int64_t mooncake_store_remove_all(mooncake_store_t store, int force);

/* ---- Buffer registration (zero-copy put_from / get_into) ---- */

int mooncake_store_register_buffer(mooncake_store_t store, void *buffer,
                                   size_t size);

int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_STORE_C_H */
