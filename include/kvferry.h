/*
 * kvferry.h - kvferry's own C API, beside the Mooncake-compatible headers.
 *
 * These calls cover what the Mooncake headers cannot express: whole-batch
 * status in one call, a blocking wait with a deadline, cancellation, and
 * the diagnostics the Python, NIXL and TensorRT-LLM layers need. They take
 * the same handles as transfer_engine_c.h and store_c.h.
 *
 * Versioning: KVFERRY_API_VERSION grows by one whenever a function is added;
 * existing signatures never change. kvferry_api_version() reports the
 * version of the loaded library, so a caller can check what it may call.
 *
 * Return convention: 0 or a positive count on success, a negative KVFERRY_ERR_*
 * code on failure (the Mooncake ERR_* values where one exists).
 * Strings passed in are copied before the call returns.
 */
#ifndef KVFERRY_H
#define KVFERRY_H

#include <stddef.h>
#include <stdint.h>

#include "transfer_engine_c.h"
#include "store_c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVFERRY_API_VERSION 1

/* Error codes (negative). The first group has Mooncake's values. */
#define KVFERRY_OK 0
#define KVFERRY_ERR_INVALID_ARGUMENT (-1)
#define KVFERRY_ERR_TOO_MANY_REQUESTS (-2)
#define KVFERRY_ERR_ADDRESS_NOT_REGISTERED (-3)
#define KVFERRY_ERR_BATCH_BUSY (-4)
#define KVFERRY_ERR_DEVICE_NOT_FOUND (-6)
#define KVFERRY_ERR_ADDRESS_OVERLAPPED (-7)
#define KVFERRY_ERR_DNS (-101)
#define KVFERRY_ERR_SOCKET (-102)
#define KVFERRY_ERR_MALFORMED_JSON (-103)
#define KVFERRY_ERR_REJECT_HANDSHAKE (-104)
#define KVFERRY_ERR_METADATA (-200)
#define KVFERRY_ERR_ENDPOINT (-201)
#define KVFERRY_ERR_CONTEXT (-202)
#define KVFERRY_ERR_NOT_IMPLEMENTED (-303)
/* kvferry additions. */
#define KVFERRY_ERR_FORKED (-10)      /* called in a child after fork() */
#define KVFERRY_ERR_TIMEOUT (-400)    /* the deadline passed */
#define KVFERRY_ERR_CANCELED (-401)   /* the batch was canceled */
#define KVFERRY_ERR_TRANSFER (-402)   /* a transfer ended FAILED */
#define KVFERRY_ERR_CLOSED (-403)     /* the engine or store is closed */
#define KVFERRY_ERR_INTERNAL (-999)   /* a bug in kvferry (caught panic) */

/* Returns KVFERRY_API_VERSION of the loaded library. */
int kvferry_api_version(void);

/* Returns the library version as a static string, e.g. "0.1.0". */
const char *kvferry_version(void);

/* Creates an engine from option pairs (keys[i] = values[i]); unknown keys are
 * an error. Keys: "metadata" (connection string, default "P2PHANDSHAKE"),
 * "local_server_name" (default: first non-loopback IPv4, else 127.0.0.1),
 * "transport" ("auto", "tcp", "local", ...), "tcp_lanes", "slice_size",
 * "timeout_ms", "auto_discover" ("1"/"0", default "1"). Values not given
 * fall back to the MC_* / KVFERRY_* environment, then to the defaults.
 * Returns NULL on failure. */
transfer_engine_t kvferry_engine_create(const char *const *keys,
                                        const char *const *values, size_t n);

/* Returns the engine's RPC (handshake) port, or a negative code. */
int kvferry_engine_rpc_port(transfer_engine_t engine);

/* Copies the engine's segment name (the P2P connection string) into buf.
 * Returns the length of the name, or a negative code; a result >= len means
 * the buffer was too small and the copy was truncated (always NUL-ended). */
int kvferry_engine_segment_name(transfer_engine_t engine, char *buf,
                                size_t len);

