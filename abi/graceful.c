// enableGracefulShutdown support: SIGTERM/SIGINT handlers that only write
// the signal number to a pipe (async-signal-safe). A Go goroutine reads the
// pipe, destroys the engines (removing their metadata), then restores the
// previous handler and raises the signal again.
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int kvf_gs_pipe[2] = {-1, -1};
static struct sigaction kvf_gs_old_term, kvf_gs_old_int;

static void kvf_gs_handler(int sig) {
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(kvf_gs_pipe[1], &b, 1);
    (void)r;
}

// Returns the read end of the pipe, or -1.
int kvf_gs_install(void) {
    if (kvf_gs_pipe[0] >= 0) return kvf_gs_pipe[0];
    if (pipe2(kvf_gs_pipe, O_CLOEXEC) != 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = kvf_gs_handler;
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &kvf_gs_old_term);
    sigaction(SIGINT, &sa, &kvf_gs_old_int);
    return kvf_gs_pipe[0];
}

void kvf_gs_reraise(int sig) {
    if (sig == SIGTERM) sigaction(SIGTERM, &kvf_gs_old_term, NULL);
    if (sig == SIGINT) sigaction(SIGINT, &kvf_gs_old_int, NULL);
    raise(sig);
}
