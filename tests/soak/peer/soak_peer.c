/* Soak peer (tests/soak): one process that loads the library with dlopen
 * and mixes transfer-engine traffic and store traffic with churn, driven
 * by one command a line on stdin, one JSON line answering each.
 *
 *   soak_peer <lib> <metadata> <name> <master> <MiB>
 *       An engine named <name> on <metadata> with <MiB> registered (at
 *       least 4: one 1 MiB slot per writer) and a
 *       store client lending <MiB> to the master <master>; prints
 *       {"ok":true,"addr":<base>,"pid"}. Commands:
 *         cycle <seed> <slot> <peer>=<addr> ...   one round of work:
 *             for each peer: open its segment, register a scratch region,
 *             WRITE a pattern from it to the peer's slot <slot> (1 MiB at
 *             addr + slot MiB: each writer its own), READ it back into the
 *             scratch region, compare, unregister the scratch region, close
 *             the segment (segment reopen and register/unregister churn);
 *             then the store: put 4 keys with 2 replicas, get them back,
 *             compare, remove them. Answers counts, the peers that failed
 *             and the first store failure: {"ok","te_ok","te_fail",
 *             "failed":[...],"te_err" (the first failed peer, its step and the
 *             engine's last error),"st_ok","st_fail","st_rc","st_err"}
 *         stats                            {"rss_kb","fds","threads","goroutines"}
 *         quit
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

enum { XFER = 1 << 20, SCRATCH = 4 << 20, VAL = 128 << 10, KEYS = 4 };

/* status_field reads a "Name:   value" line of /proc/self/status. */
static long status_field(const char *name) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, n) && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* One request of len bytes; 0 completed, 1 failed or not terminal within
 * 60 s. A failed batch is cancelled: its memory is ours again and every
 * task observed (a submit that failed leaves its task unobserved, and
 * freeBatchID answers busy until it is). What failed goes to how: the call,
 * the task's state and bytes moved, and the engine's last error at once
 * (getTransferStatus sets it for a task that did not complete; a busy
 * freeBatchID would replace it). */
