/* Tests of the Mooncake-compatible store C API (store_c.h) and kvferry's
 * store additions (kvferry.h), loaded from the library with dlopen.
 *
 *   store_test holder <lib> <master> <ready-file>
 *       Sets up a store that lends 64 MiB, writes its hostname to
 *       <ready-file>, and serves until stdin reaches EOF.
 *   store_test client <lib> <master> <holder-hostname>
 *       Functional and bad-input tests against the master and the holder.
 *   store_test embedded <lib>
 *       One process with an embedded master ("" address).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvf_api.h"

static struct store_api api;

/* Mooncake store ErrorCodes used below (specs/mooncake.md §6.6). */
enum {
    INVALID_PARAMS = -600,
    INVALID_REPLICA = -702,
    OBJECT_NOT_FOUND = -704,
    OBJECT_ALREADY_EXISTS = -705,
    OBJECT_HAS_LEASE = -706,
    RPC_FAIL = -900,
};

/* MAX_BATCH is the library's cap on a batch's keys and ranges (kvferry.h,
 * "Store ranges and sessions": more than 4M ranges is INVALID_PARAMS). */
#define MAX_BATCH ((size_t)1 << 22)

static void fill(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131 + seed);
}

static int same(const uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(i * 131 + seed)) return 0;
    return 1;
}

/* same_at reports whether p holds bytes [off, off+n) of fill's pattern of
 * seed. */
static int same_at(const uint8_t *p, size_t n, size_t off, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)((off + i) * 131 + seed)) return 0;
    return 1;
}

/* all_are reports whether the n bytes at p are all b. */
static int all_are(const uint8_t *p, size_t n, uint8_t b) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != b) return 0;
    return 1;
}

static mooncake_store_t new_store(const char *master, uint64_t segment) {
    mooncake_store_t s = api.mooncake_store_create();
    if (!s) {
        fprintf(stderr, "mooncake_store_create failed\n");
        exit(2);
    }
    int rc = api.mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", segment, 16 << 20, "tcp", "", master);
    if (rc != 0) {
        char err[512];
        api.kvferry_store_last_error(s, err, sizeof err);
        fprintf(stderr, "mooncake_store_setup(%s) = %d: %s\n", master, rc, err);
        exit(2);
    }
    return s;
}

/* Every entry point with a NULL store or NULL pointers returns -1 and does
 * not crash. */
static void test_null_args(mooncake_store_t s) {
    const char *keys[] = {"a", NULL};
    void *bufs[] = {NULL, NULL};
    size_t sizes[] = {0, 0};
    int ires[2];
    int64_t lres[2];
    char name[64];
    uint8_t b[8];
    void *out = (void *)1;

    api.mooncake_store_destroy(NULL);
    CHECK(api.mooncake_store_setup(NULL, "h", "P2PHANDSHAKE", 0, 0, "tcp", "", "") == -1, "setup");
    CHECK(api.mooncake_store_init_all(NULL, "tcp", "", 0) == -1, "init_all");
    CHECK(api.mooncake_store_health_check(NULL) == -1, "health");
    CHECK(api.mooncake_store_put(NULL, "k", b, 1, NULL) == -1, "put NULL store");
    CHECK(api.mooncake_store_put(s, NULL, b, 1, NULL) == -1, "put NULL key");
    CHECK(api.mooncake_store_put(s, "k", NULL, 1, NULL) == -1, "put NULL value");
    CHECK(api.mooncake_store_put_from(s, NULL, b, 1, NULL) == -1, "put_from NULL key");
    CHECK(api.mooncake_store_put_from(s, "k", NULL, 5, NULL) == -1, "put_from NULL buffer");
    CHECK(api.mooncake_store_batch_put_from(NULL, keys, bufs, sizes, 1, NULL, ires) == -1, "batch_put NULL store");
    CHECK(api.mooncake_store_batch_put_from(s, NULL, bufs, sizes, 1, NULL, ires) == -1, "batch_put NULL keys");
    CHECK(api.mooncake_store_batch_put_from(s, keys, NULL, sizes, 1, NULL, ires) == -1, "batch_put NULL bufs");
    CHECK(api.mooncake_store_batch_put_from(s, keys, bufs, NULL, 1, NULL, ires) == -1, "batch_put NULL sizes");
    CHECK(api.mooncake_store_batch_put_from(s, keys, bufs, sizes, 1, NULL, NULL) == -1, "batch_put NULL results");
    CHECK(api.mooncake_store_batch_put_from(s, keys, bufs, sizes, 2, NULL, ires) == -1, "batch_put NULL key");
    CHECK(api.mooncake_store_get_into(NULL, "k", b, 8) == -1, "get_into NULL store");
    CHECK(api.mooncake_store_get_into(s, NULL, b, 8) == -1, "get_into NULL key");
    CHECK(api.mooncake_store_get_into(s, "k", NULL, 8) == -1, "get_into NULL buffer");
    CHECK(api.mooncake_store_batch_get_into(s, keys, bufs, sizes, 2, lres) == -1, "batch_get NULL key");
    CHECK(api.mooncake_store_batch_get_into(s, keys, bufs, sizes, 1, NULL) == -1, "batch_get NULL results");
    CHECK(api.mooncake_store_is_exist(NULL, "k") == -1, "is_exist NULL store");
    CHECK(api.mooncake_store_is_exist(s, NULL) == -1, "is_exist NULL key");
    CHECK(api.mooncake_store_batch_is_exist(s, keys, 2, ires) == -1, "batch_is_exist NULL key");
    CHECK(api.mooncake_store_batch_is_exist(s, keys, 1, NULL) == -1, "batch_is_exist NULL results");
    CHECK(api.mooncake_store_get_size(s, NULL) == -1, "get_size NULL key");
    CHECK(api.mooncake_store_get_hostname(s, NULL, 10) == -1, "hostname NULL buf");
    CHECK(api.mooncake_store_get_hostname(s, name, 0) == -1, "hostname zero len");
    CHECK(api.mooncake_store_remove(s, NULL, 0) == -1, "remove NULL key");
    CHECK(api.mooncake_store_remove_by_regex(s, NULL, 0) == -1, "regex NULL");
    CHECK(api.mooncake_store_remove_all(NULL, 0) == -1, "remove_all NULL store");
    CHECK(api.mooncake_store_register_buffer(s, NULL, 10) == -1, "register NULL");
    CHECK(api.mooncake_store_register_buffer(s, b, 0) == -1, "register size 0");
    CHECK(api.mooncake_store_unregister_buffer(s, NULL) == -1, "unregister NULL");
    CHECK(api.kvferry_store_upsert(s, NULL, b, 1, NULL) == -1, "upsert NULL key");
    CHECK(api.kvferry_store_batch_remove(s, keys, 2, 0, ires) == -1, "batch_remove NULL key");
    CHECK(api.kvferry_store_get_alloc(s, "k", NULL) == -1, "get_alloc NULL out");
    CHECK(api.kvferry_store_get_alloc(s, NULL, &out) == -1 && out == NULL, "get_alloc NULL key");
    api.kvferry_store_free(NULL);
    /* A handle that was never returned, and a destroyed one. */
    CHECK(api.mooncake_store_is_exist((mooncake_store_t)0x1234, "k") == -1, "bogus handle");
    mooncake_store_t gone = api.mooncake_store_create();
    api.mooncake_store_destroy(gone);
    CHECK(api.mooncake_store_is_exist(gone, "k") == -1, "destroyed handle");
    api.mooncake_store_destroy(gone); /* twice is harmless */
}

