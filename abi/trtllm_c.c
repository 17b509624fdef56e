// The public C functions of kvferry.h "TensorRT-LLM support". Each checks
// the fork guard and calls one hidden Go export (trtllm_exports.go), handing
// it the calling thread's error buffer, which kvferry_trtllm_last_error
// reads: the error text of one thread is never overwritten by another's.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvferry.h"
#include "_cgo_export.h"

#define KVF_API __attribute__((visibility("default")))

int kvf_forked(void);

/* Each thread's error text lives in a malloc'd buffer found through a
 * pthread key (freed when the thread exits). Not a __thread array: this
 * library's TLS is static (Go's initial-exec model), and static TLS of a
 * library loaded by dlopen comes from glibc's small surplus. */
#define KVF_TRT_ERR_LEN 1024
static pthread_key_t kvf_trt_key;
static pthread_once_t kvf_trt_once = PTHREAD_ONCE_INIT;
static int kvf_trt_key_ok;

static void kvf_trt_key_init(void) { kvf_trt_key_ok = pthread_key_create(&kvf_trt_key, free) == 0; }

/* Returns the calling thread's error buffer, or NULL when none can be had. */
static char *kvf_trt_errbuf(void) {
    pthread_once(&kvf_trt_once, kvf_trt_key_init);
    if (!kvf_trt_key_ok) return NULL;
    char *b = pthread_getspecific(kvf_trt_key);
    if (b == NULL && (b = calloc(1, KVF_TRT_ERR_LEN)) != NULL && pthread_setspecific(kvf_trt_key, b) != 0) {
        free(b);
        b = NULL;
    }
    return b;
}

/* The error buffer arguments of the Go exports. */
#define ERRBUF eb, (eb ? (size_t)KVF_TRT_ERR_LEN : (size_t)0)

static int kvf_trt_forked(char *eb) {
    if (!kvf_forked()) return 0;
    if (eb) snprintf(eb, KVF_TRT_ERR_LEN, "kvferry called in a child after fork(); use the spawn start method");
    return 1;
}

KVF_API int kvferry_trtllm_create(const char *name, size_t name_len, const char *const *keys,
                                  const char *const *values, size_t n, kvferry_trtllm_t *out) {
    if (out) *out = 0;
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_create((char *)name, name_len, (char **)keys, (char **)values, n, out, ERRBUF);
}

KVF_API void kvferry_trtllm_destroy(kvferry_trtllm_t agent) {
    if (kvf_forked()) return;
    kvf_trt_destroy(agent);
}

KVF_API transfer_engine_t kvferry_trtllm_engine(kvferry_trtllm_t agent) {
    if (kvf_forked()) return NULL;
    return (transfer_engine_t)kvf_trt_engine(agent);
}

KVF_API int kvferry_trtllm_conn_info(kvferry_trtllm_t agent, char *buf, size_t len) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_conn_info(agent, buf, len, ERRBUF);
}

KVF_API int kvferry_trtllm_register(kvferry_trtllm_t agent, int mem_type, const kvferry_trtllm_desc_t *descs,
                                    size_t n) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_register(agent, mem_type, (void *)descs, n, 1, ERRBUF);
}

KVF_API int kvferry_trtllm_deregister(kvferry_trtllm_t agent, const kvferry_trtllm_desc_t *descs, size_t n) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_register(agent, KVFERRY_TRTLLM_DRAM, (void *)descs, n, 0, ERRBUF);
}

KVF_API int kvferry_trtllm_load(kvferry_trtllm_t agent, const char *name, size_t name_len, const char *conn_info,
                                size_t conn_len) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_load(agent, (char *)name, name_len, (char *)conn_info, conn_len, ERRBUF);
}

KVF_API int kvferry_trtllm_invalidate(kvferry_trtllm_t agent, const char *name, size_t name_len) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_invalidate(agent, (char *)name, name_len, ERRBUF);
}

KVF_API int kvferry_trtllm_check_remote(kvferry_trtllm_t agent, const char *name, size_t name_len,
                                        const kvferry_trtllm_desc_t *descs, size_t n) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_check_remote(agent, (char *)name, name_len, (void *)descs, n, ERRBUF);
}

KVF_API int kvferry_trtllm_submit(kvferry_trtllm_t agent, int op, const char *name, size_t name_len,
                                  const kvferry_trtllm_desc_t *local, const kvferry_trtllm_desc_t *remote, size_t n,
                                  int has_msg, const char *msg, size_t msg_len, uint64_t *xfer) {
    if (xfer) *xfer = 0;
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_submit(agent, op, (char *)name, name_len, (void *)local, (void *)remote, n, has_msg, (char *)msg,
                          msg_len, xfer, ERRBUF);
}

KVF_API int kvferry_trtllm_wait(kvferry_trtllm_t agent, uint64_t xfer, int64_t timeout_ms) {
    if (kvf_forked()) return KVFERRY_XFER_FAILURE;
    return kvf_trt_wait(agent, xfer, timeout_ms, 1);
}

KVF_API int kvferry_trtllm_poll(kvferry_trtllm_t agent, uint64_t xfer) {
    if (kvf_forked()) return KVFERRY_XFER_FAILURE;
    return kvf_trt_wait(agent, xfer, 0, 0);
}

KVF_API int kvferry_trtllm_xfer_error(kvferry_trtllm_t agent, uint64_t xfer, char *buf, size_t len) {
    if (kvf_forked()) return KVFERRY_ERR_FORKED;
    return kvf_trt_xfer_error(agent, xfer, buf, len);
}

KVF_API int kvferry_trtllm_cancel(kvferry_trtllm_t agent, uint64_t xfer) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_cancel(agent, xfer, ERRBUF);
}

KVF_API void kvferry_trtllm_xfer_free(kvferry_trtllm_t agent, uint64_t xfer) {
    if (kvf_forked()) return;
    kvf_trt_xfer_free(agent, xfer);
}

KVF_API int kvferry_trtllm_notify(kvferry_trtllm_t agent, const char *name, size_t name_len, const char *msg,
                                  size_t msg_len) {
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_notify(agent, (char *)name, name_len, (char *)msg, msg_len, ERRBUF);
}

KVF_API int kvferry_trtllm_get_notifs(kvferry_trtllm_t agent, kvferry_trtllm_notif_t **out, size_t *count) {
    if (out) *out = NULL;
    if (count) *count = 0;
    char *eb = kvf_trt_errbuf();
    if (kvf_trt_forked(eb)) return KVFERRY_ERR_FORKED;
    return kvf_trt_get_notifs(agent, out, count, ERRBUF);
}

KVF_API void kvferry_trtllm_free_notifs(kvferry_trtllm_notif_t *notifs) {
    /* Pure C: one block from malloc. */
    free(notifs);
}

KVF_API int kvferry_trtllm_last_error(char *buf, size_t len) {
    const char *e = kvf_trt_errbuf();
    if (e == NULL) e = "";
    size_t n = strlen(e);
    if (buf && len) snprintf(buf, len, "%s", e);
    return (int)n;
}
