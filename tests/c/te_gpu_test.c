/* te_gpu_test.c - GPU memory through the Mooncake C API, on the fake CUDA
 * driver (tests/fakecuda) loaded by the library through KVFERRY_CUDA_LIB,
 * or on the fake HIP runtime (fake_hip.c; KVFERRY_HIP_LIB and
 * KVFERRY_GPU_RUNTIME=hip): <libcuda> below is either file, and cuda_app.h
 * drives it as a CUDA or a HIP application would (tests/c/run.sh runs every
 * mode on both, by table). On HIP, cudaMalloc is hipMalloc and
 * kvferry_cuda_malloc hands out hipMemCreate memory.
 *
 *   te_gpu_test target <lib> <libcuda> <ready-file>
 *       registers cudaMalloc memory (device 0, legacy IPC) and memory from
 *       kvferry_cuda_malloc (device 1, VMM; device 0 on a machine with one
 *       GPU) at "cuda:N" and "*", writes
 *       "<segment> <legacy> <vmm> <pid>" to <ready-file>, exits on "quit".
 *   te_gpu_test initiator <lib> <libcuda> <segment> <legacy> <vmm>
 *       device -> remote device, host -> remote device and back, for both
 *       remote buffers, byte checked through the driver; the refusals.
 *   te_gpu_test fork <lib> <libcuda>
 *       a child created by fork() after the driver and an engine are up
 *       gets errors from every GPU entry point, and never calls the driver
 *       (the fake counts the calls; a real driver cannot).
 *   te_gpu_test nodriver <lib>
 *       with a driver that cannot load: a cuda registration fails with
 *       KVFERRY_ERR_NOT_IMPLEMENTED, host memory registers and moves.
 */
#include <inttypes.h>
#include <sys/wait.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvf_api.h"
#include "../fakecuda/cuda_app.h"

static struct te_api te;
static cuda_app cu;
static void *(*cuda_vmm_malloc)(ssize_t, int, void *);
static void (*cuda_vmm_free)(void *, ssize_t, int, void *);

#define SIZE (4u << 20)

static void load_alloc(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    *(void **)&cuda_vmm_malloc = h ? dlsym(h, "kvferry_cuda_malloc") : NULL;
    *(void **)&cuda_vmm_free = h ? dlsym(h, "kvferry_cuda_free") : NULL;
    if (!cuda_vmm_malloc || !cuda_vmm_free) {
        fprintf(stderr, "no kvferry_cuda_malloc in %s\n", lib);
        exit(2);
    }
}

static int transfer(transfer_engine_t e, int op, void *src, segment_id_t seg, uint64_t dst, size_t n) {
    batch_id_t b = te.allocateBatchID(e, 1);
    struct transfer_request r = {.opcode = op, .source = src, .target_id = seg, .target_offset = dst, .length = n};
    int rc = te.submitTransfer(e, b, &r, 1);
    if (rc == 0) {
        int state = 0;
        rc = te.kvferry_batch_wait(e, b, 30000, &state);
        if (rc == 0 && state != STATUS_COMPLETED) rc = -1;
    }
    te.freeBatchID(e, b);
    return rc;
}

static int run_target(const char *libcuda, const char *ready) {
    transfer_engine_t e = te_new_p2p(&te);
    uint64_t legacy = cuda_malloc(&cu, 0, SIZE);
    uint64_t vmm = (uint64_t)(uintptr_t)cuda_vmm_malloc(SIZE, cu.second, NULL);
    (void)libcuda;
    if (!legacy || !vmm) {
        fprintf(stderr, "target: no device memory\n");
        return 2;
    }
    if (te.registerLocalMemory(e, (void *)(uintptr_t)legacy, SIZE, "cuda:0", 1) != 0 ||
        te.registerLocalMemory(e, (void *)(uintptr_t)vmm, SIZE, "*", 1) != 0) {
        fprintf(stderr, "target: register failed\n");
        return 2;
    }
    char name[128], tmp[512];
    te.getLocalIpAndPort(e, name, sizeof name);
    snprintf(tmp, sizeof tmp, "%s.tmp", ready);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%s %" PRIu64 " %" PRIu64 " %d\n", name, legacy, vmm, (int)getpid());
    fclose(f);
    rename(tmp, ready);
    for (int i = 0; i < 1200; i++) {
        int n = 0;
        notify_msg_t *msgs = te.getNotifsFromEngine(e, &n);
        int quit = 0;
        for (int k = 0; k < n; k++) quit = quit || strcmp(msgs[k].msg, "quit") == 0;
        if (n) te.freeNotifsMsgBuf(msgs, n);
        if (quit) break;
        usleep(100000);
    }
    te.destroyTransferEngine(e);
    return 0;
}

