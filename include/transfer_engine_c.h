/*
 * transfer_engine_c.h - kvferry's C interface to the transfer engine.
 *
 * This header is kvferry's own text. Its declarations are ABI-identical to
 * the C interface of the Mooncake Transfer Engine, so a program built against
 * either header runs against libkvferry.so (also installed under the name
 * libtransfer_engine.so). See shared/specs/mooncake.md section 1.
 *
 * Ownership of strings: every `const char *` argument is read only while the
 * call runs; the library keeps its own copy of whatever it needs, so the caller
 * may free or reuse the string as soon as the call returns.
 *
 * Return conventions (kept exactly as Mooncake has them):
 *  - calls that manage resources (register/unregister, notify, ...) return 0
 *    on success and a negative ERR_* code on failure (-1 invalid argument,
 *    -3 address not registered, -7 address overlapped, -200 metadata, ...);
 *  - submitTransfer, submitTransferWithNotify, getTransferStatus and
 *    freeBatchID return a non-negative status code: 0 ok, 1 invalid argument,
 *    2 too many requests (batch capacity), 3 address not registered,
 *    4 batch busy, 8 transport not supported, 200 metadata (a target
 *    segment's descriptor could not be had), 202 context (the engine is
 *    closed, or an internal error);
 *  - handle-returning calls return NULL (engine, transport) or a negative
 *    segment id on failure.
 * After fork() the child gets an error from every call (the library only
 * works in the process that loaded it); use the "spawn" start method.
 */
#ifndef KVFERRY_TRANSFER_ENGINE_C_H
#define KVFERRY_TRANSFER_ENGINE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Segment ids are 32-bit in the C interface; a negative id means failure. */
#define segment_handle_t int32_t
#define segment_id_t int32_t
/* Batch ids are opaque 64-bit values. */
#define batch_id_t uint64_t

/* The engine's own memory segment. */
#define LOCAL_SEGMENT (0)
/* Never returned for a live batch. */
#define INVALID_BATCH UINT64_MAX

/* READ copies remote -> source; WRITE copies source -> remote. */
#define OPCODE_READ (0)
#define OPCODE_WRITE (1)

/* One transfer. For memory segments target_offset is the absolute virtual
 * address in the target process, inside memory the target registered. */
struct transfer_request {
    int opcode;
    void *source;
    segment_id_t target_id;
    uint64_t target_offset;
    uint64_t length;
};
typedef struct transfer_request transfer_request_t;

/* A notification: an opaque sender name and an opaque message. */
struct notify_msg {
    char *name;
    char *msg;
};
typedef struct notify_msg notify_msg_t;

/* Task states reported by getTransferStatus. */
#define STATUS_WAITING (0)
#define STATUS_PENDING (1)
#define STATUS_INVALID (2)
#define STATUS_CANCELED (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT (5)
#define STATUS_FAILED (6)

struct transfer_status {
    int status;
    uint64_t transferred_bytes;
};

/* Legacy segment description; no function takes it, kept for source
 * compatibility. */
struct segment_desc {
    int type;
    union {
        struct {
            void *addr;
            uint64_t size;
            const char *location;
        } rdma;
        struct {
            const char *file_path;
            const char *subsystem_name;
            const char *proto;
            const char *ip;
            uint64_t port;
        } nvmeof;
    } desc_;
};

typedef struct transfer_status transfer_status_t;

struct buffer_entry {
    void *addr;
    size_t length;
};
typedef struct buffer_entry buffer_entry_t;

typedef struct segment_desc segment_desc_t;
typedef void *transfer_engine_t;
typedef void *transport_t;

/* Engine lifecycle. metadata_conn_string is "P2PHANDSHAKE",
 * "http://host:port/path" or "etcd://host:port[,host:port]". In P2P mode the
 * segment name becomes "<host of local_server_name>:<rpc port>". The
 * ip_or_host_name and rpc_port arguments are accepted and ignored, as in
 * Mooncake. auto_discover != 0 installs the best transport at once. */
transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name,
                                       const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover);
int discoverTopology(transfer_engine_t engine);
/* Writes "<ip>:<rpc port>" (the P2P segment name) into buf_out. */
int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len);
transport_t installTransport(transfer_engine_t engine, const char *proto,
                             void **args);
int uninstallTransport(transfer_engine_t engine, const char *proto);

/* Segments. */
segment_id_t openSegment(transfer_engine_t engine, const char *segment_name);
segment_id_t openSegmentNoCache(transfer_engine_t engine,
                                const char *segment_name);
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);
int warmupEfaSegment(transfer_engine_t engine, const char *segment_name);
/* Drops a cached segment (any name) from this engine's cache. */
int removeLocalSegment(transfer_engine_t engine, const char *segment_name);
void destroyTransferEngine(transfer_engine_t engine);

/* Memory registration. Regions may not overlap; unregister by exact start. */
int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                        const char *location, int remote_accessible);
int unregisterLocalMemory(transfer_engine_t engine, void *addr);
int registerLocalMemoryBatch(transfer_engine_t engine,
                             buffer_entry_t *buffer_list, size_t buffer_len,
                             const char *location);
int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list,
                               size_t addr_len);

/* Batches. batch_size is the capacity: the total number of requests all
 * submits to this batch may add. Task ids continue across submits. */
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count);
/* As submitTransfer; notify_msg is sent to entries[0].target_id once the
 * whole batch has been observed COMPLETED through getTransferStatus. */
int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                             struct transfer_request *entries, size_t count,
                             notify_msg_t notify_msg);

/* Notifications. getNotifsFromEngine drains the queue into an array that,
 * like each string in it, comes from malloc(); free it with freeNotifsMsgBuf
 * (or free() each part). Returns NULL when the queue is empty. */
notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size);
int freeNotifsMsgBuf(notify_msg_t *msg, int size);
int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id,
                      notify_msg_t notify_msg);

/* Status. A task counts as finished once a call has reported it in a
 * terminal state; freeBatchID returns 4 (busy) until every task has. */
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id,
                      size_t task_id, struct transfer_status *status);
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/* Re-fetches every cached remote segment descriptor. */
int syncSegmentCache(transfer_engine_t engine);

struct nic_load_stat {
    char device_name[64];
    uint64_t inflight_bytes;
    double ewma_bandwidth_bps;
};
typedef struct nic_load_stat nic_load_stat_t;

/* On entry *count is the capacity of stats; on return the number of devices. */
int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats,
                    size_t *count);
void enableGracefulShutdown(transfer_engine_t engine);
int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len,
              int json);

#ifdef __cplusplus
}
#endif

#endif /* KVFERRY_TRANSFER_ENGINE_C_H */
