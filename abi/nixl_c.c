// The public C functions of kvferry.h "NIXL support". Each checks the fork
// guard and calls one hidden Go export (nixl_exports.go); all logic is in Go.
// After fork() they return KVFERRY_NIXL_ERR_BACKEND (KVFERRY_ERR_FORKED would
// read as NIXL_ERR_REMOTE_DISCONNECT here).
#include <stdlib.h>

#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))
#define FORKED KVFERRY_NIXL_ERR_BACKEND

int kvf_forked(void);

KVF_API int kvferry_nixl_option(size_t i, char *key, size_t key_len, char *value, size_t value_len) {
    if (kvf_forked()) return 0;
    return kvf_nixl_option(i, key, key_len, value, value_len);
}

KVF_API int kvferry_nixl_supported_mems(int *mems, size_t cap) {
    if (kvf_forked()) return 0;
    return kvf_nixl_supported_mems(mems, cap);
}

KVF_API int kvferry_nixl_create(const char *agent, size_t agent_len, const char *const *keys,
                                const char *const *values, size_t n, int progress_thread,
                                uint64_t progress_delay_us, kvferry_nixl_t *out) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_create((char *)agent, agent_len, (char **)keys, (char **)values, n, progress_thread,
                           progress_delay_us, out);
}

KVF_API void kvferry_nixl_destroy(kvferry_nixl_t nixl) {
    if (kvf_forked()) return;
    kvf_nixl_destroy(nixl);
}

KVF_API void kvferry_nixl_backend_name(const char *name, size_t name_len) {
    if (kvf_forked()) return;
    kvf_nixl_backend_name((char *)name, name_len);
}

KVF_API int64_t kvferry_nixl_conn_info(kvferry_nixl_t nixl, char *buf, size_t len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_conn_info(nixl, buf, len);
}

KVF_API int kvferry_nixl_load_conn_info(kvferry_nixl_t nixl, const char *agent, size_t agent_len,
                                        const char *info, size_t info_len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_load_conn_info(nixl, (char *)agent, agent_len, (char *)info, info_len);
}

KVF_API int kvferry_nixl_connect(kvferry_nixl_t nixl, const char *agent, size_t agent_len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_connect(nixl, (char *)agent, agent_len);
}

KVF_API int kvferry_nixl_disconnect(kvferry_nixl_t nixl, const char *agent, size_t agent_len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_disconnect(nixl, (char *)agent, agent_len);
}

KVF_API int kvferry_nixl_register(kvferry_nixl_t nixl, int mem, uint64_t addr, uint64_t len, uint64_t dev_id,
                                  kvferry_nixl_md_t *out) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_register(nixl, mem, addr, len, dev_id, out);
}

KVF_API int kvferry_nixl_deregister(kvferry_nixl_t nixl, kvferry_nixl_md_t md) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_deregister(nixl, md);
}

KVF_API int64_t kvferry_nixl_public_data(kvferry_nixl_t nixl, kvferry_nixl_md_t md, char *buf, size_t len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_public_data(nixl, md, buf, len);
}

KVF_API int kvferry_nixl_load_remote_md(kvferry_nixl_t nixl, const char *agent, size_t agent_len, int mem,
                                        uint64_t addr, uint64_t len, uint64_t dev_id, const char *blob,
                                        size_t blob_len, kvferry_nixl_md_t *out) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_load_remote_md(nixl, (char *)agent, agent_len, mem, addr, len, dev_id, (char *)blob, blob_len,
                                   out);
}

KVF_API int kvferry_nixl_load_local_md(kvferry_nixl_t nixl, kvferry_nixl_md_t md, kvferry_nixl_md_t *out) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_load_local_md(nixl, md, out);
}

KVF_API int kvferry_nixl_unload_md(kvferry_nixl_t nixl, kvferry_nixl_md_t md) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_unload_md(nixl, md);
}

KVF_API int kvferry_nixl_xfer_prep(kvferry_nixl_t nixl, int op, const char *agent, size_t agent_len,
                                   const kvferry_nixl_desc_t *local, size_t n_local,
                                   const kvferry_nixl_desc_t *remote, size_t n_remote, kvferry_nixl_xfer_t *out) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_xfer_prep(nixl, op, (char *)agent, agent_len, (kvferry_nixl_desc_t *)local, n_local,
                              (kvferry_nixl_desc_t *)remote, n_remote, out);
}

KVF_API int kvferry_nixl_xfer_post(kvferry_nixl_t nixl, kvferry_nixl_xfer_t xfer, int op,
                                   const kvferry_nixl_desc_t *local, size_t n_local,
                                   const kvferry_nixl_desc_t *remote, size_t n_remote, int has_notif,
                                   const char *msg, size_t msg_len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_xfer_post(nixl, xfer, op, (kvferry_nixl_desc_t *)local, n_local, (kvferry_nixl_desc_t *)remote,
                              n_remote, has_notif, (char *)msg, msg_len);
}

KVF_API int kvferry_nixl_xfer_check(kvferry_nixl_t nixl, kvferry_nixl_xfer_t xfer) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_xfer_check(nixl, xfer);
}

KVF_API int kvferry_nixl_xfer_release(kvferry_nixl_t nixl, kvferry_nixl_xfer_t xfer) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_xfer_release(nixl, xfer);
}

KVF_API int kvferry_nixl_gen_notif(kvferry_nixl_t nixl, const char *agent, size_t agent_len, const char *msg,
                                   size_t msg_len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_gen_notif(nixl, (char *)agent, agent_len, (char *)msg, msg_len);
}

KVF_API int kvferry_nixl_get_notifs(kvferry_nixl_t nixl, kvferry_nixl_notif_t **out, size_t *count) {
    if (kvf_forked()) {
        if (out) *out = NULL;
        if (count) *count = 0;
        return FORKED;
    }
    return kvf_nixl_get_notifs(nixl, out, count);
}

KVF_API void kvferry_nixl_free_notifs(kvferry_nixl_notif_t *notifs) {
    /* Pure C: one block from malloc. */
    free(notifs);
}

KVF_API int kvferry_nixl_last_error(kvferry_nixl_t nixl, char *buf, size_t len) {
    if (kvf_forked()) return FORKED;
    return kvf_nixl_last_error(nixl, buf, len);
}
