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

#define KVFERRY_API_VERSION 10

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
 * "transport" ("auto", "tcp", "rdma", "local", ...), "tcp_lanes",
 * "slice_size", "timeout_ms", "rdma_devices" (comma-separated NIC names),
 * "auto_discover" ("1"/"0", default "1"). Values not given
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
 * getTransferStatus had reported each. A batch submitted with a notification
 * reads STATUS_WAITING until the peer has accepted the notification (its
 * completed tasks read STATUS_PENDING meanwhile), and STATUS_FAILED if it
 * could not be delivered.
 * Any of the out pointers may be NULL. Returns 0 or a negative code. */
int kvferry_batch_status(transfer_engine_t engine, batch_id_t batch_id,
                         int *state, uint64_t *transferred_bytes,
                         size_t *task_count);

/* Blocks until every task of the batch is terminal or timeout_ms passes
 * (timeout_ms < 0: the engine's configured transfer timeout). Fills *state
 * as kvferry_batch_status does. Returns 0 when the batch is terminal,
 * KVFERRY_ERR_TIMEOUT when the deadline passed first. Polls for up to
 * KVFERRY_SPIN_US before it parks (never with KVFERRY_SPIN_US=-1). */
int kvferry_batch_wait(transfer_engine_t engine, batch_id_t batch_id,
                       int64_t timeout_ms, int *state);

/* (API version 8.) Declares that the caller calls kvferry_batch_wait on the
 * batch right after each of its submissions that follow: the engine may
 * then do the batch's I/O on the calling thread (over TCP the submit call
 * writes a large request's last stripe itself, and the wait reads a large
 * answer itself, blocked in the kernel), with no hand-off to the
 * engine's own threads. A batch declared so and then not waited for still
 * completes, a few milliseconds later. Call it after allocateBatchID and
 * before submitTransfer. Returns 0 or a negative code (unknown batch). */
int kvferry_batch_await(transfer_engine_t engine, batch_id_t batch_id);

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

/* Stores, for each of count keys, the concatenation of its buffers, in
 * order, as one object (Mooncake's batch_put_from_multi_buffers): key i owns
 * buffer_counts[i] consecutive entries of buffers and sizes (so these hold
 * the sum of buffer_counts entries; empty buffers are skipped). Buffers the
 * store registered are gathered by the transfer engine straight into the
 * replicas, with no copy. group_ids is NULL or one lifecycle group per key
 * (Mooncake's ReplicateConfig.group_ids; "" leaves a key ungrouped).
 * upsert nonzero replaces existing objects. results_out[i] receives 0 or a
 * negative code. Returns 0, or -1 for a NULL handle, key, group id or
 * array. */
int kvferry_store_batch_put_from_multi(mooncake_store_t store, const char **keys,
                                       size_t count, void **buffers,
                                       const size_t *sizes,
                                       const size_t *buffer_counts,
                                       const mooncake_replicate_config_t *config,
                                       const char **group_ids, int upsert,
                                       int *results_out);

/* Reads each of count keys and scatters its bytes over its buffers, in
 * order (buffer_counts as above; Mooncake's batch_get_into_multi_buffers),
 * straight from the replica into registered buffers. results_out[i]
 * receives the object size, or a negative code: -600 when the key's
 * buffers hold less than its object (nothing is read). Returns 0 or -1. */
int kvferry_store_batch_get_into_multi(mooncake_store_t store, const char **keys,
                                       size_t count, void **buffers,
                                       const size_t *sizes,
                                       const size_t *buffer_counts,
                                       int64_t *results_out);

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

/* Sets the tenant whose namespace every key of store lives in (Mooncake's
 * setup(..., tenant_id=...); NULL or "" is "default"): stores of different
 * tenants on one master never see each other's objects. Call it before
 * mooncake_store_setup. Returns 0; -600 (INVALID_PARAMS) for an id that
 * starts with '_', holds a control character or exceeds 256 bytes, or for
 * a store already set up; -1 for a NULL handle. */
int kvferry_store_set_tenant(mooncake_store_t store, const char *tenant_id);

/* Copies the text of the last error this store recorded into buf
 * (NUL-ended, truncated to len). Returns the full length, or -1. */
int kvferry_store_last_error(mooncake_store_t store, char *buf, size_t len);

/* ---- Python support (python/kvferry; API version 2). Same return
 * conventions as the sections above: engine calls return 0 or a negative
 * KVFERRY_ERR_* code, store calls 0 / a count or a negative store
 * ErrorCode (-1 for a NULL handle or pointer). ---- */

/* Sends a Probe over the socket RPC to the endpoint of peer_server_name
 * (Mooncake's send_probe). Returns 0 when the peer answered, else a
 * negative code; bounded by the engine's metadata timeout. */
int kvferry_engine_probe(transfer_engine_t engine, const char *peer_server_name);

/* Copies up to cap entries describing the buffers a segment registered
 * (as its cached descriptor says; LOCAL_SEGMENT: this engine's own) into
 * out. Returns the total number of buffers (may exceed cap), or a negative
 * code. */
int kvferry_segment_buffers(transfer_engine_t engine, segment_id_t segment_id,
                            buffer_entry_t *out, size_t cap);

/* As mooncake_store_setup, but the store uses engine (created with
 * createTransferEngine or kvferry_engine_create) instead of starting its
 * own; its segment name is the engine's. The engine must outlive the
 * store: destroy the store first. */
int kvferry_store_setup_with_engine(mooncake_store_t store,
                                    transfer_engine_t engine,
                                    uint64_t global_segment_size,
                                    uint64_t local_buffer_size,
                                    const char *protocol,
                                    const char *master_server_addr);

