/* store_demo: the Mooncake Store C API (include/store_c.h) of libkvferry.so,
 * in two processes on this host.
 *
 * The owner sets up a store client with an embedded master ("embedded": no
 * server to start) that lends 64 MiB of its memory to the store, and puts
 * eight 1 MiB objects into it, four from a registered buffer (sent without a
 * copy) and four from ordinary memory. It then starts a second copy of this
 * program, the reader, naming its master's address. The reader joins that
 * master as a pure client (it lends nothing), reads the objects from the
 * owner's memory with one batch_get_into, checks every byte, and answers
 * with an object of its own. The owner checks the answer, removes the
 * objects and exits 0 when all went well.
 *
 *   store_demo                  run both sides
 *   store_demo reader <master>  (started by the owner)
 *
 * Build: gcc -O2 -Iinclude examples/c/store_demo.c -Lbuild/lib -lkvferry \
 *        -Wl,-rpath,$PWD/build/lib
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvferry.h" /* kvferry_store_master_addr, kvferry_store_last_error */
#include "store_c.h"

#define NOBJ 8
#define OBJ (1u << 20)

extern char **environ;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Object i's bytes: a pattern both sides can compute. */
static void fill(uint8_t *p, size_t n, unsigned i) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (i + 1);
    for (size_t k = 0; k < n; k += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(p + k, &x, n - k < 8 ? n - k : 8);
    }
}

static int fail(mooncake_store_t s, const char *what, long long rc) {
    char why[256] = "";
    if (s) kvferry_store_last_error(s, why, sizeof why);
    fprintf(stderr, "store_demo: %s failed (%lld): %s\n", what, rc, why);
    return 1;
}

static uint8_t *map_buf(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    return p;
}

static int reader(const char *master) {
    mooncake_store_t s = mooncake_store_create();
    /* A pure client: lends no memory (0), a 16 MiB staging buffer. */
    int rc = mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 0, 16u << 20, "tcp", "", master);
    if (rc) return fail(s, "reader setup", rc);

    /* Register the destination, so batch_get_into lands in it without a copy. */
    uint8_t *buf = map_buf((size_t)NOBJ * OBJ);
    if ((rc = mooncake_store_register_buffer(s, buf, (size_t)NOBJ * OBJ))) return fail(s, "register_buffer", rc);
    char names[NOBJ][32];
    const char *keys[NOBJ];
    void *dst[NOBJ];
    size_t sizes[NOBJ];
    int64_t got[NOBJ];
    for (unsigned i = 0; i < NOBJ; i++) {
        snprintf(names[i], sizeof names[i], "demo/obj%u", i);
        keys[i] = names[i];
        dst[i] = buf + (size_t)i * OBJ;
        sizes[i] = OBJ;
    }
    double t0 = now();
    if ((rc = mooncake_store_batch_get_into(s, keys, dst, sizes, NOBJ, got))) return fail(s, "batch_get_into", rc);
    double dt = now() - t0;
    uint8_t *want = map_buf(OBJ);
    int bad = 0;
    for (unsigned i = 0; i < NOBJ; i++) {
        fill(want, OBJ, i);
        if (got[i] != OBJ || memcmp(dst[i], want, OBJ) != 0) {
            fprintf(stderr, "[reader] %s: got %lld bytes, %s\n", keys[i], (long long)got[i], "MISMATCH");
            bad++;
        }
    }
    printf("[reader] batch_get_into of %d x 1 MiB from the owner's memory: %.2f ms, %s\n", NOBJ, dt * 1e3,
           bad ? "MISMATCH" : "every byte matches");

    /* Answer with an object of this client's own (it lands in the owner's
     * segment, the only one). */
    char answer[64];
    snprintf(answer, sizeof answer, "reader %d: %d of %d objects match", (int)getpid(), NOBJ - bad, NOBJ);
    if ((rc = mooncake_store_put(s, "demo/answer", answer, strlen(answer) + 1, NULL))) return fail(s, "put answer", rc);
    mooncake_store_unregister_buffer(s, buf);
    mooncake_store_destroy(s);
    return bad ? 1 : 0;
}