/* Calls on a store that is created but not set up. */
static void test_not_setup(void) {
    mooncake_store_t s = api.mooncake_store_create();
    uint8_t b[8] = {0};
    char name[64];
    CHECK(s != NULL, "create");
    CHECK(api.mooncake_store_health_check(s) == 1, "health before setup");
    CHECK(api.mooncake_store_put(s, "k", b, 8, NULL) == INVALID_PARAMS, "put before setup");
    CHECK(api.mooncake_store_get_into(s, "k", b, 8) == INVALID_PARAMS, "get before setup");
    CHECK(api.mooncake_store_is_exist(s, "k") == INVALID_PARAMS, "is_exist before setup");
    CHECK(api.mooncake_store_remove_all(s, 1) == INVALID_PARAMS, "remove_all before setup");
    CHECK(api.mooncake_store_get_hostname(s, name, sizeof name) == 0 && name[0] == 0, "hostname before setup");
    /* A master that does not answer: setup fails with RPC_FAIL. */
    int rc = api.mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", "127.0.0.1:1");
    CHECK(rc == RPC_FAIL || rc == -901, "setup with a dead master = %d", rc);
    api.mooncake_store_destroy(s);
}

static void test_client(const char *master, const char *holder) {
    mooncake_store_t s = new_store(master, 32 << 20);
    test_null_args(s);
    test_not_setup();
    CHECK(api.mooncake_store_health_check(s) == 0, "health");

    char name[128];
    CHECK(api.mooncake_store_get_hostname(s, name, sizeof name) == 0, "hostname");
    CHECK(strncmp(name, "127.0.0.1:", 10) == 0, "hostname %s", name);
    CHECK(api.mooncake_store_get_hostname(s, name, strlen(name)) == -1, "hostname buffer too small");

    /* Put into the holder's segment, read back. */
    const size_t n = (3 << 20) + 77;
    uint8_t *src = map_lazy(n), *dst = map_lazy(n + 4096);
    fill(src, n, 1);
    const char *pref[] = {holder};
    mooncake_replicate_config_t on_holder = {1, 0, 0, pref, 1};
    CHECK(api.mooncake_store_put(s, "obj", src, n, &on_holder) == 0, "put");
    CHECK(api.mooncake_store_is_exist(s, "obj") == 1, "is_exist");
    CHECK(api.mooncake_store_is_exist(s, "nope") == 0, "is_exist miss");
    CHECK(api.mooncake_store_get_size(s, "obj") == (int64_t)n, "get_size");
    CHECK(api.mooncake_store_get_size(s, "nope") == OBJECT_NOT_FOUND, "get_size miss");
    CHECK(api.mooncake_store_get_into(s, "obj", dst, n + 4096) == (int64_t)n, "get_into");
    CHECK(same(dst, n, 1), "get_into data");
    CHECK(api.mooncake_store_get_into(s, "nope", dst, n) == OBJECT_NOT_FOUND, "get_into miss = -704");

    /* A buffer too small is an error, never an overflow. */
    memset(dst, 0xEE, n + 4096);
    int64_t rc = api.mooncake_store_get_into(s, "obj", dst, 100);
    CHECK(rc == INVALID_PARAMS, "get_into small buffer = %" PRId64, rc);
    CHECK(dst[0] == 0xEE && dst[100] == 0xEE, "small buffer untouched");
    char err[512];
    CHECK(api.kvferry_store_last_error(s, err, sizeof err) > 0 && strstr(err, "buffer") != NULL,
          "last_error: %s", err);

    /* Size 0 and replica_num 0 are INVALID_PARAMS. */
    CHECK(api.mooncake_store_put(s, "zero", src, 0, NULL) == INVALID_PARAMS, "put size 0");
    CHECK(api.mooncake_store_put(s, "zero", NULL, 0, NULL) == INVALID_PARAMS, "put NULL size 0");
    mooncake_replicate_config_t none = {0, 0, 0, NULL, 0};
    CHECK(api.mooncake_store_put(s, "zero", src, 10, &none) == INVALID_PARAMS, "replica_num 0");

    /* Put on an existing key returns 0 and keeps the old value; upsert
     * replaces it. */
    fill(src, n, 2);
    CHECK(api.mooncake_store_put(s, "obj", src, 1000, NULL) == 0, "put existing");
    CHECK(api.mooncake_store_get_size(s, "obj") == (int64_t)n, "size unchanged");
    CHECK(api.kvferry_store_upsert(s, "obj", src, 1000, NULL) == 0, "upsert");
    CHECK(api.mooncake_store_get_size(s, "obj") == 1000, "size after upsert");
    void *got = NULL;
    CHECK(api.kvferry_store_get_alloc(s, "obj", &got) == 1000 && got && same(got, 1000, 2), "get_alloc");
    api.kvferry_store_free(got);

    /* Leases: a read blocks remove unless force. */
    CHECK(api.mooncake_store_remove(s, "obj", 0) == OBJECT_HAS_LEASE, "remove leased");
    CHECK(api.mooncake_store_remove(s, "obj", 1) == 0, "remove force");
    CHECK(api.mooncake_store_remove(s, "obj", 1) == OBJECT_NOT_FOUND, "remove gone");

    /* Zero-copy batch through registered memory, two replicas (holder and
     * this client). */
    enum { K = 6, SZ = 128 << 10 };
    uint8_t *rb = map_lazy(K * SZ), *wb = map_lazy(K * SZ);
    CHECK(api.mooncake_store_register_buffer(s, rb, K * SZ) == 0, "register");
    CHECK(api.mooncake_store_register_buffer(s, wb, K * SZ) == 0, "register 2");
    const char *keys[K + 1];
    char keybuf[K + 1][16];
    void *wbufs[K + 1], *rbufs[K + 1];
    size_t sizes[K + 1];
    int ires[K + 1];
    int64_t lres[K + 1];
    for (int i = 0; i < K; i++) {
        snprintf(keybuf[i], sizeof keybuf[i], "b_%d", i);
        keys[i] = keybuf[i];
        wbufs[i] = wb + i * SZ;
        rbufs[i] = rb + i * SZ;
        sizes[i] = SZ;
        fill(wb + i * SZ, SZ, 10 + i);
    }
    keys[K] = "b_missing";
    rbufs[K] = rb;
    wbufs[K] = wb;
    sizes[K] = SZ;
    mooncake_replicate_config_t two = {2, 1, 0, NULL, 0};
    CHECK(api.mooncake_store_batch_put_from(s, keys, wbufs, sizes, K, &two, ires) == 0, "batch_put");
    for (int i = 0; i < K; i++) CHECK(ires[i] == 0, "batch_put[%d] = %d", i, ires[i]);
    CHECK(api.mooncake_store_batch_get_into(s, keys, rbufs, sizes, K + 1, lres) == 0, "batch_get");
    for (int i = 0; i < K; i++) {
        CHECK(lres[i] == SZ, "batch_get[%d] = %" PRId64, i, lres[i]);
        CHECK(same(rb + i * SZ, SZ, 10 + i), "batch_get[%d] data", i);
    }
    CHECK(lres[K] == OBJECT_NOT_FOUND, "batch_get missing = %" PRId64, lres[K]);
    CHECK(api.mooncake_store_batch_is_exist(s, keys, K + 1, ires) == 0, "batch_is_exist");
    CHECK(ires[0] == 1 && ires[K] == 0, "batch_is_exist results %d %d", ires[0], ires[K]);
    CHECK(api.mooncake_store_batch_put_from(s, keys, wbufs, sizes, 0, NULL, ires) == 0, "batch of 0");
    CHECK(api.kvferry_store_batch_upsert_from(s, keys, wbufs, sizes, 2, NULL, ires) == 0 && ires[0] == 0,
          "batch_upsert");
    CHECK(api.kvferry_store_batch_remove(s, keys, K + 1, 1, ires) == 0, "batch_remove");
    CHECK(ires[0] == 0 && ires[K] == OBJECT_NOT_FOUND, "batch_remove results %d %d", ires[0], ires[K]);
    CHECK(api.mooncake_store_unregister_buffer(s, rb) == 0, "unregister");
    CHECK(api.mooncake_store_unregister_buffer(s, rb) == -1, "unregister twice");
    CHECK(api.mooncake_store_unregister_buffer(s, wb) == 0, "unregister 2");

    /* Regex and remove-all. */
    for (int i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof k, "req1_%d_k", i);
        CHECK(api.mooncake_store_put(s, k, src, 64, NULL) == 0, "put %s", k);
    }
    CHECK(api.mooncake_store_put(s, "other", src, 64, NULL) == 0, "put other");
    CHECK(api.mooncake_store_remove_by_regex(s, "^req1_[0-2]_", 0) == 3, "regex count");
    CHECK(api.mooncake_store_remove_by_regex(s, "(", 0) == INVALID_PARAMS, "bad regex");
    int64_t all = api.mooncake_store_remove_all(s, 1);
    CHECK(all == 3, "remove_all = %" PRId64, all);

    char metrics[1 << 16];
    int64_t m = api.kvferry_metrics_text(metrics, sizeof metrics);
    CHECK(m > 0 && strstr(metrics, "kvferry_store_client_puts_total") != NULL, "metrics text");

    api.mooncake_store_destroy(s);
    munmap(src, n);
    munmap(dst, n + 4096);
    munmap(rb, K * SZ);
    munmap(wb, K * SZ);
}

