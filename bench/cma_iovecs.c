/*
 * The kernel's share of the multi-buffer store calls over cma: one
 * process_vm_writev (or _readv) per object of 16 objects into (out of) one
 * contiguous remote range each, the local side one iovec per object against
 * PIECES iovecs of PIECE bytes, adjacent or strided over the region as
 * bench/store_multi.py lays out per-layer blocks. Prints the medians of the
 * paired per-round ratios contiguous / adjacent and contiguous / strided:
 * what the kernel itself costs for the same bytes in pieces, below anything
 * the library does. The process targets its own pid (cma to oneself).
 *   cc -O2 -o /tmp/cma_iovecs bench/cma_iovecs.c
 *   /tmp/cma_iovecs PIECES PIECE ROUNDS write|read [OFFSET]   (e.g. 64 32768 60 write)
 * OFFSET (default 0) places the local buffer that many bytes past a page
 * boundary (numpy's large arrays start 16 bytes past one): a block then
 * straddles two pages.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define KEYS 16
#define MAXP 1024
#define MAXR 5000

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static ssize_t call(int wr, pid_t pid, struct iovec *l, int nl, struct iovec *r) {
  return wr ? process_vm_writev(pid, l, nl, r, 1, 0) : process_vm_readv(pid, l, nl, r, 1, 0);
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s PIECES PIECE ROUNDS write|read [OFFSET]\n", argv[0]);
    return 2;
  }
  int pieces = atoi(argv[1]), rounds = atoi(argv[3]), wr = strcmp(argv[4], "write") == 0;
  size_t piece = strtoul(argv[2], NULL, 10), obj = (size_t)pieces * piece;
  size_t offset = argc == 6 ? strtoul(argv[5], NULL, 10) % 4096 : 0;
  if (pieces < 1 || pieces > MAXP || piece == 0 || rounds < 1 || rounds > MAXR) {
    fprintf(stderr, "PIECES 1..%d, PIECE > 0, ROUNDS 1..%d\n", MAXP, MAXR);
    return 2;
  }
  char *local = aligned_alloc(4096, KEYS * obj + 4096), *remote = aligned_alloc(4096, KEYS * obj);
  static struct iovec one[KEYS], rem[KEYS], adj[KEYS][MAXP], str[KEYS][MAXP];
  static double ra[MAXR], rs[MAXR];
  if (!local || !remote) return 1;
  local += offset;
  memset(local, 1, KEYS * obj);
  memset(remote, 2, KEYS * obj);
  for (int k = 0; k < KEYS; k++) {
    one[k] = (struct iovec){local + k * obj, obj};
    rem[k] = (struct iovec){remote + k * obj, obj};
    for (int l = 0; l < pieces; l++) {
      adj[k][l] = (struct iovec){local + k * obj + l * piece, piece};
      str[k][l] = (struct iovec){local + ((size_t)l * KEYS + k) * piece, piece};
    }
  }
  pid_t pid = getpid();
  for (int i = 0; i < rounds; i++) {
    double t0 = now_us();
    for (int k = 0; k < KEYS; k++) call(wr, pid, &one[k], 1, &rem[k]);
    double t1 = now_us();
    for (int k = 0; k < KEYS; k++) call(wr, pid, adj[k], pieces, &rem[k]);
    double t2 = now_us();
    for (int k = 0; k < KEYS; k++) call(wr, pid, str[k], pieces, &rem[k]);
    double t3 = now_us();
    ra[i] = (t1 - t0) / (t2 - t1);
    rs[i] = (t1 - t0) / (t3 - t2);
  }
  qsort(ra, rounds, sizeof ra[0], cmp);
  qsort(rs, rounds, sizeof rs[0], cmp);
  printf("%s %d x %zu B at page offset %zu: contiguous/adjacent %.2fx, contiguous/strided %.2fx (medians of %d rounds)\n",
         wr ? "write" : "read", pieces, piece, offset, ra[rounds / 2], rs[rounds / 2], rounds);
  return 0;
}
