/* Route B: TensorRT-LLM's stock Mooncake wrapper over kvferry.
 *
 * This program replays, call for call, how TensorRT-LLM's
 * libtensorrt_llm_mooncake_wrapper.so drives the Mooncake C API and how the
 * C++ cache transceiver drives that wrapper (shared/specs/tensorrt-llm.md
 * sections 3 and 4). It is linked like the wrapper (DT_NEEDED
 * libtransfer_engine.so, see te_stub.c) and run against kvferry's
 * libtransfer_engine.so symlink.
 *
 *   route_b ctx <dir> [nbuf] [buf_mib] [rounds]
 *       The context (sender) instance. Creates a P2P engine, registers nbuf
 *       host buffers with location "*", publishes "<ip:port> <agent name>"
 *       in <dir>/ctx.info, then serves requests: each request-and-buffer
 *       message from a generation agent makes it open the peer's segment
 *       (once), write one large block into the peer's receive buffer by
 *       absolute address, poll getTransferStatus every 1 ms, free the batch,
 *       call syncSegmentCache, and send the sync message (round 1 rides on
 *       submitTransferWithNotify instead).
 *   route_b gen <dir> [nbuf] [buf_mib] [rounds]
 *       The generation (receiver) instance. Opens the context segment from
 *       its connection info, sends one request per round, waits for the sync
 *       message and compares its receive buffer byte by byte (plus guard
 *       bytes on both sides), then acknowledges.
 *
 * Both sides drain notifications the way the transceiver does: several
 * threads busy-poll getNotifsFromEngine; messages are base64 (the wrapper
 * encodes them because the C API carries NUL-terminated strings) and carry
 * binary payloads with NUL bytes. The returned arrays are released with
 * plain free() (and, on one thread, freeNotifsMsgBuf, as the wrapper does).
 * Exit status 0 means every check passed. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvf_test.h"
#include "transfer_engine_c.h"

#ifndef POLLERS
#define POLLERS 4
#endif
#define MAX_MSGS 256
#define GUARD 4096
#define WAIT_S 120.0

/* ---- base64 (standard alphabet, '=' padding), as the wrapper uses ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const uint8_t *p, size_t n) {
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = B64[v >> 18], *o++ = B64[(v >> 12) & 63], *o++ = B64[(v >> 6) & 63], *o++ = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = B64[v >> 18], *o++ = B64[(v >> 12) & 63], *o++ = '=', *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = B64[v >> 18], *o++ = B64[(v >> 12) & 63], *o++ = B64[(v >> 6) & 63], *o++ = '=';
    }
    *o = 0;
    return out;
}

/* Decodes s into a malloc'd buffer; returns its length, or -1 if s is not
 * base64. */
static long b64_decode(const char *s, uint8_t **out) {
    size_t n = strlen(s);
    uint8_t *buf = malloc(n / 4 * 3 + 3);
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        const char *c = strchr(B64, s[i]);
        if (!c || !s[i]) {
            free(buf);
            return -1;
        }
        acc = acc << 6 | (uint32_t)(c - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[k++] = (uint8_t)(acc >> bits);
        }
    }
    *out = buf;
    return (long)k;
}

/* ---- binary control messages (stand-ins for RequestAndBufferInfo,
 * NotificationSyncInfo and the acknowledgement; NUL bytes on purpose) ---- */

enum { MSG_REQUEST = 'R', MSG_SYNC = 'S', MSG_ACK = 'A', MSG_QUIT = 'Q' };

struct wire {
    uint8_t b[1024];
    size_t n;
};

