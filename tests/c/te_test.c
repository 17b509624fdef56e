/* Two-process test of the Mooncake-compatible transfer engine C API.
 *
 *   te_test target <lib> <size> <ready-file>
 *       Creates an engine on 127.0.0.1 (P2P, or on the metadata service
 *       KVFERRY_TEST_METADATA names), registers <size> bytes and writes
 *       "<segment name> <buffer address> <pid>" to <ready-file>. It answers
 *       notifications: "verify:<seed>:<len>:<peer>" checks its buffer against
 *       the pattern and notifies the peer "verified:ok|bad"; any other message
 *       is echoed to its sender segment (named in the notification's name
 *       field as "<agent>@<segment>") as "echo:<agent>:<msg>"; "quit" exits.
 *   te_test initiator <lib> <segment> <addr>
 *       Runs the functional and bad-input tests against a target.
 *   te_test fault <lib> <segment> <addr> <pid> <segment2> <addr2>
 *       Submits a 1 GiB batch to the first target, SIGKILLs it mid-flight,
 *       checks that every task ends FAILED/COMPLETED within the deadline, then
 *       moves data to the second target.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvf_api.h"

static struct te_api te;

/* Polls every task of a batch until terminal (deadline seconds); returns the
 * number of tasks that did not complete, or -1 on timeout. */
static int wait_batch(transfer_engine_t e, batch_id_t b, size_t n, double deadline) {
    double end = now_s() + deadline;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        for (;;) {
            struct transfer_status st;
            int rc = te.getTransferStatus(e, b, i, &st);
            if (rc != 0) {
                fprintf(stderr, "getTransferStatus(%zu) = %d\n", i, rc);
                return -1;
            }
            if (st.status == STATUS_COMPLETED) break;
            if (st.status == STATUS_FAILED || st.status == STATUS_CANCELED || st.status == STATUS_TIMEOUT) {
                bad++;
                break;
            }
            if (now_s() > end) return -1;
            usleep(100);
        }
    }
    return bad;
}

/* ---- target ---- */

static int run_target(size_t size, const char *ready) {
    char name[128];
    transfer_engine_t e = te_new_md(&te, "target", name, sizeof name);
    uint8_t *buf = map_buf(size);
    if (te.registerLocalMemory(e, buf, size, "cpu:0", 1) != 0) {
        fprintf(stderr, "target: register failed\n");
        return 2;
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", ready);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%s %" PRIuPTR " %d\n", name, (uintptr_t)buf, (int)getpid());
    fclose(f);
    rename(tmp, ready);
    double idle_end = now_s() + 120;
    while (now_s() < idle_end) {
        int n = 0;
        notify_msg_t *msgs = te.getNotifsFromEngine(e, &n);
        for (int i = 0; i < n; i++) {
            const char *nm = msgs[i].name, *m = msgs[i].msg;
            const char *at = strchr(nm, '@');
            segment_id_t peer = at ? te.openSegment(e, at + 1) : -1;
            if (strcmp(m, "quit") == 0) {
                te.freeNotifsMsgBuf(msgs, n);
                te.unregisterLocalMemory(e, buf);
                te.destroyTransferEngine(e);
                return 0;
            }
            char reply[1024];
            uint64_t seed;
            size_t len;
            if (sscanf(m, "verify:%" SCNu64 ":%zu", &seed, &len) == 2) {
                uint8_t *want = malloc(len);
                pattern(want, len, seed);
                snprintf(reply, sizeof reply, "verified:%s", memcmp(want, buf, len) == 0 ? "ok" : "bad");
                free(want);
            } else {
                snprintf(reply, sizeof reply, "echo:%.*s:%s", at ? (int)(at - nm) : (int)strlen(nm), nm, m);
            }
            if (peer >= 0) {
                notify_msg_t r = {.name = "target", .msg = reply};
                te.genNotifyInEngine(e, (uint64_t)peer, r);
            }
        }
        /* Free the array the way TensorRT-LLM does: plain free(). */
        for (int i = 0; i < n; i++) {
            free(msgs[i].name);
            free(msgs[i].msg);
        }
        free(msgs);
        usleep(1000);
    }
    return 3;
}

