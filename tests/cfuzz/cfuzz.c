/* Fuzz driver over the library's C entry points (issue 15): it dlopens the
 * built libkvferry.so as C programs do and calls the exported functions of
 * transfer_engine_c.h, store_c.h and kvferry.h in random order with
 * generated arguments: live, destroyed and made-up handles, batch ids,
 * segment ids and task ids; NULL, empty, odd and over-long strings; counts
 * and lengths inside and outside what was registered; small output
 * buffers. Memory it passes is always its own (the C contract: the caller
 * owns the bytes it names), everything else is fair game.
 *
 *   cfuzz <lib> <seed> <calls> [store]
 *
 * Checks: no crash, no call longer than its bound (a watchdog aborts after
 * 60 s in one call), every return value one the headers document (0 or a
 * negative code; ids and sizes where those are returned), and after
 * everything is destroyed the library's goroutines and the process's file
 * descriptors are back near where they started. Prints the number of calls
 * made, for make fuzz-long's table. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvf_api.h"

static struct te_api te;
static struct store_api st;

/* ---- random numbers (xorshift64*) ---- */
static uint64_t rs;
static uint64_t rnd(void) {
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return rs * 0x2545F4914F6CDD1Dull;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static int chance(int pct) { return (int)below(100) < pct; }

/* ---- watchdog: no call may block for long ---- */
static _Atomic(const char *) cur_call;
static _Atomic int64_t cur_start;
static uint64_t calls;

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        sleep(1);
        const char *c = atomic_load(&cur_call);
        int64_t s = atomic_load(&cur_start);
        if (c && now_ms() - s > 60000) {
            fprintf(stderr, "cfuzz: HANG: %s blocked for %" PRId64 " ms (call %" PRIu64 ")\n", c, now_ms() - s, calls);
            abort();
        }
    }
    return NULL;
}
#define CALL(name, expr)                                 \
    ({                                                   \
        atomic_store(&cur_start, now_ms());              \
        atomic_store(&cur_call, name);                   \
        __typeof__(expr) r_ = (expr);                    \
        atomic_store(&cur_call, (const char *)NULL);     \
        calls++;                                         \
        r_;                                              \
    })
#define VCALL(name, expr)                                \
    do {                                                 \
        atomic_store(&cur_start, now_ms());              \
        atomic_store(&cur_call, name);                   \
        expr;                                            \
        atomic_store(&cur_call, (const char *)NULL);     \
        calls++;                                         \
    } while (0)

static void bad(const char *what, long long v) {
    fprintf(stderr, "cfuzz: %s returned %lld, outside what the header documents (call %" PRIu64 ")\n", what, v, calls);
    exit(1);
}
/* A resource-style return: 0 or a negative code. */
static void rc_ok(const char *what, long long rc) {
    if (rc > 0) bad(what, rc);
}
/* A batch-style return (submitTransfer, getTransferStatus, freeBatchID):
 * Mooncake's non-negative status codes 0-4, 8, 200 and 202. */
static void st_ok(const char *what, long long rc) {
    if (rc < 0 || (rc > 4 && rc != 8 && rc != 200 && rc != 202)) bad(what, rc);
}

/* ---- state ---- */
#define MEM (8u << 20)
static uint8_t *mem;
#define NENG 3
static transfer_engine_t eng[NENG];
static char segname[NENG][128];
static transfer_engine_t dead[8];
static int ndead;
struct reg { void *addr; size_t len; int e; };
static struct reg regs[64];
static int nregs;
static batch_id_t batches[32];
static int nbatches;
static segment_id_t segs[16];
static int nsegs;
static mooncake_store_t store;

static const char *pick_str(void) {
    static char longs[5000];
    static const char *pool[] = {"", "x", "tcp", "rdma", "nvmeof", "cuda:0", "cpu:0", "*", "127.0.0.1:1",
                                 "P2PHANDSHAKE", "http://127.0.0.1:1/metadata", "etcd://127.0.0.1:1", "\xff\xfe",
                                 "a\tb c", "../../etc/passwd", "%s%n", NULL};
    if (chance(3)) {
        memset(longs, 'a' + (int)below(26), sizeof longs - 1);
        longs[below(sizeof longs - 1)] = 0;
        return longs;
    }
    return pool[below(sizeof pool / sizeof pool[0])];
}

static transfer_engine_t pick_engine(void) {
    int k = (int)below(10);
    if (k < 7) return eng[below(NENG)];
    if (k < 8 && ndead) return dead[below(ndead)];
    if (k < 9) return NULL;
    return (transfer_engine_t)(uintptr_t)rnd();
}