static mooncake_store_t tenant_store(const char *master, const char *tenant) {
    mooncake_store_t s = api.mooncake_store_create();
    if (!s) exit(2);
    CHECK(api.kvferry_store_set_tenant(s, tenant) == 0, "set_tenant(%s)", tenant);
    int rc = api.mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", master);
    if (rc != 0) {
        fprintf(stderr, "setup of tenant %s = %d\n", tenant, rc);
        exit(2);
    }
    return s;
}

/* Stores of two tenants on one master: the same key is two objects, and
 * nothing of one tenant is seen or removed by the other. */
static void test_tenants(const char *master) {
    CHECK(api.kvferry_store_set_tenant(NULL, "a") == -1, "set_tenant NULL store");
    mooncake_store_t bad = api.mooncake_store_create();
    CHECK(api.kvferry_store_set_tenant(bad, "_reserved") == INVALID_PARAMS, "reserved tenant");
    CHECK(api.kvferry_store_set_tenant(bad, "a\tb") == INVALID_PARAMS, "control character");
    CHECK(api.kvferry_store_set_tenant(bad, NULL) == 0, "NULL tenant is the default");
    api.mooncake_store_destroy(bad);

    mooncake_store_t a = tenant_store(master, "tenant-a"), b = tenant_store(master, "tenant-b");
    CHECK(api.kvferry_store_set_tenant(a, "other") == INVALID_PARAMS, "set_tenant after setup");
    uint8_t va[512], vb[300], out[512];
    fill(va, sizeof va, 21);
    fill(vb, sizeof vb, 22);
    CHECK(api.mooncake_store_put(a, "tk", va, sizeof va, NULL) == 0, "put a");
    CHECK(api.mooncake_store_put(b, "tk", vb, sizeof vb, NULL) == 0, "put b");
    CHECK(api.mooncake_store_put(a, "only-a", va, sizeof va, NULL) == 0, "put only-a");
    CHECK(api.mooncake_store_get_into(a, "tk", out, sizeof out) == (int64_t)sizeof va && same(out, sizeof va, 21),
          "get a");
    CHECK(api.mooncake_store_get_into(b, "tk", out, sizeof out) == (int64_t)sizeof vb && same(out, sizeof vb, 22),
          "get b");
    CHECK(api.mooncake_store_is_exist(b, "only-a") == 0, "b sees a's key");
    CHECK(api.mooncake_store_get_size(b, "only-a") == OBJECT_NOT_FOUND, "b sizes a's key");
    CHECK(api.mooncake_store_remove(b, "only-a", 1) == OBJECT_NOT_FOUND, "b removes a's key");
    int64_t n = api.mooncake_store_remove_all(b, 1);
    CHECK(n == 1, "remove_all b = %" PRId64, n);
    CHECK(api.mooncake_store_is_exist(a, "tk") == 1 && api.mooncake_store_is_exist(a, "only-a") == 1,
          "a kept its keys");
    CHECK(api.mooncake_store_remove_by_regex(a, "^(tk|only-a)$", 1) == 2, "a removes its keys");
    api.mooncake_store_destroy(a);
    api.mooncake_store_destroy(b);
}

/* Multi-buffer puts and gets: each object is the concatenation of its
 * buffers; registered buffers move with no copy, others are staged. */