/* ---- initiator ---- */

static char my_name[128];

/* Waits for the next notification; returns a malloc'd message or NULL. */
static char *next_notify(transfer_engine_t e, double timeout) {
    double end = now_s() + timeout;
    while (now_s() < end) {
        int n = 0;
        notify_msg_t *msgs = te.getNotifsFromEngine(e, &n);
        if (n > 0) {
            char *m = strdup(msgs[0].msg);
            CHECK(n == 1, "expected one notification at a time, got %d", n);
            te.freeNotifsMsgBuf(msgs, n);
            return m;
        }
        CHECK(msgs == NULL, "empty queue must return NULL");
        usleep(500);
    }
    return NULL;
}

static void expect_notify(transfer_engine_t e, const char *want) {
    char *m = next_notify(e, 10);
    CHECK(m && strcmp(m, want) == 0, "notification: got %s want %s", m ? m : "(none)", want);
    free(m);
}

static void test_bad_input(transfer_engine_t e, segment_id_t seg, uint8_t *local, uint64_t remote) {
    transfer_engine_t bogus = (transfer_engine_t)(uintptr_t)0x1234;
    char buf[64];
    struct transfer_status st;
    struct transfer_request req = {OPCODE_WRITE, local, seg, remote, 4096};

    /* NULL and bogus engine handles. */
    for (int k = 0; k < 2; k++) {
        transfer_engine_t x = k ? bogus : NULL;
        CHECK(te.registerLocalMemory(x, local, 4096, "*", 1) == -1, "register on bad engine");
        CHECK(te.unregisterLocalMemory(x, local) < 0, "unregister on bad engine");
        CHECK(te.openSegment(x, "127.0.0.1:1") < 0, "open on bad engine");
        CHECK(te.allocateBatchID(x, 4) == INVALID_BATCH, "allocate on bad engine");
        CHECK(te.submitTransfer(x, 1, &req, 1) != 0, "submit on bad engine");
        CHECK(te.getTransferStatus(x, 1, 0, &st) != 0, "status on bad engine");
        CHECK(te.freeBatchID(x, 1) != 0, "free on bad engine");
        CHECK(te.kvferry_batch_await(x, 1) < 0, "await on bad engine");
        int wst = -1;
        CHECK(te.kvferry_batch_wait(x, 1, 10, &wst) < 0, "wait on bad engine");
        CHECK(te.getLocalIpAndPort(x, buf, sizeof buf) < 0, "ip on bad engine");
        int n = 5;
        CHECK(te.getNotifsFromEngine(x, &n) == NULL && n == 0, "notifs on bad engine");
        notify_msg_t m = {"a", "b"};
        CHECK(te.genNotifyInEngine(x, 1, m) < 0, "notify on bad engine");
        te.destroyTransferEngine(x); /* must not crash */
        CHECK(te.installTransport(x, "tcp", NULL) == NULL, "install on bad engine");
    }
    /* NULL arguments on a good engine. */
    CHECK(te.openSegment(e, NULL) < 0, "open NULL name");
    CHECK(te.openSegment(e, "") < 0, "open empty name");
    CHECK(te.openSegment(e, "not-a-segment") < 0, "open malformed name");
    CHECK(te.openSegment(e, "127.0.0.1:1") < 0, "open unreachable segment");
    CHECK(te.getTransferStatus(e, 1, 0, NULL) != 0, "status NULL out");
    CHECK(te.getLocalIpAndPort(e, NULL, 0) < 0, "ip NULL buf");
    CHECK(te.getNicLoadStats(e, NULL, NULL) == -1, "nic stats NULL");
    CHECK(te.registerLocalMemoryBatch(e, NULL, 3, "*") == -1, "batch register NULL list");
    CHECK(te.kvferry_batch_status(e, 987654321, NULL, NULL, NULL) < 0, "status of unknown batch");
    CHECK(te.kvferry_batch_await(e, 987654321) < 0, "await of unknown batch");
    CHECK(te.kvferry_batch_wait(e, 987654321, 10, NULL) < 0, "wait for unknown batch");
    CHECK(te.kvferry_batch_wait(e, 987654321, -1, NULL) < 0, "wait for unknown batch, default timeout");

    /* Registration rules. */
    CHECK(te.registerLocalMemory(e, local, 0, "*", 1) == -1, "zero length register");
    CHECK(te.registerLocalMemory(e, NULL, 4096, "*", 1) == -1, "NULL register");
    CHECK(te.registerLocalMemory(e, local + 4096, 4096, "*", 1) == -7, "overlapping register");
    CHECK(te.unregisterLocalMemory(e, local + 4096) == -3, "unregister not at start");
    CHECK(te.unregisterLocalMemory(e, (void *)0x10) == -3, "unregister unknown");

    /* Unknown batch, task out of range, double free. */
    CHECK(te.getTransferStatus(e, 987654321, 0, &st) == 1, "status of unknown batch");
    CHECK(te.freeBatchID(e, 987654321) == 1, "free of unknown batch");
    CHECK(te.freeBatchID(e, INVALID_BATCH) == 1, "free of INVALID_BATCH");
    batch_id_t b = te.allocateBatchID(e, 4);
    CHECK(b != INVALID_BATCH, "allocate");
    CHECK(te.getTransferStatus(e, b, 0, &st) == 1, "task 0 of an empty batch");
    CHECK(te.freeBatchID(e, b) == 0, "free empty batch");
    CHECK(te.freeBatchID(e, b) == 1, "double free");

    /* Unknown segment id, bad opcode: nothing added. */
    b = te.allocateBatchID(e, 4);
    struct transfer_request r2 = req;
    r2.target_id = 4242;
    CHECK(te.submitTransfer(e, b, &r2, 1) == 1, "unknown segment id");
    r2 = req;
    r2.opcode = 7;
    CHECK(te.submitTransfer(e, b, &r2, 1) == 1, "bad opcode");
    CHECK(te.submitTransfer(e, b, NULL, 1) == 1, "NULL entries");
    CHECK(te.submitTransferWithNotify(e, b, &req, 0, (notify_msg_t){"a", "b"}) == 1, "notify with zero entries");
    CHECK(te.getTransferStatus(e, b, 0, &st) == 1, "nothing was added");

    /* Zero length completes at once. */
    r2 = req;
    r2.length = 0;
    CHECK(te.submitTransfer(e, b, &r2, 1) == 0, "zero-length submit");
    CHECK(wait_batch(e, b, 1, 5) == 0, "zero-length completes");
    CHECK(te.getTransferStatus(e, b, 0, &st) == 0 && st.status == STATUS_COMPLETED, "zero-length state");

    /* Remote range outside the peer's registered memory: the task fails. */
    r2 = req;
    r2.target_offset = remote + (64u << 20) - 100;
    te.submitTransfer(e, b, &r2, 1);
    CHECK(wait_batch(e, b, 2, 10) == 1, "out-of-range remote write fails");
    r2.target_offset = 16; /* far outside */
    r2.opcode = OPCODE_READ;
    te.submitTransfer(e, b, &r2, 1);
    CHECK(wait_batch(e, b, 3, 10) == 2, "out-of-range remote read fails");

    /* Unregistered local source: code 3, task exists and fails. */
    static uint8_t unregistered[4096];
    r2 = req;
    r2.source = unregistered;
    CHECK(te.submitTransfer(e, b, &r2, 1) == 3, "unregistered source");
    CHECK(wait_batch(e, b, 4, 10) == 3, "unregistered source task fails");
    CHECK(te.freeBatchID(e, b) == 0, "free after observed");
}