/* Standalone storage mode (Mooncake's setup_dummy): sets store up as a
 * dummy client of the real client process that server_address ("host:port",
 * the port it serves; see kvferry-client) names on this host. Every later
 * call on store runs on the real client: calls on memory of buffers from
 * kvferry_host_mem_alloc registered with mooncake_store_register_buffer
 * carry only addresses (the real client maps the same pages), others carry
 * the bytes. local_buffer_size bytes of shared staging memory serve calls
 * on other memory; mem_pool_size is accepted as Mooncake's and unused.
 * Returns 0, -900 (RPC_FAIL) when no real client serves that port, or
 * another negative code. */
int kvferry_store_setup_dummy(mooncake_store_t store, uint64_t mem_pool_size,
                              uint64_t local_buffer_size,
                              const char *server_address);

/* Allocates size bytes of zeroed host memory shared through a memfd
 * (Mooncake's MooncakeHostMemAllocator), which a dummy client can share
 * with its real client; NULL on failure. */
void *kvferry_host_mem_alloc(size_t size);

/* Frees memory from kvferry_host_mem_alloc: 0, or -1 for a pointer it did
 * not return. */
int kvferry_host_mem_free(void *ptr);

/* Copies the gRPC address of the master the store uses ("127.0.0.1:port"
 * for an embedded master, which other processes can pass as their
 * master_server_addr) into buf. Returns the full length, or a negative
 * code; a result >= len means the copy was truncated. */
int kvferry_store_master_addr(mooncake_store_t store, char *buf, size_t len);

/* Looks up the replicas of count keys in one master call and stores a
 * malloc'ed, NUL-ended JSON array in *json_out (free it with
 * kvferry_store_free): one element per key,
 * {"code":0,"size":N,"replicas":[{"segment_name":"host:port",
 * "address":A,"size":N,"status":"COMPLETE","protocol":"tcp"}]}, where code
 * is the key's ErrorCode (-704 when absent). Like a get, the answer grants
 * a read lease. Returns the JSON length, or a negative code (then
 * *json_out is NULL). */
int64_t kvferry_store_replica_desc(mooncake_store_t store, const char **keys,
                                   size_t count, char **json_out);

/* An asynchronous completion queue over one store: a fixed pool of worker
 * threads runs submitted calls; finished calls are collected with
 * kvferry_store_queue_poll. An eventfd becomes readable whenever
 * completions are waiting, so an event loop (asyncio add_reader) can wait
 * without a thread per call. */
typedef void *kvferry_store_queue_t;

/* Operations of kvferry_store_queue_submit; the result is what the
 * matching synchronous call returns. */
#define KVFERRY_QOP_PUT 1       /* put / put_from of buffer[0..size)        */
#define KVFERRY_QOP_GET_INTO 2  /* get_into buffer (size bytes of room)     */
#define KVFERRY_QOP_GET_ALLOC 3 /* get into malloc'ed memory (poll's data)  */
#define KVFERRY_QOP_IS_EXIST 4  /* 1 / 0 / negative                         */
#define KVFERRY_QOP_GET_SIZE 5  /* size / negative                          */
#define KVFERRY_QOP_REMOVE 6    /* 0 / negative                             */
/* Flags of kvferry_store_queue_submit. */
#define KVFERRY_QFLAG_UPSERT 1 /* PUT replaces an existing object */
#define KVFERRY_QFLAG_FORCE 2  /* REMOVE ignores leases            */

/* Creates a queue for store with workers threads (0: 16; at most 256) and
 * room for depth calls submitted but not yet polled (0: 4096). Returns
 * NULL on failure. */
kvferry_store_queue_t kvferry_store_queue_create(mooncake_store_t store,
                                                 int workers, size_t depth);

/* Returns the queue's eventfd (non-blocking; read 8 bytes to reset it), or
 * a negative code. The queue owns it. */
int kvferry_store_queue_fd(kvferry_store_queue_t queue);

/* Submits one call; tag comes back with its completion. key is copied;
 * buffer must stay valid until the completion has been polled. Returns 0,
 * KVFERRY_ERR_TOO_MANY_REQUESTS when depth calls are outstanding,
 * KVFERRY_ERR_CLOSED after destroy, or -1 for bad arguments. */
int kvferry_store_queue_submit(kvferry_store_queue_t queue, int op,
                               uint64_t tag, const char *key, void *buffer,
                               size_t size,
                               const mooncake_replicate_config_t *config,
                               int flags);

/* Moves up to max completions into tags[i], results[i] and data[i] (the
 * malloc'ed object of a GET_ALLOC, to free with kvferry_store_free; else
 * NULL; with data NULL such memory is freed at once). Never blocks.
 * Returns the number moved, or a negative code. */
int kvferry_store_queue_poll(kvferry_store_queue_t queue, uint64_t *tags,
                             int64_t *results, void **data, size_t max);

/* Stops the queue: waits for running calls (each bounded by the store's
 * timeouts), drops unpolled completions (freeing their data) and closes
 * the eventfd. */
void kvferry_store_queue_destroy(kvferry_store_queue_t queue);

/* ---- NIXL support ----
 * The calls the NIXL backend plugin (libplugin_KVFERRY.so, a symlink to this
 * library) is built on; any C or C++ program may use them too. A kvferry_nixl_t
 * is one NIXL "agent" on its own engine: it knows the other agents by name,
 * keeps per-buffer public data for the metadata exchange, and runs reusable
 * transfer requests.
 *
 * Unlike the rest of this header, these calls return nixl_status_t values
 * (KVFERRY_NIXL_*): 0 success, 1 in progress, negative errors. Names and
 * messages are (pointer, length) byte strings and may hold NUL bytes. */

