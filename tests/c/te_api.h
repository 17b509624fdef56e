/* Loads the transfer engine C API from a shared object with dlopen/dlsym,
 * the way plugins that wrap Mooncake load libtransfer_engine.so. */
#ifndef KVF_TEST_TE_API_H
#define KVF_TEST_TE_API_H
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "transfer_engine_c.h"
#include "kvferry.h"

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

struct te_api {
#define X(name) __typeof__(&name) name;
    TE_FUNCS(X)
#undef X
};

static inline int te_load(struct te_api *api, const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return -1;
    }
#define X(name)                                                              \
    api->name = (__typeof__(&name))dlsym(h, #name);                          \
    if (!api->name) {                                                        \
        fprintf(stderr, "dlsym %s: %s\n", #name, dlerror());                 \
        return -1;                                                           \
    }
    TE_FUNCS(X)
#undef X
    return 0;
}
#endif
