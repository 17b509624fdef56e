// The public C functions of transfer_engine_c.h and kvferry.h. Each checks
// the fork guard and calls one hidden Go export; all logic is in Go.
#include <errno.h>
#include <stdlib.h>

#include "transfer_engine_c.h"
#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define H(e) ((uintptr_t)(e))

int kvf_forked(void);

KVF_API transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                               const char *local_server_name,
                                               const char *ip_or_host_name,
                                               uint64_t rpc_port, int auto_discover) {
    (void)ip_or_host_name;
    (void)rpc_port;
    if (kvf_forked()) return NULL;
    return (transfer_engine_t)kvf_create((char *)metadata_conn_string, (char *)local_server_name, auto_discover);
}

KVF_API int discoverTopology(transfer_engine_t engine) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_discover(H(engine));
}

KVF_API int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_local_ip_port(H(engine), buf_out, buf_len);
}

KVF_API transport_t installTransport(transfer_engine_t engine, const char *proto, void **args) {
    if (kvf_forked()) return NULL;
    return (transport_t)kvf_install(H(engine), (char *)proto, (void *)args);
}

KVF_API int uninstallTransport(transfer_engine_t engine, const char *proto) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_uninstall(H(engine), (char *)proto);
}

KVF_API segment_id_t openSegment(transfer_engine_t engine, const char *segment_name) {
    if (kvf_forked()) return -1;
    return kvf_open(H(engine), (char *)segment_name, 0);
}

KVF_API segment_id_t openSegmentNoCache(transfer_engine_t engine, const char *segment_name) {
    if (kvf_forked()) return -1;
    return kvf_open(H(engine), (char *)segment_name, 1);
}

KVF_API int closeSegment(transfer_engine_t engine, segment_id_t segment_id) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_close_segment(H(engine), segment_id);
}

KVF_API int warmupEfaSegment(transfer_engine_t engine, const char *segment_name) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_warmup_efa(H(engine), (char *)segment_name);
}

KVF_API int removeLocalSegment(transfer_engine_t engine, const char *segment_name) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_remove_segment(H(engine), (char *)segment_name);
}

KVF_API void destroyTransferEngine(transfer_engine_t engine) {
    if (kvf_forked()) return;
    kvf_destroy(H(engine));
}

KVF_API int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                                const char *location, int remote_accessible) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_register(H(engine), addr, length, (char *)location, remote_accessible);
}

KVF_API int unregisterLocalMemory(transfer_engine_t engine, void *addr) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_unregister(H(engine), addr);
}

KVF_API int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t *buffer_list,
                                     size_t buffer_len, const char *location) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_register_batch(H(engine), buffer_list, buffer_len, (char *)location);
}

KVF_API int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list, size_t addr_len) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_unregister_batch(H(engine), addr_list, addr_len);
}

KVF_API batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size) {
    if (kvf_forked()) return INVALID_BATCH;
    return kvf_alloc_batch(H(engine), batch_size);
}

KVF_API int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                           struct transfer_request *entries, size_t count) {
    if (kvf_forked()) return 202; /* Status::Context */
    return kvf_submit(H(engine), batch_id, entries, count, 0, NULL, NULL);
}

KVF_API int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                                     struct transfer_request *entries, size_t count,
                                     notify_msg_t notify_msg) {
    if (kvf_forked()) return 202;
    return kvf_submit(H(engine), batch_id, entries, count, 1, notify_msg.name, notify_msg.msg);
}

KVF_API notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size) {
    if (kvf_forked()) {
        if (size) *size = 0;
        return NULL;
    }
    return kvf_get_notifs(H(engine), size);
}

KVF_API int freeNotifsMsgBuf(notify_msg_t *msg, int size) {
    /* Pure C: works even after fork, never enters Go. */
    if (msg == NULL) return 0;
    for (int i = 0; i < size; i++) {
        free(msg[i].name);
        free(msg[i].msg);
    }
    free(msg);
    return 0;
}

KVF_API int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_gen_notify(H(engine), target_id, notify_msg.name, notify_msg.msg);
}

KVF_API int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
                              struct transfer_status *status) {
    if (kvf_forked()) return 202;
    return kvf_status(H(engine), batch_id, task_id, status);
}

KVF_API int freeBatchID(transfer_engine_t engine, batch_id_t batch_id) {
    if (kvf_forked()) return 202;
    return kvf_free_batch(H(engine), batch_id);
}

KVF_API int syncSegmentCache(transfer_engine_t engine) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_sync_cache(H(engine));
}

KVF_API int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats, size_t *count) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    if (count == NULL) return -1;
    return kvf_nic_stats(H(engine), stats, count);
}

KVF_API void enableGracefulShutdown(transfer_engine_t engine) {
    if (kvf_forked()) return;
    kvf_graceful(H(engine));
}

KVF_API int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len, int json) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_show_links(H(engine), buf_out, buf_len, json);
}

/* ---- kvferry.h ---- */

KVF_API int kvferry_api_version(void) { return KVFERRY_API_VERSION; }

KVF_API const char *kvferry_version(void) { return "0.1.0"; }

KVF_API transfer_engine_t kvferry_engine_create(const char *const *keys, const char *const *values, size_t n) {
    if (kvf_forked()) return NULL;
    return (transfer_engine_t)kvf_engine_create_kv((char **)keys, (char **)values, n);
}

KVF_API int kvferry_engine_rpc_port(transfer_engine_t engine) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_rpc_port(H(engine));
}

KVF_API int kvferry_engine_segment_name(transfer_engine_t engine, char *buf, size_t len) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_segment_name(H(engine), buf, len);
}

KVF_API int kvferry_engine_last_error(transfer_engine_t engine, char *buf, size_t len) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_last_error(H(engine), buf, len);
}

KVF_API int kvferry_batch_status(transfer_engine_t engine, batch_id_t batch_id, int *state,
                                 uint64_t *transferred_bytes, size_t *task_count) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_batch_status(H(engine), batch_id, state, transferred_bytes, task_count);
}

KVF_API int kvferry_batch_wait(transfer_engine_t engine, batch_id_t batch_id, int64_t timeout_ms, int *state) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_batch_wait(H(engine), batch_id, timeout_ms, state);
}

KVF_API int kvferry_batch_await(transfer_engine_t engine, batch_id_t batch_id) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_batch_await(H(engine), batch_id);
}

KVF_API int kvferry_batch_cancel(transfer_engine_t engine, batch_id_t batch_id) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_batch_cancel(H(engine), batch_id);
}

KVF_API int kvferry_segment_check(transfer_engine_t engine, segment_id_t segment_id,
                                  uint64_t addr, uint64_t length) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_segment_check(H(engine), segment_id, addr, length);
}

KVF_API int64_t kvferry_metrics_text(char *buf, size_t len) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_metrics_text(buf, len);
}