typedef uint64_t kvferry_nixl_t;      /* an agent engine; 0 is never valid */
typedef uint64_t kvferry_nixl_md_t;   /* local registration or loaded buffer */
typedef uint64_t kvferry_nixl_xfer_t; /* a reusable transfer request */

#define KVFERRY_NIXL_IN_PROG 1
#define KVFERRY_NIXL_SUCCESS 0
#define KVFERRY_NIXL_ERR_NOT_POSTED (-1)
#define KVFERRY_NIXL_ERR_INVALID_PARAM (-2)
#define KVFERRY_NIXL_ERR_BACKEND (-3)
#define KVFERRY_NIXL_ERR_NOT_FOUND (-4)
#define KVFERRY_NIXL_ERR_MISMATCH (-5)
#define KVFERRY_NIXL_ERR_NOT_ALLOWED (-6)
#define KVFERRY_NIXL_ERR_REPOST_ACTIVE (-7)
#define KVFERRY_NIXL_ERR_UNKNOWN (-8)
#define KVFERRY_NIXL_ERR_NOT_SUPPORTED (-9)
#define KVFERRY_NIXL_ERR_REMOTE_DISCONNECT (-10)
#define KVFERRY_NIXL_ERR_CANCELED (-11)

/* Memory types (nixl_mem_t) and operations (nixl_xfer_op_t). */
#define KVFERRY_NIXL_DRAM 0
#define KVFERRY_NIXL_VRAM 1
#define KVFERRY_NIXL_READ 0  /* remote -> local */
#define KVFERRY_NIXL_WRITE 1 /* local -> remote */

/* One side of one transfer descriptor. md is the registration (local side) or
 * loaded remote buffer (remote side) that covers [addr, addr+len); 0 means
 * "none given", and the range is then checked against the engine's view. */
typedef struct kvferry_nixl_desc {
    uint64_t addr;
    uint64_t len;
    uint64_t dev_id;
    kvferry_nixl_md_t md;
} kvferry_nixl_desc_t;

/* A received notification. The strings point into the same allocation as the
 * array and are not NUL-terminated. */
typedef struct kvferry_nixl_notif {
    const char *agent;
    size_t agent_len;
    const char *msg;
    size_t msg_len;
} kvferry_nixl_notif_t;

/* Reports backend option i (0, 1, ...): copies its key and default value,
 * NUL-terminated and truncated, into the buffers. Returns 1, or 0 past the
 * last option. Options: "metadata", "local_server_name", "transport",
 * "tcp_lanes", "slice_size", "timeout_ms". */
int kvferry_nixl_option(size_t i, char *key, size_t key_len, char *value,
                        size_t value_len);

/* Fills mems with the supported memory types (up to cap); returns how many
 * there are. */
int kvferry_nixl_supported_mems(int *mems, size_t cap);

/* Creates the engine of agent `agent` from option pairs (keys of
 * kvferry_nixl_option; unknown keys are an error). progress_thread != 0 makes
 * the engine observe completions itself (notifications go out without the
 * caller polling); otherwise that happens in kvferry_nixl_xfer_check and
 * kvferry_nixl_get_notifs. progress_delay_us is accepted for NIXL's pthrDelay
 * and unused: the progress thread waits on events, never polls. */
int kvferry_nixl_create(const char *agent, size_t agent_len,
                        const char *const *keys, const char *const *values,
                        size_t n, int progress_thread,
                        uint64_t progress_delay_us, kvferry_nixl_t *out);

/* Destroys the engine: transfers still running are canceled, every handle of
 * the engine becomes invalid. A second call is harmless. */
void kvferry_nixl_destroy(kvferry_nixl_t nixl);

/* Tells the library the backend name NIXL created this backend under: NIXL
 * names a backend after its plugin's file name, so a copy or symlink of the
 * plugin under another name loads as another backend. A name other than
 * "KVFERRY" is logged once per name as a warning. */
void kvferry_nixl_backend_name(const char *name, size_t name_len);

/* Copies min(len, size) bytes of the connection info (the engine's segment
 * name) into buf and returns its size, or a negative status. */
int64_t kvferry_nixl_conn_info(kvferry_nixl_t nixl, char *buf, size_t len);

/* Records how to reach agent `agent` and opens its segment. Loading the same
 * info again succeeds and does nothing; different info is NOT_ALLOWED until
 * kvferry_nixl_disconnect. Loading one's own name is allowed. */
int kvferry_nixl_load_conn_info(kvferry_nixl_t nixl, const char *agent,
                                size_t agent_len, const char *info,
                                size_t info_len);

/* SUCCESS for one's own name and for agents with loaded info (connections
 * are made lazily), NOT_FOUND otherwise. */
int kvferry_nixl_connect(kvferry_nixl_t nixl, const char *agent,
                         size_t agent_len);

/* Forgets the agent's info and its cached segment. NOT_FOUND if unknown. */
int kvferry_nixl_disconnect(kvferry_nixl_t nixl, const char *agent,
                            size_t agent_len);

/* Registers [addr, addr+len) of memory type mem. Registering the same range
 * again, or a range inside a registered one, takes a reference. */
int kvferry_nixl_register(kvferry_nixl_t nixl, int mem, uint64_t addr,
                          uint64_t len, uint64_t dev_id,
                          kvferry_nixl_md_t *out);

