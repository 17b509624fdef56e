/* One driver for the transfer engine C API over RDMA, run against either
 * kvferry's or Mooncake's libtransfer_engine.so (loaded with dlopen, only
 * the functions both export), both on the fake verbs provider
 * (tests/rdma/fakeverbs). tests/interop/rdma-mooncake.sh pairs a target and
 * an initiator of either library.
 *
 *   rdma_mooncake target <lib> <size> <ready-file>
 *       Creates an engine (P2P handshake on 127.0.0.1, transports
 *       auto-discovered), fills <size> registered bytes with pattern seed 1
 *       and writes "<segment name> <buffer address> <pid>" to <ready-file>.
 *       It answers notifications whose text ends in ":<peer segment>":
 *       "verify:<seed>:<len>:<peer>" checks the buffer against the pattern
 *       and notifies the peer "verified:ok" or "verified:bad";
 *       "fill:<seed>:<len>:<peer>" fills it and notifies "filled";
 *       "read:<len>:<peer>" (sent with a READ) notifies "read-seen";
 *       "quit" exits 0 (3 when no quit came within the deadline).
 *   rdma_mooncake initiator <lib> <segment> <addr> <size>
 *       Registers <size> bytes and, against the target: WRITEs them with a
 *       notification and has the target verify them; has the target fill
 *       its buffer and READs it back with a notification, checked here;
 *       then the same both ways again with the target's pattern changed.
 *       Each transfer is a batch of 4 MiB requests. Prints the figures and
 *       the bytes the initiator's fake NICs moved as requester, which must
 *       cover every byte: the data went over RDMA, not another transport.
 *
 * Exit status 0 when every check passed. Every wait has a deadline. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "transfer_engine_c.h"
#include "kvf_test.h"

/* The C API functions both libraries export. */
#define TE_FUNCS(X)           \
    X(createTransferEngine)   \
    X(getLocalIpAndPort)      \
    X(openSegment)            \
    X(destroyTransferEngine)  \
    X(registerLocalMemory)    \
    X(unregisterLocalMemory)  \
    X(allocateBatchID)        \
    X(submitTransfer)         \
    X(submitTransferWithNotify) \
    X(getNotifsFromEngine)    \
    X(freeNotifsMsgBuf)       \
    X(genNotifyInEngine)      \
    X(getTransferStatus)      \
    X(freeBatchID)

static struct {
    TE_FUNCS(KVF_DL_FIELD)
} te;

static int load(const char *path) { return KVF_DL_LOAD(kvf_dl_open(path, 0), &te, TE_FUNCS); }

#define CHUNK (4u << 20)
#define DEADLINE 60.0

static int matches(const uint8_t *p, size_t n, uint64_t seed) {
    uint8_t *want = malloc(n);
    if (!want) return 0;
    pattern(want, n, seed);
    int ok = memcmp(want, p, n) == 0;
    free(want);
    return ok;
}

/* The bytes the process's fake NICs moved as requester: the fake provider
 * is already loaded (by path for kvferry, by soname for Mooncake). */
static unsigned long long fake_bytes(void) {
    const char *paths[] = {getenv("KVFERRY_IBVERBS_LIB"), "libibverbs.so.1"};
    for (size_t i = 0; i < 2; i++) {
        if (!paths[i]) continue;
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_NOLOAD);
        if (!h) continue;
        unsigned long long (*fn)(const char *) = (unsigned long long (*)(const char *))dlsym(h, "fakeverbs_bytes");
        if (!fn) continue;
        const char *devs = getenv("FAKEVERBS_DEVICES");
        char buf[256];
        snprintf(buf, sizeof buf, "%s", devs ? devs : "fake_mlx5_0");
        unsigned long long sum = 0;
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) sum += fn(t);
        return sum;
    }
    return 0;
}

static transfer_engine_t new_engine(void) {
    transfer_engine_t e = te.createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "", 0, 1);
    if (!e) {
        fprintf(stderr, "createTransferEngine failed\n");
        exit(2);
    }
    return e;
}

static void notify(transfer_engine_t e, segment_id_t peer, const char *name, const char *msg) {
    notify_msg_t m = {.name = (char *)name, .msg = (char *)msg};
    int rc = te.genNotifyInEngine(e, (uint64_t)peer, m);
    if (rc != 0) fprintf(stderr, "genNotifyInEngine(%s) = %d\n", msg, rc);
}

/* ---- target ---- */