static void put(struct wire *w, const void *p, size_t n) {
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void put64(struct wire *w, uint64_t v) { put(w, &v, 8); }
static void putstr(struct wire *w, const char *s) {
    uint32_t n = (uint32_t)strlen(s);
    put(w, &n, 4);
    put(w, s, n);
}

struct reader {
    const uint8_t *b;
    size_t n, off;
    int bad;
};

static void get(struct reader *r, void *p, size_t n) {
    if (r->off + n > r->n) {
        r->bad = 1;
        memset(p, 0, n);
        return;
    }
    memcpy(p, r->b + r->off, n);
    r->off += n;
}
static uint64_t get64(struct reader *r) {
    uint64_t v;
    get(r, &v, 8);
    return v;
}
static void getstr(struct reader *r, char *out, size_t cap) {
    uint32_t n = 0;
    get(r, &n, 4);
    if (n >= cap || r->off + n > r->n) {
        r->bad = 1;
        out[0] = 0;
        return;
    }
    memcpy(out, r->b + r->off, n);
    out[n] = 0;
    r->off += n;
}

/* ---- the agent: engine, names, mailbox filled by poller threads ---- */

struct msg {
    char name[128];
    uint8_t *data;
    long len;
};

static transfer_engine_t eng;
static char my_conn[64];   /* getLocalIpAndPort, as getLocalConnectionInfo */
static char my_agent[128]; /* hostname_pid_random, as the transceiver names agents */
static pthread_mutex_t mbox_mu = PTHREAD_MUTEX_INITIALIZER;
static struct msg mbox[MAX_MSGS];
static int mbox_n;
static atomic_int stop_pollers;
static atomic_long drained; /* notifications taken from the engine */

static void *poller(void *arg) {
    int idx = (int)(intptr_t)arg;
    while (!atomic_load(&stop_pollers)) {
        int n = -1;
        notify_msg_t *a = getNotifsFromEngine(eng, &n);
        if (a == NULL) {
            CHECK(n == 0, "empty drain must report size 0, got %d", n);
            sched_yield(); /* busy poll, as the transceiver threads do */
            continue;
        }
        CHECK(n > 0, "non-NULL array with size %d", n);
        for (int i = 0; i < n; i++) {
            struct msg m = {0};
            CHECK(a[i].name && a[i].msg, "NULL name or message");
            snprintf(m.name, sizeof m.name, "%s", a[i].name ? a[i].name : "");
            m.len = a[i].msg ? b64_decode(a[i].msg, &m.data) : -1;
            CHECK(m.len >= 0, "message is not base64: %s", a[i].msg ? a[i].msg : "(null)");
            if (m.len < 0) continue;
            pthread_mutex_lock(&mbox_mu);
            if (mbox_n < MAX_MSGS) mbox[mbox_n++] = m;
            pthread_mutex_unlock(&mbox_mu);
        }
        atomic_fetch_add(&drained, n);
        if (idx == 0) {
            freeNotifsMsgBuf(a, n); /* the wrapper's way */
        } else {
            for (int i = 0; i < n; i++) { /* the way: plain free() */
                free(a[i].name);
                free(a[i].msg);
            }
            free(a);
        }
    }
    return NULL;
}

/* Takes the oldest message of the given kind (first byte); 0 on timeout. */
static int take(int kind, struct msg *out, double timeout) {
    double end = now_s() + timeout;
    while (now_s() < end) {
        pthread_mutex_lock(&mbox_mu);
        for (int i = 0; i < mbox_n; i++) {
            if (mbox[i].len > 0 && mbox[i].data[0] == kind) {
                *out = mbox[i];
                memmove(mbox + i, mbox + i + 1, (size_t)(mbox_n - i - 1) * sizeof mbox[0]);
                mbox_n--;
                pthread_mutex_unlock(&mbox_mu);
                return 1;
            }
        }
        pthread_mutex_unlock(&mbox_mu);
        sleep_ms(1);
    }
    return 0;
}

/* notifySyncMessage: base64 over genNotifyInEngine. */
static void notify(segment_id_t seg, const struct wire *w) {
    char *b64 = b64_encode(w->b, w->n);
    notify_msg_t m = {.name = my_agent, .msg = b64};
    int rc = genNotifyInEngine(eng, (uint64_t)seg, m);
    CHECK(rc == 0, "genNotifyInEngine = %d", rc);
    free(b64);
}

static void start_agent(const char *role, int nbuf, size_t buf_len, uint8_t **bufs, pthread_t *th) {
    /* The wrapper's constructor: IP from TLLM_MOONCAKE_IP_ADDR, else 127.0.0.1. */
    const char *ip = getenv("TLLM_MOONCAKE_IP_ADDR");
    eng = createTransferEngine("P2PHANDSHAKE", ip ? ip : "127.0.0.1", "", 0, 1);
    if (!eng) {
        fprintf(stderr, "%s: createTransferEngine failed\n", role);
        exit(2);
    }
    CHECK(getLocalIpAndPort(eng, my_conn, sizeof my_conn) == 0, "getLocalIpAndPort");
    CHECK(strchr(my_conn, ':') != NULL, "connection info %s is ip:port", my_conn);
    char host[64];
    gethostname(host, sizeof host);
    snprintf(my_agent, sizeof my_agent, "%s_%d_%08x_%s", host, (int)getpid(), (unsigned)rand(), role);
    /* registerMemory: every staging buffer, location "*", remote accessible. */
    for (int i = 0; i < nbuf; i++) {
        bufs[i] = map_lazy(buf_len);
        int rc = registerLocalMemory(eng, bufs[i], buf_len, "*", 1);
        CHECK(rc == 0, "registerLocalMemory(buffer %d, %zu bytes) = %d", i, buf_len, rc);
    }
    for (int i = 0; i < POLLERS; i++) pthread_create(&th[i], NULL, poller, (void *)(intptr_t)i);
}

static void stop_agent(int nbuf, uint8_t **bufs, size_t buf_len, pthread_t *th) {
    atomic_store(&stop_pollers, 1);
    for (int i = 0; i < POLLERS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < nbuf; i++) {
        CHECK(unregisterLocalMemory(eng, bufs[i]) == 0, "unregisterLocalMemory(buffer %d)", i);
        munmap(bufs[i], buf_len);
    }
    destroyTransferEngine(eng);
}

/* Round r: which receive buffer, offsets and length (round 0 fills a whole
 * buffer; round 1 is unaligned and rides on submitTransferWithNotify; the
 * last is small). */
static void round_shape(int r, int rounds, size_t buf_len, int nbuf, int *dst_buf, size_t *src_off, size_t *dst_off,
                        size_t *len) {
    *dst_buf = 1 + r % (nbuf - 1); /* buffer 0 is the send buffer */
    if (r == 0) {
        *src_off = 0, *dst_off = 0, *len = buf_len;
    } else if (r == rounds - 1) {
        *src_off = 5, *dst_off = GUARD + 11, *len = 1000003;
    } else {
        *src_off = 3 + (size_t)r, *dst_off = GUARD + 1 + (size_t)r, *len = buf_len - 2 * GUARD - 4097 * (size_t)r;
    }
}

/* ---- ctx: serves one generation agent ---- */

static int run_ctx(const char *dir, int nbuf, size_t buf_len, int rounds) {
    uint8_t *bufs[16];
    pthread_t th[POLLERS];
    start_agent("ctx", nbuf, buf_len, bufs, th);
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/ctx.info", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%s %s\n", my_conn, my_agent);
    fclose(f);
    rename(tmp, path);

    segment_id_t seg = -1;
    char peer_agent[128] = "";
    for (int r = 0; r < rounds; r++) {
        struct msg m;
        if (!take(MSG_REQUEST, &m, WAIT_S)) {
            CHECK(0, "ctx: no request for round %d", r);
            break;
        }
        struct reader rd = {m.data, (size_t)m.len, 1, 0};
        char name[128], conn[64];
        getstr(&rd, name, sizeof name);
        getstr(&rd, conn, sizeof conn);
        uint64_t tag = get64(&rd), nb = get64(&rd);
        uint64_t addr[16] = {0}, len[16] = {0};
        for (uint64_t i = 0; i < nb && i < 16; i++) addr[i] = get64(&rd), len[i] = get64(&rd);
        CHECK(!rd.bad && nb >= 1 && nb <= 16, "ctx: malformed request");
        CHECK(strcmp(name, m.name) == 0, "ctx: sender %s does not match map key %s", name, m.name);
        CHECK(tag == (uint64_t)r, "ctx: request tag %" PRIu64 " in round %d", tag, r);
        free(m.data);
        if (seg < 0) {
            /* loadRemoteAgent(name, connInfo) = openSegment(connInfo), once. */
            seg = openSegment(eng, conn);
            CHECK(seg >= 0, "ctx: openSegment(%s) = %d", conn, seg);
            CHECK(openSegment(eng, conn) == seg, "ctx: openSegment is idempotent");
            snprintf(peer_agent, sizeof peer_agent, "%s", name);
        }
        CHECK(strcmp(peer_agent, name) == 0, "ctx: same peer every round");

        int dbuf;
        size_t soff, doff, n;
        round_shape(r, rounds, buf_len, nbuf, &dbuf, &soff, &doff, &n);
        CHECK(dbuf - 1 < (int)nb && doff + n <= len[dbuf - 1], "ctx: round %d does not fit the peer's buffer", r);
        uint64_t seed = 0x5eed0000u + (uint64_t)r;
        pat_fill(bufs[0] + soff, n, seed, 0); /* the "format" kernel */

        /* submitTransferRequests: one descriptor pair, absolute remote address. */
        batch_id_t b = allocateBatchID(eng, 1024);
        CHECK(b != INVALID_BATCH, "ctx: allocateBatchID(1024)");
        struct transfer_request req = {
            .opcode = OPCODE_WRITE,
            .source = bufs[0] + soff,
            .target_id = seg,
            .target_offset = addr[dbuf - 1] + doff,
            .length = n,
        };
        struct wire sync = {.n = 0};
        uint8_t kind = MSG_SYNC;
        put(&sync, &kind, 1);
        put64(&sync, tag);
        put64(&sync, seed);
        put64(&sync, (uint64_t)dbuf);
        put64(&sync, doff);
        put64(&sync, n);
        int with_notify = (r == 1);
        double t0 = now_s();
        int rc;
        if (with_notify) {
            char *b64 = b64_encode(sync.b, sync.n);
            notify_msg_t nm = {.name = my_agent, .msg = b64};
            rc = submitTransferWithNotify(eng, b, &req, 1, nm);
            free(b64); /* the engine must have copied it */
        } else {
            rc = submitTransfer(eng, b, &req, 1);
        }
        CHECK(rc == 0, "ctx: submit round %d = %d", r, rc);

        /* TransferStatus::wait(): poll every task, sleep 1 ms between polls;
         * anything but COMPLETED/FAILED counts as still running. */
        int state = -1;
        double end = now_s() + WAIT_S;
        while (now_s() < end) {
            struct transfer_status st;
            int src = getTransferStatus(eng, b, 0, &st);
            if (src != 0 || st.status == STATUS_FAILED) {
                state = STATUS_FAILED;
                CHECK(0, "ctx: round %d failed: rc %d status %d", r, src, st.status);
                break;
            }
            if (st.status == STATUS_COMPLETED) {
                CHECK(st.transferred_bytes == n, "ctx: transferred %" PRIu64 " of %zu", st.transferred_bytes, n);
                state = STATUS_COMPLETED;
                break;
            }
            CHECK(st.status == STATUS_WAITING || st.status == STATUS_PENDING,
                  "ctx: status %d would make the wrapper spin forever", st.status);
            sleep_ms(1);
        }
        double dt = now_s() - t0;
        CHECK(state == STATUS_COMPLETED, "ctx: round %d did not complete in %.0fs", r, WAIT_S);
        if (state == STATUS_COMPLETED) {
            CHECK(freeBatchID(eng, b) == 0, "ctx: freeBatchID");
            double s0 = now_s();
            CHECK(syncSegmentCache(eng) == 0, "ctx: syncSegmentCache");
            double sdt = now_s() - s0;
            sleep_ms(1);
            printf("ctx: round %d: WRITE %zu bytes in %.3fs (%.2f GB/s)%s; syncSegmentCache %.2f ms\n", r, n, dt,
                   n / dt / 1e9, with_notify ? " with notify" : "", sdt * 1e3);
            CHECK(sdt < 1.0, "ctx: syncSegmentCache took %.3fs", sdt);
        }
        if (!with_notify) notify(seg, &sync); /* NotificationSyncInfo */
        struct msg ack;
        if (take(MSG_ACK, &ack, WAIT_S)) {
            struct reader ar = {ack.data, (size_t)ack.len, 1, 0};
            uint64_t atag = get64(&ar);
            uint8_t ok = 0;
            get(&ar, &ok, 1);
            CHECK(!ar.bad && atag == tag && ok == 1, "ctx: round %d acknowledged %" PRIu64 "/%d", r, atag, ok);
            free(ack.data);
        } else {
            CHECK(0, "ctx: no acknowledgement for round %d", r);
        }
    }
    struct msg q;
    CHECK(take(MSG_QUIT, &q, WAIT_S), "ctx: no quit message");
    sleep_ms(50);
    pthread_mutex_lock(&mbox_mu);
    CHECK(mbox_n == 0, "ctx: %d unexpected messages left", mbox_n);
    pthread_mutex_unlock(&mbox_mu);
    /* Every notification taken from the engine exactly once: a request and
     * an acknowledgement per round, plus quit. */
    CHECK(atomic_load(&drained) == 2 * rounds + 1, "ctx: drained %ld notifications, want %d",
          atomic_load(&drained), 2 * rounds + 1);
    stop_agent(nbuf, bufs, buf_len, th);
    return failures ? 1 : 0;
}