/* Drops a registration (unregisters once the last reference goes). */
int kvferry_nixl_deregister(kvferry_nixl_t nixl, kvferry_nixl_md_t md);

/* Copies min(len, size) bytes of the registration's public data (what a peer
 * passes to kvferry_nixl_load_remote_md) into buf; returns its size, or a
 * negative status. */
int64_t kvferry_nixl_public_data(kvferry_nixl_t nixl, kvferry_nixl_md_t md,
                                 char *buf, size_t len);

/* Loads a buffer agent `agent` registered, from its public data: checked
 * against the agent's connection info and the descriptor, no network. */
int kvferry_nixl_load_remote_md(kvferry_nixl_t nixl, const char *agent,
                                size_t agent_len, int mem, uint64_t addr,
                                uint64_t len, uint64_t dev_id,
                                const char *blob, size_t blob_len,
                                kvferry_nixl_md_t *out);

/* Gives the remote-side handle of one's own registration md (intra-agent
 * transfers). */
int kvferry_nixl_load_local_md(kvferry_nixl_t nixl, kvferry_nixl_md_t md,
                               kvferry_nixl_md_t *out);

/* Drops a handle from kvferry_nixl_load_remote_md / _load_local_md. */
int kvferry_nixl_unload_md(kvferry_nixl_t nixl, kvferry_nixl_md_t md);

/* Creates a transfer request of n_local local and n_remote remote
 * descriptors (the counts and each pair's lengths must match) toward agent
 * `agent` (one's own name: intra-agent). Every descriptor is checked here. */
int kvferry_nixl_xfer_prep(kvferry_nixl_t nixl, int op, const char *agent,
                           size_t agent_len, const kvferry_nixl_desc_t *local,
                           size_t n_local, const kvferry_nixl_desc_t *remote,
                           size_t n_remote, kvferry_nixl_xfer_t *out);

/* Posts the request: the whole list in one call. Descriptors equal to the
 * prepared ones are not checked again. With has_notif, the target agent
 * receives (this agent, msg) exactly once, after the data is visible. A
 * request may be posted again once its previous post is complete
 * (REPOST_ACTIVE before that). Returns IN_PROG or an error. */
int kvferry_nixl_xfer_post(kvferry_nixl_t nixl, kvferry_nixl_xfer_t xfer,
                           int op, const kvferry_nixl_desc_t *local,
                           size_t n_local, const kvferry_nixl_desc_t *remote,
                           size_t n_remote, int has_notif, const char *msg,
                           size_t msg_len);

/* IN_PROG, SUCCESS or the error of the last post (NOT_POSTED before the
 * first); never blocks. A dead peer gives REMOTE_DISCONNECT. */
int kvferry_nixl_xfer_check(kvferry_nixl_t nixl, kvferry_nixl_xfer_t xfer);

/* Releases the request. A post still running is canceled first (bounded by
 * the transfer timeout; on failure the request stays valid and an error is
 * returned). A released handle is INVALID_PARAM. */
int kvferry_nixl_xfer_release(kvferry_nixl_t nixl, kvferry_nixl_xfer_t xfer);

/* Sends (this agent, msg) to agent `agent` now; to oneself it is queued
 * locally. */
int kvferry_nixl_gen_notif(kvferry_nixl_t nixl, const char *agent,
                           size_t agent_len, const char *msg, size_t msg_len);

/* Drains received notifications, oldest first, each returned once: *out is
 * one malloc'd block (free it with kvferry_nixl_free_notifs) or NULL when
 * *count is 0. */
int kvferry_nixl_get_notifs(kvferry_nixl_t nixl, kvferry_nixl_notif_t **out,
                            size_t *count);

/* Frees a block from kvferry_nixl_get_notifs (NULL is harmless). */
void kvferry_nixl_free_notifs(kvferry_nixl_notif_t *notifs);

/* Copies the text of the engine's last error into buf (NUL-ended,
 * truncated); returns its full length, or a negative status. */
int kvferry_nixl_last_error(kvferry_nixl_t nixl, char *buf, size_t len);

/* ---- TensorRT-LLM support ----
 * The calls behind createMooncakeTransferAgent (the TensorRT-LLM transfer
 * agent in libtensorrt_llm_mooncake_wrapper.so, a symlink to this library);
 * any C or C++ program may use them too. A kvferry_trtllm_t is one agent on
 * its own P2P engine: it knows the other agents by name, counts memory
 * registrations, and sends and receives binary messages tagged with the
 * sender agent's name. On the wire a message is base64 text sent with the
 * sender's name through the engine's notify RPC, as the stock Mooncake agent
 * sends it, so both agents interoperate.
 *
 * Return convention: 0 (or a count, or a KVFERRY_XFER_* state) on success, a
 * negative KVFERRY_ERR_* code on failure. After a failure,
 * kvferry_trtllm_last_error gives the text of the calling thread's last
 * error. Names and messages are (pointer, length) byte strings and may hold
 * NUL bytes. */

typedef uint64_t kvferry_trtllm_t; /* an agent; 0 is never valid */

/* Transfer states (the values of TensorRT-LLM's TransferState). */
#define KVFERRY_XFER_IN_PROGRESS 0
#define KVFERRY_XFER_SUCCESS 1
#define KVFERRY_XFER_FAILURE 2

/* One memory range (the layout of TensorRT-LLM's MemoryDesc: 24 bytes). */
typedef struct kvferry_trtllm_desc {
    uint64_t addr;
    uint64_t len;
    uint32_t device_id;
    uint32_t reserved;
} kvferry_trtllm_desc_t;

