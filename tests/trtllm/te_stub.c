/* Link-time stand-in for libtransfer_engine.so, with no SONAME.
 *
 * TensorRT-LLM's stock Mooncake wrapper is linked against Mooncake's
 * libtransfer_engine.so, so its DT_NEEDED entry is the bare file name and the
 * loader resolves it through LD_LIBRARY_PATH at run time. route_b is linked
 * against this stub the same way and then run with LD_LIBRARY_PATH pointing
 * at kvferry's build/lib, where libtransfer_engine.so is a symlink to
 * libkvferry.so.1. Every function here aborts: if one ever runs, the loader
 * picked the stub instead of kvferry and the test fails loudly. The set of
 * functions is exactly the 15 the stock wrapper calls
 * (shared/specs/tensorrt-llm.md section 3). */
#include <stdio.h>
#include <stdlib.h>

#include "transfer_engine_c.h"

static void stub_called(const char *fn) {
    fprintf(stderr, "te_stub: %s called: the stub was loaded instead of kvferry's libtransfer_engine.so\n", fn);
    abort();
}

transfer_engine_t createTransferEngine(const char *a, const char *b, const char *c, uint64_t d, int e) {
    (void)a, (void)b, (void)c, (void)d, (void)e;
    stub_called(__func__);
    return NULL;
}
void destroyTransferEngine(transfer_engine_t e) {
    (void)e;
    stub_called(__func__);
}
int getLocalIpAndPort(transfer_engine_t e, char *b, size_t n) {
    (void)e, (void)b, (void)n;
    stub_called(__func__);
    return -1;
}
int registerLocalMemory(transfer_engine_t e, void *a, size_t n, const char *l, int r) {
    (void)e, (void)a, (void)n, (void)l, (void)r;
    stub_called(__func__);
    return -1;
}
int unregisterLocalMemory(transfer_engine_t e, void *a) {
    (void)e, (void)a;
    stub_called(__func__);
    return -1;
}
segment_id_t openSegment(transfer_engine_t e, const char *n) {
    (void)e, (void)n;
    stub_called(__func__);
    return -1;
}
batch_id_t allocateBatchID(transfer_engine_t e, size_t n) {
    (void)e, (void)n;
    stub_called(__func__);
    return INVALID_BATCH;
}
int freeBatchID(transfer_engine_t e, batch_id_t b) {
    (void)e, (void)b;
    stub_called(__func__);
    return -1;
}
int submitTransfer(transfer_engine_t e, batch_id_t b, struct transfer_request *r, size_t n) {
    (void)e, (void)b, (void)r, (void)n;
    stub_called(__func__);
    return -1;
}
int submitTransferWithNotify(transfer_engine_t e, batch_id_t b, struct transfer_request *r, size_t n,
                             notify_msg_t m) {
    (void)e, (void)b, (void)r, (void)n, (void)m;
    stub_called(__func__);
    return -1;
}
int getTransferStatus(transfer_engine_t e, batch_id_t b, size_t t, struct transfer_status *s) {
    (void)e, (void)b, (void)t, (void)s;
    stub_called(__func__);
    return -1;
}
int genNotifyInEngine(transfer_engine_t e, uint64_t t, notify_msg_t m) {
    (void)e, (void)t, (void)m;
    stub_called(__func__);
    return -1;
}
notify_msg_t *getNotifsFromEngine(transfer_engine_t e, int *n) {
    (void)e, (void)n;
    stub_called(__func__);
    return NULL;
}
int freeNotifsMsgBuf(notify_msg_t *m, int n) {
    (void)m, (void)n;
    stub_called(__func__);
    return -1;
}
int syncSegmentCache(transfer_engine_t e) {
    (void)e;
    stub_called(__func__);
    return -1;
}
