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

#include "kvf_test.h"
#include "trtllm_abi.h"

using namespace kvftrt;

static MemRanges dram(uint8_t *p, size_t n) { return MemRanges{MemKind::kDRAM, {MemRange{p, n, 0}}}; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: driver_trtllm <name> <MiB>\n");
        return 2;
    }
    std::string name = argv[1];
    size_t size = strtoull(argv[2], nullptr, 0) << 20;
    void *dl = kvf_dl_open("libtensorrt_llm_mooncake_wrapper.so", RTLD_LAZY | RTLD_LOCAL);
    if (!dl) return 2;
    using Factory = std::unique_ptr<AgentBase> (*)(Config const *);
    auto factory = reinterpret_cast<Factory>(kvf_dl_sym(dl, "createMooncakeTransferAgent"));
    if (!factory) return 2;
    Config cfg{name, true, false, true, false, {}, 0, 2, 0, {}};
    std::unique_ptr<AgentBase> agent = factory(&cfg);
    if (!agent) {
        printf("{\"ok\":false,\"err\":\"createMooncakeTransferAgent\"}\n");
        return 1;
    }
    uint8_t *buf = map_buf(2 * size);
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
    kvf_serve([&](const std::string &cmd, std::istringstream &in) {
        double t0 = now_s();
        try {
            if (cmd == "connect") {
                std::string info;
                in >> info;
                auto eq = info.find('=');
                peer = info.substr(0, eq);
                agent->loadRemoteAgent(peer, ConnInfo{info.substr(eq + 1)});
                printf("{\"ok\":true,\"ms\":%.1f}\n", (now_s() - t0) * 1e3);
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
                       match ? "true" : "false", (now_s() - t0) * 1e3);
            } else if (cmd == "stats") {
                printf("{\"ok\":true,\"fds\":%d,\"goroutines\":%ld}\n", count_fds(), dl_goroutines(dl));
            } else if (cmd == "unreg") {
                if (registered) agent->deregisterMemory(dram(buf, 2 * size));
                registered = false;
                printf("{\"ok\":true,\"ms\":%.1f}\n", (now_s() - t0) * 1e3);
            } else {
                printf("{\"ok\":false,\"err\":\"unknown command\"}\n");
            }
        } catch (std::exception const &e) {
            // The stock agent throws on failures; so may ours.
            printf("{\"ok\":false,\"state\":\"failed\",\"err\":\"exception\",\"ms\":%.1f}\n", (now_s() - t0) * 1e3);
        }
    });
    agent.reset();
    return 0;
}