/* A received message. The strings point into the same allocation as the
 * array and are not NUL-terminated. */
typedef struct kvferry_trtllm_notif {
    const char *agent;
    size_t agent_len;
    const char *msg;
    size_t msg_len;
} kvferry_trtllm_notif_t;

/* Creates agent `name` on a new P2P engine from option pairs (the keys of
 * kvferry_engine_create, plus "notify_wait_us"; n may be 0). Without
 * "local_server_name" the engine advertises TLLM_MOONCAKE_IP_ADDR, else the
 * address of the interface named by TRTLLM_MOONCAKE_INTERFACE, else the
 * first non-loopback IPv4 address, else 127.0.0.1. "notify_wait_us" (default
 * KVFERRY_TRTLLM_NOTIFY_WAIT_US, else 1000; 0-1000000) is how long
 * kvferry_trtllm_get_notifs waits for a message when none is queued. */
int kvferry_trtllm_create(const char *name, size_t name_len,
                          const char *const *keys, const char *const *values,
                          size_t n, kvferry_trtllm_t *out);

/* Destroys the agent and its engine: transfers still running end FAILED,
 * every transfer id of the agent becomes invalid. A second call is
 * harmless. */
void kvferry_trtllm_destroy(kvferry_trtllm_t agent);

/* Returns the agent's engine, for the calls of transfer_engine_c.h and the
 * rest of this header (valid until kvferry_trtllm_destroy), or NULL. */
transfer_engine_t kvferry_trtllm_engine(kvferry_trtllm_t agent);

/* Copies the connection info ("ip:port", "[v6]:port"), NUL-ended and
 * truncated, into buf; returns its full length. */
int kvferry_trtllm_conn_info(kvferry_trtllm_t agent, char *buf, size_t len);

/* Memory types (TensorRT-LLM's MemoryType). */
#define KVFERRY_TRTLLM_DRAM 0
#define KVFERRY_TRTLLM_VRAM 1

/* Registers n ranges of memory type mem_type for remote access.
 * Registering a range whose start is already registered (with no greater
 * length) takes a reference instead. All or nothing: on failure no range of
 * this call stays registered. Only host memory (KVFERRY_TRTLLM_DRAM) is
 * supported by this version: other types fail with
 * KVFERRY_ERR_NOT_IMPLEMENTED instead of faulting at the first transfer. */
int kvferry_trtllm_register(kvferry_trtllm_t agent, int mem_type,
                            const kvferry_trtllm_desc_t *descs, size_t n);

/* Drops one reference per range (matched by start address); the last one
 * unregisters it. Unknown starts are skipped. Returns 0 or the first
 * error. */
int kvferry_trtllm_deregister(kvferry_trtllm_t agent,
                              const kvferry_trtllm_desc_t *descs, size_t n);

/* Opens the segment of agent `name` from its connection info (the P2P
 * handshake) and remembers it; messages queued for `name` are delivered
 * now, in order. Loading the same info again does nothing; new info replaces
 * the old. */
int kvferry_trtllm_load(kvferry_trtllm_t agent, const char *name,
                        size_t name_len, const char *conn_info,
                        size_t conn_len);

/* Forgets agent `name` and drops its cached segment descriptor, so the next
 * load fetches it afresh. Unknown names are ignored. */
int kvferry_trtllm_invalidate(kvferry_trtllm_t agent, const char *name,
                              size_t name_len);

/* Returns 1 when agent `name` is loaded and every range lies in memory it
 * registered (refreshing its descriptor once if not), else 0. */
int kvferry_trtllm_check_remote(kvferry_trtllm_t agent, const char *name,
                                size_t name_len,
                                const kvferry_trtllm_desc_t *descs, size_t n);

/* Starts one transfer of n local ranges to or from n remote ranges (absolute
 * addresses in agent `name`'s registered memory; pair i must have equal
 * lengths) with op OPCODE_READ or OPCODE_WRITE. There is no limit on n. With
 * has_msg, agent `name` receives (this agent, msg) once the whole transfer
 * has completed and been observed (kvferry_trtllm_wait/_poll). Stores the
 * transfer's id in *xfer; release it with kvferry_trtllm_xfer_free. On
 * failure nothing is left running. */
int kvferry_trtllm_submit(kvferry_trtllm_t agent, int op, const char *name,
                          size_t name_len, const kvferry_trtllm_desc_t *local,
                          const kvferry_trtllm_desc_t *remote, size_t n,
                          int has_msg, const char *msg, size_t msg_len,
                          uint64_t *xfer);

/* Waits up to timeout_ms for the transfer. With timeout_ms < 0 it waits as
 * long as the transfer makes progress: one that moves no byte for a whole
 * transfer timeout (MC_TRANSFER_TIMEOUT, timeout_ms option) is canceled and
 * ends FAILURE. Returns a KVFERRY_XFER_* state: IN_PROGRESS only when a
 * timeout_ms >= 0 passed; FAILURE also for an unknown id. Never spins. */
int kvferry_trtllm_wait(kvferry_trtllm_t agent, uint64_t xfer,
                        int64_t timeout_ms);

/* The transfer's KVFERRY_XFER_* state now; never blocks. */
int kvferry_trtllm_poll(kvferry_trtllm_t agent, uint64_t xfer);

/* Copies why the transfer failed (empty while it runs or after success),
 * NUL-ended and truncated, into buf; returns the full length. */
int kvferry_trtllm_xfer_error(kvferry_trtllm_t agent, uint64_t xfer,
                              char *buf, size_t len);

