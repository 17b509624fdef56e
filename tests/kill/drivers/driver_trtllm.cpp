// Kill-matrix driver for the TensorRT-LLM agent (tests/kill): it loads
// libtensorrt_llm_mooncake_wrapper.so by bare name (LD_LIBRARY_PATH points
// at build/lib/trtllm) as TensorRT-LLM's cache transceiver does and drives
// the agent through its vtable (plugin/trtllm_abi.h), answering the
// commands of tests/kill's protocol with one JSON line each. The agent
// uses the P2P handshake, as TensorRT-LLM's Mooncake agent does (no
// metadata service).
//
//   driver_trtllm <name> <MiB>
//       Agent <name> with 2 x <MiB> registered; prints
//       {"ok","info":"<name>=<conn>","addr","pid"}.
//         connect <name>=<conn>         loadRemoteAgent
//         batch <addr> <bytes> <seed>   WRITE [0,n) to the peer, READ it
//                                       back into [n,2n), compare
//         stats | unreg | quit
#include <dirent.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "trtllm_abi.h"

using namespace kvftrt;

static double nowS() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pattern(uint8_t *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

static int countFds() {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 3;
}

static long goroutines(void *dl) {
    auto text = reinterpret_cast<int64_t (*)(char *, size_t)>(dlsym(dl, "kvferry_metrics_text"));
    if (!text) return -1;
    static char buf[4 << 20];
    int64_t n = text(buf, sizeof buf);
    const char *p = n > 0 ? strstr(buf, "\ngo_goroutines ") : nullptr;
    return p ? strtol(p + 15, nullptr, 10) : -1;
}

static MemRanges dram(uint8_t *p, size_t n) { return MemRanges{MemKind::kDRAM, {MemRange{p, n, 0}}}; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: driver_trtllm <name> <MiB>\n");
        return 2;
    }
    std::string name = argv[1];
    size_t size = strtoull(argv[2], nullptr, 0) << 20;
    void *dl = dlopen("libtensorrt_llm_mooncake_wrapper.so", RTLD_LAZY | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    using Factory = std::unique_ptr<AgentBase> (*)(Config const *);
    auto factory = reinterpret_cast<Factory>(dlsym(dl, "createMooncakeTransferAgent"));
    if (!factory) return 2;
    Config cfg{name, true, false, true, false, {}, 0, 2, 0, {}};
    std::unique_ptr<AgentBase> agent = factory(&cfg);
    if (!agent) {
        printf("{\"ok\":false,\"err\":\"createMooncakeTransferAgent\"}\n");
        return 1;
    }
    void *raw = mmap(nullptr, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (raw == MAP_FAILED) return 2;
    auto *buf = static_cast<uint8_t *>(raw);
    try {
        agent->registerMemory(dram(buf, 2 * size));
    } catch (std::exception const &e) {
        printf("{\"ok\":false,\"err\":\"registerMemory\"}\n");
        return 1;
    }
    printf("{\"ok\":true,\"info\":\"%s=%s\",\"addr\":%" PRIu64 ",\"pid\":%d}\n", name.c_str(),
           agent->getLocalConnectionInfo().c_str(), (uint64_t)(uintptr_t)buf, getpid());
    fflush(stdout);
    std::string peer;
    bool registered = true;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "quit") break;
        double t0 = nowS();
        try {
            if (cmd == "connect") {
                std::string info;
                in >> info;
                auto eq = info.find('=');
                peer = info.substr(0, eq);
                agent->loadRemoteAgent(peer, ConnInfo{info.substr(eq + 1)});
                printf("{\"ok\":true,\"ms\":%.1f}\n", (nowS() - t0) * 1e3);
            } else if (cmd == "batch") {
                uint64_t addr = 0, n = 0, seed = 0;
                in >> addr >> n >> seed;
                n = std::min<uint64_t>(n, size);
                pattern(buf, n, seed);
                memset(buf + size, 0, n);
                auto remote = MemRanges{MemKind::kDRAM, {MemRange{static_cast<uintptr_t>(addr), n, 0}}};
                auto run = [&](Op op, uint8_t *local) {
                    auto s = agent->submitTransferRequests(Request{op, dram(local, n), remote, peer});
                    State r = s->wait(60000);
                    return r == State::kSUCCESS ? "completed" : r == State::kFAILURE ? "failed" : "hang";
                };
                std::string st = run(Op::kWRITE, buf);
                bool match = false;
                if (st == "completed") {
                    st = run(Op::kREAD, buf + size);
                    match = st == "completed" && memcmp(buf, buf + size, n) == 0;
                }
                printf("{\"ok\":%s,\"state\":\"%s\",\"match\":%s,\"ms\":%.1f}\n", match ? "true" : "false", st.c_str(),
                       match ? "true" : "false", (nowS() - t0) * 1e3);
            } else if (cmd == "stats") {
                printf("{\"ok\":true,\"fds\":%d,\"goroutines\":%ld}\n", countFds(), goroutines(dl));
            } else if (cmd == "unreg") {
                if (registered) agent->deregisterMemory(dram(buf, 2 * size));
                registered = false;
                printf("{\"ok\":true,\"ms\":%.1f}\n", (nowS() - t0) * 1e3);
            } else {
                printf("{\"ok\":false,\"err\":\"unknown command\"}\n");
            }
        } catch (std::exception const &e) {
            // The stock agent throws on failures; so may ours.
            printf("{\"ok\":false,\"state\":\"failed\",\"err\":\"exception\",\"ms\":%.1f}\n", (nowS() - t0) * 1e3);
        }
        fflush(stdout);
    }
    agent.reset();
    return 0;
}
