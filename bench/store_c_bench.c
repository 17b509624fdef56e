/*
 * store_c_bench: one store benchmark loop for any library that exports the
 * Mooncake Store C API (include/store_c.h): kvferry's libkvferry.so or
 * Mooncake's own libmooncake_store.so (its WITH_STORE_C_SHARED build). The
 * library is loaded with dlopen and driven only through store_c.h, so both
 * sides run exactly the same code (bench/store.sh's Mooncake rows).
 *
 *   store_c_bench holder LIB MASTER SEGMENT_BYTES
 *       sets a store up that lends SEGMENT_BYTES to the store, prints
 *       "ready <hostname>" and serves until its stdin closes.
 *   store_c_bench run LIB MASTER SIZE OPS [TAG]
 *       a client that lends nothing: one untimed pass (OPS puts, gets and
 *       removes: connections and pages warm), then OPS put_from of SIZE
 *       bytes from a registered buffer under fresh keys, timed one by one,
 *       then OPS get_into of them into another registered buffer (each
 *       checked), then the keys removed. Prints one JSON object.
 *
 * Environment: STORE_PROTOCOL (default "tcp"), STORE_METADATA (default
 * "P2PHANDSHAKE"), STORE_HOSTNAME (default "127.0.0.1").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "store_c.h"

#define STORE_FUNCS(X)                \
    X(mooncake_store_create)          \
    X(mooncake_store_destroy)         \
    X(mooncake_store_setup)           \
    X(mooncake_store_put_from)        \
    X(mooncake_store_get_into)        \
    X(mooncake_store_remove)          \
    X(mooncake_store_get_hostname)    \
    X(mooncake_store_register_buffer) \
    X(mooncake_store_unregister_buffer)

static struct {
#define X(name) __typeof__(&name) name;
    STORE_FUNCS(X)
#undef X
} api;

static void load(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(2);
    }
#define X(name)                                              \
    api.name = (__typeof__(&name))dlsym(h, #name);           \
    if (!api.name) {                                         \
        fprintf(stderr, "dlsym %s: %s\n", #name, dlerror()); \
        exit(2);                                             \
    }
    STORE_FUNCS(X)
#undef X
}

static const char *env_or(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static mooncake_store_t new_store(const char *master, uint64_t segment) {
    mooncake_store_t s = api.mooncake_store_create();
    if (!s) {
        fprintf(stderr, "mooncake_store_create failed\n");
        exit(2);
    }
    int rc = api.mooncake_store_setup(s, env_or("STORE_HOSTNAME", "127.0.0.1"), env_or("STORE_METADATA", "P2PHANDSHAKE"),
                                      segment, 16 << 20, env_or("STORE_PROTOCOL", "tcp"), "", master);
    if (rc != 0) {
        fprintf(stderr, "mooncake_store_setup(%s) = %d\n", master, rc);
        exit(2);
    }
    return s;
}

static void *map_buf(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(p, 0, n);
    return p;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static int holder(const char *master, uint64_t segment) {
    mooncake_store_t s = new_store(master, segment);
    char name[256] = "";
    api.mooncake_store_get_hostname(s, name, sizeof name);
    printf("ready %s\n", name);
    fflush(stdout);
    char b[64];
    while (read(0, b, sizeof b) > 0) {
    }
    api.mooncake_store_destroy(s);
    return 0;
}

/* stamp writes the op's number into the value's first and last 8 bytes. */
static void stamp(uint8_t *p, size_t size, uint64_t n) {
    memcpy(p, &n, 8);
    memcpy(p + size - 8, &n, 8);
}

static int stamped(const uint8_t *p, size_t size, uint64_t n) {
    return memcmp(p, &n, 8) == 0 && memcmp(p + size - 8, &n, 8) == 0;
}

/* phase runs OPS puts (or gets) of the keys TAG-pass-i; lat receives each
 * op's microseconds (NULL: untimed); returns the errors. */