static int run_initiator(const char *seg_name, uint64_t legacy, uint64_t vmm) {
    transfer_engine_t e = te_new_p2p(&te);
    segment_id_t seg = te.openSegment(e, seg_name);
    CHECK(seg > 0, "openSegment(%s) = %d", seg_name, seg);
    uint64_t src = cuda_malloc(&cu, 0, SIZE), back = cuda_malloc(&cu, 0, SIZE);
    uint8_t *host = map_lazy(SIZE), *want = map_lazy(SIZE), *got = map_lazy(SIZE);
    CHECK(src && back, "device memory");
    CHECK(te.registerLocalMemory(e, (void *)(uintptr_t)src, SIZE, "cuda:0", 1) == 0, "register src");
    CHECK(te.registerLocalMemory(e, (void *)(uintptr_t)back, SIZE, "*", 1) == 0, "register back");
    CHECK(te.registerLocalMemory(e, host, SIZE, "cpu:0", 1) == 0, "register host");
    /* A device pointer at a cpu location is refused, not memcpy'd. */
    uint64_t stray = cuda_malloc(&cu, 0, 4096);
    CHECK(te.registerLocalMemory(e, (void *)(uintptr_t)stray, 4096, "cpu:0", 1) < 0, "device memory as cpu:0");
    uint64_t remotes[2] = {legacy, vmm};
    for (int r = 0; r < 2; r++) {
        for (int from_host = 0; from_host < 2; from_host++) {
            uint64_t seed = 10 * r + from_host + 1;
            pattern(want, SIZE, seed);
            void *source = host;
            if (from_host) {
                memcpy(host, want, SIZE);
            } else {
                cuda_current(&cu, 0);
                CHECK(cu.h2d(src, want, SIZE) == 0, "h2d");
                source = (void *)(uintptr_t)src;
            }
            CHECK(transfer(e, OPCODE_WRITE, source, seg, remotes[r], SIZE) == 0, "write remote %d from %s: %s", r,
                  from_host ? "host" : "device", "");
            /* Read back into device memory, check through the driver. */
            CHECK(transfer(e, OPCODE_READ, (void *)(uintptr_t)back, seg, remotes[r], SIZE) == 0, "read remote %d", r);
            cuda_current(&cu, 0);
            memset(got, 0, SIZE);
            CHECK(cu.d2h(got, back, SIZE) == 0, "d2h");
            CHECK(memcmp(got, want, SIZE) == 0, "remote %d from %s: bytes differ", r, from_host ? "host" : "device");
            /* And into host memory, at an offset. */
            memset(host, 0, SIZE);
            CHECK(transfer(e, OPCODE_READ, host, seg, remotes[r] + 4096, SIZE - 4096) == 0, "read remote %d to host", r);
            CHECK(memcmp(host, want + 4096, SIZE - 4096) == 0, "remote %d to host: bytes differ", r);
        }
        /* Past the end of the remote buffer: refused. */
        CHECK(transfer(e, OPCODE_WRITE, host, seg, remotes[r] + SIZE - 10, 20) != 0, "write past the remote end");
    }
    notify_msg_t q = {.name = "initiator", .msg = "quit"};
    te.genNotifyInEngine(e, seg, q);
    te.destroyTransferEngine(e);
    return failures ? 1 : 0;
}

static int run_nodriver(void) {
    transfer_engine_t a = te_new_p2p(&te), b = te_new_p2p(&te);
    uint8_t *src = map_lazy(1 << 20), *dst = map_lazy(1 << 20);
    CHECK(te.registerLocalMemory(a, src, 1 << 20, "cuda:0", 1) == KVFERRY_ERR_NOT_IMPLEMENTED, "cuda: without a driver");
    CHECK(te.registerLocalMemory(a, src, 1 << 20, "cpu:0", 1) == 0, "host memory");
    CHECK(te.registerLocalMemory(b, dst, 1 << 20, "*", 1) == 0, "host memory");
    char name[128];
    te.getLocalIpAndPort(b, name, sizeof name);
    segment_id_t seg = te.openSegment(a, name);
    pattern(src, 1 << 20, 5);
    CHECK(transfer(a, OPCODE_WRITE, src, seg, (uint64_t)(uintptr_t)dst, 1 << 20) == 0, "host transfer");
    CHECK(memcmp(src, dst, 1 << 20) == 0, "bytes");
    te.destroyTransferEngine(a);
    te.destroyTransferEngine(b);
    return failures ? 1 : 0;
}

