// Fork guard and signal audit: plain C because they must work without
// entering Go (a child after fork() must never call into the runtime).
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile int kvf_is_forked;

static void kvf_on_fork_child(void) { kvf_is_forked = 1; }

__attribute__((constructor)) static void kvf_install_fork_guard(void) {
    pthread_atfork(NULL, NULL, kvf_on_fork_child);
}

int kvf_forked(void) { return kvf_is_forked; }

// kvf_audit_signals lists, comma-separated, the signals whose current
// handler lacks SA_ONSTACK. Returns the number found.
int kvf_audit_signals(char *buf, size_t len) {
    static const struct { int sig; const char *name; } sigs[] = {
        {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGPROF, "SIGPROF"},
        {SIGURG, "SIGURG"}, {SIGFPE, "SIGFPE"}, {SIGPIPE, "SIGPIPE"},
    };
    int found = 0;
    size_t used = 0;
    if (len) buf[0] = 0;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa;
        if (sigaction(sigs[i].sig, NULL, &sa) != 0) continue;
        if (!(sa.sa_flags & SA_SIGINFO) && (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)) continue;
        if (sa.sa_flags & SA_ONSTACK) continue;
        found++;
        int n = snprintf(buf + used, len > used ? len - used : 0, "%s%s", used ? "," : "", sigs[i].name);
        if (n > 0) used += (size_t)n;
        if (used >= len) used = len ? len - 1 : 0;
    }
    return found;
}