static int phase(mooncake_store_t s, int put, const char *tag, int pass, uint8_t *buf, size_t size, int ops,
                 double *lat, double *total_us) {
    char key[128];
    int errors = 0;
    double t0 = now_us();
    for (int i = 0; i < ops; i++) {
        snprintf(key, sizeof key, "%s-%d-%d", tag, pass, i);
        double a = now_us();
        if (put) {
            stamp(buf, size, (uint64_t)pass << 32 | (uint64_t)i);
            int rc = api.mooncake_store_put_from(s, key, buf, size, NULL);
            if (rc != 0 && errors++ == 0) fprintf(stderr, "put_from(%s) = %d\n", key, rc);
        } else {
            int64_t n = api.mooncake_store_get_into(s, key, buf, size);
            if ((n != (int64_t)size || !stamped(buf, size, (uint64_t)pass << 32 | (uint64_t)i)) && errors++ == 0)
                fprintf(stderr, "get_into(%s) = %lld\n", key, (long long)n);
        }
        if (lat) lat[i] = now_us() - a;
    }
    if (total_us) *total_us = now_us() - t0;
    return errors;
}

static void remove_pass(mooncake_store_t s, const char *tag, int pass, int ops) {
    char key[128];
    int failed = 0;
    for (int i = 0; i < ops; i++) {
        snprintf(key, sizeof key, "%s-%d-%d", tag, pass, i);
        int rc = api.mooncake_store_remove(s, key, 1);
        if (rc != 0 && failed++ == 0) fprintf(stderr, "remove(%s) = %d\n", key, rc);
    }
}

static int run(const char *master, size_t size, int ops, const char *tag) {
    if (size < 16 || ops < 1) {
        fprintf(stderr, "SIZE must be >= 16 and OPS >= 1\n");
        return 2;
    }
    mooncake_store_t s = new_store(master, 0);
    uint8_t *src = map_buf(size), *dst = map_buf(size);
    for (size_t i = 0; i < size; i++) src[i] = (uint8_t)(i * 131);
    if (api.mooncake_store_register_buffer(s, src, size) != 0 || api.mooncake_store_register_buffer(s, dst, size) != 0) {
        fprintf(stderr, "register_buffer failed\n");
        return 2;
    }
    double *put_lat = calloc(ops, sizeof(double)), *get_lat = calloc(ops, sizeof(double));
    double put_us = 0, get_us = 0;
    int warm_errors = phase(s, 1, tag, 0, src, size, ops, NULL, NULL);
    warm_errors += phase(s, 0, tag, 0, dst, size, ops, NULL, NULL);
    remove_pass(s, tag, 0, ops);
    int put_errors = phase(s, 1, tag, 1, src, size, ops, put_lat, &put_us);
    int get_errors = phase(s, 0, tag, 1, dst, size, ops, get_lat, &get_us);
    remove_pass(s, tag, 1, ops);
    qsort(put_lat, ops, sizeof(double), cmp_double);
    qsort(get_lat, ops, sizeof(double), cmp_double);
    printf("{\"size\": %zu, \"ops\": %d, \"warm_errors\": %d,"
           " \"put_gb_per_s\": %.4f, \"put_ops_per_s\": %.1f, \"put_p50_us\": %.1f, \"put_p99_us\": %.1f, \"put_errors\": %d,"
           " \"get_gb_per_s\": %.4f, \"get_ops_per_s\": %.1f, \"get_p50_us\": %.1f, \"get_p99_us\": %.1f, \"get_errors\": %d}\n",
           size, ops, warm_errors, (double)size * ops / put_us / 1e3, ops / put_us * 1e6, pct(put_lat, ops, 0.5),
           pct(put_lat, ops, 0.99), put_errors, (double)size * ops / get_us / 1e3, ops / get_us * 1e6,
           pct(get_lat, ops, 0.5), pct(get_lat, ops, 0.99), get_errors);
    fflush(stdout);
    api.mooncake_store_unregister_buffer(s, src);
    api.mooncake_store_unregister_buffer(s, dst);
    api.mooncake_store_destroy(s);
    free(put_lat);
    free(get_lat);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "holder") == 0) {
        load(argv[2]);
        return holder(argv[3], strtoull(argv[4], NULL, 0));
    }
    if (argc >= 6 && strcmp(argv[1], "run") == 0) {
        load(argv[2]);
        return run(argv[3], strtoull(argv[4], NULL, 0), atoi(argv[5]), argc > 6 ? argv[6] : "bench");
    }
    fprintf(stderr,
            "usage: %s holder LIB MASTER SEGMENT_BYTES\n"
            "       %s run LIB MASTER SIZE OPS [TAG]\n",
            argv[0], argv[0]);
    return 2;
}