static int run_fork(const char *lib, const char *libcuda) {
    transfer_engine_t e = te_new_p2p(&te);
    void *p = cuda_vmm_malloc(1 << 20, 0, NULL);
    CHECK(p != NULL, "allocation before fork");
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    void *c = dlopen(libcuda, RTLD_NOW | RTLD_LOCAL);
    int (*probe)(int) = h ? (int (*)(int))dlsym(h, "kvferry_cuda_probe") : NULL;
    int (*copy)(void *, const void *, size_t) = h ? (int (*)(void *, const void *, size_t))dlsym(h, "kvferry_cuda_memcpy") : NULL;
    int (*on_stream)(transfer_engine_t, void *, const char *, void *const *, const uint64_t *, const size_t *, size_t, int) =
        h ? (int (*)(transfer_engine_t, void *, const char *, void *const *, const uint64_t *, const size_t *, size_t, int))dlsym(h, "kvferry_transfer_on_stream") : NULL;
    /* The fake counts driver calls; a real driver has no such count. */
    unsigned long long (*calls)(const char *) = c ? (unsigned long long (*)(const char *))dlsym(c, "fakecuda_calls") : NULL;
    CHECK(probe && copy && on_stream && (calls || !cuda_fake(&cu)), "symbols");
    if (!probe || !copy || !on_stream || (!calls && cuda_fake(&cu))) return 1;
    CHECK(probe(0) == 1, "probe before fork");
    pid_t pid = fork();
    if (pid == 0) {
        const char *fns[] = {"cuMemCreate", "cuMemAlloc", "cuPointerGetAttributes", "cuMemcpy", "cuLaunchHostFunc", "cuCtxPushCurrent"};
        unsigned long long before[6] = {0};
        for (int i = 0; calls && i < 6; i++) before[i] = calls(fns[i]);
        int bad = 0;
        bad += cuda_vmm_malloc(1 << 20, 0, NULL) != NULL;
        cuda_vmm_free(p, 0, 0, NULL);
        bad += probe(0) != KVFERRY_ERR_FORKED;
        uint8_t b[16];
        bad += copy(b, p, sizeof b) != KVFERRY_ERR_FORKED;
        void *bufs[1] = {b};
        uint64_t peer = 0;
        size_t len = 1;
        bad += on_stream(e, NULL, "127.0.0.1:1", bufs, &peer, &len, 1, 1) != KVFERRY_ERR_FORKED;
        bad += te.registerLocalMemory(e, p, 1 << 20, "cuda:0", 1) != KVFERRY_ERR_FORKED;
        for (int i = 0; calls && i < 6; i++) bad += calls(fns[i]) != before[i];
        _exit(bad);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child: status %d", st);
    cuda_vmm_free(p, 0, 0, NULL);
    te.destroyTransferEngine(e);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3 || te_load(&te, argv[2]) != 0) {
        fprintf(stderr, "usage: te_gpu_test target|initiator|nodriver <lib> ...\n");
        return 2;
    }
    if (strcmp(argv[1], "nodriver") == 0) {
        int rc = run_nodriver();
        printf("nodriver: %d failures\n", failures);
        return rc;
    }
    if (argc < 4 || cuda_open(&cu, argv[3]) != 0) {
        fprintf(stderr, "cannot initialize the CUDA driver %s\n", argc > 3 ? argv[3] : "");
        return 2;
    }
    load_alloc(argv[2]);
    if (strcmp(argv[1], "fork") == 0 && argc == 4) {
        int rc = run_fork(argv[2], argv[3]);
        printf("fork: %d failures\n", failures);
        return rc;
    }
    if (strcmp(argv[1], "target") == 0 && argc == 5) return run_target(argv[3], argv[4]);
    if (strcmp(argv[1], "initiator") == 0 && argc == 7) {
        int rc = run_initiator(argv[4], strtoull(argv[5], NULL, 0), strtoull(argv[6], NULL, 0));
        printf("initiator: %d failures\n", failures);
        return rc;
    }
    fprintf(stderr, "bad arguments\n");
    return 2;
}