static int live(int i) { return eng[i] != NULL; }

static void *pick_addr(size_t *len) {
    size_t off = below(MEM);
    size_t max = MEM - off;
    size_t n = chance(20) ? 0 : 1 + below(chance(50) ? 4096 : max);
    if (n > max) n = max;
    if (len) *len = n;
    return mem + off;
}

static batch_id_t pick_batch(void) {
    if (nbatches && chance(80)) return batches[below(nbatches)];
    return chance(50) ? INVALID_BATCH : rnd();
}

static segment_id_t pick_seg(void) {
    if (nsegs && chance(70)) return segs[below(nsegs)];
    return chance(50) ? LOCAL_SEGMENT : (segment_id_t)rnd();
}

static uint64_t pick_target(void) {
    /* Inside a registration of some engine (another one's, or ours), or
     * anywhere. */
    if (nregs && chance(70)) {
        struct reg *r = &regs[below(nregs)];
        return (uint64_t)(uintptr_t)r->addr + below(r->len + 64);
    }
    return rnd();
}

static void op_create(void) {
    int i = (int)below(NENG);
    if (live(i)) return;
    const char *meta = chance(90) ? "P2PHANDSHAKE" : pick_str();
    const char *host = chance(90) ? "127.0.0.1" : pick_str();
    transfer_engine_t e = CALL("createTransferEngine", te.createTransferEngine(meta, host, chance(90) ? "" : pick_str(), chance(90) ? 0 : rnd() % 70000, (int)below(2)));
    eng[i] = e;
    segname[i][0] = 0;
    if (e) {
        int rc = CALL("getLocalIpAndPort", te.getLocalIpAndPort(e, segname[i], sizeof segname[i]));
        if (rc != 0) segname[i][0] = 0;
    }
}

static void op_destroy(void) {
    int i = (int)below(NENG);
    if (!live(i)) return;
    VCALL("destroyTransferEngine", te.destroyTransferEngine(eng[i]));
    if (ndead < 8) dead[ndead++] = eng[i];
    else dead[below(8)] = eng[i];
    for (int k = 0; k < nregs;) {
        if (regs[k].e == i) regs[k] = regs[--nregs];
        else k++;
    }
    eng[i] = NULL;
    nbatches = 0; /* ids of other engines stay valid but we forget them: fine */
}

static void op_register(void) {
    int i = (int)below(NENG);
    size_t n;
    void *a = pick_addr(&n);
    const char *loc = chance(80) ? "cpu:0" : pick_str();
    int rc = CALL("registerLocalMemory", te.registerLocalMemory(chance(90) ? eng[i] : pick_engine(), chance(95) ? a : NULL, n, loc, (int)below(2)));
    rc_ok("registerLocalMemory", rc);
    if (rc == 0 && live(i) && nregs < 64) regs[nregs++] = (struct reg){a, n, i};
}

static void op_unregister(void) {
    if (nregs && chance(70)) {
        int k = (int)below(nregs);
        int rc = CALL("unregisterLocalMemory", te.unregisterLocalMemory(eng[regs[k].e], regs[k].addr));
        rc_ok("unregisterLocalMemory", rc);
        if (rc == 0) regs[k] = regs[--nregs];
        return;
    }
    rc_ok("unregisterLocalMemory", CALL("unregisterLocalMemory", te.unregisterLocalMemory(pick_engine(), pick_addr(NULL))));
}

static void op_register_batch(void) {
    buffer_entry_t list[8];
    size_t n = below(9);
    for (size_t k = 0; k < n; k++) list[k].addr = pick_addr(&list[k].length);
    int i = (int)below(NENG);
    int rc = CALL("registerLocalMemoryBatch", te.registerLocalMemoryBatch(chance(90) ? eng[i] : pick_engine(), chance(95) ? list : NULL, n, chance(80) ? "cpu:0" : pick_str()));
    rc_ok("registerLocalMemoryBatch", rc);
    if (rc == 0 && live(i))
        for (size_t k = 0; k < n && nregs < 64; k++) regs[nregs++] = (struct reg){list[k].addr, list[k].length, i};
    void *addrs[8];
    size_t m = below(9);
    for (size_t k = 0; k < m; k++) addrs[k] = nregs && chance(50) ? regs[below(nregs)].addr : pick_addr(NULL);
    rc = CALL("unregisterLocalMemoryBatch", te.unregisterLocalMemoryBatch(pick_engine(), chance(95) ? addrs : NULL, m));
    rc_ok("unregisterLocalMemoryBatch", rc);
    if (rc == 0) nregs = 0; /* we lost track of which went: forget them all */
}