/* Cancels the transfer: requests not yet on the wire are dropped, requests
 * in flight are awaited (bounded by the transfer timeout). Afterwards the
 * engine touches none of its memory and its state is final. Returns 0, or a
 * negative code (the transfer may still be running). */
int kvferry_trtllm_cancel(kvferry_trtllm_t agent, uint64_t xfer);

/* Releases the transfer id, canceling the transfer first if it still runs.
 * A pending completion message is sent if the transfer completed. */
void kvferry_trtllm_xfer_free(kvferry_trtllm_t agent, uint64_t xfer);

/* Sends (this agent, msg) to agent `name`. Returns 0 when delivered, 1 when
 * `name` is not loaded yet: the message is then queued and delivered by the
 * kvferry_trtllm_load of that name (at most 4096 messages wait per agent;
 * beyond that KVFERRY_ERR_TOO_MANY_REQUESTS). */
int kvferry_trtllm_notify(kvferry_trtllm_t agent, const char *name,
                          size_t name_len, const char *msg, size_t msg_len);

/* Drains received messages, oldest first, each returned once (safe from
 * many threads): *out is one malloc'd block (free it with free() or
 * kvferry_trtllm_free_notifs) or NULL when *count is 0. When none is queued
 * it waits up to the agent's notify_wait_us for one (an arrival ends the
 * wait at once), so callers that poll in a loop do not spin. */
int kvferry_trtllm_get_notifs(kvferry_trtllm_t agent,
                              kvferry_trtllm_notif_t **out, size_t *count);

/* Frees a block from kvferry_trtllm_get_notifs (NULL is harmless). */
void kvferry_trtllm_free_notifs(kvferry_trtllm_notif_t *notifs);

/* Copies the text of the calling thread's last kvferry_trtllm_* error,
 * NUL-ended and truncated, into buf; returns its full length (0: none). */
int kvferry_trtllm_last_error(char *buf, size_t len);

/* ---- Store tiers and tasks (API version 5). Same return conventions as
 * the store section: 0 or a negative ErrorCode, -1 for a NULL handle or
 * pointer. ---- */

/* Turns the disk tier on (Mooncake's enable_ssd_offload with
 * ssd_offload_path): objects in this store's segment are written to
 * checksummed files under path before the master evicts them from memory
 * and are read back on get; intact files survive a restart of the client.
 * capacity_bytes bounds the files (0: 90% of the free space). NULL or ""
 * turns it off. Call it before mooncake_store_setup (-600 after). */
int kvferry_store_set_ssd_offload(mooncake_store_t store, const char *path,
                                  uint64_t capacity_bytes);

/* Makes mooncake_store_destroy unmount gracefully: the master moves the
 * objects only this store's segment holds to other segments first,
 * waiting up to grace_ms (0: off, the default). Before setup. */
int kvferry_store_set_drain(mooncake_store_t store, uint64_t grace_ms);

/* Mooncake's CreateCopyTask: copies key's object to each of the count
 * segments in targets (segment names, as get_hostname returns them).
 * CreateMoveTask: moves its replica on segment source to target. Each
 * writes the task's id (a UUID, NUL-ended) into task_id; -10
 * (BUFFER_OVERFLOW) when task_id_len is too small. */
int kvferry_store_create_copy_task(mooncake_store_t store, const char *key,
                                   const char **targets, size_t count, char *task_id,
                                   size_t task_id_len);
int kvferry_store_create_move_task(mooncake_store_t store, const char *key,
                                   const char *source, const char *target, char *task_id,
                                   size_t task_id_len);

/* Versioned publish (beyond Mooncake; Mooncake's put and pub calls are
 * unchanged). kvferry_store_publish stores value under key when the key's
 * current version is expected_version (0: the key must not exist yet;
 * KVFERRY_VERSION_ANY: whatever it is), replacing it, and writes the
 * version published (monotonic per key) into *version_out. Another
 * publisher's version in between, or one being written, is -300
 * (INVALID_VERSION): read the key and retry over its version.
 * kvferry_store_get_versioned reads the object once its version is at
 * least min_version, waiting up to wait_ms for a publish: the bytes in
 * memory the library allocated (free with kvferry_store_free) and the
 * version; returns the size, or -300 when only an older version is there
 * after the wait, -704 when the key is absent. */
#define KVFERRY_VERSION_ANY UINT64_MAX
int kvferry_store_publish(mooncake_store_t store, const char *key, const void *value, size_t size,
                          uint64_t expected_version, const mooncake_replicate_config_t *config,
                          uint64_t *version_out);
int64_t kvferry_store_get_versioned(mooncake_store_t store, const char *key, uint64_t min_version,
                                    uint64_t wait_ms, void **data_out, uint64_t *version_out);

/* Task types and states reported by kvferry_store_query_task. */
#define KVFERRY_TASK_REPLICA_COPY 0
#define KVFERRY_TASK_REPLICA_MOVE 1
#define KVFERRY_TASK_PENDING 0
#define KVFERRY_TASK_PROCESSING 1
#define KVFERRY_TASK_SUCCESS 2
#define KVFERRY_TASK_FAILED 3

/* Mooncake's QueryTask: the task's type, status, creation and last update
 * times (ms since the epoch), the client it was assigned to and its
 * message (both NUL-ended, truncated to their buffers). Any output pointer
 * may be NULL. -1400 (TASK_NOT_FOUND) for an unknown id. */
int kvferry_store_query_task(mooncake_store_t store, const char *task_id, int *type,
                             int *status, int64_t *created_ms, int64_t *updated_ms,
                             char *assigned_client, size_t assigned_len, char *message,
                             size_t message_len);