static int run_target(size_t size, const char *ready) {
    transfer_engine_t e = new_engine();
    uint8_t *buf = map_buf(size);
    pattern(buf, size, 1);
    if (te.registerLocalMemory(e, buf, size, "cpu:0", 1) != 0) {
        fprintf(stderr, "target: registerLocalMemory failed\n");
        return 2;
    }
    char name[128] = "";
    if (te.getLocalIpAndPort(e, name, sizeof name) != 0 || !*name) {
        fprintf(stderr, "target: getLocalIpAndPort failed\n");
        return 2;
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", ready);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        return 2;
    }
    fprintf(f, "%s %" PRIuPTR " %d\n", name, (uintptr_t)buf, (int)getpid());
    fclose(f);
    rename(tmp, ready);
    double end = now_s() + 4 * DEADLINE;
    while (now_s() < end) {
        int n = 0;
        notify_msg_t *msgs = te.getNotifsFromEngine(e, &n);
        for (int i = 0; i < n; i++) {
            const char *m = msgs[i].msg;
            if (strcmp(m, "quit") == 0) {
                te.freeNotifsMsgBuf(msgs, n);
                te.unregisterLocalMemory(e, buf);
                te.destroyTransferEngine(e);
                fprintf(stderr, "target: quit\n");
                return 0;
            }
            uint64_t seed;
            size_t len;
            char peer_name[128];
            const char *reply = NULL;
            char verdict[32];
            if (sscanf(m, "verify:%" SCNu64 ":%zu:%127s", &seed, &len, peer_name) == 3 && len <= size) {
                int ok = matches(buf, len, seed);
                snprintf(verdict, sizeof verdict, "verified:%s", ok ? "ok" : "bad");
                reply = verdict;
            } else if (sscanf(m, "fill:%" SCNu64 ":%zu:%127s", &seed, &len, peer_name) == 3 && len <= size) {
                pattern(buf, len, seed);
                reply = "filled";
            } else if (sscanf(m, "read:%zu:%127s", &len, peer_name) == 2) {
                reply = "read-seen";
            } else {
                fprintf(stderr, "target: unexpected notification %s from %s\n", m, msgs[i].name);
                continue;
            }
            segment_id_t peer = te.openSegment(e, peer_name);
            if (peer < 0) {
                fprintf(stderr, "target: openSegment(%s) = %d\n", peer_name, peer);
                continue;
            }
            notify(e, peer, "target", reply);
        }
        if (n > 0) te.freeNotifsMsgBuf(msgs, n);
        usleep(500);
    }
    fprintf(stderr, "target: no quit within the deadline\n");
    return 3;
}

/* ---- initiator ---- */

/* Waits for the next notification; returns its malloc'd text or NULL. */
static char *next_notify(transfer_engine_t e, double timeout) {
    double end = now_s() + timeout;
    while (now_s() < end) {
        int n = 0;
        notify_msg_t *msgs = te.getNotifsFromEngine(e, &n);
        if (n > 0) {
            char *m = strdup(msgs[0].msg);
            if (n > 1) fprintf(stderr, "initiator: %d notifications at once, kept the first\n", n);
            te.freeNotifsMsgBuf(msgs, n);
            return m;
        }
        usleep(500);
    }
    return NULL;
}

static void expect_notify(transfer_engine_t e, const char *want) {
    char *m = next_notify(e, DEADLINE);
    CHECK(m && strcmp(m, want) == 0, "notification: got %s, want %s", m ? m : "(none within the deadline)", want);
    free(m);
}

/* One batch of CHUNK-sized requests over [0, size); with a notification
 * when msg is set. Returns the seconds from submit to the last completion,
 * or -1 on failure. */