static void op_segments(void) {
    transfer_engine_t e = pick_engine();
    int other = (int)below(NENG);
    const char *name = segname[other][0] && chance(70) ? segname[other] : pick_str();
    segment_id_t id;
    switch (below(4)) {
    case 0:
        id = CALL("openSegment", te.openSegment(e, name));
        if (id >= 0 && nsegs < 16) segs[nsegs++] = id;
        break;
    case 1:
        id = CALL("openSegmentNoCache", te.openSegmentNoCache(e, name));
        if (id >= 0 && nsegs < 16) segs[nsegs++] = id;
        break;
    case 2:
        rc_ok("closeSegment", CALL("closeSegment", te.closeSegment(e, pick_seg())));
        break;
    default:
        rc_ok("removeLocalSegment", CALL("removeLocalSegment", te.removeLocalSegment(e, name)));
    }
}

static void op_transport(void) {
    transfer_engine_t e = pick_engine();
    if (chance(50)) {
        void *args[2] = {(void *)pick_str(), NULL};
        (void)CALL("installTransport", te.installTransport(e, pick_str(), chance(50) ? args : NULL));
    } else {
        rc_ok("uninstallTransport", CALL("uninstallTransport", te.uninstallTransport(e, pick_str())));
    }
}

static void op_batch(void) {
    transfer_engine_t e = pick_engine();
    size_t cap = chance(90) ? below(64) : rnd();
    batch_id_t b = CALL("allocateBatchID", te.allocateBatchID(e, cap));
    if (b != INVALID_BATCH && nbatches < 32) batches[nbatches++] = b;
}

static void op_submit(void) {
    struct transfer_request req[16];
    size_t n = below(17);
    for (size_t k = 0; k < n; k++) {
        size_t len;
        req[k].source = pick_addr(&len);
        req[k].length = chance(95) ? len : rnd();
        if (req[k].length > (size_t)(mem + MEM - (uint8_t *)req[k].source)) req[k].length = mem + MEM - (uint8_t *)req[k].source;
        req[k].opcode = chance(90) ? (int)below(2) : (int)rnd();
        req[k].target_id = pick_seg();
        req[k].target_offset = pick_target();
        if (req[k].target_offset + req[k].length < req[k].target_offset) req[k].target_offset = 0;
    }
    transfer_engine_t e = pick_engine();
    batch_id_t b = pick_batch();
    int rc;
    if (chance(30)) rc_ok("kvferry_batch_await", CALL("kvferry_batch_await", te.kvferry_batch_await(e, b)));
    if (chance(70)) {
        rc = CALL("submitTransfer", te.submitTransfer(e, b, chance(95) ? req : NULL, n));
    } else {
        notify_msg_t m = {(char *)pick_str(), (char *)pick_str()};
        rc = CALL("submitTransferWithNotify", te.submitTransferWithNotify(e, b, chance(95) ? req : NULL, n, m));
    }
    st_ok("submitTransfer", rc);
}

static void op_status(void) {
    transfer_engine_t e = pick_engine();
    batch_id_t b = pick_batch();
    struct transfer_status s;
    switch (below(5)) {
    case 0:
    case 1: {
        int rc = CALL("getTransferStatus", te.getTransferStatus(e, b, chance(90) ? below(20) : rnd(), chance(95) ? &s : NULL));
        st_ok("getTransferStatus", rc);
        if (rc == 0 && (s.status < STATUS_WAITING || s.status > STATUS_FAILED)) bad("getTransferStatus status", s.status);
        break;
    }
    case 2: {
        int state = -1;
        uint64_t bytes;
        size_t tasks;
        int rc = CALL("kvferry_batch_status", te.kvferry_batch_status(e, b, chance(95) ? &state : NULL, chance(95) ? &bytes : NULL, chance(95) ? &tasks : NULL));
        rc_ok("kvferry_batch_status", rc);
        break;
    }
    case 3: {
        int state;
        rc_ok("kvferry_batch_wait", CALL("kvferry_batch_wait", te.kvferry_batch_wait(e, b, (int64_t)below(50) - 5, chance(95) ? &state : NULL)));
        break;
    }
    default:
        if (chance(30)) rc_ok("kvferry_batch_cancel", CALL("kvferry_batch_cancel", te.kvferry_batch_cancel(e, b)));
        else {
            int rc = CALL("freeBatchID", te.freeBatchID(e, b));
            st_ok("freeBatchID", rc);
            if (rc == 0)
                for (int k = 0; k < nbatches; k++)
                    if (batches[k] == b) { batches[k] = batches[--nbatches]; break; }
        }
    }
}