/* ---- gen: receives from the context agent ---- */

static int run_gen(const char *dir, int nbuf, size_t buf_len, int rounds) {
    uint8_t *bufs[16];
    pthread_t th[POLLERS];
    start_agent("gen", nbuf, buf_len, bufs, th);
    char path[512], ctx_conn[64] = "", ctx_agent[128] = "";
    snprintf(path, sizeof path, "%s/ctx.info", dir);
    double end = now_s() + 60;
    FILE *f = NULL;
    while (now_s() < end && !(f = fopen(path, "r"))) sleep_ms(20);
    if (!f || fscanf(f, "%63s %127s", ctx_conn, ctx_agent) != 2) {
        fprintf(stderr, "gen: no ctx.info\n");
        return 2;
    }
    fclose(f);
    /* getConnections -> loadRemoteAgent(ctxName, ctxConnInfo). */
    segment_id_t seg = openSegment(eng, ctx_conn);
    CHECK(seg >= 0, "gen: openSegment(%s) = %d", ctx_conn, seg);
    CHECK(openSegment(eng, ctx_conn) == seg, "gen: openSegment is idempotent");

    for (int r = 0; r < rounds; r++) {
        int dbuf;
        size_t soff, doff, n;
        round_shape(r, rounds, buf_len, nbuf, &dbuf, &soff, &doff, &n);
        /* Canary the whole region plus guards so stray bytes show. */
        size_t lo = doff >= GUARD ? doff - GUARD : 0, hi = doff + n + GUARD > buf_len ? buf_len : doff + n + GUARD;
        memset(bufs[dbuf] + lo, 0xEE, hi - lo);

        /* sendRequestAndBufferInfo: name, connection info, receive buffers. */
        struct wire w = {.n = 0};
        uint8_t kind = MSG_REQUEST;
        put(&w, &kind, 1);
        putstr(&w, my_agent);
        putstr(&w, my_conn);
        put64(&w, (uint64_t)r);
        put64(&w, (uint64_t)(nbuf - 1));
        for (int i = 1; i < nbuf; i++) put64(&w, (uint64_t)(uintptr_t)bufs[i]), put64(&w, buf_len);
        notify(seg, &w);

        struct msg m;
        if (!take(MSG_SYNC, &m, WAIT_S)) {
            CHECK(0, "gen: no sync message for round %d", r);
            break;
        }
        CHECK(strcmp(m.name, ctx_agent) == 0, "gen: sync from %s, want %s", m.name, ctx_agent);
        struct reader rd = {m.data, (size_t)m.len, 1, 0};
        uint64_t tag = get64(&rd), seed = get64(&rd), sbuf = get64(&rd), soff2 = get64(&rd), n2 = get64(&rd);
        free(m.data);
        CHECK(!rd.bad && tag == (uint64_t)r && sbuf == (uint64_t)dbuf && soff2 == doff && n2 == n,
              "gen: sync message fields for round %d", r);
        /* The concat kernel would read the buffer now: compare every byte. */
        size_t bad = pat_diff(bufs[dbuf] + doff, n, seed, 0);
        CHECK(bad == n, "gen: round %d: byte %zu of %zu differs", r, bad, n);
        int guards_ok = 1;
        for (size_t i = lo; i < doff; i++) guards_ok &= bufs[dbuf][i] == 0xEE;
        for (size_t i = doff + n; i < hi; i++) guards_ok &= bufs[dbuf][i] == 0xEE;
        CHECK(guards_ok, "gen: round %d wrote outside its range", r);
        printf("gen: round %d: %zu bytes compared byte by byte: %s\n", r, n, bad == n && guards_ok ? "ok" : "BAD");

        struct wire a = {.n = 0};
        uint8_t ak = MSG_ACK, ok = bad == n && guards_ok;
        put(&a, &ak, 1);
        put64(&a, tag);
        put(&a, &ok, 1);
        notify(seg, &a);
    }
    struct wire q = {.n = 0};
    uint8_t qk = MSG_QUIT;
    put(&q, &qk, 1);
    put(&q, "\0bye\0", 5);
    notify(seg, &q);
    sleep_ms(50);
    pthread_mutex_lock(&mbox_mu);
    CHECK(mbox_n == 0, "gen: %d unexpected messages left", mbox_n);
    pthread_mutex_unlock(&mbox_mu);
    CHECK(atomic_load(&drained) == rounds, "gen: drained %ld notifications, want %d", atomic_load(&drained), rounds);
    stop_agent(nbuf, bufs, buf_len, th);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s ctx|gen <dir> [nbuf] [buf_mib] [rounds]\n", argv[0]);
        return 2;
    }
    int nbuf = argc > 3 ? atoi(argv[3]) : 3;
    size_t buf_len = (size_t)(argc > 4 ? atoi(argv[4]) : 512) << 20;
    int rounds = argc > 5 ? atoi(argv[5]) : 3;
    if (nbuf < 2 || nbuf > 16 || rounds < 2 || buf_len < (16u << 20)) {
        fprintf(stderr, "need nbuf 2-16, rounds >= 2, buf_mib >= 16\n");
        return 2;
    }
    srand((unsigned)getpid());
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(argv[1], "ctx") == 0) return run_ctx(argv[2], nbuf, buf_len, rounds);
    if (strcmp(argv[1], "gen") == 0) return run_gen(argv[2], nbuf, buf_len, rounds);
    fprintf(stderr, "unknown role %s\n", argv[1]);
    return 2;
}