/* ---- GPU memory (API version 6) ---- */

#include <sys/types.h>

/* An allocator of shareable GPU memory, with the signatures
 * torch.cuda.memory.CUDAPluggableAllocator takes: kvferry_cuda_malloc
 * returns size bytes on device (rounded up to the allocation granularity)
 * made with cuMemCreate (shareable as POSIX fds, and fabric handles where
 * the device supports them), mapped and accessible from every device, so
 * that same-host peers map it through the nvlink transport; on a device
 * without virtual memory management it falls back to cuMemAlloc (legacy
 * IPC). When the process's GPU runtime is HIP (ROCm; KVFERRY_GPU_RUNTIME,
 * KVFERRY_HIP_LIB) it is hipMemCreate memory (POSIX fd handles) mapped for
 * every device, or hipMalloc memory where the runtime has no VMM. NULL on
 * failure (no runtime, out of memory). stream is ignored.
 * kvferry_cuda_free frees it (size, device and stream are ignored).
 * mc_nvlink_malloc / mc_nvlink_free are the same functions under the names
 * Mooncake's nvlink_allocator.so exports. */
void *kvferry_cuda_malloc(ssize_t size, int device, void *stream);
void kvferry_cuda_free(void *ptr, ssize_t size, int device, void *stream);
void *mc_nvlink_malloc(ssize_t size, int device, void *stream);
void mc_nvlink_free(void *ptr, ssize_t size, int device, void *stream);

/* Copies n bytes from src to dst, either of which may be device, pinned,
 * managed or pageable host memory (cuMemcpy with unified addressing), and
 * waits for the copy. 0 or a negative code (-303 without a driver). */
int kvferry_cuda_memcpy(void *dst, const void *src, size_t n);

/* The kind of the memory at p, as registration would classify it:
 * KVFERRY_MEM_HOST (pageable, or no driver loaded), KVFERRY_MEM_PINNED,
 * KVFERRY_MEM_DEVICE, KVFERRY_MEM_MANAGED; *device (may be NULL) receives
 * the CUDA device of device and managed memory. Never loads the driver. */
#define KVFERRY_MEM_HOST 0
#define KVFERRY_MEM_PINNED 1
#define KVFERRY_MEM_DEVICE 2
#define KVFERRY_MEM_MANAGED 3
int kvferry_memory_kind(const void *p, int *device);

/* What kvferry_cuda_malloc hands out on device: 1 shareable VMM memory
 * (cuMemCreate, hipMemCreate), 0 cuMemAlloc / hipMalloc memory, -2 no
 * usable runtime or device
 * (Mooncake's mc_probe_fabric_support answers 1 only for fabric memory). */
int kvferry_cuda_probe(int device);
int mc_probe_fabric_support(int device);

/* Stream-ordered transfers (Mooncake's transfer_*_on_cuda): queues the n
 * requests (opcode: 0 READ into buffers[i], 1 WRITE from them) to segment
 * target behind the work already queued on stream (a CUstream; NULL is the
 * legacy default stream of the calling thread's current context), and
 * holds the work queued after the call until they have completed. Returns
 * 0 once queued, or a negative code (bad arguments, unknown segment, a
 * stream but no driver); a transfer that later fails is logged and
 * recorded as the engine's last error, and the stream continues. With
 * stream NULL and no driver (or no current context on the calling thread)
 * there is nothing to order with: the requests run at once and the call
 * returns when they are done (-402 when one failed). */
int kvferry_transfer_on_stream(transfer_engine_t engine, void *stream, const char *target,
                               void *const *buffers, const uint64_t *peer_addresses,
                               const size_t *lengths, size_t n, int opcode);

/* ---- Store segments (API version 9). Mooncake's RealClient calls of
 * the same names (mount_segment, ...): more memory lent to the store after
 * setup, each range a segment of its own under the store's segment name,
 * re-mounted with the others and unmounted by mooncake_store_destroy.
 * Returns 0 or a negative code (-1 INTERNAL_ERROR for a dummy client, an
 * id these calls did not make, or a failure outside the master; -600 for
 * bad arguments; the master's code otherwise). Segment ids are UUIDs,
 * written NUL-ended (several joined by ','); -10 (BUFFER_OVERFLOW) when
 * segment_ids_len is too small, and nothing stays mounted. */

/* Maps size bytes of the file at path from offset (a multiple of the page
 * size; the range inside the file) shared and read-write, and lends them.
 * protocol is recorded with the segment ("" or NULL: the store's);
 * location is the memory's location for the engine ("" or NULL: "*"). */
int kvferry_store_mount_segment(mooncake_store_t store, const char *path, uint64_t offset,
                                uint64_t size, const char *protocol, const char *location,
                                char *segment_ids, size_t segment_ids_len);

/* Maps size bytes (rounded up to 16 MiB, Mooncake's slab size; stored in
 * *allocated_size when not NULL) of anonymous memory and lends them. */
int kvferry_store_allocate_and_mount_segment(mooncake_store_t store, uint64_t size,
                                             const char *protocol, const char *location,
                                             uint64_t *allocated_size, char *segment_ids,
                                             size_t segment_ids_len);

/* Unmounts the count segments: those of kvferry_store_mount_segment with
 * free_memory 0, those of kvferry_store_allocate_and_mount_segment with 1,
 * and unmaps their memory. The master drops their replicas and removes
 * objects left with none; with grace_period_seconds > 0 (at most 300) it
 * first moves the objects only a segment holds to other stores' segments,
 * and the call returns when they are moved or the grace is over. Every id
 * is tried; the result is the first failure. */