static void op_notify(void) {
    transfer_engine_t e = pick_engine();
    if (chance(50)) {
        int n = -1;
        notify_msg_t *m = CALL("getNotifsFromEngine", te.getNotifsFromEngine(e, chance(95) ? &n : NULL));
        if (m && n < 0) bad("getNotifsFromEngine size", n);
        if (m) rc_ok("freeNotifsMsgBuf", CALL("freeNotifsMsgBuf", te.freeNotifsMsgBuf(m, n)));
        else if (chance(10)) (void)CALL("freeNotifsMsgBuf", te.freeNotifsMsgBuf(NULL, (int)below(3)));
    } else {
        notify_msg_t m = {(char *)pick_str(), (char *)pick_str()};
        rc_ok("genNotifyInEngine", CALL("genNotifyInEngine", te.genNotifyInEngine(e, (uint64_t)pick_seg(), m)));
    }
}

static void op_misc(void) {
    transfer_engine_t e = pick_engine();
    char small[96];
    size_t len = below(sizeof small + 1);
    switch (below(9)) {
    case 0: rc_ok("syncSegmentCache", CALL("syncSegmentCache", te.syncSegmentCache(e))); break;
    case 1: rc_ok("getLocalIpAndPort", CALL("getLocalIpAndPort", te.getLocalIpAndPort(e, chance(90) ? small : NULL, len))); break;
    case 2: (void)CALL("showLinks", te.showLinks(e, chance(90) ? small : NULL, len, (int)below(2))); break;
    case 3: {
        nic_load_stat_t s[4];
        size_t n = below(5);
        rc_ok("getNicLoadStats", CALL("getNicLoadStats", te.getNicLoadStats(e, chance(90) ? s : NULL, chance(95) ? &n : NULL)));
        break;
    }
    case 4: (void)CALL("kvferry_engine_last_error", te.kvferry_engine_last_error(e, chance(90) ? small : NULL, len)); break;
    case 5: (void)CALL("kvferry_metrics_text", te.kvferry_metrics_text(chance(90) ? small : NULL, len)); break;
    case 6: (void)CALL("discoverTopology", te.discoverTopology(e)); break;
    case 7: (void)CALL("warmupEfaSegment", te.warmupEfaSegment(e, pick_str())); break;
    default: if (chance(5)) VCALL("enableGracefulShutdown", te.enableGracefulShutdown(e));
    }
}

static void op_store(void) {
    if (!store) return;
    char key[32];
    snprintf(key, sizeof key, "k%u", (unsigned)below(64));
    const char *k = chance(90) ? key : pick_str();
    size_t n;
    void *a = pick_addr(&n);
    if (n > (1u << 20)) n = 1u << 20;
    mooncake_store_t s = chance(95) ? store : (mooncake_store_t)(uintptr_t)(chance(50) ? 0 : rnd());
    switch (below(10)) {
    case 0: rc_ok("store_put", CALL("mooncake_store_put", st.mooncake_store_put(s, k, chance(95) ? a : NULL, n, NULL))); break;
    case 1: rc_ok("store_upsert", CALL("kvferry_store_upsert", st.kvferry_store_upsert(s, k, a, n, NULL))); break;
    case 2: {
        int64_t r = CALL("mooncake_store_get_into", st.mooncake_store_get_into(s, k, chance(95) ? a : NULL, n));
        (void)r;
        break;
    }
    case 3: (void)CALL("mooncake_store_is_exist", st.mooncake_store_is_exist(s, k)); break;
    case 4: (void)CALL("mooncake_store_get_size", st.mooncake_store_get_size(s, k)); break;
    case 5: rc_ok("store_remove", CALL("mooncake_store_remove", st.mooncake_store_remove(s, k, (int)below(2)))); break;
    case 6: (void)CALL("mooncake_store_remove_by_regex", st.mooncake_store_remove_by_regex(s, chance(80) ? "k[0-9]" : pick_str(), (int)below(2))); break;
    case 7: {
        const char *keys[4];
        void *bufs[4];
        size_t sizes[4];
        int res[4];
        int64_t res64[4];
        size_t c = below(5);
        for (size_t i = 0; i < c; i++) {
            keys[i] = chance(90) ? key : pick_str();
            bufs[i] = pick_addr(&sizes[i]);
            if (sizes[i] > 65536) sizes[i] = 65536;
        }
        if (chance(50)) rc_ok("store_batch_put_from", CALL("mooncake_store_batch_put_from", st.mooncake_store_batch_put_from(s, chance(95) ? keys : NULL, bufs, sizes, c, NULL, chance(95) ? res : NULL)));
        else rc_ok("store_batch_get_into", CALL("mooncake_store_batch_get_into", st.mooncake_store_batch_get_into(s, keys, chance(95) ? bufs : NULL, sizes, c, chance(95) ? res64 : NULL)));
        break;
    }
    case 8: {
        size_t rn;
        void *ra = pick_addr(&rn);
        if (chance(50)) rc_ok("store_register_buffer", CALL("mooncake_store_register_buffer", st.mooncake_store_register_buffer(s, ra, rn)));
        else rc_ok("store_unregister_buffer", CALL("mooncake_store_unregister_buffer", st.mooncake_store_unregister_buffer(s, ra)));
        break;
    }
    default: {
        char small[64];
        (void)CALL("mooncake_store_get_hostname", st.mooncake_store_get_hostname(s, chance(90) ? small : NULL, below(sizeof small + 1)));
        (void)CALL("kvferry_store_last_error", st.kvferry_store_last_error(s, small, below(sizeof small + 1)));
    }
    }
}

