/*
 * Store interop driver (issue 36): one C program against the store C API
 * (include/store_c.h), loaded with dlopen, so the same code runs on
 * kvferry's libkvferry.so and on Mooncake's libmooncake_store.so. It is
 * our own code; it uses only the C function names and signatures that both
 * libraries export.
 *
 *   store_mooncake LIB MASTER HOST self
 *       put/get 1 KiB .. 64 MiB, batch put/get, exist, batch exist, size,
 *       remove, regex remove, remove all, all in one process.
 *   store_mooncake LIB MASTER HOST pair MINE THEIRS DIR
 *       put objects named MINE-*, create DIR/MINE.ready, wait (deadline)
 *       for DIR/THEIRS.ready, get and check THEIRS-* (put by the other
 *       process, whose segment may hold them), create DIR/MINE.done, wait
 *       for DIR/THEIRS.done so the other's reads of our segment finish
 *       (and, with PAIR_HOLD set, for DIR/release), then regex-remove MINE-*
 *       and wait for DIR/THEIRS.removed before unmounting.
 *
 * Every check prints "ok NAME" or "FAIL NAME ..."; the exit status is the
 * number of failures (capped at 100).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef void *store_t;

static struct {
    store_t (*create)(void);
    void (*destroy)(store_t);
    int (*setup)(store_t, const char *, const char *, uint64_t, uint64_t, const char *, const char *, const char *);
    int (*put)(store_t, const char *, const void *, size_t, const void *);
    int (*batch_put_from)(store_t, const char **, void **, const size_t *, size_t, const void *, int *);
    int64_t (*get_into)(store_t, const char *, void *, size_t);
    int (*batch_get_into)(store_t, const char **, void **, const size_t *, size_t, int64_t *);
    int (*is_exist)(store_t, const char *);
    int (*batch_is_exist)(store_t, const char **, size_t, int *);
    int64_t (*get_size)(store_t, const char *);
    int (*remove)(store_t, const char *, int);
    int64_t (*remove_by_regex)(store_t, const char *, int);
    int64_t (*remove_all)(store_t, int);
    int (*register_buffer)(store_t, void *, size_t);
    int (*unregister_buffer)(store_t, void *);
} api;

static int failures;

static void check(int ok, const char *name, const char *fmt, long long a, long long b) {
    if (ok) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s ", name);
        printf(fmt, a, b);
        printf("\n");
        failures++;
    }
    fflush(stdout);
}

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "missing symbol %s: %s\n", name, dlerror());
        exit(100);
    }
    return p;
}

static void load(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
        exit(100);
    }
    *(void **)&api.create = sym(h, "mooncake_store_create");
    *(void **)&api.destroy = sym(h, "mooncake_store_destroy");
    *(void **)&api.setup = sym(h, "mooncake_store_setup");
    *(void **)&api.put = sym(h, "mooncake_store_put");
    *(void **)&api.batch_put_from = sym(h, "mooncake_store_batch_put_from");
    *(void **)&api.get_into = sym(h, "mooncake_store_get_into");
    *(void **)&api.batch_get_into = sym(h, "mooncake_store_batch_get_into");
    *(void **)&api.is_exist = sym(h, "mooncake_store_is_exist");
    *(void **)&api.batch_is_exist = sym(h, "mooncake_store_batch_is_exist");
    *(void **)&api.get_size = sym(h, "mooncake_store_get_size");
    *(void **)&api.remove = sym(h, "mooncake_store_remove");
    *(void **)&api.remove_by_regex = sym(h, "mooncake_store_remove_by_regex");
    *(void **)&api.remove_all = sym(h, "mooncake_store_remove_all");
    *(void **)&api.register_buffer = sym(h, "mooncake_store_register_buffer");
    *(void **)&api.unregister_buffer = sym(h, "mooncake_store_unregister_buffer");
}

static uint32_t seed_of(const char *key) {
    uint32_t h = 2166136261u;
    for (; *key; key++) h = (h ^ (uint8_t)*key) * 16777619u;
    return h;
}

static void fill(uint8_t *p, size_t n, const char *key) {
    uint32_t s = seed_of(key);
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = (uint8_t)(s >> 16);
    }
}

static size_t mismatch(const uint8_t *p, size_t n, const char *key) {
    uint32_t s = seed_of(key);
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        if (p[i] != (uint8_t)(s >> 16)) return i + 1;
    }
    return 0;
}

static const size_t sizes[] = {1024, 64 << 10, 1 << 20, 8 << 20, 64 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* put_get puts key with n bytes and reads it back through a registered buffer. */
static void put_get(store_t s, const char *key, size_t n) {
    char name[160];
    uint8_t *in = malloc(n), *out = malloc(n);
    if (!in || !out) exit(100);
    fill(in, n, key);
    snprintf(name, sizeof name, "put-%zu", n);
    int rc = api.put(s, key, in, n, NULL);
    check(rc == 0, name, "rc=%lld%lld", rc, 0);
    snprintf(name, sizeof name, "size-%zu", n);
    int64_t sz = api.get_size(s, key);
    check(sz == (int64_t)n, name, "size=%lld want %lld", sz, (long long)n);
    memset(out, 0, n);
    api.register_buffer(s, out, n);
    int64_t got = api.get_into(s, key, out, n);
    snprintf(name, sizeof name, "get-%zu", n);
    check(got == (int64_t)n, name, "got=%lld want %lld", got, (long long)n);
    size_t bad = got == (int64_t)n ? mismatch(out, n, key) : 0;
    snprintf(name, sizeof name, "bytes-%zu", n);
    check(bad == 0, name, "first bad byte %lld of %lld", (long long)bad - 1, (long long)n);
    api.unregister_buffer(s, out);
    free(in);
    free(out);
}