static int run_initiator(const char *seg_name, uint64_t remote) {
    transfer_engine_t e = te_new_md(&te, "initiator", my_name, sizeof my_name);
    const size_t total = 64u << 20, req_size = 1u << 20;
    uint8_t *src = map_buf(total), *back = map_buf(total);
    CHECK(te.registerLocalMemory(e, src, total, "*", 1) == 0, "register src");
    buffer_entry_t be = {back, total};
    CHECK(te.registerLocalMemoryBatch(e, &be, 1, "*") == 0, "register back");
    pattern(src, total, 42);

    /* The segment name comes from a buffer freed right after the call. */
    char *name = strdup(seg_name);
    segment_id_t seg = te.openSegment(e, name);
    memset(name, 'x', strlen(name));
    free(name);
    CHECK(seg > 0, "openSegment(%s) = %d", seg_name, seg);
    CHECK(te.openSegment(e, seg_name) == seg, "cached id");
    CHECK(te.openSegment(e, my_name) == LOCAL_SEGMENT, "own name maps to LOCAL_SEGMENT");

    /* WRITE 64 MiB in 1 MiB requests, then READ it back. */
    const size_t n = total / req_size;
    struct transfer_request *reqs = calloc(n, sizeof *reqs);
    for (int op = OPCODE_WRITE; op >= OPCODE_READ; op--) {
        for (size_t i = 0; i < n; i++) {
            reqs[i].opcode = op;
            reqs[i].source = (op == OPCODE_WRITE ? src : back) + i * req_size;
            reqs[i].target_id = seg;
            reqs[i].target_offset = remote + i * req_size;
            reqs[i].length = req_size;
        }
        batch_id_t b = te.allocateBatchID(e, n);
        double t0 = now_s();
        CHECK(te.submitTransfer(e, b, reqs, n) == 0, "submit 64 MiB");
        CHECK(wait_batch(e, b, n, 60) == 0, "64 MiB %s completes", op ? "write" : "read");
        double dt = now_s() - t0;
        struct transfer_status st;
        CHECK(te.getTransferStatus(e, b, n - 1, &st) == 0 && st.transferred_bytes == req_size, "transferred bytes");
        CHECK(te.freeBatchID(e, b) == 0, "free after completion");
        printf("%s 64 MiB in 1 MiB requests: %.2f GB/s\n", op ? "WRITE" : "READ", total / dt / 1e9);
    }
    CHECK(memcmp(src, back, total) == 0, "read back equals written");
    /* The target checks its own memory. */
    char msg[256];
    snprintf(msg, sizeof msg, "verify:42:%zu", total);
    notify_msg_t vm = {.name = NULL, .msg = msg};
    char nm[200];
    snprintf(nm, sizeof nm, "checker@%s", my_name);
    vm.name = nm;
    CHECK(te.genNotifyInEngine(e, (uint64_t)seg, vm) == 0, "genNotifyInEngine");
    expect_notify(e, "verified:ok");

    /* submitTransferWithNotify: delivered once, after completion. */
    batch_id_t b = te.allocateBatchID(e, 8);
    snprintf(nm, sizeof nm, "agentA@%s", my_name);
    notify_msg_t nmsg = {.name = nm, .msg = "kv-ready"};
    CHECK(te.submitTransferWithNotify(e, b, reqs, 8, nmsg) == 0, "submit with notify");
    CHECK(wait_batch(e, b, 8, 30) == 0, "notify batch completes");
    for (int i = 0; i < 3; i++) { /* polling again must not resend */
        struct transfer_status st;
        te.getTransferStatus(e, b, 0, &st);
    }
    CHECK(te.freeBatchID(e, b) == 0, "free notify batch");
    expect_notify(e, "echo:agentA:kv-ready");
    char *extra = next_notify(e, 0.3);
    CHECK(extra == NULL, "notification delivered more than once: %s", extra);
    free(extra);

    /* Every byte a C string can hold (1..255, invalid UTF-8 included)
     * arrives exactly, both ways, by genNotifyInEngine and with a batch. */
    {
        char bytes[256], want[300];
        for (int i = 1; i < 256; i++) bytes[i - 1] = (char)i;
        bytes[255] = 0;
        snprintf(want, sizeof want, "echo:bytes:%s", bytes);
        snprintf(nm, sizeof nm, "bytes@%s", my_name);
        notify_msg_t bm = {.name = nm, .msg = bytes};
        CHECK(te.genNotifyInEngine(e, (uint64_t)seg, bm) == 0, "genNotifyInEngine with all bytes");
        expect_notify(e, want);
        batch_id_t bb = te.allocateBatchID(e, 1);
        CHECK(te.submitTransferWithNotify(e, bb, reqs, 1, bm) == 0, "submit with a notification of all bytes");
        CHECK(wait_batch(e, bb, 1, 30) == 0, "all-bytes notify batch completes");
        CHECK(te.freeBatchID(e, bb) == 0, "free all-bytes notify batch");
        expect_notify(e, want);
    }

    /* Batch capacity is cumulative; ids continue across submits. */
    b = te.allocateBatchID(e, 2);
    CHECK(te.submitTransfer(e, b, reqs, 3) == 2, "over capacity");
    CHECK(te.submitTransfer(e, b, reqs, 1) == 0, "first submit");
    CHECK(te.submitTransfer(e, b, reqs + 1, 1) == 0, "second submit");
    CHECK(te.submitTransfer(e, b, reqs + 2, 1) == 2, "capacity reached");
    CHECK(wait_batch(e, b, 2, 30) == 0, "two tasks complete");
    struct transfer_status st;
    CHECK(te.getTransferStatus(e, b, 2, &st) == 1, "task id out of range");
    CHECK(te.freeBatchID(e, b) == 0, "free");

    /* BatchBusy until every task was observed terminal. */
    b = te.allocateBatchID(e, 16);
    CHECK(te.submitTransfer(e, b, reqs, 16) == 0, "submit 16");
    CHECK(te.freeBatchID(e, b) == 4, "BatchBusy before observation");
    CHECK(wait_batch(e, b, 15, 30) == 0, "15 observed");
    CHECK(te.freeBatchID(e, b) == 4, "BatchBusy with one unobserved");
    CHECK(wait_batch(e, b, 16, 30) == 0, "all observed");
    CHECK(te.freeBatchID(e, b) == 0, "free after observation");

    /* kvferry.h: blocking wait and cancel. */
    b = te.allocateBatchID(e, n);
    CHECK(te.submitTransfer(e, b, reqs, n) == 0, "submit for wait");
    int state = -1;
    CHECK(te.kvferry_batch_wait(e, b, 30000, &state) == 0 && state == STATUS_COMPLETED, "batch wait");
    CHECK(te.freeBatchID(e, b) == 0, "free after wait");
    /* Batch-1 waits without await (the waiter sleeps in the kernel until
     * the lane's reader completes the batch, issue 38). */
    for (int k = 0; k < 50; k++) {
        b = te.allocateBatchID(e, 1);
        CHECK(te.submitTransfer(e, b, reqs, 1) == 0, "submit batch-1 %d", k);
        state = -1;
        CHECK(te.kvferry_batch_wait(e, b, 30000, &state) == 0 && state == STATUS_COMPLETED, "batch-1 wait %d", k);
        CHECK(te.freeBatchID(e, b) == 0, "free batch-1 %d", k);
    }
    /* Awaited batches (the submit writes a large request itself, the wait
     * reads the answer): slot 5 of the peer gets slot 3's bytes, is read
     * back and compared, then gets its own bytes again. */
    const struct { int op; uint8_t *local; } steps[3] = {
        {OPCODE_WRITE, src + 3 * req_size}, {OPCODE_READ, back}, {OPCODE_WRITE, src + 5 * req_size}};
    memset(back, 0, req_size);
    for (int k = 0; k < 3; k++) {
        struct transfer_request one = {steps[k].op, steps[k].local, seg, remote + 5 * req_size, req_size};
        b = te.allocateBatchID(e, 1);
        CHECK(te.kvferry_batch_await(e, b) == 0, "await");
        CHECK(te.submitTransfer(e, b, &one, 1) == 0, "awaited submit (step %d)", k);
        state = -1;
        CHECK(te.kvferry_batch_wait(e, b, 30000, &state) == 0 && state == STATUS_COMPLETED, "awaited wait (step %d)", k);
        CHECK(te.freeBatchID(e, b) == 0, "free after awaited wait");
        if (k == 1) CHECK(memcmp(back, src + 3 * req_size, req_size) == 0, "awaited write and read moved the bytes");
    }
    b = te.allocateBatchID(e, n);
    CHECK(te.kvferry_batch_await(e, b) == 0, "await a batch of n");
    CHECK(te.submitTransfer(e, b, reqs, n) == 0, "awaited submit of n");
    state = -1;
    CHECK(te.kvferry_batch_wait(e, b, 30000, &state) == 0 && state == STATUS_COMPLETED, "awaited wait of n");
    CHECK(te.freeBatchID(e, b) == 0, "free after awaited wait of n");
    b = te.allocateBatchID(e, n);
    CHECK(te.submitTransfer(e, b, reqs, n) == 0, "submit for cancel");
    CHECK(te.kvferry_batch_cancel(e, b) == 0, "cancel");
    CHECK(te.freeBatchID(e, b) == 0, "free after cancel");

    test_bad_input(e, seg, src, remote);

    /* Intra-engine (LOCAL_SEGMENT) transfer. */
    struct transfer_request lr = {OPCODE_WRITE, src, LOCAL_SEGMENT, (uint64_t)(uintptr_t)back, 1u << 20};
    b = te.allocateBatchID(e, 1);
    memset(back, 0, 1u << 20);
    CHECK(te.submitTransfer(e, b, &lr, 1) == 0, "local submit");
    CHECK(wait_batch(e, b, 1, 10) == 0 && memcmp(src, back, 1u << 20) == 0, "local transfer");
    te.freeBatchID(e, b);

    char links[1024];
    CHECK(te.showLinks(e, links, sizeof links, 1) == 0 && strstr(links, seg_name), "showLinks lists the peer");
    CHECK(te.syncSegmentCache(e) == 0, "syncSegmentCache");
    CHECK(te.openSegmentNoCache(e, seg_name) == seg, "openSegmentNoCache keeps the id");
    size_t cnt = 4;
    /* No NICs, but the one libfabric device of the efa rows (run.sh). */
    size_t want_nics = getenv("KVFERRY_TEST_PROTOCOL") && strcmp(getenv("KVFERRY_TEST_PROTOCOL"), "efa") == 0;
    CHECK(te.getNicLoadStats(e, NULL, &cnt) == 0 && cnt == want_nics, "NICs: %zu, want %zu", cnt, want_nics);
    int64_t mlen = te.kvferry_metrics_text(NULL, 0);
    char *mt = malloc(mlen + 1);
    te.kvferry_metrics_text(mt, mlen + 1);
    CHECK(strstr(mt, "kvferry_engine_tasks_total") != NULL, "metrics text");
    free(mt);

    notify_msg_t q = {.name = "initiator", .msg = "quit"};
    te.genNotifyInEngine(e, (uint64_t)seg, q);
    CHECK(te.unregisterLocalMemory(e, src) == 0, "unregister src");
    void *addrs[1] = {back};
    CHECK(te.unregisterLocalMemoryBatch(e, addrs, 1) == 0, "unregister back");
    te.destroyTransferEngine(e);
    free(reqs);
    return failures ? 1 : 0;
}

