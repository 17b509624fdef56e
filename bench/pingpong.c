/* pingpong: the machine's round-trip floor on loopback TCP, the baseline of
 * every latency figure the bench scripts print.
 *
 * Two processes (the program forks): the client writes a request of
 * REQ bytes, the server reads it whole and answers RESP bytes, the client
 * reads the answer whole; one round trip per iteration, one in flight.
 * TCP_NODELAY on both sides. Reads either block in the kernel (what a
 * program that parks its threads pays: two thread wake-ups per round trip)
 * or spin on non-blocking recv (what a program that busy-polls pays: no
 * wake-up at all). The bytes are touched on both sides.
 *
 *   cc -O2 -o pingpong bench/pingpong.c
 *   pingpong [-s] [-q REQ] [-r RESP] [-n ITERS] [-w WARMUP]
 *     -s       spinning reads (default: blocking)
 *     -q REQ   request bytes (default 4096)
 *     -r RESP  answer bytes (default 8)
 *     -n ITERS timed round trips (default 20000)
 *     -w N     untimed round trips first (default 2000)
 *
 * Prints one JSON object: mode, bytes, iterations, mean/p50/p99 in us.
 * Only our own code; loopback only. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int spin;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* read_full reads n bytes; 0 at a clean end of stream, 1 when read. */
static int read_full(int fd, char *b, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, b + got, n - got, spin ? MSG_DONTWAIT : 0);
        if (k > 0) {
            got += (size_t)k;
        } else if (k == 0) {
            if (got == 0)
                return 0;
            fprintf(stderr, "pingpong: short read\n");
            exit(1);
        } else if (errno != EAGAIN && errno != EINTR) {
            die("recv");
        }
    }
    return 1;
}

static void write_full(int fd, const char *b, size_t n) {
    size_t put = 0;
    while (put < n) {
        ssize_t k = send(fd, b + put, n - put, MSG_NOSIGNAL);
        if (k > 0)
            put += (size_t)k;
        else if (k < 0 && errno != EAGAIN && errno != EINTR)
            die("send");
    }
}

static void nodelay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        die("setsockopt");
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    size_t req = 4096, resp = 8;
    long iters = 20000, warm = 2000;
    int opt;
    while ((opt = getopt(argc, argv, "sq:r:n:w:")) != -1) {
        switch (opt) {
        case 's': spin = 1; break;
        case 'q': req = strtoul(optarg, NULL, 10); break;
        case 'r': resp = strtoul(optarg, NULL, 10); break;
        case 'n': iters = strtol(optarg, NULL, 10); break;
        case 'w': warm = strtol(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: %s [-s] [-q REQ] [-r RESP] [-n ITERS] [-w WARMUP]\n", argv[0]);
            return 2;
        }
    }
    if (req == 0 || resp == 0 || iters <= 0 || warm < 0) {
        fprintf(stderr, "pingpong: sizes and iterations must be positive\n");
        return 2;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0)
        die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (struct sockaddr *)&a, &al))
        die("listen");
    char *qbuf = malloc(req), *rbuf = malloc(resp);
    if (!qbuf || !rbuf)
        die("malloc");
    memset(qbuf, 0x5a, req);
    memset(rbuf, 0xa5, resp);

    pid_t child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) { /* server */
        int c = accept(ls, NULL, NULL);
        if (c < 0)
            die("accept");
        nodelay(c);
        while (read_full(c, qbuf, req)) {
            rbuf[0] = qbuf[req - 1];
            write_full(c, rbuf, resp);
        }
        _exit(0);
    }
    close(ls);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a))
        die("connect");
    nodelay(c);
    uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)iters);
    if (!lat)
        die("malloc");
    uint64_t sum = 0;
    for (long i = -warm; i < iters; i++) {
        uint64_t t0 = now_ns();
        qbuf[req - 1] = (char)i;
        write_full(c, qbuf, req);
        if (!read_full(c, rbuf, resp)) {
            fprintf(stderr, "pingpong: server closed\n");
            return 1;
        }
        uint64_t d = now_ns() - t0;
        if (i >= 0) {
            lat[i] = d;
            sum += d;
        }
    }
    close(c);
    waitpid(child, NULL, 0);
    qsort(lat, (size_t)iters, sizeof *lat, cmp_u64);
    printf("{\"mode\":\"%s\",\"req_bytes\":%zu,\"resp_bytes\":%zu,\"iterations\":%ld,"
           "\"mean_us\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f}\n",
           spin ? "spin" : "block", req, resp, iters, (double)sum / (double)iters / 1e3,
           (double)lat[iters / 2] / 1e3, (double)lat[(size_t)((double)iters * 0.99)] / 1e3);
    return 0;
}
