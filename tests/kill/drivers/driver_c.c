/* Kill-matrix driver for the C entry points (tests/kill): the transfer
 * engine C API (transfer_engine_c.h) and the store C API (store_c.h),
 * loaded with dlopen. One JSON line answers each command on stdin.
 *
 *   driver_c te <lib> <metadata> <name> <MiB>
 *       An engine named <name> (P2P: a host) with <MiB> registered; prints
 *       {"ok","info":<segment>,"addr","pid"}. Commands:
 *         connect <segment>                   openSegment
 *         batch <addr> <bytes> <seed>         WRITE our [0,n) there, READ it
 *                                             back into [n,2n), compare
 *         stats | unreg | quit                (stats: fds, goroutines,
 *                                             slices failed over)
 *   driver_c store <lib> <metadata> <name> <master> <MiB>
 *       A store client lending <MiB>; prints {"ok","info":<hostname>,"pid"}.
 *         put <key> <bytes> <seed> <replicas>  (acknowledged: "ok":true)
 *         get <key> <bytes> <seed>             "ok", "match"
 *         stats | quit
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
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

/* metrics_sum is the sum of every sample of the counter name (each label
 * set) in the library's metrics text; 0 where it has none. */
static double metrics_sum(const char *name) {
    static char buf[4 << 20];
    int64_t n = te.kvferry_metrics_text ? te.kvferry_metrics_text(buf, sizeof buf) : -1;
    if (n <= 0 || n >= (int64_t)sizeof buf) return 0;
    double sum = 0;
    size_t k = strlen(name);
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, k) || (l[k] != '{' && l[k] != ' ')) continue;
        char *v = strchr(l, ' ');
        if (l[k] == '{') v = strstr(l, "} ") ? strstr(l, "} ") + 1 : NULL;
        if (v) sum += strtod(v, NULL);
    }
    return sum;
}

static void stats(void) {
    printf("{\"ok\":true,\"fds\":%d,\"goroutines\":%ld,\"failovers\":%.0f}\n", count_fds(),
           metrics_goroutines(te.kvferry_metrics_text), metrics_sum("kvferry_engine_failovers_total"));
}

/* Runs one batch of n requests of len bytes; returns 0 completed, 1 failed,
 * 2 not terminal within the bound (a hang). */
static int run_batch(transfer_engine_t e, segment_id_t seg, int op, uint8_t *local, uint64_t remote, size_t len, int nreq) {
    batch_id_t b = te.allocateBatchID(e, nreq);
    if (b == INVALID_BATCH) return 1;
    struct transfer_request req[64];
    size_t step = len / nreq;
    for (int i = 0; i < nreq; i++)
        req[i] = (struct transfer_request){op, local + i * step, seg, remote + i * step, i == nreq - 1 ? len - step * (nreq - 1) : step};
    int rc = te.submitTransfer(e, b, req, nreq);
    int result = rc == 0 ? 0 : 1;
    double end = now_s() + 60;
    for (int i = 0; rc == 0 && i < nreq; i++) {
        struct transfer_status s;
        for (;;) {
            if (te.getTransferStatus(e, b, i, &s) != 0) { result = 1; break; }
            if (s.status == STATUS_COMPLETED) break;
            if (s.status == STATUS_FAILED || s.status == STATUS_CANCELED || s.status == STATUS_TIMEOUT || s.status == STATUS_INVALID) { result = 1; break; }
            if (now_s() > end) return 2;
            usleep(500);
        }
    }
    while (te.freeBatchID(e, b) == 4 && now_s() < end) usleep(1000);
    return result;
}