static void run_self(store_t s) {
    char key[64];
    for (size_t i = 0; i < NSIZES; i++) {
        snprintf(key, sizeof key, "self-%zu", sizes[i]);
        put_get(s, key, sizes[i]);
        int rc = api.remove(s, key, 1);
        check(rc == 0, "remove-after-get", "rc=%lld%lld", rc, 0);
    }
    check(api.is_exist(s, "self-1024") == 0, "exist-after-remove", "rc=%lld%lld", api.is_exist(s, "self-1024"), 0);

    enum { NB = 8 };
    const char *keys[NB];
    char names[NB][32];
    void *bufs[NB], *outs[NB];
    size_t lens[NB];
    int res[NB];
    int64_t got[NB];
    for (int i = 0; i < NB; i++) {
        snprintf(names[i], sizeof names[i], "batch-%d", i);
        keys[i] = names[i];
        lens[i] = (size_t)(4096 << (i % 4));
        bufs[i] = malloc(lens[i]);
        outs[i] = malloc(lens[i]);
        fill(bufs[i], lens[i], keys[i]);
        memset(outs[i], 0, lens[i]);
        api.register_buffer(s, bufs[i], lens[i]);
        api.register_buffer(s, outs[i], lens[i]);
        res[i] = -1;
    }
    int rc = api.batch_put_from(s, keys, bufs, lens, NB, NULL, res);
    int allok = rc == 0;
    for (int i = 0; i < NB; i++) allok = allok && res[i] == 0;
    check(allok, "batch-put", "rc=%lld first=%lld", rc, res[0]);
    rc = api.batch_get_into(s, keys, outs, lens, NB, got);
    allok = rc == 0;
    for (int i = 0; i < NB; i++) allok = allok && got[i] == (int64_t)lens[i] && mismatch(outs[i], lens[i], keys[i]) == 0;
    check(allok, "batch-get", "rc=%lld first=%lld", rc, got[0]);
    const char *ek[3] = {"batch-0", "batch-nope", "batch-7"};
    int er[3] = {-9, -9, -9};
    rc = api.batch_is_exist(s, ek, 3, er);
    check(rc == 0 && er[0] == 1 && er[1] == 0 && er[2] == 1, "batch-exist", "rc=%lld missing=%lld", rc, er[1]);
    check(api.is_exist(s, "batch-3") == 1, "exist", "rc=%lld%lld", api.is_exist(s, "batch-3"), 0);
    check(api.is_exist(s, "nope") == 0, "exist-missing", "rc=%lld%lld", api.is_exist(s, "nope"), 0);
    check(api.get_into(s, "nope", outs[0], lens[0]) < 0, "get-missing", "rc=%lld%lld", 0, 0);

    int64_t n = api.remove_by_regex(s, "^batch-[0-3]$", 1);
    check(n == 4, "regex-remove", "removed=%lld want %lld", n, 4);
    check(api.is_exist(s, "batch-2") == 0 && api.is_exist(s, "batch-5") == 1, "regex-remove-kept", "%lld%lld", 0, 0);
    n = api.remove_all(s, 1);
    check(n == 4, "remove-all", "removed=%lld want %lld", n, 4);
    check(api.is_exist(s, "batch-6") == 0, "exist-after-remove-all", "%lld%lld", 0, 0);
    for (int i = 0; i < NB; i++) {
        api.unregister_buffer(s, bufs[i]);
        api.unregister_buffer(s, outs[i]);
        free(bufs[i]);
        free(outs[i]);
    }
}