static void test_multi(const char *master) {
    mooncake_store_t s = new_store(master, 0);
    const size_t P = 64 << 10;
    uint8_t *src = map_lazy(4 * P), *dst = map_lazy(8 * P), plain[3000];
    fill(src, 4 * P, 31);
    fill(plain, sizeof plain, 32);
    CHECK(api.mooncake_store_register_buffer(s, src, 4 * P) == 0, "register src");
    CHECK(api.mooncake_store_register_buffer(s, dst, 8 * P) == 0, "register dst");
    /* m0 = src[2P..3P) + src[0..P); m1 = plain (unregistered), in two parts;
     * m2 = src[3P..4P). */
    const char *keys[] = {"m0", "m1", "m2"}, *groups[] = {"g", "", "g"};
    void *bufs[] = {src + 2 * P, src, plain, plain + 1000, src + 3 * P};
    size_t sizes[] = {P, P, 1000, 2000, P}, counts[] = {2, 2, 1};
    int res[3] = {1, 1, 1};
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 3, bufs, sizes, counts, NULL, groups, 0, res) == 0,
          "put multi");
    for (int i = 0; i < 3; i++) CHECK(res[i] == 0, "put multi[%d] = %d", i, res[i]);

    /* Read back scattered: m0 into 3 parts (the last larger than needed). */
    void *outs[] = {dst, dst + P / 2, dst + 4 * P, dst + 6 * P, dst + 7 * P};
    size_t osz[] = {P / 2, P / 2, 2 * P, 3000, P};
    size_t ocnt[] = {3, 1, 1};
    int64_t lres[3];
    CHECK(api.kvferry_store_batch_get_into_multi(s, keys, 3, outs, osz, ocnt, lres) == 0, "get multi");
    CHECK(lres[0] == (int64_t)(2 * P) && lres[1] == 3000 && lres[2] == (int64_t)P, "get multi sizes %" PRId64
          " %" PRId64 " %" PRId64, lres[0], lres[1], lres[2]);
    CHECK(memcmp(dst, src + 2 * P, P) == 0 && memcmp(dst + 4 * P, src, P) == 0, "m0 data");
    CHECK(memcmp(dst + 6 * P, plain, sizeof plain) == 0, "m1 data");
    CHECK(memcmp(dst + 7 * P, src + 3 * P, P) == 0, "m2 data");
    /* Buffers that hold less than the object: -600. */
    size_t small[] = {100};
    CHECK(api.kvferry_store_batch_get_into_multi(s, keys, 1, outs, small, (size_t[]){1}, lres) == 0 &&
              lres[0] == INVALID_PARAMS, "get multi too small = %" PRId64, lres[0]);
    /* h0 and h1 share a group: a read of h1 leases h0; u is ungrouped. */
    const char *hkeys[] = {"h0", "h1", "u"}, *hgroups[] = {"h", "h", ""};
    CHECK(api.kvferry_store_batch_put_from_multi(s, hkeys, 3, bufs, sizes, (size_t[]){1, 1, 1}, NULL, hgroups, 0,
                                                 res) == 0 && res[0] == 0 && res[1] == 0 && res[2] == 0,
          "put group");
    CHECK(api.mooncake_store_get_into(s, "h1", dst, P) == (int64_t)P, "get h1");
    CHECK(api.mooncake_store_remove(s, "h0", 0) == OBJECT_HAS_LEASE, "group lease");
    CHECK(api.mooncake_store_remove(s, "u", 0) == 0, "ungrouped not leased");

    /* Bad input. */
    const char *nullkeys[] = {"a", NULL};
    const char *nullgroups[] = {"g", NULL};
    CHECK(api.kvferry_store_batch_put_from_multi(NULL, keys, 1, bufs, sizes, counts, NULL, NULL, 0, res) == -1,
          "NULL store");
    CHECK(api.kvferry_store_batch_put_from_multi(s, nullkeys, 2, bufs, sizes, (size_t[]){1, 1}, NULL, NULL, 0,
                                                 res) == -1, "NULL key");
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 2, bufs, sizes, (size_t[]){1, 1}, NULL, nullgroups, 0,
                                                 res) == -1, "NULL group id");
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 1, NULL, NULL, counts, NULL, NULL, 0, res) == -1,
          "NULL buffers");
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 1, bufs, sizes, NULL, NULL, NULL, 0, res) == -1,
          "NULL counts");
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL) == -1,
          "NULL results");
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 0, NULL, NULL, NULL, NULL, NULL, 0, res) == 0,
          "empty batch");
    CHECK(api.kvferry_store_batch_put_from_multi(s, keys, 1, bufs, sizes, (size_t[]){0}, NULL, NULL, 0, res) == 0 &&
              res[0] == INVALID_PARAMS, "object of no buffer = %d", res[0]);
    CHECK(api.kvferry_store_batch_get_into_multi(s, keys, 1, NULL, NULL, counts, lres) == -1, "get NULL buffers");
    CHECK(api.mooncake_store_remove_all(s, 1) >= 3, "remove all");
    api.mooncake_store_destroy(s);
    munmap(src, 4 * P);
    munmap(dst, 8 * P);
}

/* Ranged reads (kvferry_store_get_into_ranges): ranges of objects on the
 * holder and on this client's segment, one key twice, into registered
 * memory, bytes checked; ranges outside the object or outside registered
 * memory are -600 and read nothing; then bad input. */
static void test_get_into_ranges(const char *master, const char *holder) {
    mooncake_store_t s = new_store(master, 8 << 20);
    char self[128];
    CHECK(api.mooncake_store_get_hostname(s, self, sizeof self) == 0, "hostname");
    enum { N0 = 256 << 10, N1 = 10000, DST = 64 << 10 };
    uint8_t *src = map_lazy(N0), *dst = map_lazy(DST), plain[64];
    fill(src, N0, 41);
    const char *on_holder[] = {holder}, *on_self[] = {self};
    mooncake_replicate_config_t h = {1, 0, 0, on_holder, 1}, me = {1, 0, 0, on_self, 1};
    CHECK(api.mooncake_store_put(s, "rg0", src, N0, &h) == 0, "put rg0");
    fill(src, N1, 42);
    CHECK(api.mooncake_store_put(s, "rg1", src, N1, &me) == 0, "put rg1");
    CHECK(api.mooncake_store_register_buffer(s, dst, DST) == 0, "register dst");
    memset(dst, 0xEE, DST);
    memset(plain, 0xEE, sizeof plain);

    /* rg0: two ranges and a bad one; rg1: one range and one of no bytes;
     * rg0 again: its last 16 bytes and a range outside registered memory;
     * a missing key. */
    const char *keys[] = {"rg0", "rg1", "rg0", "rg-missing"};
    void *addrs[] = {dst, dst + 8192, dst + 16384, dst + 20000, dst + 30000, dst + 32768, plain, dst + 40000};
    uint64_t offs[] = {0, 100000, N0 - 10, 7, 0, N0 - 16, 0, 0};
    uint64_t szs[] = {4096, 5000, 20, 1000, 0, 16, sizeof plain, 10};
    size_t counts[] = {3, 2, 2, 1};
    int64_t res[8];
    for (int i = 0; i < 8; i++) res[i] = 12345;
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 4, addrs, offs, szs, counts, res) == 0, "get_into_ranges");
    int64_t want[] = {4096, 5000, INVALID_PARAMS, 1000, 0, 16, INVALID_PARAMS, OBJECT_NOT_FOUND};
    for (int i = 0; i < 8; i++) CHECK(res[i] == want[i], "range %d = %" PRId64 ", want %" PRId64, i, res[i], want[i]);
    CHECK(same_at(dst, 4096, 0, 41), "rg0 [0, 4096)");
    CHECK(same_at(dst + 8192, 5000, 100000, 41), "rg0 [100000, 105000)");
    CHECK(all_are(dst + 16384, 20, 0xEE), "range outside rg0 read nothing");
    CHECK(same_at(dst + 20000, 1000, 7, 42), "rg1 [7, 1007)");
    CHECK(same_at(dst + 32768, 16, N0 - 16, 41), "rg0's last 16 bytes");
    CHECK(all_are(plain, sizeof plain, 0xEE), "unregistered memory untouched");
    CHECK(all_are(dst + 40000, 10, 0xEE), "missing key read nothing");

    /* Bad input: -1 for NULL or bad arguments, -600 for too many ranges,
     * never a crash. */
    const char *nullkey[] = {"rg0", NULL};
    size_t one[] = {1}, two[] = {1, 1}, none[] = {0}, huge[] = {MAX_BATCH + 1};
    CHECK(api.kvferry_store_get_into_ranges(NULL, keys, 1, addrs, offs, szs, one, res) == -1, "NULL store");
    CHECK(api.kvferry_store_get_into_ranges((mooncake_store_t)0x1234, keys, 1, addrs, offs, szs, one, res) == -1,
          "bogus handle");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, addrs, offs, szs, one, NULL) == -1, "NULL results");
    CHECK(api.kvferry_store_get_into_ranges(s, NULL, 1, addrs, offs, szs, one, res) == -1, "NULL keys");
    CHECK(api.kvferry_store_get_into_ranges(s, nullkey, 2, addrs, offs, szs, two, res) == -1, "NULL key");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, addrs, offs, szs, NULL, res) == -1, "NULL range counts");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, NULL, offs, szs, one, res) == -1, "NULL addrs");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, addrs, NULL, szs, one, res) == -1, "NULL offsets");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, addrs, offs, NULL, one, res) == -1, "NULL sizes");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 0, NULL, NULL, NULL, NULL, res) == 0, "no keys");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, NULL, NULL, NULL, none, res) == 0, "a key of no ranges");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, MAX_BATCH + 1, addrs, offs, szs, one, res) == -1,
          "more than 4M keys");
    CHECK(api.kvferry_store_get_into_ranges(s, keys, 1, addrs, offs, szs, huge, res) == INVALID_PARAMS,
          "more than 4M ranges");

    /* A store that is not set up: -600 for every range. */
    mooncake_store_t raw = api.mooncake_store_create();
    res[0] = res[1] = 0;
    CHECK(api.kvferry_store_get_into_ranges(raw, keys, 2, addrs, offs, szs, two, res) == 0 &&
              res[0] == INVALID_PARAMS && res[1] == INVALID_PARAMS,
          "not set up: %" PRId64 " %" PRId64, res[0], res[1]);
    api.mooncake_store_destroy(raw);

    CHECK(api.mooncake_store_unregister_buffer(s, dst) == 0, "unregister dst");
    CHECK(api.mooncake_store_remove_by_regex(s, "^rg[01]$", 1) == 2, "remove rg0, rg1");
    api.mooncake_store_destroy(s);
    munmap(src, N0);
    munmap(dst, DST);
}