int kvferry_store_unmount_segment(mooncake_store_t store, const char **segment_ids, size_t count,
                                  uint64_t grace_period_seconds, int free_memory);

/* Takes the store's disk tier (kvferry_store_set_ssd_offload) off the
 * master, so that it names the store as a holder of no file, then waits
 * grace_period_seconds (at most 300). 0 without a disk tier. */
int kvferry_store_unmount_local_disk_segment(mooncake_store_t store,
                                             uint64_t grace_period_seconds);

/* How many reads were served from a disk tier (own files read directly,
 * files of another store read through its serve buffer, and objects
 * promoted from another store's disk): Mooncake's
 * get_offload_rpc_read_count. 0 for a dummy client. */
int64_t kvferry_store_offload_read_count(mooncake_store_t store);

/* Huge-page host memory (Mooncake's hugepage_memory_alloc/_free, whose
 * addresses get_alloc_func_addr and get_free_func_addr return): page
 * aligned, 2 MiB pages where the kernel has them reserved, else ordinary
 * pages advised for transparent huge pages. NULL on failure; free ignores
 * NULL and pointers it did not hand out. Safe from any thread. */
void *kvferry_hugepage_alloc(size_t size);
void kvferry_hugepage_free(void *ptr);

/* ---- Store ranges and sessions (API version 10). Mooncake's RealClient
 * get_into_ranges and its put and get sessions. Ranges come flat: key i
 * owns range_counts[i] consecutive entries of addrs (caller memory),
 * offsets (where in the object) and sizes. A key may appear more than
 * once. These need a store client of this process: a dummy client's
 * handle gets -600 (INVALID_PARAMS) for every key. Each returns 0 (or -1
 * for a NULL or bad argument, -600 for more than 4M ranges) and writes one
 * result per range or per key. */

/* Reads each range of its object into registered memory, asking the
 * master once for every distinct key. results_out has one entry per range
 * (the total of range_counts): its size, or a negative code (-600 for a
 * range outside its object or outside registered memory, which is not
 * read). */
int kvferry_store_get_into_ranges(mooncake_store_t store, const char **keys, size_t count,
                                  void **addrs, const uint64_t *offsets, const uint64_t *sizes,
                                  const size_t *range_counts, int64_t *results_out);

/* Starts a get session per key: looks its replicas up once and keeps
 * them, under the lease the master granted, for
 * kvferry_store_get_session_ranges. results_out[i]: 0, the master's code,
 * or -702 (INVALID_REPLICA) without a memory replica. */
int kvferry_store_get_session_start(mooncake_store_t store, const char **keys, size_t count,
                                    int *results_out);

/* Reads each key's ranges through its get session, asking the master
 * nothing. results_out[i]: the bytes read for key i; -600 without a
 * session or for a range outside the object (nothing of that key is
 * read); -707 (LEASE_EXPIRED) once the lease is over (the session is
 * dropped). */
int kvferry_store_get_session_ranges(mooncake_store_t store, const char **keys, size_t count,
                                     void **addrs, const uint64_t *offsets, const uint64_t *sizes,
                                     const size_t *range_counts, int64_t *results_out);

/* Drops the get sessions of keys; 0 (keys without one are ignored). */
int kvferry_store_get_session_end(mooncake_store_t store, const char **keys, size_t count);

/* Reserves sizes[i] bytes for keys[i] at the master without writing them
 * (config and group_ids as kvferry_store_batch_put_from_multi's).
 * results_out[i]: 0, -600 for a key with an open session, or the master's
 * code (-705 OBJECT_ALREADY_EXISTS for a stored key). */
int kvferry_store_put_session_start(mooncake_store_t store, const char **keys, size_t count,
                                    const uint64_t *sizes,
                                    const mooncake_replicate_config_t *config,
                                    const char **group_ids, int *results_out);

/* Writes each key's ranges into every replica its put session reserved,
 * offsets[j] being where in the object range j goes. results_out[i]: the
 * bytes written for key i; -600 without an open session or for a range
 * outside the object (nothing of that key is written). */
int kvferry_store_put_session_ranges(mooncake_store_t store, const char **keys, size_t count,
                                     void **addrs, const uint64_t *offsets, const uint64_t *sizes,
                                     const size_t *range_counts, int64_t *results_out);

/* Completes the put sessions of keys: waits for their range writes in
 * flight, then the objects become readable. results_out[i]: 0, -600
 * without a session, or the master's code (the session then stays, sealed,
 * for another end or a revoke). */
int kvferry_store_put_session_end(mooncake_store_t store, const char **keys, size_t count,
                                  int *results_out);

/* Abandons the put sessions of keys: waits for their range writes in
 * flight, then the master frees the space. results_out[i] as
 * kvferry_store_put_session_end's (a key the master no longer has counts
 * as revoked). */
int kvferry_store_put_session_revoke(mooncake_store_t store, const char **keys, size_t count,
                                     int *results_out);

/* Clears the replicas of keys that this store wrote and that no reader
 * holds a lease on (Mooncake's batch_replica_clear): whole objects with
 * segment_name NULL or "", otherwise only the replicas on the segment of
 * that name, an object left with none being removed. Keys that do not
 * qualify are skipped. cleared_out[i] is 1 for a key cleared, else 0.
 * Returns how many were cleared, or a negative code. */
int kvferry_store_batch_replica_clear(mooncake_store_t store, const char **keys, size_t count,
                                      const char *segment_name, int *cleared_out);

#ifdef __cplusplus
}
#endif

#endif /* KVFERRY_H */