static int run_fault(const char *seg_name, uint64_t remote, int pid, const char *seg2, uint64_t remote2) {
    transfer_engine_t e = te_new_p2p(&te);
    const size_t total = 1u << 30, req_size = 1u << 20, n = total / req_size;
    uint8_t *src = map_buf(total);
    CHECK(te.registerLocalMemory(e, src, total, "*", 1) == 0, "register 1 GiB");
    segment_id_t seg = te.openSegment(e, seg_name);
    segment_id_t other = te.openSegment(e, seg2);
    CHECK(seg > 0 && other > 0, "open both targets");
    struct transfer_request *reqs = calloc(n, sizeof *reqs);
    for (size_t i = 0; i < n; i++)
        reqs[i] = (struct transfer_request){OPCODE_WRITE, src + i * req_size, seg, remote + i * req_size, req_size};
    batch_id_t b = te.allocateBatchID(e, n);
    CHECK(te.submitTransfer(e, b, reqs, n) == 0, "submit 1 GiB");
    char why[512] = "";
    te.kvferry_engine_last_error(e, why, sizeof why);
    CHECK(why[0] == 0, "no error recorded before the kill: %s", why);
    usleep(20000);
    kill(pid, SIGKILL);
    double t0 = now_s();
    int bad = wait_batch(e, b, n, 45);
    double dt = now_s() - t0;
    CHECK(bad >= 0, "every task terminal within the deadline");
    CHECK(bad > 0, "the kill must fail some tasks (all completed in %.3fs?)", dt);
    printf("target killed: %d of %zu tasks FAILED, all terminal %.3f s after the kill\n", bad, n, dt);
    /* A FAILED task's reason (it arrived asynchronously, from the transport)
     * is the engine's last error once getTransferStatus reported it. */
    te.kvferry_engine_last_error(e, why, sizeof why);
    CHECK(why[0] != 0, "a FAILED task left kvferry_engine_last_error empty");
    printf("last error: %s\n", why);
    CHECK(te.freeBatchID(e, b) == 0, "free after failure");
    /* The engine keeps working with another peer. */
    struct transfer_request r = {OPCODE_WRITE, src, other, remote2, 8u << 20};
    b = te.allocateBatchID(e, 1);
    CHECK(te.submitTransfer(e, b, &r, 1) == 0 && wait_batch(e, b, 1, 30) == 0, "transfer to the second target");
    te.freeBatchID(e, b);
    notify_msg_t q = {.name = "fault", .msg = "quit"};
    te.genNotifyInEngine(e, (uint64_t)other, q);
    te.destroyTransferEngine(e);
    free(reqs);
    return failures ? 1 : 0;
}