static int transfer(transfer_engine_t e, segment_id_t seg, int op, uint8_t *local, uint64_t remote, size_t len, char *how, size_t hn) {
    batch_id_t b = te.allocateBatchID(e, 1);
    if (b == INVALID_BATCH) {
        snprintf(how, hn, "allocateBatchID failed");
        return 1;
    }
    struct transfer_request req = {op, local, seg, remote, len};
    int rc = te.submitTransfer(e, b, &req, 1);
    int r = rc == 0 ? 0 : 1;
    int state = 0;
    if (r) snprintf(how, hn, "submitTransfer = %d", rc);
    if (r == 0) {
        double t0 = now_s();
        if ((rc = te.kvferry_batch_wait(e, b, 60000, &state)) != 0) {
            snprintf(how, hn, "kvferry_batch_wait = %d after %.3f s (state %d)", rc, now_s() - t0, state);
            r = 1;
        } else {
            struct transfer_status s;
            rc = te.getTransferStatus(e, b, 0, &s);
            r = rc == 0 && s.status == STATUS_COMPLETED ? 0 : 1;
            if (r) snprintf(how, hn, "getTransferStatus = %d: status %d, %" PRIu64 " of %zu bytes, %.3f s", rc, s.status,
                            (uint64_t)s.transferred_bytes, len, now_s() - t0);
        }
    }
    if (r) {
        size_t n = strlen(how);
        if (n + 2 < hn) {
            snprintf(how + n, hn - n, ": ");
            te.kvferry_engine_last_error(e, how + n + 2, hn - n - 2);
        }
        te.kvferry_batch_cancel(e, b);
    }
    double end = now_s() + 60;
    while (te.freeBatchID(e, b) == 4 && now_s() < end) usleep(1000);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: soak_peer <lib> <metadata> <name> <master> <MiB>\n");
        return 2;
    }
    const char *lib = argv[1], *meta = argv[2], *name = argv[3], *master = argv[4];
    size_t size = strtoull(argv[5], NULL, 0) << 20;
    if (te_load(&te, lib) != 0 || store_load(&st, lib) != 0) return 2;
    transfer_engine_t e = te.createTransferEngine(meta, name, "127.0.0.1", 0, 1);
    if (!e) {
        printf("{\"ok\":false,\"err\":\"createTransferEngine\"}\n");
        return 1;
    }
    uint8_t *buf = map_buf(size);
    if (te.registerLocalMemory(e, buf, size, "cpu:0", 1) != 0) {
        printf("{\"ok\":false,\"err\":\"register\"}\n");
        return 1;
    }
    mooncake_store_t s = st.mooncake_store_create();
    if (!s || st.mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", size, 16u << 20, "tcp", "", master) != 0) {
        char err[512] = "";
        if (s) st.kvferry_store_last_error(s, err, sizeof err);
        json_clean(err);
        printf("{\"ok\":false,\"err\":\"store setup: %s\"}\n", err);
        return 1;
    }
    uint8_t *scratch = map_buf(SCRATCH), *val = map_buf(VAL), *got = map_buf(VAL);
    printf("{\"ok\":true,\"addr\":%" PRIu64 ",\"pid\":%d}\n", (uint64_t)(uintptr_t)buf, getpid());
    fflush(stdout);

    static char line[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        char *save = NULL, *cmd = strtok_r(line, " \t\n", &save);
        if (!cmd) continue;
        if (!strcmp(cmd, "quit")) break;
        if (!strcmp(cmd, "stats")) {
            printf("{\"ok\":true,\"rss_kb\":%ld,\"fds\":%d,\"threads\":%ld,\"goroutines\":%ld}\n", status_field("VmRSS"),
                   count_fds(), status_field("Threads"), metrics_goroutines(te.kvferry_metrics_text));
            fflush(stdout);
            continue;
        }
        if (strcmp(cmd, "cycle")) {
            printf("{\"ok\":false,\"err\":\"unknown command\"}\n");
            fflush(stdout);
            continue;
        }
        char *tok = strtok_r(NULL, " \t\n", &save);
        uint64_t seed = tok ? strtoull(tok, NULL, 0) : 1;
        tok = strtok_r(NULL, " \t\n", &save);
        uint64_t slot = tok ? strtoull(tok, NULL, 0) : 0;
        int te_ok = 0, te_fail = 0, st_ok = 0, st_fail = 0, st_rc = 0;
        char st_err[512] = "", te_err[1024] = "";
        char failed[4096] = "";
        size_t flen = 0;
        while ((tok = strtok_r(NULL, " \t\n", &save))) {
            char *eq = strchr(tok, '=');
            if (!eq) continue;
            *eq = 0;
            uint64_t addr = strtoull(eq + 1, NULL, 0) + slot * XFER;
            int ok = 0;
            char how[768] = "";
            const char *step = "openSegment";
            segment_id_t seg = te.openSegment(e, tok);
            if (seg >= 0 && (step = "registerLocalMemory", te.registerLocalMemory(e, scratch, SCRATCH, "cpu:0", 1) == 0)) {
                uint8_t *src = scratch, *dst = scratch + XFER;
                pattern(src, XFER, seed);
                memset(dst, 0, XFER);
                ok = (step = "write", transfer(e, seg, OPCODE_WRITE, src, addr, XFER, how, sizeof how) == 0) &&
                     (step = "read", transfer(e, seg, OPCODE_READ, dst, addr, XFER, how, sizeof how) == 0) &&
                     (step = "compare", memcmp(src, dst, XFER) == 0);
                if (te.unregisterLocalMemory(e, scratch) != 0 && ok) {
                    step = "unregisterLocalMemory";
                    ok = 0;
                }
            }
            if (seg >= 0) te.closeSegment(e, seg);
            if (ok) {
                te_ok++;
            } else {
                te_fail++;
                if (!te_err[0]) {
                    /* A transfer's how holds the last error of its failure. */
                    int n = snprintf(te_err, sizeof te_err, "%s %s: %s", tok, step, how);
                    if (!how[0] && n > 0 && (size_t)n < sizeof te_err) te.kvferry_engine_last_error(e, te_err + n, sizeof te_err - n);
                    json_clean(te_err);
                }
                if (flen + strlen(tok) + 4 < sizeof failed)
                    flen += snprintf(failed + flen, sizeof failed - flen, "%s\"%s\"", flen ? "," : "", tok);
            }
        }
        for (int k = 0; k < KEYS; k++) {
            char key[320];
            snprintf(key, sizeof key, "soak/%s/%" PRIu64 "/%d", name, seed, k);
            pattern(val, VAL, seed * KEYS + k);
            mooncake_replicate_config_t cfg = {2, 0, 0, NULL, 0};
            int rc = st.mooncake_store_put(s, key, val, VAL, &cfg);
            int ok = rc == 0;
            const char *sop = "put";
            if (ok) {
                sop = "get";
                memset(got, 0, VAL);
                int64_t n = st.mooncake_store_get_into(s, key, got, VAL);
                /* A read slower than the read lease (a loaded machine) is
                 * LEASE_EXPIRED, as Mooncake answers: asked again. */
                for (int again = 0; n == -707 && again < 3; again++) n = st.mooncake_store_get_into(s, key, got, VAL);
                ok = n == VAL && memcmp(val, got, VAL) == 0;
                if (!ok) rc = n < 0 ? (int)n : -1000;
            }
            if (ok) {
                st_ok++;
            } else {
                st_fail++;
                if (!st_err[0]) { /* before the remove's error replaces it */
                    int n = snprintf(st_err, sizeof st_err, "%s%s: ", sop, rc == -1000 ? " returned other bytes" : "");
                    if (n > 0 && (size_t)n < sizeof st_err) st.kvferry_store_last_error(s, st_err + n, sizeof st_err - n);
                    json_clean(st_err);
                    st_rc = rc;
                }
            }
            st.mooncake_store_remove(s, key, 1);
        }
        printf("{\"ok\":%s,\"te_ok\":%d,\"te_fail\":%d,\"failed\":[%s],\"te_err\":\"%s\",\"st_ok\":%d,\"st_fail\":%d,\"st_rc\":%d,\"st_err\":\"%s\"}\n",
               te_fail == 0 && st_fail == 0 ? "true" : "false", te_ok, te_fail, failed, te_err, st_ok, st_fail, st_rc, st_err);
        fflush(stdout);
    }
    st.mooncake_store_destroy(s);
    te.unregisterLocalMemory(e, buf);
    te.destroyTransferEngine(e);
    return 0;
}
