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
 *   store_mooncake LIB MASTER HOST victim DIR
 *   store_mooncake LIB MASTER HOST survivor DIR
 *       the kill case of store-mooncake-faults.sh: the victim puts V-small-*
 *       (alone on the master, so on its own segment), creates DIR/V.ready,
 *       waits for DIR/go, then puts and removes 64 MiB objects V-big-I in a
 *       loop, writing I to DIR/V.putting before each put, until the script
 *       SIGKILLs it. The survivor, once DIR/killed holds the index I being
 *       put, checks that V-big-I is missing or whole, that its own puts and
 *       gets work, that V-small-* go once the victim's TTL ran out, and that
 *       a put of V-big-I then succeeds and reads back.
 *   store_mooncake LIB MASTER HOST restart DIR
 *       the restart case: puts R-*, creates DIR/R.ready, waits for
 *       DIR/restarted, then (deadline) puts and gets new objects through
 *       the restarted master and reports whether R-* survived; with
 *       EXPECT_KEEP set, R-* must read back byte for byte.
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

/* read_int reads the integer in path (-1 when absent). */
static long read_int(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static void write_int(const char *path, long v) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%ld\n", v);
    fclose(f);
    rename(tmp, path);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* whole_or_missing gets key into buf (n bytes registered): 1 when the get
 * fails or returns n bytes of key's pattern, 0 on anything else (a short
 * or a wrong read: a half-written object). */
static int whole_or_missing(store_t s, const char *key, uint8_t *buf, size_t n, int64_t *got) {
    memset(buf, 0, n);
    *got = api.get_into(s, key, buf, n);
    if (*got < 0) return 1;
    return *got == (int64_t)n && mismatch(buf, n, key) == 0;
}

/* put_retry puts n bytes of key's pattern, retrying (a put may first land on
 * a dead client's segment) until deadline seconds pass; returns the tries
 * (negative when none succeeded). */
static int put_retry(store_t s, const char *key, uint8_t *buf, size_t n, double deadline) {
    fill(buf, n, key);
    double end = now_s() + deadline;
    for (int tries = 1;; tries++) {
        if (api.put(s, key, buf, n, NULL) == 0) return tries;
        if (now_s() > end) return -tries;
        usleep(200000);
    }
}

#define BIG (64u << 20)
static const size_t small_sizes[] = {1024, 64 << 10, 1 << 20, 4 << 20};
#define NSMALL (sizeof small_sizes / sizeof small_sizes[0])

static void run_victim(store_t s, const char *dir) {
    char key[128], path[512], name[160];
    uint8_t *buf = malloc(BIG);
    if (!buf) exit(100);
    for (size_t i = 0; i < NSMALL; i++) {
        snprintf(key, sizeof key, "V-small-%zu", i);
        fill(buf, small_sizes[i], key);
        int rc = api.put(s, key, buf, small_sizes[i], NULL);
        snprintf(name, sizeof name, "victim-put-small-%zu", i);
        check(rc == 0, name, "rc=%lld%lld", rc, 0);
    }
    snprintf(path, sizeof path, "%s/V.ready", dir);
    touch(path);
    snprintf(path, sizeof path, "%s/go", dir);
    if (!wait_file(path, 120)) {
        check(0, "victim-go", "%lld%lld", 0, 0);
        return;
    }
    snprintf(path, sizeof path, "%s/V.putting", dir);
    double end = now_s() + 300;
    for (long i = 0; now_s() < end; i++) {
        snprintf(key, sizeof key, "V-big-%ld", i);
        fill(buf, BIG, key);
        write_int(path, i);
        api.put(s, key, buf, BIG, NULL);
        api.remove(s, key, 1);
    }
    check(0, "victim-killed", "the script never killed the victim%lld%lld", 0, 0);
}