/* Copies the text of the last error this engine recorded into buf (NUL-ended,
 * truncated to len). Returns the full length. */
int kvferry_engine_last_error(transfer_engine_t engine, char *buf, size_t len);

/* Aggregate status of a whole batch in one call. *state is STATUS_WAITING
 * while any task runs, STATUS_COMPLETED when all completed, STATUS_FAILED
 * (or STATUS_CANCELED / STATUS_TIMEOUT) once every task is terminal and one
 * did not complete. Terminal tasks count as observed, exactly as if
 * getTransferStatus had reported each, and a pending notification is sent.
 * Any of the out pointers may be NULL. Returns 0 or a negative code. */
int kvferry_batch_status(transfer_engine_t engine, batch_id_t batch_id,
                         int *state, uint64_t *transferred_bytes,
                         size_t *task_count);

/* Blocks until every task of the batch is terminal or timeout_ms passes
 * (timeout_ms < 0: the engine's configured transfer timeout). Fills *state
 * as kvferry_batch_status does. Returns 0 when the batch is terminal,
 * KVFERRY_ERR_TIMEOUT when the deadline passed first. Never spins. */
int kvferry_batch_wait(transfer_engine_t engine, batch_id_t batch_id,
                       int64_t timeout_ms, int *state);

/* Cancels the batch: requests not yet on the wire are dropped, requests in
 * flight are awaited (bounded by the transfer timeout), every unfinished task
 * ends STATUS_CANCELED. When it returns, the engine no longer touches the
 * batch's memory, and freeBatchID succeeds. Returns 0 or a negative code. */
int kvferry_batch_cancel(transfer_engine_t engine, batch_id_t batch_id);

/* Checks that [addr, addr+length) lies inside one buffer the segment
 * registered, as its cached descriptor says (refreshing it once if not).
 * Returns 0, KVFERRY_ERR_ADDRESS_NOT_REGISTERED, or another negative code. */
int kvferry_segment_check(transfer_engine_t engine, segment_id_t segment_id,
                          uint64_t addr, uint64_t length);

/* Copies the Prometheus text exposition of the library's private registry
 * into buf (may be NULL when len is 0). Returns the full size in bytes; call
 * again with a larger buffer when the result is >= len. */
int64_t kvferry_metrics_text(char *buf, size_t len);

/* ---- Store (handles of store_c.h; same return convention as store_c.h:
 * 0 or a count on success, -1 for a NULL handle or pointer, else a negative
 * Mooncake store ErrorCode) ---- */

/* Stores size bytes at value under key, replacing an existing object. */
int kvferry_store_upsert(mooncake_store_t store, const char *key,
                         const void *value, size_t size,
                         const mooncake_replicate_config_t *config);

/* As kvferry_store_upsert; a registered buffer is sent without a copy. */
int kvferry_store_upsert_from(mooncake_store_t store, const char *key,
                              void *buffer, size_t size,
                              const mooncake_replicate_config_t *config);

/* Upserts count objects; results_out[i] receives 0 or a negative code. */
int kvferry_store_batch_upsert_from(mooncake_store_t store, const char **keys,
                                    void **buffers, const size_t *sizes,
                                    size_t count,
                                    const mooncake_replicate_config_t *config,
                                    int *results_out);

/* Removes count keys in one master call; results_out[i] receives 0 or a
 * negative code (-706 for a leased key without force). */
int kvferry_store_batch_remove(mooncake_store_t store, const char **keys,
                               size_t count, int force, int *results_out);

/* Reads the object under key into memory allocated with malloc, stored in
 * *data_out (free it with kvferry_store_free). Returns the object size, or
 * a negative code (then *data_out is NULL). */
int64_t kvferry_store_get_alloc(mooncake_store_t store, const char *key,
                                void **data_out);

/* Frees memory returned by kvferry_store_get_alloc (NULL is harmless). */
void kvferry_store_free(void *data);

/* Copies the text of the last error this store recorded into buf
 * (NUL-ended, truncated to len). Returns the full length, or -1. */
int kvferry_store_last_error(mooncake_store_t store, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KVFERRY_H */