/* Get sessions: start (the master's code per key), ranged reads through
 * the session into registered and plain memory, bytes checked; a key with
 * no session, or a range outside its object, is -600 and reads nothing;
 * end drops the sessions; then bad input. */
static void test_get_sessions(const char *master, const char *holder) {
    mooncake_store_t s = new_store(master, 8 << 20);
    enum { N = 96 << 10, DST = 32 << 10 };
    uint8_t *src = map_lazy(N), *dst = map_lazy(DST), plain[3000];
    fill(src, N, 51);
    const char *on_holder[] = {holder};
    mooncake_replicate_config_t h = {1, 0, 0, on_holder, 1};
    CHECK(api.mooncake_store_put(s, "gs0", src, N, &h) == 0, "put gs0");
    CHECK(api.mooncake_store_register_buffer(s, dst, DST) == 0, "register dst");
    memset(dst, 0xEE, DST);
    memset(plain, 0xEE, sizeof plain);

    const char *start[] = {"gs0", "gs-missing"};
    int ires[2] = {1, 1};
    CHECK(api.kvferry_store_get_session_start(s, start, 2, ires) == 0, "get_session_start");
    CHECK(ires[0] == 0 && ires[1] == OBJECT_NOT_FOUND, "start results %d %d", ires[0], ires[1]);

    /* gs0: two ranges, registered and plain memory; gs0 again with a range
     * past its end; a key that has no session. */
    const char *keys[] = {"gs0", "gs0", "gs-missing"};
    void *addrs[] = {dst, plain, dst + 8192, dst + 16384};
    uint64_t offs[] = {1000, N - 3000, 0, 0};
    uint64_t szs[] = {8000, 3000, N + 1, 100};
    size_t counts[] = {2, 1, 1};
    int64_t res[3];
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 3, addrs, offs, szs, counts, res) == 0, "session ranges");
    CHECK(res[0] == 11000, "gs0 read %" PRId64 " bytes, want 11000", res[0]);
    CHECK(res[1] == INVALID_PARAMS, "range past the end = %" PRId64, res[1]);
    CHECK(res[2] == INVALID_PARAMS, "no session = %" PRId64, res[2]);
    CHECK(same_at(dst, 8000, 1000, 51), "gs0 [1000, 9000)");
    CHECK(same_at(plain, 3000, N - 3000, 51), "gs0's last 3000 bytes into plain memory");
    CHECK(all_are(dst + 8192, 8192, 0xEE) && all_are(dst + 16384, 100, 0xEE), "failed keys read nothing");

    /* End: the session is gone (an unknown key is ignored), a ranged read
     * is -600 and reads nothing. */
    CHECK(api.kvferry_store_get_session_end(s, start, 2) == 0, "get_session_end");
    CHECK(api.kvferry_store_get_session_end(s, start, 2) == 0, "get_session_end again");
    memset(dst, 0xEE, DST);
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 1, addrs, offs, szs, counts, res) == 0 &&
              res[0] == INVALID_PARAMS, "ranges after end = %" PRId64, res[0]);
    CHECK(all_are(dst, 8000, 0xEE), "ended session read nothing");

    /* Bad input. */
    const char *nullkey[] = {"gs0", NULL};
    size_t one[] = {1}, huge[] = {MAX_BATCH + 1};
    CHECK(api.kvferry_store_get_session_start(NULL, start, 1, ires) == -1, "start NULL store");
    CHECK(api.kvferry_store_get_session_start((mooncake_store_t)0x1234, start, 1, ires) == -1, "start bogus handle");
    CHECK(api.kvferry_store_get_session_start(s, start, 1, NULL) == -1, "start NULL results");
    CHECK(api.kvferry_store_get_session_start(s, NULL, 1, ires) == -1, "start NULL keys");
    CHECK(api.kvferry_store_get_session_start(s, nullkey, 2, ires) == -1, "start NULL key");
    CHECK(api.kvferry_store_get_session_start(s, NULL, 0, NULL) == 0, "start no keys");
    CHECK(api.kvferry_store_get_session_start(s, start, MAX_BATCH + 1, ires) == -1, "start more than 4M keys");
    CHECK(api.kvferry_store_get_session_ranges(NULL, keys, 1, addrs, offs, szs, one, res) == -1, "ranges NULL store");
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 1, addrs, offs, szs, one, NULL) == -1, "ranges NULL results");
    CHECK(api.kvferry_store_get_session_ranges(s, nullkey, 2, addrs, offs, szs, counts, res) == -1, "ranges NULL key");
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 1, addrs, offs, szs, NULL, res) == -1,
          "ranges NULL range counts");
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 1, NULL, offs, szs, one, res) == -1, "ranges NULL addrs");
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 0, NULL, NULL, NULL, NULL, NULL) == 0, "ranges no keys");
    CHECK(api.kvferry_store_get_session_ranges(s, keys, MAX_BATCH + 1, addrs, offs, szs, one, res) == -1,
          "ranges more than 4M keys");
    res[0] = 0;
    CHECK(api.kvferry_store_get_session_ranges(s, keys, 1, addrs, offs, szs, huge, res) == INVALID_PARAMS &&
              res[0] == INVALID_PARAMS, "ranges more than 4M ranges: %" PRId64, res[0]);
    CHECK(api.kvferry_store_get_session_end(NULL, start, 1) == -1, "end NULL store");
    CHECK(api.kvferry_store_get_session_end(s, NULL, 1) == -1, "end NULL keys");
    CHECK(api.kvferry_store_get_session_end(s, nullkey, 2) == -1, "end NULL key");
    CHECK(api.kvferry_store_get_session_end(s, start, MAX_BATCH + 1) == -1, "end more than 4M keys");
    CHECK(api.kvferry_store_get_session_end(s, NULL, 0) == 0, "end no keys");

    /* A store that is not set up: -600 for every key. */
    mooncake_store_t raw = api.mooncake_store_create();
    ires[0] = ires[1] = 0;
    CHECK(api.kvferry_store_get_session_start(raw, start, 2, ires) == 0 && ires[0] == INVALID_PARAMS &&
              ires[1] == INVALID_PARAMS, "start not set up: %d %d", ires[0], ires[1]);
    res[0] = 0;
    CHECK(api.kvferry_store_get_session_ranges(raw, keys, 1, addrs, offs, szs, one, res) == 0 &&
              res[0] == INVALID_PARAMS, "ranges not set up: %" PRId64, res[0]);
    CHECK(api.kvferry_store_get_session_end(raw, start, 2) == INVALID_PARAMS, "end not set up");
    api.mooncake_store_destroy(raw);

    CHECK(api.mooncake_store_unregister_buffer(s, dst) == 0, "unregister dst");
    CHECK(api.mooncake_store_remove(s, "gs0", 1) == 0, "remove gs0");
    api.mooncake_store_destroy(s);
    munmap(src, N);
    munmap(dst, DST);
}

