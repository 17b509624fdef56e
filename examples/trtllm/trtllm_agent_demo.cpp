// trtllm_agent_demo: kvferry as TensorRT-LLM's Mooncake transfer agent, a
// context (sender) and a generation (receiver) instance in two processes of
// this host.
//
// TensorRT-LLM's cache transceiver (cache_transceiver_config.backend:
// MOONCAKE) loads the agent as this program does: dlopen of
// libtensorrt_llm_mooncake_wrapper.so by name (kvferry's is in
// build/lib/trtllm: put it first on LD_LIBRARY_PATH), dlsym of
// createMooncakeTransferAgent, and calls through the BaseTransferAgent
// interface it returns. The types here are kvferry's own declarations of that
// interface (plugin/trtllm_abi.h, the layouts of TensorRT-LLM's
// transferAgent.h), so neither TensorRT-LLM nor CUDA is needed. The steps
// follow the transceiver's, for one request:
//
//   gen  loadRemoteAgent(ctx, connection info)   the ctx's address came with the request
//   gen  notifySyncMessage(ctx, request)         "here are my name, address and buffer"
//   ctx  getNotifiedSyncMessages()               takes the request
//   ctx  loadRemoteAgent(gen, AgentDesc), checkRemoteDescs(gen, buffer)
//   ctx  submitTransferRequests(WRITE, KV -> gen's buffer), wait()
//   ctx  notifySyncMessage(gen, "sent")          gen checks the bytes and answers
//
// Then ctx reads the buffer back and checks it too. Every wait is bounded;
// the exit status is 0 only when both sides saw the right bytes.
//
// Build: g++ -std=c++17 -Iplugin examples/trtllm/trtllm_agent_demo.cpp -ldl
// Run:   LD_LIBRARY_PATH=build/lib/trtllm ./a.out    (or ./a.out <path of the .so>)
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trtllm_abi.h"

using namespace kvftrt;