/* After fork() the child gets error codes at once, never a hang. */
static int run_fork(void) {
    transfer_engine_t e = te_new_p2p(&te);
    char buf[64];
    CHECK(te.getLocalIpAndPort(e, buf, sizeof buf) == 0, "parent works");
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10); /* a hang would be killed by SIGALRM and fail the test */
        int bad = 0;
        bad += te.getLocalIpAndPort(e, buf, sizeof buf) != KVFERRY_ERR_FORKED;
        bad += te.allocateBatchID(e, 4) != INVALID_BATCH;
        bad += te.createTransferEngine("P2PHANDSHAKE", "127.0.0.1", NULL, 0, 1) != NULL;
        bad += te.openSegment(e, "127.0.0.1:1") != -1;
        struct transfer_status st;
        bad += te.getTransferStatus(e, 1, 0, &st) == 0;
        bad += te.freeNotifsMsgBuf(NULL, 0) != 0; /* pure C, still fine */
        _exit(bad);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child after fork: status %#x", status);
    CHECK(te.getLocalIpAndPort(e, buf, sizeof buf) == 0, "parent still works after fork");
    te.destroyTransferEngine(e);
    return failures ? 1 : 0;
}

/* enableGracefulShutdown: SIGTERM destroys the engine, then the previous
 * disposition (default: terminate) applies. */