/* Put sessions: start reserves (a second start of an open key is -600, a
 * stored key -705, size 0 -600), ranged writes from registered and plain
 * memory in any order, end makes the object readable (bytes checked),
 * revoke frees it; a key with no session is -600; then bad input. */
static void test_put_sessions(const char *master, const char *holder) {
    mooncake_store_t s = new_store(master, 8 << 20);
    enum { N0 = 64 << 10, N1 = 10000, H = N0 / 2 };
    uint8_t *src = map_lazy(N0), *out = map_lazy(N0 + 4096), *plain = malloc(N1);
    fill(src, N0, 61);
    fill(plain, N1, 62);
    CHECK(api.mooncake_store_register_buffer(s, src, N0) == 0, "register src");
    CHECK(api.mooncake_store_put(s, "ps-stored", plain, 100, NULL) == 0, "put ps-stored");

    const char *on_holder[] = {holder};
    mooncake_replicate_config_t h = {1, 0, 0, on_holder, 1};
    const char *keys[] = {"ps0", "ps1", "ps0", "ps-stored", "ps-zero"};
    uint64_t sizes[] = {N0, N1, N0, 100, 0};
    int ires[5] = {1, 1, 1, 1, 1};
    CHECK(api.kvferry_store_put_session_start(s, keys, 5, sizes, &h, NULL, ires) == 0, "put_session_start");
    CHECK(ires[0] == 0 && ires[1] == 0, "start ps0, ps1: %d %d", ires[0], ires[1]);
    CHECK(ires[2] == INVALID_PARAMS, "start of an open key = %d", ires[2]);
    CHECK(ires[3] == OBJECT_ALREADY_EXISTS, "start of a stored key = %d", ires[3]);
    CHECK(ires[4] == INVALID_PARAMS, "start of size 0 = %d", ires[4]);
    CHECK(api.kvferry_store_put_session_start(s, keys, 1, sizes, NULL, NULL, ires) == 0 && ires[0] == INVALID_PARAMS,
          "start again = %d", ires[0]);

    /* ps0: its second half first (registered memory), then its first half
     * written from the pattern's second half; ps1: whole, from plain
     * memory; ps1 again, a range past its end; a key with no session. */
    const char *wkeys[] = {"ps0", "ps1", "ps1", "ps-none"};
    void *addrs[] = {src + H, src + H, plain, plain, plain};
    uint64_t offs[] = {H, 0, 0, N1 - 10, 0};
    uint64_t szs[] = {H, H, N1, 11, 10};
    size_t counts[] = {2, 1, 1, 1};
    int64_t res[4];
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 4, addrs, offs, szs, counts, res) == 0, "session ranges");
    CHECK(res[0] == N0 && res[1] == N1, "written %" PRId64 " %" PRId64, res[0], res[1]);
    CHECK(res[2] == INVALID_PARAMS, "range past the end = %" PRId64, res[2]);
    CHECK(res[3] == INVALID_PARAMS, "no session = %" PRId64, res[3]);

    const char *ends[] = {"ps0", "ps1", "ps-none"};
    CHECK(api.kvferry_store_put_session_end(s, ends, 3, ires) == 0, "put_session_end");
    CHECK(ires[0] == 0 && ires[1] == 0 && ires[2] == INVALID_PARAMS, "end results %d %d %d", ires[0], ires[1],
          ires[2]);
    CHECK(api.mooncake_store_get_into(s, "ps0", out, N0 + 4096) == N0, "get ps0");
    CHECK(same_at(out, H, H, 61) && same_at(out + H, H, H, 61), "ps0 bytes");
    CHECK(api.mooncake_store_get_into(s, "ps1", out, N0) == N1 && same(out, N1, 62), "ps1 bytes");
    /* The sessions are over: another end, or a write, is -600. */
    CHECK(api.kvferry_store_put_session_end(s, ends, 1, ires) == 0 && ires[0] == INVALID_PARAMS,
          "end again = %d", ires[0]);
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 1, addrs, offs, szs, counts, res) == 0 &&
              res[0] == INVALID_PARAMS, "write after end = %" PRId64, res[0]);

    /* Revoke: the reserved object never appears. */
    const char *rk[] = {"ps2"};
    uint64_t rsz[] = {4096};
    CHECK(api.kvferry_store_put_session_start(s, rk, 1, rsz, NULL, NULL, ires) == 0 && ires[0] == 0, "start ps2");
    CHECK(api.kvferry_store_put_session_ranges(s, rk, 1, addrs, offs + 1, rsz, (size_t[]){1}, res) == 0 &&
              res[0] == 4096, "write ps2 = %" PRId64, res[0]);
    CHECK(api.kvferry_store_put_session_revoke(s, rk, 1, ires) == 0 && ires[0] == 0, "revoke = %d", ires[0]);
    CHECK(api.mooncake_store_is_exist(s, "ps2") == 0, "revoked ps2 is not stored");
    CHECK(api.kvferry_store_put_session_revoke(s, rk, 1, ires) == 0 && ires[0] == INVALID_PARAMS,
          "revoke again = %d", ires[0]);

    /* Bad input. */
    const char *nullkey[] = {"px", NULL}, *nullgroup[] = {"g", NULL}, *groups[] = {"g", "g"};
    size_t one[] = {1}, huge[] = {MAX_BATCH + 1};
    CHECK(api.kvferry_store_put_session_start(NULL, keys, 1, sizes, NULL, NULL, ires) == -1, "start NULL store");
    CHECK(api.kvferry_store_put_session_start((mooncake_store_t)0x1234, keys, 1, sizes, NULL, NULL, ires) == -1,
          "start bogus handle");
    CHECK(api.kvferry_store_put_session_start(s, keys, 1, NULL, NULL, NULL, ires) == -1, "start NULL sizes");
    CHECK(api.kvferry_store_put_session_start(s, keys, 1, sizes, NULL, NULL, NULL) == -1, "start NULL results");
    CHECK(api.kvferry_store_put_session_start(s, NULL, 1, sizes, NULL, NULL, ires) == -1, "start NULL keys");
    CHECK(api.kvferry_store_put_session_start(s, nullkey, 2, sizes, NULL, NULL, ires) == -1, "start NULL key");
    CHECK(api.kvferry_store_put_session_start(s, wkeys, 2, sizes, NULL, nullgroup, ires) == -1, "start NULL group id");
    CHECK(api.kvferry_store_put_session_start(s, NULL, 0, NULL, NULL, NULL, NULL) == 0, "start no keys");
    CHECK(api.kvferry_store_put_session_start(s, keys, MAX_BATCH + 1, sizes, NULL, groups, ires) == -1,
          "start more than 4M keys");
    mooncake_replicate_config_t zero = {0, 0, 0, NULL, 0};
    CHECK(api.kvferry_store_put_session_start(s, rk, 1, rsz, &zero, NULL, ires) == 0 && ires[0] == INVALID_PARAMS,
          "start replica_num 0 = %d", ires[0]);
    CHECK(api.kvferry_store_put_session_ranges(NULL, wkeys, 1, addrs, offs, szs, one, res) == -1, "ranges NULL store");
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 1, addrs, offs, szs, one, NULL) == -1, "ranges NULL results");
    CHECK(api.kvferry_store_put_session_ranges(s, nullkey, 2, addrs, offs, szs, counts, res) == -1, "ranges NULL key");
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 1, addrs, NULL, szs, one, res) == -1, "ranges NULL offsets");
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 1, addrs, offs, szs, NULL, res) == -1,
          "ranges NULL range counts");
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 0, NULL, NULL, NULL, NULL, NULL) == 0, "ranges no keys");
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, MAX_BATCH + 1, addrs, offs, szs, one, res) == -1,
          "ranges more than 4M keys");
    res[0] = 0;
    CHECK(api.kvferry_store_put_session_ranges(s, wkeys, 1, addrs, offs, szs, huge, res) == INVALID_PARAMS &&
              res[0] == INVALID_PARAMS, "ranges more than 4M ranges: %" PRId64, res[0]);
    CHECK(api.kvferry_store_put_session_end(NULL, ends, 1, ires) == -1, "end NULL store");
    CHECK(api.kvferry_store_put_session_end(s, ends, 1, NULL) == -1, "end NULL results");
    CHECK(api.kvferry_store_put_session_end(s, nullkey, 2, ires) == -1, "end NULL key");
    CHECK(api.kvferry_store_put_session_end(s, ends, MAX_BATCH + 1, ires) == -1, "end more than 4M keys");
    CHECK(api.kvferry_store_put_session_end(s, NULL, 0, NULL) == 0, "end no keys");
    CHECK(api.kvferry_store_put_session_revoke(NULL, rk, 1, ires) == -1, "revoke NULL store");
    CHECK(api.kvferry_store_put_session_revoke(s, rk, 1, NULL) == -1, "revoke NULL results");
    CHECK(api.kvferry_store_put_session_revoke(s, nullkey, 2, ires) == -1, "revoke NULL key");
    CHECK(api.kvferry_store_put_session_revoke(s, rk, MAX_BATCH + 1, ires) == -1, "revoke more than 4M keys");
    CHECK(api.kvferry_store_put_session_revoke(s, NULL, 0, NULL) == 0, "revoke no keys");

    /* A store that is not set up: -600 for every key. */
    mooncake_store_t raw = api.mooncake_store_create();
    ires[0] = ires[1] = 0;
    CHECK(api.kvferry_store_put_session_start(raw, keys, 2, sizes, NULL, NULL, ires) == 0 &&
              ires[0] == INVALID_PARAMS && ires[1] == INVALID_PARAMS, "start not set up: %d %d", ires[0], ires[1]);
    res[0] = 0;
    CHECK(api.kvferry_store_put_session_ranges(raw, wkeys, 1, addrs, offs, szs, one, res) == 0 &&
              res[0] == INVALID_PARAMS, "ranges not set up: %" PRId64, res[0]);
    ires[0] = 0;
    CHECK(api.kvferry_store_put_session_end(raw, ends, 1, ires) == 0 && ires[0] == INVALID_PARAMS,
          "end not set up: %d", ires[0]);
    ires[0] = 0;
    CHECK(api.kvferry_store_put_session_revoke(raw, rk, 1, ires) == 0 && ires[0] == INVALID_PARAMS,
          "revoke not set up: %d", ires[0]);
    api.mooncake_store_destroy(raw);

    CHECK(api.mooncake_store_unregister_buffer(s, src) == 0, "unregister src");
    CHECK(api.mooncake_store_remove_by_regex(s, "^ps", 1) == 3, "remove ps0, ps1, ps-stored");
    api.mooncake_store_destroy(s);
    munmap(src, N0);
    munmap(out, N0 + 4096);
    free(plain);
}