namespace {

constexpr size_t kKV = 32u << 20; // the request's KV bytes, one descriptor
constexpr double kWaitS = 60;     // bound of every wait

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The factory TensorRT-LLM looks up: C linkage, returns a C++ object.
using Factory = std::unique_ptr<AgentBase> (*)(Config const *);

Factory loadFactory(const char *path) {
    // By bare name, as TensorRT-LLM's DynLibLoader (RTLD_LAZY, local scope).
    void *h = dlopen(path ? path : "libtensorrt_llm_mooncake_wrapper.so", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s (set LD_LIBRARY_PATH=build/lib/trtllm)\n", dlerror());
        return nullptr;
    }
    auto f = reinterpret_cast<Factory>(dlsym(h, "createMooncakeTransferAgent"));
    if (!f) fprintf(stderr, "dlsym createMooncakeTransferAgent: %s\n", dlerror());
    return f; // never dlclose'd, as in TensorRT-LLM
}

// BaseAgentConfig as the transceiver fills it: progress and listen threads
// on, rank 0 of a world of 1.
std::unique_ptr<AgentBase> makeAgent(Factory f, const std::string &name) {
    Config cfg{name, true, false, true, false, {}, 0, 1, 0, {}};
    return f(&cfg);
}

uint8_t *mapBuf(size_t n) {
    void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return static_cast<uint8_t *>(p);
}

void fill(uint8_t *p, size_t n) {
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

bool matches(const uint8_t *p, size_t n) {
    std::vector<uint8_t> want(n);
    fill(want.data(), n);
    return memcmp(p, want.data(), n) == 0;
}

MemRanges dram(uintptr_t addr, size_t len) { return MemRanges{MemKind::kDRAM, {MemRange{addr, len, 0}}}; }

// Polls getNotifiedSyncMessages (which drains) until a message from `from`
// arrives, kWaitS at most. Returns false on timeout.
bool nextMessage(AgentBase &a, const std::string &from, std::string &msg) {
    for (auto t0 = Clock::now(); since(t0) < kWaitS; std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
        for (auto &[sender, msgs] : a.getNotifiedSyncMessages()) {
            if ((from.empty() || sender == from) && !msgs.empty()) {
                msg = msgs.front();
                return true;
            }
        }
    }
    fprintf(stderr, "no message from %s within %.0f s\n", from.empty() ? "anyone" : from.c_str(), kWaitS);
    return false;
}

// The generation instance: receives the KV into its registered buffer.
int gen(Factory f, const std::string &dir) {
    auto agent = makeAgent(f, "gen");
    if (!agent) return 1;
    uint8_t *recv = mapBuf(kKV);
    agent->registerMemory(dram(reinterpret_cast<uintptr_t>(recv), kKV)); // the recv staging buffer

    // The ctx's name and address (in TensorRT-LLM they come with the
    // request, from the context server through the router: here a file).
    std::string ctxConn, ctxName;
    for (auto t0 = Clock::now(); since(t0) < kWaitS && ctxName.empty();) {
        std::ifstream in(dir + "/ctx.info");
        if (!(in >> ctxConn >> ctxName)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (ctxName.empty()) return 1;
    agent->loadRemoteAgent(ctxName, ctxConn);

    // The request: name, address and where the KV goes.
    std::string req = "gen " + agent->getLocalConnectionInfo() + " " +
                      std::to_string(reinterpret_cast<uintptr_t>(recv)) + " " + std::to_string(kKV);
    agent->notifySyncMessage(ctxName, req);
    printf("[gen] sent the request to %s at %s: %s\n", ctxName.c_str(), ctxConn.c_str(), req.c_str());

    std::string m;
    if (!nextMessage(*agent, ctxName, m) || m != "sent") return 1;
    bool good = matches(recv, kKV);
    printf("[gen] \"%s\" from %s: %s\n", m.c_str(), ctxName.c_str(), good ? "all 32 MiB match" : "MISMATCH");
    agent->notifySyncMessage(ctxName, good ? "ok" : "bad");
    bool bye = nextMessage(*agent, ctxName, m) && m == "bye"; // stay registered until ctx is done
    agent->deregisterMemory(dram(reinterpret_cast<uintptr_t>(recv), kKV));
    agent->notifySyncMessage(ctxName, "deregistered");
    return good && bye ? 0 : 1;
}

// The context instance: sends the KV it computed.
int ctx(Factory f, const std::string &dir) {
    auto agent = makeAgent(f, "ctx");
    if (!agent) return 1;
    uint8_t *send = mapBuf(kKV), *back = mapBuf(kKV);
    fill(send, kKV);
    agent->registerMemory(dram(reinterpret_cast<uintptr_t>(send), kKV)); // the send staging buffer
    agent->registerMemory(dram(reinterpret_cast<uintptr_t>(back), kKV));
    {
        std::ofstream out(dir + "/ctx.info.tmp");
        out << agent->getLocalConnectionInfo() << " ctx\n";
    }
    std::rename((dir + "/ctx.info.tmp").c_str(), (dir + "/ctx.info").c_str());

    // The request (the transceiver's request-info thread).
    std::string m;
    if (!nextMessage(*agent, "", m)) return 1;
    char name[64], conn[128];
    unsigned long long recv = 0, len = 0;
    if (sscanf(m.c_str(), "%63s %127s %llu %llu", name, conn, &recv, &len) != 4 || len != kKV) {
        fprintf(stderr, "[ctx] bad request \"%s\"\n", m.c_str());
        return 1;
    }
    // connect(): load the peer from its agent desc, check its buffer.
    agent->loadRemoteAgent(name, AgentInfo{conn});
    if (!agent->checkRemoteDescs(name, dram(recv, len))) {
        fprintf(stderr, "[ctx] %s's buffer is not usable\n", name);
        return 1;
    }

    // One WRITE of the whole KV: one descriptor pair, as the C++ transceiver.
    auto t0 = Clock::now();
    auto st = agent->submitTransferRequests(
        Request{Op::kWRITE, dram(reinterpret_cast<uintptr_t>(send), kKV), dram(recv, kKV), name});
    State s = st->wait(static_cast<int64_t>(kWaitS * 1000));
    double w = since(t0);
    if (s != State::kSUCCESS) {
        fprintf(stderr, "[ctx] WRITE failed: %s\n", st->getLastStatusStr().c_str());
        return 1;
    }
    printf("[ctx] WRITE 32 MiB into %s: %.2f ms, %.2f GB/s\n", name, w * 1e3, kKV / w / 1e9);
    agent->notifySyncMessage(name, "sent"); // after wait(): the bytes are there
    std::string answer;
    bool ok = nextMessage(*agent, name, answer) && answer == "ok";
    printf("[ctx] %s answered \"%s\"\n", name, answer.c_str());

    // Read it back and compare.
    t0 = Clock::now();
    st = agent->submitTransferRequests(
        Request{Op::kREAD, dram(reinterpret_cast<uintptr_t>(back), kKV), dram(recv, kKV), name});
    s = st->wait(static_cast<int64_t>(kWaitS * 1000));
    double r = since(t0);
    bool same = s == State::kSUCCESS && memcmp(send, back, kKV) == 0;
    printf("[ctx] READ 32 MiB back: %.2f ms, %s\n", r * 1e3, same ? "all bytes match" : "MISMATCH");
    agent->notifySyncMessage(name, "bye");
    std::string last;
    nextMessage(*agent, name, last); // gen lets go of its buffer while ctx is still there
    agent->deregisterMemory(dram(reinterpret_cast<uintptr_t>(back), kKV));
    agent->deregisterMemory(dram(reinterpret_cast<uintptr_t>(send), kKV));
    return ok && same ? 0 : 1;
}

// Runs one side; the agent reports failures by throwing.
int run(int (*side)(Factory, const std::string &), const char *path, const std::string &dir) {
    Factory f = loadFactory(path);
    if (!f) return 1;
    try {
        return side(f, dir);
    } catch (const std::exception &e) {
        fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IONBF, 0);
    const char *path = argc > 1 ? argv[1] : nullptr;
    // Agents advertise TLLM_MOONCAKE_IP_ADDR (else the first non-loopback
    // address); this demo stays on loopback.
    setenv("TLLM_MOONCAKE_IP_ADDR", "127.0.0.1", 0);
    char tmpl[] = "/tmp/trtllm_agent_demo.XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    std::string dir = tmpl;
    // Fork before either side loads the library: each process then starts
    // its own Go runtime inside it.
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) _exit(run(gen, path, dir));
    int rc = run(ctx, path, dir);
    int status = 0;
    for (auto t0 = Clock::now(); waitpid(pid, &status, WNOHANG) == 0; usleep(10000)) {
        if (since(t0) > kWaitS) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
    }
    unlink((dir + "/ctx.info").c_str());
    rmdir(dir.c_str());
    bool genOK = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (rc != 0 || !genOK) {
        fprintf(stderr, "trtllm_agent_demo: FAILED (ctx %d, gen %s)\n", rc, genOK ? "ok" : "failed");
        return 1;
    }
    printf("trtllm_agent_demo: OK\n");
    return 0;
}