static long goroutines(void) {
    long n = metrics_goroutines(te.kvferry_metrics_text);
    if (n < 0) {
        fprintf(stderr, "cfuzz: no go_goroutines in the metrics\n");
        exit(1);
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: cfuzz <lib> <seed> <calls> [store]\n");
        return 2;
    }
    if (te_load(&te, argv[1]) != 0 || store_load(&st, argv[1]) != 0) return 2;
    rs = strtoull(argv[2], NULL, 0) * 0x9E3779B97F4A7C15ull + 1;
    uint64_t want = strtoull(argv[3], NULL, 0);
    int with_store = argc > 4 && strcmp(argv[4], "store") == 0;
    mem = map_buf(MEM);
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog, NULL);
    (void)te.kvferry_api_version();
    long g0 = goroutines();
    int fd0 = count_fds();
    if (with_store) {
        store = st.mooncake_store_create();
        if (!store || st.mooncake_store_setup(store, "127.0.0.1", "P2PHANDSHAKE", 16u << 20, 16u << 20, "tcp", "", "") != 0) {
            fprintf(stderr, "cfuzz: store setup failed\n");
            return 2;
        }
    }
    int64_t t0 = now_ms();
    while (calls < want) {
        switch (below(20)) {
        case 0: op_create(); break;
        case 1: if (chance(20)) op_destroy(); break;
        case 2: op_transport(); break;
        case 3: case 4: op_register(); break;
        case 5: op_unregister(); break;
        case 6: op_register_batch(); break;
        case 7: case 8: op_segments(); break;
        case 9: op_batch(); break;
        case 10: case 11: op_submit(); break;
        case 12: case 13: op_status(); break;
        case 14: op_notify(); break;
        case 15: op_misc(); break;
        default: if (with_store) op_store(); else op_status();
        }
    }
    double secs = (now_ms() - t0) / 1000.0;
    /* Tear down; what is left must be what was there at the start. */
    for (int i = 0; i < nbatches; i++)
        for (int e = 0; e < NENG; e++)
            if (eng[e]) {
                te.kvferry_batch_cancel(eng[e], batches[i]);
                te.freeBatchID(eng[e], batches[i]);
            }
    for (int i = 0; i < NENG; i++)
        if (eng[i]) te.destroyTransferEngine(eng[i]);
    if (store) st.mooncake_store_destroy(store);
    long g1 = -1;
    int fd1 = -1;
    for (int k = 0; k < 100; k++) { /* goroutines wind down */
        g1 = goroutines();
        fd1 = count_fds();
        if (g1 <= g0 + 8 && fd1 <= fd0 + 4) break;
        usleep(100000);
    }
    printf("cfuzz: %" PRIu64 " calls in %.1f s (%.0f/s), seed %s%s; goroutines %ld -> %ld, fds %d -> %d\n", calls, secs,
           calls / (secs > 0 ? secs : 1), argv[2], with_store ? ", store" : "", g0, g1, fd0, fd1);
    if (g1 > g0 + 8 || fd1 > fd0 + 4) {
        fprintf(stderr, "cfuzz: leaked goroutines or fds after everything was destroyed\n");
        return 1;
    }
    return 0;
}
