/* kvf_api.h - the library's C API as tables of function pointers, loaded
 * from the shared object with dlopen/dlsym the way the plugins that wrap
 * Mooncake load libtransfer_engine.so: the transfer engine's
 * (transfer_engine_c.h and kvferry.h) and the store's (store_c.h and
 * kvferry.h). Needs include/ on the include path. */
#ifndef KVF_TEST_API_H
#define KVF_TEST_API_H
#include "kvf_test.h"

#include "transfer_engine_c.h"
#include "store_c.h"
#include "kvferry.h"

/* TE_FUNCS lists the transfer engine functions (an X-macro list). */
#define TE_FUNCS(X)                                   \
    X(createTransferEngine)                           \
    X(discoverTopology)                               \
    X(getLocalIpAndPort)                              \
    X(installTransport)                               \
    X(uninstallTransport)                             \
    X(openSegment)                                    \
    X(openSegmentNoCache)                             \
    X(closeSegment)                                   \
    X(warmupEfaSegment)                               \
    X(removeLocalSegment)                             \
    X(destroyTransferEngine)                          \
    X(registerLocalMemory)                            \
    X(unregisterLocalMemory)                          \
    X(registerLocalMemoryBatch)                       \
    X(unregisterLocalMemoryBatch)                     \
    X(allocateBatchID)                                \
    X(submitTransfer)                                 \
    X(submitTransferWithNotify)                       \
    X(getNotifsFromEngine)                            \
    X(freeNotifsMsgBuf)                               \
    X(genNotifyInEngine)                              \
    X(getTransferStatus)                              \
    X(freeBatchID)                                    \
    X(syncSegmentCache)                               \
    X(getNicLoadStats)                                \
    X(enableGracefulShutdown)                         \
    X(showLinks)                                      \
    X(kvferry_api_version)                            \
    X(kvferry_batch_status)                           \
    X(kvferry_batch_wait)                             \
    X(kvferry_batch_await)                            \
    X(kvferry_batch_cancel)                           \
    X(kvferry_engine_last_error)                      \
    X(kvferry_metrics_text)

/* STORE_FUNCS lists the store functions (an X-macro list). */
#define STORE_FUNCS(X)                        \
    X(mooncake_store_create)                  \
    X(mooncake_store_destroy)                 \
    X(mooncake_store_setup)                   \
    X(mooncake_store_init_all)                \
    X(mooncake_store_health_check)            \
    X(mooncake_store_put)                     \
    X(mooncake_store_put_from)                \
    X(mooncake_store_batch_put_from)          \
    X(mooncake_store_get_into)                \
    X(mooncake_store_batch_get_into)          \
    X(mooncake_store_is_exist)                \
    X(mooncake_store_batch_is_exist)          \
    X(mooncake_store_get_size)                \
    X(mooncake_store_get_hostname)            \
    X(mooncake_store_remove)                  \
    X(mooncake_store_remove_by_regex)         \
    X(mooncake_store_remove_all)              \
    X(mooncake_store_register_buffer)         \
    X(mooncake_store_unregister_buffer)       \
    X(kvferry_store_upsert)                   \
    X(kvferry_store_upsert_from)              \
    X(kvferry_store_batch_upsert_from)        \
    X(kvferry_store_batch_remove)             \
    X(kvferry_store_get_alloc)                \
    X(kvferry_store_free)                     \
    X(kvferry_store_last_error)               \
    X(kvferry_store_set_tenant)               \
    X(kvferry_store_batch_put_from_multi)     \
    X(kvferry_store_batch_get_into_multi)     \
    X(kvferry_store_set_ssd_offload)          \
    X(kvferry_store_get_into_ranges)          \
    X(kvferry_store_get_session_start)        \
    X(kvferry_store_get_session_ranges)       \
    X(kvferry_store_get_session_end)          \
    X(kvferry_store_put_session_start)        \
    X(kvferry_store_put_session_ranges)       \
    X(kvferry_store_put_session_end)          \
    X(kvferry_store_put_session_revoke)       \
    X(kvferry_store_batch_replica_clear)      \
    X(kvferry_metrics_text)

/* te_api is the transfer engine, one field per name of TE_FUNCS. */
struct te_api {
    TE_FUNCS(KVF_DL_FIELD)
};

/* store_api is the store, one field per name of STORE_FUNCS. */
struct store_api {
    STORE_FUNCS(KVF_DL_FIELD)
};

/* te_load fills api from the library at path: 0, or -1 with the reason on
 * stderr. */
static inline int te_load(struct te_api *api, const char *path) {
    return KVF_DL_LOAD(kvf_dl_open(path, 0), api, TE_FUNCS);
}

/* store_load fills api from the library at path: 0, or -1 with the reason
 * on stderr. */
static inline int store_load(struct store_api *api, const char *path) {
    return KVF_DL_LOAD(kvf_dl_open(path, 0), api, STORE_FUNCS);
}
/* te_new_p2p is a new engine of api on 127.0.0.1 with the P2P handshake
 * (no metadata service); the program exits (status 2) if there is none. */
static inline transfer_engine_t te_new_p2p(const struct te_api *api) {
    transfer_engine_t e = api->createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "", 0, 1);
    if (!e) {
        fprintf(stderr, "createTransferEngine failed\n");
        exit(2);
    }
    /* KVFERRY_TEST_PROTOCOL names one more transport to install, as a
     * Mooncake program does with installTransport (run.sh: "efa"). */
    const char *proto = getenv("KVFERRY_TEST_PROTOCOL");
    if (proto && *proto && !api->installTransport(e, proto, NULL)) {
        fprintf(stderr, "installTransport(%s) failed\n", proto);
        exit(2);
    }
    return e;
}

/* te_new_md is a new engine of api on the metadata service that
 * KVFERRY_TEST_METADATA names (unset or P2PHANDSHAKE: the P2P handshake,
 * as te_new_p2p). Outside P2P mode its segment name is "<role>-<pid>"
 * (the address comes from MC_TCP_BIND_ADDRESS). The segment name peers
 * open it by goes to name (n bytes). The program exits (status 2) if
 * there is no engine. */
static inline transfer_engine_t te_new_md(const struct te_api *api, const char *role, char *name, size_t n) {
    const char *md = getenv("KVFERRY_TEST_METADATA");
    if (!md || !*md || strcmp(md, "P2PHANDSHAKE") == 0) {
        transfer_engine_t e = te_new_p2p(api);
        api->getLocalIpAndPort(e, name, n);
        return e;
    }
    snprintf(name, n, "%s-%d", role, (int)getpid());
    transfer_engine_t e = api->createTransferEngine(md, name, "", 0, 1);
    if (!e) {
        fprintf(stderr, "createTransferEngine(%s) failed\n", role);
        exit(2);
    }
    return e;
}
#endif