/* kvferry_store_batch_replica_clear: one segment's replicas of an object
 * on two (the object stays readable from the other, bytes checked), whole
 * objects; keys that are missing, another store's, or leased are skipped;
 * then bad input. No key is read before it is cleared (a read leases it). */
static void test_replica_clear(const char *master, const char *holder) {
    mooncake_store_t s = new_store(master, 8 << 20), other = new_store(master, 0);
    char self[128];
    CHECK(api.mooncake_store_get_hostname(s, self, sizeof self) == 0, "hostname");
    enum { N = 48 << 10 };
    uint8_t *src = map_lazy(N), *out = map_lazy(N);
    fill(src, N, 71);
    const char *both[] = {holder, self};
    mooncake_replicate_config_t two = {2, 0, 0, both, 2};
    CHECK(api.mooncake_store_put(s, "cl0", src, N, &two) == 0, "put cl0");
    CHECK(api.mooncake_store_put(s, "cl1", src, N, &two) == 0, "put cl1");
    CHECK(api.mooncake_store_put(other, "cl-other", src, N, NULL) == 0, "put cl-other");

    const char *k0[] = {"cl0"};
    int cl[3] = {7, 7, 7};
    CHECK(api.kvferry_store_batch_replica_clear(s, k0, 1, holder, cl) == 1 && cl[0] == 1, "clear cl0 on the holder");
    cl[0] = 7;
    CHECK(api.kvferry_store_batch_replica_clear(s, k0, 1, holder, cl) == 0 && cl[0] == 0,
          "cl0 has no replica left on the holder");
    const char *ks[] = {"cl1", "cl-missing", "cl-other"};
    CHECK(api.kvferry_store_batch_replica_clear(s, ks, 3, NULL, cl) == 1, "clear whole");
    CHECK(cl[0] == 1 && cl[1] == 0 && cl[2] == 0, "cleared %d %d %d", cl[0], cl[1], cl[2]);
    CHECK(api.mooncake_store_get_into(s, "cl0", out, N) == N && same(out, N, 71), "cl0 read from its other replica");
    CHECK(api.mooncake_store_is_exist(s, "cl1") == 0, "cl1 is gone");
    CHECK(api.mooncake_store_is_exist(other, "cl-other") == 1, "cl-other stays");
    /* cl0 is leased by the read above: skipped. */
    CHECK(api.kvferry_store_batch_replica_clear(s, k0, 1, "", cl) == 0 && cl[0] == 0, "leased cl0 skipped");
    CHECK(api.mooncake_store_is_exist(s, "cl0") == 1, "cl0 stays");
    CHECK(api.kvferry_store_batch_replica_clear(s, k0, 1, "no-such-segment", cl) == 0 && cl[0] == 0,
          "unknown segment");

    /* Bad input. */
    const char *nullkey[] = {"cl0", NULL};
    CHECK(api.kvferry_store_batch_replica_clear(NULL, k0, 1, NULL, cl) == -1, "NULL store");
    CHECK(api.kvferry_store_batch_replica_clear((mooncake_store_t)0x1234, k0, 1, NULL, cl) == -1, "bogus handle");
    CHECK(api.kvferry_store_batch_replica_clear(s, k0, 1, NULL, NULL) == -1, "NULL cleared_out");
    CHECK(api.kvferry_store_batch_replica_clear(s, NULL, 1, NULL, cl) == -1, "NULL keys");
    CHECK(api.kvferry_store_batch_replica_clear(s, nullkey, 2, NULL, cl) == -1, "NULL key");
    CHECK(api.kvferry_store_batch_replica_clear(s, k0, MAX_BATCH + 1, NULL, cl) == -1, "more than 4M keys");
    CHECK(api.kvferry_store_batch_replica_clear(s, NULL, 0, NULL, NULL) == 0, "no keys");
    mooncake_store_t raw = api.mooncake_store_create();
    CHECK(api.kvferry_store_batch_replica_clear(raw, k0, 1, NULL, cl) == INVALID_PARAMS && cl[0] == 0,
          "not set up");
    api.mooncake_store_destroy(raw);

    CHECK(api.mooncake_store_remove(s, "cl0", 1) == 0, "remove cl0");
    CHECK(api.mooncake_store_remove(other, "cl-other", 1) == 0, "remove cl-other");
    api.mooncake_store_destroy(other);
    api.mooncake_store_destroy(s);
    munmap(src, N);
    munmap(out, N);
}