static void run_survivor(store_t s, const char *dir) {
    char key[128], path[512], name[160];
    uint8_t *buf = malloc(BIG);
    if (!buf) exit(100);
    api.register_buffer(s, buf, BIG);
    snprintf(path, sizeof path, "%s/S.ready", dir);
    touch(path);
    snprintf(path, sizeof path, "%s/killed", dir);
    if (!wait_file(path, 180)) {
        check(0, "survivor-killed-signal", "%lld%lld", 0, 0);
        return;
    }
    double tkill = now_s();
    usleep(100000);
    long n = read_int(path);
    check(n >= 0, "survivor-kill-index", "index %lld%lld", n, 0);
    int64_t got;
    snprintf(key, sizeof key, "V-big-%ld", n);
    int ok = whole_or_missing(s, key, buf, BIG, &got);
    check(ok, "no-half-object", "got=%lld (neither missing nor whole)%lld", got, 0);
    printf("# V-big-%ld right after the kill: %s\n", n, got < 0 ? "missing" : "whole");

    /* The survivor keeps working while the dead client's lease runs. */
    for (size_t i = 0; i < NSMALL; i++) {
        snprintf(key, sizeof key, "S-after-kill-%zu", i);
        int tries = put_retry(s, key, buf, small_sizes[i], 20);
        snprintf(name, sizeof name, "survivor-put-%zu", small_sizes[i]);
        check(tries > 0, name, "no success in %lld tries%lld", -tries, 0);
        if (tries > 1) printf("# %s took %d tries (the first landed on the dead segment)\n", key, tries);
        memset(buf, 0, small_sizes[i]);
        got = api.get_into(s, key, buf, small_sizes[i]);
        snprintf(name, sizeof name, "survivor-get-%zu", small_sizes[i]);
        check(got == (int64_t)small_sizes[i] && mismatch(buf, small_sizes[i], key) == 0, name, "got=%lld want %lld",
              got, (long long)small_sizes[i]);
    }

    /* The dead client's segment is reclaimed after its TTL: its objects go. */
    const char *dl = getenv("RECLAIM_S");
    double end = now_s() + (dl ? atoi(dl) : 60), t0 = now_s();
    int gone = 0, half = 0;
    while (!gone && now_s() < end) {
        gone = 1;
        for (size_t i = 0; i < NSMALL; i++) {
            snprintf(key, sizeof key, "V-small-%zu", i);
            if (api.is_exist(s, key) == 1) {
                gone = 0;
                /* until then, it is whole */
                if (!whole_or_missing(s, key, buf, small_sizes[i], &got)) half = 1;
            }
        }
        if (!gone) usleep(250000);
    }
    check(gone, "victim-objects-gone", "still there after the deadline%lld%lld", 0, 0);
    check(!half, "victim-objects-whole-until-gone", "%lld%lld", 0, 0);
    printf("# the victim's objects went %.1f s after the kill (%.1f s after the survivor's puts)\n", now_s() - tkill,
           now_s() - t0);
    snprintf(key, sizeof key, "V-big-%ld", n);
    check(api.is_exist(s, key) != 1 || whole_or_missing(s, key, buf, BIG, &got), "no-half-object-later",
          "got=%lld%lld", got, 0);

    /* The same key can be put again and read back: a put of a key whose
     * interrupted put the master still holds may "succeed" (Mooncake's
     * client takes OBJECT_ALREADY_EXISTS as done) while the object is not
     * readable until the master discards the dead put, so put and get
     * until both work (deadline). */
    double rt0 = now_s();
    int tries = 0, reput = 0;
    while (!reput && now_s() < end + 30) {
        tries++;
        fill(buf, BIG, key);
        if (api.put(s, key, buf, BIG, NULL) == 0) {
            memset(buf, 0, BIG);
            got = api.get_into(s, key, buf, BIG);
            reput = got == (int64_t)BIG && mismatch(buf, BIG, key) == 0;
        }
        if (!reput) usleep(500000);
    }
    check(reput, "reput-same-key", "no put and get of it in %lld tries (last get %lld)", tries, got);
    double took = now_s() - rt0;
    printf("# a put of V-big-%ld read back %.1f s after the objects went (%d tries)\n", n, took, tries);
    const char *rs = getenv("REPUT_S");
    if (rs) check(reput && took <= atoi(rs), "reput-after-expiry", "took %lld s, bound %lld s", (long long)took, atoi(rs));
    int64_t removed = api.remove_by_regex(s, "^(S-after-kill-|V-big-)", 1);
    check(removed == (int64_t)NSMALL + 1, "survivor-cleanup", "removed=%lld want %lld", removed, (long long)NSMALL + 1);
    api.unregister_buffer(s, buf);
    free(buf);
}