static int run_graceful(void) {
    transfer_engine_t e = te_new_p2p(&te);
    te.enableGracefulShutdown(e);
    raise(SIGTERM);
    for (int i = 0; i < 100; i++) usleep(50000); /* killed before this ends */
    fprintf(stderr, "still alive 5 s after SIGTERM\n");
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: te_test target|initiator|fault <lib> ...\n");
        return 2;
    }
    if (te_load(&te, argv[2]) != 0) return 2;
    if (strcmp(argv[1], "fork") == 0) {
        int rc = run_fork();
        printf("fork: %d failures\n", failures);
        return rc;
    }
    if (strcmp(argv[1], "graceful") == 0) return run_graceful();
    if (strcmp(argv[1], "target") == 0 && argc == 5)
        return run_target(strtoull(argv[3], NULL, 0), argv[4]);
    if (strcmp(argv[1], "initiator") == 0 && argc == 5) {
        int rc = run_initiator(argv[3], strtoull(argv[4], NULL, 0));
        printf("initiator: %d failures\n", failures);
        return rc;
    }
    if (strcmp(argv[1], "fault") == 0 && argc == 8) {
        int rc = run_fault(argv[3], strtoull(argv[4], NULL, 0), atoi(argv[5]), argv[6], strtoull(argv[7], NULL, 0));
        printf("fault: %d failures\n", failures);
        return rc;
    }
    fprintf(stderr, "bad arguments\n");
    return 2;
}