/* Starts "<self> reader <master>" and waits for it, at most 60 s. posix_spawn
 * (not a bare fork) because the library runs threads in this process. */
static int run_reader(const char *master) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) { perror("readlink"); return 1; }
    self[n] = 0;
    char *argv[] = {self, "reader", (char *)master, NULL};
    pid_t pid;
    int err = posix_spawn(&pid, self, NULL, NULL, argv, environ);
    if (err) { fprintf(stderr, "posix_spawn: %s\n", strerror(err)); return 1; }
    int status = 0;
    for (double end = now() + 60; waitpid(pid, &status, WNOHANG) == 0;) {
        if (now() > end) {
            fprintf(stderr, "store_demo: the reader did not finish within 60 s\n");
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 1;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int owner(void) {
    mooncake_store_t s = mooncake_store_create();
    /* Embedded master, P2P handshake, 64 MiB lent, 16 MiB staging buffer. */
    int rc = mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 64u << 20, 16u << 20, "tcp", "", "embedded");
    if (rc) return fail(s, "owner setup", rc);
    char master[64], segment[64];
    if (kvferry_store_master_addr(s, master, sizeof master) <= 0) return fail(s, "master_addr", -1);
    mooncake_store_get_hostname(s, segment, sizeof segment);
    printf("[owner] embedded master at %s, segment %s (64 MiB lent)\n", master, segment);

    /* Objects 0-3 from a registered buffer in one batch_put_from (no copy
     * through the staging buffer); 4-7 with put, from ordinary memory. */
    uint8_t *reg = map_buf(4 * (size_t)OBJ);
    if ((rc = mooncake_store_register_buffer(s, reg, 4 * (size_t)OBJ))) return fail(s, "register_buffer", rc);
    char names[NOBJ][32];
    const char *keys[4];
    void *bufs[4];
    size_t sizes[4];
    int res[4];
    for (unsigned i = 0; i < NOBJ; i++) snprintf(names[i], sizeof names[i], "demo/obj%u", i);
    for (unsigned i = 0; i < 4; i++) {
        keys[i] = names[i];
        bufs[i] = reg + (size_t)i * OBJ;
        sizes[i] = OBJ;
        fill(bufs[i], OBJ, i);
    }
    mooncake_replicate_config_t one = {.replica_num = 1};
    if ((rc = mooncake_store_batch_put_from(s, keys, bufs, sizes, 4, &one, res))) return fail(s, "batch_put_from", rc);
    for (unsigned i = 0; i < 4; i++)
        if (res[i]) return fail(s, names[i], res[i]);
    uint8_t *plain = malloc(OBJ);
    for (unsigned i = 4; i < NOBJ; i++) {
        fill(plain, OBJ, i);
        if ((rc = mooncake_store_put(s, names[i], plain, OBJ, NULL))) return fail(s, names[i], rc);
    }
    free(plain);
    printf("[owner] put %d x 1 MiB (4 by batch_put_from of registered memory, 4 by put)\n", NOBJ);

    int reader_rc = run_reader(master);

    /* The reader's answer. */
    char answer[64] = "";
    int64_t n = mooncake_store_get_into(s, "demo/answer", answer, sizeof answer - 1);
    if (n < 0) return fail(s, "get answer", n);
    printf("[owner] the reader answered: \"%s\"\n", answer);
    int64_t removed = mooncake_store_remove_by_regex(s, "^demo/", 1);
    printf("[owner] removed %lld objects; exists(demo/obj0) = %d\n", (long long)removed,
           mooncake_store_is_exist(s, "demo/obj0"));
    mooncake_store_unregister_buffer(s, reg);
    mooncake_store_destroy(s);
    if (reader_rc != 0 || removed != NOBJ + 1) {
        fprintf(stderr, "store_demo: FAILED (reader exit %d)\n", reader_rc);
        return 1;
    }
    printf("store_demo: OK\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 1) return owner();
    if (argc == 3 && strcmp(argv[1], "reader") == 0) return reader(argv[2]);
    fprintf(stderr, "usage: store_demo | store_demo reader <master>\n");
    return 2;
}