static void run_restart(store_t s, const char *dir) {
    char key[128], path[512], name[160];
    uint8_t *buf = malloc(BIG);
    if (!buf) exit(100);
    api.register_buffer(s, buf, BIG);
    for (size_t i = 0; i < NSMALL; i++) {
        snprintf(key, sizeof key, "R-%zu", i);
        fill(buf, small_sizes[i], key);
        int rc = api.put(s, key, buf, small_sizes[i], NULL);
        snprintf(name, sizeof name, "put-before-restart-%zu", small_sizes[i]);
        check(rc == 0, name, "rc=%lld%lld", rc, 0);
    }
    snprintf(path, sizeof path, "%s/R.ready", dir);
    touch(path);
    snprintf(path, sizeof path, "%s/restarted", dir);
    if (!wait_file(path, 120)) {
        check(0, "restarted-signal", "%lld%lld", 0, 0);
        return;
    }
    /* New puts work once the client has reconnected (and remounted). */
    double t0 = now_s();
    int tries = put_retry(s, "N-0", buf, 1 << 20, 60);
    check(tries > 0, "put-after-restart", "no success in %lld tries%lld", -tries, 0);
    printf("# first put after the restart succeeded after %.1f s (%d tries)\n", now_s() - t0, tries);
    int64_t got = api.get_into(s, "N-0", buf, 1 << 20);
    check(got == 1 << 20 && mismatch(buf, 1 << 20, "N-0") == 0, "get-after-restart", "got=%lld%lld", got, 0);
    tries = put_retry(s, "N-1", buf, BIG, 30);
    check(tries > 0, "put-64MiB-after-restart", "no success in %lld tries%lld", -tries, 0);
    memset(buf, 0, BIG);
    got = api.get_into(s, "N-1", buf, BIG);
    check(got == (int64_t)BIG && mismatch(buf, BIG, "N-1") == 0, "get-64MiB-after-restart", "got=%lld%lld", got, 0);
    int kept = 0;
    for (size_t i = 0; i < NSMALL; i++) {
        snprintf(key, sizeof key, "R-%zu", i);
        if (whole_or_missing(s, key, buf, small_sizes[i], &got) && got == (int64_t)small_sizes[i]) kept++;
        else check(got < 0, "old-object-missing-or-whole", "got=%lld%lld", got, 0);
    }
    printf("# %d of %zu objects put before the restart read back after it\n", kept, NSMALL);
    if (getenv("EXPECT_KEEP")) check(kept == (int)NSMALL, "objects-survive-restart", "kept %lld of %lld", kept, NSMALL);
    snprintf(path, sizeof path, "%s/R.done", dir);
    touch(path);
    api.remove_all(s, 1);
    api.unregister_buffer(s, buf);
    free(buf);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIB MASTER HOST self | pair MINE THEIRS DIR | victim DIR | survivor DIR | restart DIR\n", argv[0]);
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
    } else if (strcmp(argv[4], "victim") == 0 && argc == 6) {
        run_victim(s, argv[5]);
    } else if (strcmp(argv[4], "survivor") == 0 && argc == 6) {
        run_survivor(s, argv[5]);
    } else if (strcmp(argv[4], "restart") == 0 && argc == 6) {
        run_restart(s, argv[5]);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[4]);
        return 100;
    }
    api.destroy(s);
    return failures > 100 ? 100 : failures;
}