static void test_embedded(void) {
    mooncake_store_t s = new_store("", 16 << 20);
    uint8_t b[4096], out[4096];
    fill(b, sizeof b, 3);
    CHECK(api.mooncake_store_put(s, "e", b, sizeof b, NULL) == 0, "embedded put");
    CHECK(api.mooncake_store_get_into(s, "e", out, sizeof out) == (int64_t)sizeof out, "embedded get");
    CHECK(same(out, sizeof out, 3), "embedded data");
    CHECK(api.mooncake_store_health_check(s) == 0, "embedded health");
    api.mooncake_store_destroy(s);

    s = new_store("embedded", 1 << 20);
    CHECK(api.mooncake_store_put(s, "e", b, sizeof b, NULL) == 0, "second embedded put");
    api.mooncake_store_destroy(s);
}

/* The disk tier under a real read pattern (issue 32): a store with a
 * 4 MiB segment and a disk tier puts 4x its memory in 128 KiB objects as
 * fast as it can, reads each back (in order, then backwards), and, after
 * a restart on the same directory with a new embedded master, reads
 * everything again: every put that returned 0 reads back intact. */
static mooncake_store_t new_ssd_store(const char *dir) {
    mooncake_store_t s = api.mooncake_store_create();
    if (!s || api.kvferry_store_set_ssd_offload(s, dir, 256 << 20) != 0) {
        fprintf(stderr, "disk tier in %s failed\n", dir);
        exit(2);
    }
    int rc = api.mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 4 << 20, 4 << 20, "tcp", "", "");
    if (rc != 0) {
        fprintf(stderr, "mooncake_store_setup with a disk tier = %d\n", rc);
        exit(2);
    }
    return s;
}

static void check_ssd_reads(mooncake_store_t s, int n, int backwards, uint8_t *out, size_t obj) {
    for (int j = 0; j < n; j++) {
        int i = backwards ? n - 1 - j : j;
        char key[32];
        snprintf(key, sizeof key, "ssd%d", i);
        int64_t got = api.mooncake_store_get_into(s, key, out, obj);
        CHECK(got == (int64_t)(obj - (size_t)(i % 7) * 512), "get_into %s = %" PRId64, key, got);
        CHECK(got > 0 && same(out, (size_t)got, (unsigned)i), "%s: wrong bytes", key);
    }
}

static void test_ssd(void) {
    char dir[] = "/tmp/kvferry-cssd-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    const size_t obj = 128 << 10;
    const int n = 4 * (4 << 20) / (int)obj;
    uint8_t *b = malloc(obj), *out = malloc(obj);
    mooncake_store_t s = new_ssd_store(dir);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "ssd%d", i);
        size_t len = obj - (size_t)(i % 7) * 512;
        fill(b, len, (unsigned)i);
        CHECK(api.mooncake_store_put(s, key, b, len, NULL) == 0, "put %s", key);
    }
    check_ssd_reads(s, n, 0, out, obj);
    check_ssd_reads(s, n, 1, out, obj);
    api.mooncake_store_destroy(s);
    s = new_ssd_store(dir);
    check_ssd_reads(s, n, 0, out, obj);
    api.mooncake_store_destroy(s);
    free(b);
    free(out);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: store_test holder|client|embedded <lib> ...\n");
        return 2;
    }
    if (store_load(&api, argv[2]) != 0) return 2;
    if (strcmp(argv[1], "holder") == 0 && argc == 5) {
        mooncake_store_t s = new_store(argv[3], 64 << 20);
        char name[128];
        if (api.mooncake_store_get_hostname(s, name, sizeof name) != 0) return 2;
        FILE *f = fopen(argv[4], "w");
        if (!f) return 2;
        fprintf(f, "%s\n", name);
        fclose(f);
        char c;
        while (read(0, &c, 1) > 0) {
        }
        api.mooncake_store_destroy(s);
        return 0;
    }
    if (strcmp(argv[1], "client") == 0 && argc == 5) {
        test_client(argv[3], argv[4]);
        test_tenants(argv[3]);
        test_multi(argv[3]);
        test_get_into_ranges(argv[3], argv[4]);
        test_get_sessions(argv[3], argv[4]);
        test_put_sessions(argv[3], argv[4]);
        test_replica_clear(argv[3], argv[4]);
    } else if (strcmp(argv[1], "embedded") == 0) {
        test_embedded();
        test_ssd();
    } else {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("store C API tests passed (%s)\n", argv[1]);
    return 0;
}
