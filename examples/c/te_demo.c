/* te_demo: two processes move 1 GiB (or the size given) over loopback through
 * the Mooncake-compatible C API of libkvferry.so, verify every byte and print
 * GB/s.
 *
 *   te_demo target <ready-file> [MiB]        register 1 GiB (or MiB), publish
 *                                            the segment name and address
 *   te_demo initiator <segment> <addr> [MiB] write a pattern into the target,
 *                                            read it back, verify, ask the
 *                                            target to verify
 *
 * Build: gcc -O2 -Iinclude te_demo.c -Lbuild/lib -lkvferry -Wl,-rpath,build/lib
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvferry.h"
#include "transfer_engine_c.h"

#define BLOCK (4ull << 20)

/* Bytes moved: 1 GiB unless the command line says otherwise (a multiple of
 * BLOCK). */
static size_t total = 1ull << 30;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static uint8_t *map_buf(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    return p;
}

static void fill(uint8_t *p, size_t n) {
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

static int target(const char *ready) {
    transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", NULL, 0, 1);
    if (!e) { fprintf(stderr, "createTransferEngine failed\n"); return 1; }
    uint8_t *buf = map_buf(total);
    if (registerLocalMemory(e, buf, total, "cpu:0", 1)) { fprintf(stderr, "register failed\n"); return 1; }
    char name[64];
    getLocalIpAndPort(e, name, sizeof name);
    FILE *f = fopen(ready, "w");
    fprintf(f, "%s %" PRIuPTR "\n", name, (uintptr_t)buf);
    fclose(f);
    printf("[target] segment %s, %zu MiB registered at %p\n", name, total >> 20, (void *)buf);
    for (int i = 0; i < 120000; i++) { /* up to 120 s */
        int n = 0;
        notify_msg_t *m = getNotifsFromEngine(e, &n);
        for (int k = 0; k < n; k++) {
            if (strcmp(m[k].msg, "verify") == 0) {
                uint8_t *want = map_buf(total);
                fill(want, total);
                int ok = memcmp(want, buf, total) == 0;
                printf("[target] received %s from %s: %s\n", m[k].msg, m[k].name, ok ? "all bytes match" : "MISMATCH");
                freeNotifsMsgBuf(m, n);
                destroyTransferEngine(e);
                return ok ? 0 : 1;
            }
        }
        freeNotifsMsgBuf(m, n);
        usleep(1000);
    }
    return 1;
}

static int run_batch(transfer_engine_t e, int op, uint8_t *local, segment_id_t seg, uint64_t remote) {
    size_t n = total / BLOCK;
    struct transfer_request *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = (struct transfer_request){op, local + i * BLOCK, seg, remote + i * BLOCK, BLOCK};
    batch_id_t b = allocateBatchID(e, n);
    double t0 = now();
    if (submitTransfer(e, b, r, n)) { fprintf(stderr, "submit failed\n"); return 1; }
    int state = -1;
    if (kvferry_batch_wait(e, b, 60000, &state) || state != STATUS_COMPLETED) {
        fprintf(stderr, "batch ended in state %d\n", state);
        return 1;
    }
    double dt = now() - t0;
    freeBatchID(e, b);
    free(r);
    printf("[initiator] %-5s %zu MiB in %zu x 4 MiB requests: %.3f s, %.2f GB/s\n", op ? "WRITE" : "READ", total >> 20, n, dt, total / dt / 1e9);
    return 0;
}

static int initiator(const char *seg_name, uint64_t remote) {
    transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", NULL, 0, 1);
    if (!e) return 1;
    uint8_t *src = map_buf(total), *back = map_buf(total);
    fill(src, total);
    registerLocalMemory(e, src, total, "cpu:0", 1);
    registerLocalMemory(e, back, total, "cpu:0", 1);
    segment_id_t seg = openSegment(e, seg_name);
    if (seg < 0) { fprintf(stderr, "openSegment(%s) failed\n", seg_name); return 1; }
    if (run_batch(e, OPCODE_WRITE, src, seg, remote) || run_batch(e, OPCODE_READ, back, seg, remote)) return 1;
    int ok = memcmp(src, back, total) == 0;
    printf("[initiator] read back: %s\n", ok ? "all bytes match" : "MISMATCH");
    notify_msg_t m = {"initiator", "verify"};
    genNotifyInEngine(e, (uint64_t)seg, m);
    destroyTransferEngine(e);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int target_mode = (argc == 3 || argc == 4) && strcmp(argv[1], "target") == 0;
    int initiator_mode = (argc == 4 || argc == 5) && strcmp(argv[1], "initiator") == 0;
    int size_arg = target_mode ? 3 : 4;
    if ((target_mode || initiator_mode) && argc > size_arg) {
        unsigned long long mib = strtoull(argv[size_arg], NULL, 10);
        if (mib == 0 || mib > (64ull << 10) || mib % (BLOCK >> 20)) {
            fprintf(stderr, "te_demo: size must be a multiple of %llu MiB up to 64 GiB\n", BLOCK >> 20);
            return 2;
        }
        total = mib << 20;
    }
    if (target_mode) return target(argv[2]);
    if (initiator_mode) return initiator(argv[2], strtoull(argv[3], NULL, 0));
    fprintf(stderr, "usage: te_demo target <ready-file> [MiB] | initiator <segment> <addr> [MiB]\n");
    return 2;
}
