/* kvf_test.h - what the C and C++ test programs share (tests/c, tests/cfuzz,
 * tests/kill/drivers, tests/soak/peer, tests/nixl, tests/trtllm): loading a
 * shared object's functions with dlopen/dlsym, the CHECK macro, monotonic
 * time, anonymous mappings, the data patterns the peers write and compare,
 * and the resource counts the drivers report. Header-only (static inline),
 * valid C (gnu11) and C++. The library's API tables are in kvf_api.h. */
#ifndef KVF_TEST_H
#define KVF_TEST_H
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* ---- checks ---- */

/* failures counts the CHECKs that did not hold (atomically: pollers and
 * progress threads check too); a program exits non-zero when it is not 0. */
static int failures __attribute__((unused));

/* CHECK counts a failure and names it on stderr, with a printf-style
 * message, when cond is false; the program goes on. */
#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
        }                                                                   \
    } while (0)

/* ---- time ---- */

/* now_s is the monotonic clock in seconds. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* sleep_ms sleeps ms milliseconds. */
static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- memory ---- */

/* map_anon maps n bytes of private anonymous memory, faulted in at once
 * when populate is set; it exits the program (status 2) if it cannot. */
static inline uint8_t *map_anon(size_t n, int populate) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return (uint8_t *)p;
}

/* map_buf is n bytes of populated memory (a buffer the test registers and
 * moves whole). */
static inline uint8_t *map_buf(size_t n) { return map_anon(n, 1); }

/* map_lazy is n bytes of memory whose pages come when first touched (a
 * large buffer of which a test uses parts). */
static inline uint8_t *map_lazy(size_t n) { return map_anon(n, 0); }

/* ---- data patterns ---- */

/* pattern fills the whole 8-byte words of [p, p+n) with the xorshift
 * stream of seed (the drivers' and the C tests' transfer check). */
static inline void pattern(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

/* pat_word is word w of the indexed pattern of seed: byte i of that
 * pattern is byte i&7 of pat_word(seed, i>>3), so any piece of it can be
 * made or checked without the bytes before (the TensorRT-LLM suites). */
static inline uint64_t pat_word(uint64_t seed, uint64_t w) {
    uint64_t x = w * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return x;
}

/* pat_fill writes bytes [start, start+n) of the indexed pattern of seed to
 * p, a word at a time. */
static inline void pat_fill(uint8_t *p, size_t n, uint64_t seed, uint64_t start) {
    uint64_t x = pat_word(seed, start >> 3);
    for (size_t k = 0; k < n; k++) {
        uint64_t i = start + k;
        if ((i & 7) == 0) x = pat_word(seed, i >> 3);
        p[k] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

/* pat_diff compares p with bytes [start, start+n) of the indexed pattern
 * of seed; it returns the index in p of the first byte that differs, or n. */
static inline size_t pat_diff(const uint8_t *p, size_t n, uint64_t seed, uint64_t start) {
    uint64_t x = pat_word(seed, start >> 3);
    for (size_t k = 0; k < n; k++) {
        uint64_t i = start + k;
        if ((i & 7) == 0) x = pat_word(seed, i >> 3);
        if (p[k] != (uint8_t)(x >> ((i & 7) * 8))) return k;
    }
    return n;
}

/* ---- JSON answers ---- */

/* json_clean replaces, in place, the bytes of s that a JSON string cannot
 * hold as they are (quote, backslash, control characters) with an
 * apostrophe, so that an error text can go into an answer; it returns s. */
static inline char *json_clean(char *s) {
    for (char *c = s; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '\'';
    return s;
}

/* ---- resource counts ---- */

/* count_fds is the number of the process's open file descriptors, -1 if
 * /proc/self/fd cannot be read. */
static inline int count_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 3; /* ., .. and the one opendir holds */
}

/* metrics_goroutines reads go_goroutines from the library's metrics text
 * (kvferry_metrics_text of kvferry.h, passed as text); -1 if text is NULL
 * or the text has no such line. */
static inline long metrics_goroutines(int64_t (*text)(char *, size_t)) {
    static char buf[4 << 20];
    int64_t n = text ? text(buf, sizeof buf) : -1;
    char *p = n > 0 && n < (int64_t)sizeof buf ? strstr(buf, "\ngo_goroutines ") : NULL;
    return p ? strtol(p + 15, NULL, 10) : -1;
}

/* dl_goroutines is metrics_goroutines of the kvferry_metrics_text that the
 * loaded object h exports (a plugin that is the library: NIXL's,
 * TensorRT-LLM's); -1 where h lacks it. */
static inline long dl_goroutines(void *h) {
    void *f = h ? dlsym(h, "kvferry_metrics_text") : NULL;
    return metrics_goroutines((int64_t (*)(char *, size_t))f);
}

/* ---- dlopen ---- */

/* kvf_dl_open dlopens path with flags (RTLD_NOW | RTLD_LOCAL where 0); on
 * failure it names path and the loader's reason on stderr and returns
 * NULL. */
static inline void *kvf_dl_open(const char *path, int flags) {
    void *h = dlopen(path, flags ? flags : RTLD_NOW | RTLD_LOCAL);
    if (!h) fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return h;
}

/* kvf_dl_sym is symbol name of h; on failure it names the symbol and the
 * loader's reason on stderr and returns NULL. */
static inline void *kvf_dl_sym(void *h, const char *name) {
    dlerror();
    void *p = dlsym(h, name);
    if (!p) {
        const char *why = dlerror();
        fprintf(stderr, "dlsym %s: %s\n", name, why ? why : "NULL");
    }
    return p;
}

/* KVF_DL_FIELD declares, inside a struct, the function pointer field name
 * typed from the declaration of the function name: a struct of the names of
 * an X-macro list is `struct t { LIST(KVF_DL_FIELD) };`. */
#define KVF_DL_FIELD(name) __typeof__(&name) name;

/* KVF_DL_LOAD(h, tbl, LIST) resolves every name of the X-macro list LIST
 * from the handle h into the field of that name of *tbl. It is an
 * expression: 0, or -1 once a name is missing (named on stderr; the fields
 * after it are left unset). */
#define KVF_DL_LOAD(h, tbl, LIST)                                \
    __extension__({                                              \
        void *kvf_dl_h_ = (h);                                   \
        __typeof__(tbl) kvf_dl_t_ = (tbl);                       \
        int kvf_dl_rc_ = kvf_dl_h_ ? 0 : -1;                     \
        LIST(KVF_DL_LOAD_ONE_)                                   \
        kvf_dl_rc_;                                              \
    })
#define KVF_DL_LOAD_ONE_(name)                                                              \
    if (kvf_dl_rc_ == 0 &&                                                                  \
        !(kvf_dl_t_->name = (__typeof__(kvf_dl_t_->name))kvf_dl_sym(kvf_dl_h_, #name))) \
        kvf_dl_rc_ = -1;
#ifdef __cplusplus
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

/* kvf_serve is a C++ driver's command loop: for each line of stdin it
 * calls handle with the line's first word and a stream of the rest, then
 * flushes stdout, until stdin ends or the word is "quit". */
static inline void kvf_serve(const std::function<void(const std::string &cmd, std::istringstream &args)> &handle) {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "quit") break;
        handle(cmd, in);
        fflush(stdout);
    }
}
#endif
#endif