static double transfer(transfer_engine_t e, int opcode, uint8_t *local, segment_id_t seg, uint64_t remote,
                       size_t size, const char *my_name, const char *msg) {
    size_t n = (size + CHUNK - 1) / CHUNK;
    struct transfer_request *reqs = calloc(n, sizeof *reqs);
    for (size_t i = 0; i < n; i++) {
        size_t off = i * CHUNK;
        reqs[i] = (struct transfer_request){opcode, local + off, seg, remote + off, size - off < CHUNK ? size - off : CHUNK};
    }
    batch_id_t b = te.allocateBatchID(e, n);
    if (b == INVALID_BATCH) {
        free(reqs);
        return -1;
    }
    double t0 = now_s();
    int rc = msg ? te.submitTransferWithNotify(e, b, reqs, n, (notify_msg_t){(char *)my_name, (char *)msg})
                 : te.submitTransfer(e, b, reqs, n);
    free(reqs);
    if (rc != 0) {
        fprintf(stderr, "submit = %d\n", rc);
        te.freeBatchID(e, b);
        return -1;
    }
    double end = t0 + DEADLINE;
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        for (;;) {
            struct transfer_status st;
            if (te.getTransferStatus(e, b, i, &st) != 0) {
                bad = 1;
                break;
            }
            if (st.status == STATUS_COMPLETED) break;
            if (st.status == STATUS_FAILED || st.status == STATUS_CANCELED || st.status == STATUS_TIMEOUT) {
                fprintf(stderr, "task %zu: status %d\n", i, st.status);
                bad = 1;
                break;
            }
            if (now_s() > end) {
                fprintf(stderr, "task %zu: not done within %.0f s\n", i, DEADLINE);
                bad = 1;
                break;
            }
        }
    }
    double dt = now_s() - t0;
    te.freeBatchID(e, b);
    return bad ? -1 : dt;
}

static void report(const char *op, size_t size, double dt) {
    printf("%-5s %zu MiB in %zu requests of %u MiB: %.3f s, %.2f GB/s\n", op, size >> 20, (size + CHUNK - 1) / CHUNK,
           CHUNK >> 20, dt, size / dt / 1e9);
}

static int run_initiator(const char *segment, uint64_t remote, size_t size) {
    transfer_engine_t e = new_engine();
    uint8_t *local = map_buf(size);
    if (te.registerLocalMemory(e, local, size, "cpu:0", 1) != 0) {
        fprintf(stderr, "initiator: registerLocalMemory failed\n");
        return 2;
    }
    char me[128] = "";
    te.getLocalIpAndPort(e, me, sizeof me);
    segment_id_t seg = te.openSegment(e, segment);
    if (seg < 0) {
        fprintf(stderr, "initiator: openSegment(%s) = %d\n", segment, seg);
        return 2;
    }
    unsigned long long bytes0 = fake_bytes();
    char msg[256];
    for (int round = 0; round < 2; round++) {
        /* WRITE with a notification; the target checks what landed. */
        uint64_t wseed = 100 + round;
        pattern(local, size, wseed);
        snprintf(msg, sizeof msg, "verify:%" PRIu64 ":%zu:%s", wseed, size, me);
        double dt = transfer(e, OPCODE_WRITE, local, seg, remote, size, me, msg);
        CHECK(dt > 0, "WRITE round %d failed", round);
        if (dt > 0) report("WRITE", size, dt);
        expect_notify(e, "verified:ok");

        /* The target fills its buffer; READ it with a notification. */
        uint64_t rseed = 200 + round;
        snprintf(msg, sizeof msg, "fill:%" PRIu64 ":%zu:%s", rseed, size, me);
        notify(e, seg, me, msg);
        expect_notify(e, "filled");
        memset(local, 0, size);
        snprintf(msg, sizeof msg, "read:%zu:%s", size, me);
        dt = transfer(e, OPCODE_READ, local, seg, remote, size, me, msg);
        CHECK(dt > 0, "READ round %d failed", round);
        if (dt > 0) report("READ", size, dt);
        CHECK(matches(local, size, rseed), "READ round %d: bytes differ from the target's", round);
        expect_notify(e, "read-seen");
    }
    unsigned long long moved = fake_bytes() - bytes0;
    printf("fake NICs moved %llu bytes as requester (%llu MiB; the transfers were %zu MiB)\n", moved, moved >> 20,
           (4 * size) >> 20);
    CHECK(moved >= 4 * (unsigned long long)size, "the fake NICs moved %llu bytes, fewer than the %zu transferred: "
          "not over RDMA", moved, 4 * size);
    notify(e, seg, me, "quit");
    te.unregisterLocalMemory(e, local);
    te.destroyTransferEngine(e);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("ok: WRITE and READ with notifications, every byte checked\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && strcmp(argv[1], "target") == 0) {
        if (load(argv[2])) return 2;
        return run_target(strtoull(argv[3], NULL, 0), argv[4]);
    }
    if (argc == 6 && strcmp(argv[1], "initiator") == 0) {
        if (load(argv[2])) return 2;
        return run_initiator(argv[3], strtoull(argv[4], NULL, 0), strtoull(argv[5], NULL, 0));
    }
    fprintf(stderr, "usage: %s target <lib> <size> <ready-file> | initiator <lib> <segment> <addr> <size>\n", argv[0]);
    return 2;
}