static int wait_file(const char *path, int secs) {
    struct stat st;
    for (int i = 0; i < secs * 10; i++) {
        if (stat(path, &st) == 0) return 1;
        usleep(100000);
    }
    return 0;
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

static void run_pair(store_t s, const char *mine, const char *theirs, const char *dir) {
    char key[128], path[512], name[160];
    uint8_t *buf = malloc(sizes[NSIZES - 1]);
    if (!buf) exit(100);
    for (size_t i = 0; i < NSIZES; i++) {
        snprintf(key, sizeof key, "%s-%zu", mine, sizes[i]);
        fill(buf, sizes[i], key);
        int rc = api.put(s, key, buf, sizes[i], NULL);
        snprintf(name, sizeof name, "%s-put-%zu", mine, sizes[i]);
        check(rc == 0, name, "rc=%lld%lld", rc, 0);
    }
    snprintf(path, sizeof path, "%s/%s.ready", dir, mine);
    touch(path);
    snprintf(path, sizeof path, "%s/%s.ready", dir, theirs);
    check(wait_file(path, 120), "peer-ready", "%lld%lld", 0, 0);
    api.register_buffer(s, buf, sizes[NSIZES - 1]);
    for (size_t i = 0; i < NSIZES; i++) {
        snprintf(key, sizeof key, "%s-%zu", theirs, sizes[i]);
        memset(buf, 0, sizes[i]);
        int64_t got = api.get_into(s, key, buf, sizes[i]);
        snprintf(name, sizeof name, "%s-get-%s-%zu", mine, theirs, sizes[i]);
        check(got == (int64_t)sizes[i] && mismatch(buf, sizes[i], key) == 0, name, "got=%lld want %lld", got,
              (long long)sizes[i]);
    }
    snprintf(key, sizeof key, "^%s-", theirs);
    api.unregister_buffer(s, buf);
    snprintf(path, sizeof path, "%s/%s.done", dir, mine);
    touch(path);
    snprintf(path, sizeof path, "%s/%s.done", dir, theirs);
    check(wait_file(path, 120), "peer-done", "%lld%lld", 0, 0);
    if (getenv("PAIR_HOLD")) { /* the script inspects placement first */
        snprintf(path, sizeof path, "%s/release", dir);
        check(wait_file(path, 120), "released", "%lld%lld", 0, 0);
    }
    snprintf(key, sizeof key, "^%s-", mine);
    int64_t n = api.remove_by_regex(s, key, 1);
    snprintf(name, sizeof name, "%s-regex-remove", mine);
    check(n == (int64_t)NSIZES, name, "removed=%lld want %lld", n, (long long)NSIZES);
    /* Stay mounted until the other removed its objects too: some lie in
     * our segment, and unmounting it (at exit) would drop them first. */
    snprintf(path, sizeof path, "%s/%s.removed", dir, mine);
    touch(path);
    snprintf(path, sizeof path, "%s/%s.removed", dir, theirs);
    check(wait_file(path, 120), "peer-removed", "%lld%lld", 0, 0);
    free(buf);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIB MASTER HOST self | pair MINE THEIRS DIR\n", argv[0]);
        return 100;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    load(argv[1]);
    store_t s = api.create();
    if (!s) {
        printf("FAIL create\n");
        return 100;
    }
    const char *seg = getenv("SEGMENT_MB");
    uint64_t segsz = (uint64_t)(seg ? atoi(seg) : 256) << 20;
    int rc = api.setup(s, argv[3], "P2PHANDSHAKE", segsz, 128ull << 20, "tcp", "", argv[2]);
    check(rc == 0, "setup", "rc=%lld%lld", rc, 0);
    if (rc != 0) return 100;
    if (strcmp(argv[4], "self") == 0) {
        run_self(s);
    } else if (strcmp(argv[4], "pair") == 0 && argc == 8) {
        run_pair(s, argv[5], argv[6], argv[7]);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[4]);
        return 100;
    }
    api.destroy(s);
    return failures > 100 ? 100 : failures;
}