static int te_main(int argc, char **argv) {
    if (argc < 6) return 2;
    const char *meta = argv[3], *name = argv[4];
    size_t size = strtoull(argv[5], NULL, 0) << 20;
    int p2p = strcmp(meta, "P2PHANDSHAKE") == 0;
    transfer_engine_t e = te.createTransferEngine(meta, name, "127.0.0.1", 0, 1);
    if (!e) {
        printf("{\"ok\":false,\"err\":\"createTransferEngine\"}\n");
        return 1;
    }
    uint8_t *buf = map_buf(2 * size);
    if (te.registerLocalMemory(e, buf, 2 * size, "cpu:0", 1) != 0) {
        printf("{\"ok\":false,\"err\":\"register\"}\n");
        return 1;
    }
    char seg[256] = "";
    if (p2p) te.getLocalIpAndPort(e, seg, sizeof seg);
    else snprintf(seg, sizeof seg, "%s", name);
    printf("{\"ok\":true,\"info\":\"%s\",\"addr\":%" PRIu64 ",\"pid\":%d}\n", seg, (uint64_t)(uintptr_t)buf, getpid());
    fflush(stdout);
    segment_id_t target = -1;
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", arg[1024] = "";
        uint64_t a = 0, n = 0, seed = 0;
        if (sscanf(line, "%31s %1023s %" SCNu64 " %" SCNu64, cmd, arg, &n, &seed) < 1) continue;
        if (!strcmp(cmd, "quit")) break;
        if (!strcmp(cmd, "connect")) {
            double t0 = now_s();
            target = te.openSegment(e, arg);
            printf("{\"ok\":%s,\"id\":%d,\"ms\":%.1f}\n", target >= 0 ? "true" : "false", target, (now_s() - t0) * 1e3);
        } else if (!strcmp(cmd, "batch")) {
            a = strtoull(arg, NULL, 0);
            if (n > size) n = size;
            double t0 = now_s();
            pattern(buf, n, seed);
            int r = run_batch(e, target, OPCODE_WRITE, buf, a, n, 8);
            int match = 0;
            if (r == 0) {
                memset(buf + size, 0, n);
                r = run_batch(e, target, OPCODE_READ, buf + size, a, n, 8);
                match = r == 0 && memcmp(buf, buf + size, n) == 0;
            }
            const char *state = r == 0 ? "completed" : r == 1 ? "failed" : "hang";
            printf("{\"ok\":%s,\"state\":\"%s\",\"match\":%s,\"ms\":%.1f}\n", r == 0 && match ? "true" : "false", state,
                   match ? "true" : "false", (now_s() - t0) * 1e3);
        } else if (!strcmp(cmd, "stats")) {
            stats();
        } else if (!strcmp(cmd, "unreg")) {
            double t0 = now_s();
            int rc = te.unregisterLocalMemory(e, buf);
            printf("{\"ok\":%s,\"ms\":%.1f}\n", rc == 0 ? "true" : "false", (now_s() - t0) * 1e3);
        } else {
            printf("{\"ok\":false,\"err\":\"unknown command\"}\n");
        }
        fflush(stdout);
    }
    te.destroyTransferEngine(e);
    return 0;
}

static int store_main(int argc, char **argv) {
    if (argc < 7) return 2;
    const char *meta = argv[3], *name = argv[4], *master = argv[5];
    size_t size = strtoull(argv[6], NULL, 0) << 20;
    mooncake_store_t s = st.mooncake_store_create();
    if (!s || st.mooncake_store_setup(s, name, meta, size, 16u << 20, "tcp", "", master) != 0) {
        char err[512] = "";
        if (s) st.kvferry_store_last_error(s, err, sizeof err);
        json_clean(err);
        printf("{\"ok\":false,\"err\":\"setup: %s\"}\n", err);
        return 1;
    }
    char host[256] = "";
    st.mooncake_store_get_hostname(s, host, sizeof host);
    printf("{\"ok\":true,\"info\":\"%s\",\"pid\":%d}\n", host, getpid());
    fflush(stdout);
    uint8_t *val = map_buf(8 << 20), *got = map_buf(8 << 20);
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", key[256] = "";
        uint64_t n = 0, seed = 0, reps = 1;
        if (sscanf(line, "%31s %255s %" SCNu64 " %" SCNu64 " %" SCNu64, cmd, key, &n, &seed, &reps) < 1) continue;
        if (n > (8u << 20)) n = 8u << 20;
        if (!strcmp(cmd, "quit")) break;
        double t0 = now_s();
        if (!strcmp(cmd, "put")) {
            pattern(val, n, seed);
            mooncake_replicate_config_t cfg = {reps, 0, 0, NULL, 0};
            int rc = st.mooncake_store_put(s, key, val, n, &cfg);
            printf("{\"ok\":%s,\"rc\":%d,\"ms\":%.1f}\n", rc == 0 ? "true" : "false", rc, (now_s() - t0) * 1e3);
        } else if (!strcmp(cmd, "get")) {
            pattern(val, n, seed);
            memset(got, 0, n);
            int64_t r = st.mooncake_store_get_into(s, key, got, n);
            int match = r == (int64_t)n && memcmp(val, got, n) == 0;
            printf("{\"ok\":%s,\"rc\":%" PRId64 ",\"match\":%s,\"ms\":%.1f}\n", r >= 0 ? "true" : "false", r, match ? "true" : "false",
                   (now_s() - t0) * 1e3);
        } else if (!strcmp(cmd, "stats")) {
            stats();
        } else {
            printf("{\"ok\":false,\"err\":\"unknown command\"}\n");
        }
        fflush(stdout);
    }
    st.mooncake_store_destroy(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: driver_c te|store <lib> ...\n");
        return 2;
    }
    if (te_load(&te, argv[2]) != 0 || store_load(&st, argv[2]) != 0) return 2;
    if (!strcmp(argv[1], "te")) return te_main(argc, argv);
    if (!strcmp(argv[1], "store")) return store_main(argc, argv);
    return 2;
}
