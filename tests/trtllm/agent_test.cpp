// Route A: TensorRT-LLM's transfer-agent ABI served by kvferry.
//
// This program plays TensorRT-LLM: it dlopens libtensorrt_llm_mooncake_wrapper.so
// by name (as DynLibLoader does, RTLD_LAZY | RTLD_LOCAL), looks up
// createMooncakeTransferAgent and drives the returned BaseTransferAgent and
// its TransferStatus objects through their vtables, as the C++ cache
// transceiver does (shared/specs/tensorrt-llm.md §2.2, §4). The types come
// from plugin/trtllm_abi.h, whose layouts are pinned to the spec.
//
//   agent_test ctx <dir>   the context (sender) instance; writes <dir>/ctx.info
//   agent_test gen <dir>   the generation (receiver) instance; is SIGKILLed by
//                          ctx in the last phase
//
// Checks: registration, connection info and agent descs exchanged, a message
// sent before the peer is loaded arrives once it is, checkRemoteDescs, a
// 3000-descriptor WRITE (above the stock agent's 1024 cap), wait(timeout),
// messages both ways drained once by several polling threads, a completion
// message carried by the request, a second agent in one process sharing a
// buffer, counted deregistration, cancel through release(), a stopped peer
// (wait() without a timeout still returns), and a peer killed mid-transfer
// (wait fails within its timeout, notify fails loudly).
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kvf_test.h"
#include "trtllm_abi.h"
#include "../fakecuda/cuda_app.h"

using namespace kvftrt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kBig = 512u << 20;   // the staging buffers
constexpr size_t kSmall = 1u << 20;   // the buffer registered twice
constexpr int kDescs = 3000;          // above the stock agent's 1024 cap
constexpr size_t kChunk = 8192 + 24;  // per descriptor
constexpr double kWaitS = 120;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using Factory = std::unique_ptr<AgentBase> (*)(Config const *);

Factory loadFactory() {
    // By bare name: LD_LIBRARY_PATH points at kvferry's build/lib/trtllm.
    void *h = kvf_dl_open("libtensorrt_llm_mooncake_wrapper.so", RTLD_LAZY | RTLD_LOCAL);
    void *f = h ? kvf_dl_sym(h, "createMooncakeTransferAgent") : nullptr;
    if (!f) std::exit(2);
    return reinterpret_cast<Factory>(f);
}

std::unique_ptr<AgentBase> makeAgent(Factory f, std::string const &name) {
    Config cfg{name, true, false, true, false, {}, 0, 2, 0, {}};
    auto a = f(&cfg);
    if (!a) {
        std::fprintf(stderr, "createMooncakeTransferAgent returned NULL\n");
        std::exit(2);
    }
    return a;
}

// Where descriptor i of a scattered write lands in the receive buffer.
size_t scatterOffset(int i) { return static_cast<size_t>((static_cast<uint64_t>(i) * 7919) % kDescs) * kChunk; }

// ---- control messages (binary, NUL bytes included) ----

struct Wire {
    std::string b;
    Wire &u64(uint64_t v) {
        b.append(reinterpret_cast<char const *>(&v), 8);
        return *this;
    }
    Wire &str(std::string const &s) {
        u64(s.size());
        b += s;
        return *this;
    }
};

struct Reader {
    std::string const &b;
    size_t off = 0;
    bool bad = false;
    uint64_t u64() {
        uint64_t v = 0;
        if (off + 8 > b.size()) {
            bad = true;
            return 0;
        }
        std::memcpy(&v, b.data() + off, 8);
        off += 8;
        return v;
    }
    std::string str() {
        uint64_t n = u64();
        if (bad || off + n > b.size()) {
            bad = true;
            return {};
        }
        std::string s = b.substr(off, n);
        off += n;
        return s;
    }
};

enum Kind : uint64_t { kReq = 1, kData, kAck, kDereg, kSyncTag };

std::string msg(Kind k, Wire w = {}) { return Wire{}.u64(k).b + std::string("\0\0", 2) + w.b; }

// ---- the mailbox: several threads spin on getNotifiedSyncMessages ----

class Mailbox {
public:
    explicit Mailbox(AgentBase *a) : agent_(a) {
        for (int i = 0; i < 4; i++) threads_.emplace_back([this] { run(); });
    }
    ~Mailbox() { stop(); }

    void stop() {
        stop_ = true;
        for (auto &t : threads_)
            if (t.joinable()) t.join();
    }

    // Takes the oldest message of kind k (from anyone); false on timeout.
    bool take(Kind k, std::string *from, Reader **out, std::string *keep, double timeout = kWaitS) {
        auto t0 = Clock::now();
        while (since(t0) < timeout) {
            {
                std::lock_guard<std::mutex> g(mu_);
                for (size_t i = 0; i < box_.size(); i++) {
                    Reader r{box_[i].second};
                    if (r.u64() == k) {
                        *from = box_[i].first;
                        *keep = box_[i].second;
                        box_.erase(box_.begin() + static_cast<long>(i));
                        *out = new Reader{*keep, 10};
                        return true;
                    }
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return false;
    }

    size_t left() {
        std::lock_guard<std::mutex> g(mu_);
        return box_.size();
    }

    long received() const { return received_; }

private:
    void run() {
        while (!stop_) {
            try {
                auto m = agent_->getNotifiedSyncMessages(); // busy poll, no sleep
                for (auto &[name, msgs] : m) {
                    std::lock_guard<std::mutex> g(mu_);
                    for (auto &s : msgs) box_.emplace_back(name, s);
                    received_ += static_cast<long>(msgs.size());
                }
                if (m.empty()) std::this_thread::yield();
            } catch (std::exception const &e) {
                CHECK(false, "getNotifiedSyncMessages threw: %s", e.what());
            }
        }
    }

    AgentBase *agent_;
    std::atomic<bool> stop_{false};
    std::atomic<long> received_{0};
    std::mutex mu_;
    std::vector<std::pair<std::string, std::string>> box_;
    std::vector<std::thread> threads_;
};

struct Taken {
    std::string from, keep;
    Reader *r = nullptr;
    ~Taken() { delete r; }
};

bool take(Mailbox &mb, Kind k, Taken &t, double timeout = kWaitS) { return mb.take(k, &t.from, &t.r, &t.keep, timeout); }

MemRanges dram(std::vector<MemRange> v) { return MemRanges{MemKind::kDRAM, std::move(v)}; }

// ---- gen ----

int runGen(std::string const &dir) {
    Factory f = loadFactory();
    std::string name = "gen_" + std::to_string(getpid());
    auto agent = makeAgent(f, name);
    uint8_t *recv = map_lazy(kBig), *small = map_lazy(kSmall);
    agent->registerMemory(dram({MemRange{recv, kBig, 0}}));
    agent->registerMemory(dram({MemRange{small, kSmall, 0}}));
    agent->registerMemory(dram({MemRange{small, kSmall, 0}})); // counted twice
    std::string conn = agent->getLocalConnectionInfo();
    CHECK(agent->getLocalAgentDesc().getBackendAgentDesc() == conn, "agent desc carries the connection info");

    std::string ctxConn, ctxName;
    auto t0 = Clock::now();
    while (since(t0) < 60) {
        std::ifstream in(dir + "/ctx.info");
        if (in >> ctxConn >> ctxName) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (ctxName.empty()) {
        std::fprintf(stderr, "gen: no ctx.info\n");
        return 2;
    }
    Mailbox mb(agent.get());

    // The request goes out before ctx is loaded: it must wait, not vanish.
    Wire req;
    req.str(name).str(conn).u64(static_cast<uint64_t>(getpid()));
    req.u64(reinterpret_cast<uintptr_t>(recv)).u64(kBig).u64(reinterpret_cast<uintptr_t>(small)).u64(kSmall);
    agent->notifySyncMessage(ctxName, msg(kReq, req));
    agent->loadRemoteAgent(ctxName, ctxConn);
    std::printf("gen: %s at %s loaded %s at %s\n", name.c_str(), conn.c_str(), ctxName.c_str(), ctxConn.c_str());

    // Serve until killed.
    t0 = Clock::now();
    while (since(t0) < 240) {
        Taken t;
        if (take(mb, kData, t, 0.01)) {
            CHECK(t.from == ctxName, "data message from %s", t.from.c_str());
            uint64_t phase = t.r->u64(), seed = t.r->u64(), scattered = t.r->u64(), off = t.r->u64(), n = t.r->u64();
            bool ok = !t.r->bad;
            if (scattered) {
                for (int i = 0; i < kDescs && ok; i++) {
                    size_t j = pat_diff(recv + scatterOffset(i), kChunk, seed, static_cast<uint64_t>(i) * kChunk);
                    if (j != kChunk) {
                        ok = false;
                        std::fprintf(stderr, "gen: descriptor %d byte %zu differs\n", i, j);
                    }
                }
            } else if (size_t j = pat_diff(recv + off, n, seed, 0); j != n) {
                ok = false;
                std::fprintf(stderr, "gen: byte %zu of %zu differs\n", j, static_cast<size_t>(n));
            }
            std::printf("gen: phase %llu: %s compared byte by byte: %s\n", static_cast<unsigned long long>(phase),
                        scattered ? "3000 descriptors" : "range", ok ? "ok" : "BAD");
            CHECK(ok, "phase %llu data", static_cast<unsigned long long>(phase));
            agent->notifySyncMessage(ctxName, msg(kAck, Wire{}.u64(phase).u64(ok)));
            continue;
        }
        if (take(mb, kSyncTag, t, 0.001)) {
            // Carried by the request itself; the data must be there already.
            uint64_t seed = t.r->u64(), off = t.r->u64(), n = t.r->u64();
            bool ok = !t.r->bad && pat_diff(recv + off, n, seed, 0) == n;
            std::printf("gen: completion message of a request: data %s\n", ok ? "ok" : "BAD");
            agent->notifySyncMessage(ctxName, msg(kAck, Wire{}.u64(100).u64(ok)));
            continue;
        }
        if (take(mb, kDereg, t, 0.001)) {
            uint64_t phase = t.r->u64();
            agent->deregisterMemory(dram({MemRange{small, kSmall, 0}}));
            agent->notifySyncMessage(ctxName, msg(kAck, Wire{}.u64(phase).u64(1)));
        }
    }
    std::fprintf(stderr, "gen: never killed\n");
    return 3;
}

// ---- ctx ----

// Waits (2 s at most) until every thread of process pid is stopped.
bool waitStopped(pid_t pid) {
    auto t0 = Clock::now();
    while (since(t0) < 2) {
        bool all = true;
        std::string dir = "/proc/" + std::to_string(pid) + "/task";
        std::unique_ptr<DIR, int (*)(DIR *)> d(opendir(dir.c_str()), closedir);
        if (!d) return false;
        while (dirent *e = readdir(d.get())) {
            if (e->d_name[0] == '.') continue;
            std::ifstream st(dir + "/" + e->d_name + "/stat");
            std::string line;
            std::getline(st, line);
            size_t p = line.rfind(')');
            if (p == std::string::npos || p + 2 >= line.size() || line[p + 2] != 'T') all = false;
        }
        if (all) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

// Waits for the acknowledgement of phase p.
void expectAck(Mailbox &mb, std::string const &gen, uint64_t p) {
    Taken t;
    if (!take(mb, kAck, t)) {
        CHECK(false, "no acknowledgement of phase %llu", static_cast<unsigned long long>(p));
        return;
    }
    uint64_t phase = t.r->u64(), ok = t.r->u64();
    CHECK(t.from == gen && phase == p && ok == 1, "acknowledgement %llu/%llu from %s (want phase %llu)",
          static_cast<unsigned long long>(phase), static_cast<unsigned long long>(ok), t.from.c_str(),
          static_cast<unsigned long long>(p));
}

int runCtx(std::string const &dir) {
    Factory f = loadFactory();
    std::string name = "ctx_" + std::to_string(getpid());
    auto agent = makeAgent(f, name);
    uint8_t *send = map_lazy(kBig);
    agent->registerMemory(dram({MemRange{send, kBig, 0}}));
    // GPU memory: refused loudly (this build has no GPU path), never accepted
    // and then faulted on.
    try {
        agent->registerMemory(MemRanges{MemKind::kVRAM, {MemRange{send + kBig - 4096, 4096, 0}}});
        CHECK(false, "registering kVRAM must throw");
    } catch (std::exception const &e) {
        std::printf("ctx: kVRAM registration refused: %s\n", e.what());
    }
    std::string conn = agent->getLocalConnectionInfo();
    {
        std::ofstream out(dir + "/ctx.info.tmp");
        out << conn << " " << name << "\n";
    }
    std::rename((dir + "/ctx.info.tmp").c_str(), (dir + "/ctx.info").c_str());
    Mailbox mb(agent.get());

    // The request, keyed by the sender's agent name.
    Taken req;
    if (!take(mb, kReq, req)) {
        std::fprintf(stderr, "ctx: no request (a message sent before load was lost?)\n");
        return 1;
    }
    std::string gen = req.r->str(), genConn = req.r->str();
    pid_t genPid = static_cast<pid_t>(req.r->u64());
    uint64_t recv = req.r->u64(), recvLen = req.r->u64(), small = req.r->u64(), smallLen = req.r->u64();
    CHECK(!req.r->bad && gen == req.from, "request from %s names %s", req.from.c_str(), gen.c_str());
    std::printf("ctx: %s at %s got the request of %s\n", name.c_str(), conn.c_str(), gen.c_str());

    // connect(): invalidate, load from the agent desc, then checkRemoteDescs
    // must hold on the first call.
    agent->invalidateRemoteAgent(gen);
    agent->loadRemoteAgent(gen, AgentInfo{genConn});
    CHECK(agent->checkRemoteDescs(gen, dram({MemRange{recv, recvLen, 0}})), "checkRemoteDescs of the recv buffer");
    CHECK(!agent->checkRemoteDescs(gen, dram({MemRange{recv, recvLen + 1, 0}})), "a range past the buffer");
    CHECK(!agent->checkRemoteDescs("nobody", dram({MemRange{recv, 1, 0}})), "an agent never loaded");

    uint64_t phase = 1;
    // 1. A WRITE of 3000 descriptors, scattered, with wait(timeout).
    {
        uint64_t seed = 0xA11CE;
        pat_fill(send, kDescs * kChunk, seed, 0);
        std::vector<MemRange> src, dst;
        for (int i = 0; i < kDescs; i++) {
            src.emplace_back(send + static_cast<size_t>(i) * kChunk, kChunk, 0);
            dst.emplace_back(static_cast<uintptr_t>(recv + scatterOffset(i)), kChunk, 0);
        }
        auto t0 = Clock::now();
        auto st = agent->submitTransferRequests(Request{Op::kWRITE, dram(src), dram(dst), gen});
        State s = st->wait(30000);
        CHECK(s == State::kSUCCESS, "3000-descriptor write: state %d: %s", static_cast<int>(s),
              st->getLastStatusStr().c_str());
        CHECK(st->isCompleted() && st->getLastStatusStr().empty(), "completed, no error text");
        std::printf("ctx: phase 1: %d descriptors (%zu bytes) in %.3fs\n", kDescs, kDescs * kChunk, since(t0));
        agent->notifySyncMessage(gen, msg(kData, Wire{}.u64(phase).u64(seed).u64(1).u64(0).u64(0)));
        expectAck(mb, gen, phase);
    }

    // 2. The completion message carried by the request.
    {
        uint64_t seed = 0xB0B, off = 12345, n = (3u << 20) + 7;
        pat_fill(send + 999, n, seed, 0);
        Wire w;
        w.u64(seed).u64(off).u64(n);
        auto st = agent->submitTransferRequests(
            Request{Op::kWRITE, dram({MemRange{send + 999, n, 0}}), dram({MemRange{recv + off, n, 0}}), gen,
                    msg(kSyncTag, w)});
        CHECK(st->wait(-1) == State::kSUCCESS, "write with a completion message");
        expectAck(mb, gen, 100);
    }

    // 3. A second agent in this process shares the send buffer, writes from
    // a small unaligned vector, and reads it back.
    {
        auto second = makeAgent(f, name + "_2");
        std::vector<char> v(4097);
        for (size_t i = 0; i < v.size(); i++) v[i] = static_cast<char>(i * 31 + 7);
        std::vector<char> back(v.size());
        second->registerMemory(dram({MemRange{send, kBig, 0}}));
        second->registerMemory(dram({MemRange{v.data(), v.size(), 0}, MemRange{back.data(), back.size(), 0}}));
        second->loadRemoteAgent(gen, genConn);
        uint64_t at = recv + recvLen - 5000;
        auto w = second->submitTransferRequests(
            Request{Op::kWRITE, dram({MemRange{v.data(), v.size(), 0}}), dram({MemRange{at, v.size(), 0}}), gen});
        CHECK(w->wait(30000) == State::kSUCCESS, "second agent write");
        auto r = second->submitTransferRequests(
            Request{Op::kREAD, dram({MemRange{back.data(), back.size(), 0}}), dram({MemRange{at, back.size(), 0}}),
                    gen});
        CHECK(r->wait(30000) == State::kSUCCESS, "second agent read");
        CHECK(v == back, "second agent read back what it wrote");
        second->deregisterMemory(dram({MemRange{v.data(), v.size(), 0}, MemRange{back.data(), back.size(), 0}}));
        second->deregisterMemory(dram({MemRange{send, kBig, 0}}));
    }

    // 4. Registrations are counted and really dropped.
    {
        MemRanges s = dram({MemRange{small, smallLen, 0}});
        CHECK(agent->checkRemoteDescs(gen, s), "small buffer registered");
        agent->notifySyncMessage(gen, msg(kDereg, Wire{}.u64(++phase)));
        expectAck(mb, gen, phase);
        CHECK(agent->checkRemoteDescs(gen, s), "still registered after one of two deregistrations");
        agent->notifySyncMessage(gen, msg(kDereg, Wire{}.u64(++phase)));
        expectAck(mb, gen, phase);
        // Gone: the peer refuses a write into it (checkRemoteDescs may still
        // answer from the cached descriptor; it refreshes only on a miss).
        pat_fill(send, 4096, 0xDEAD, 0);
        auto st = agent->submitTransferRequests(
            Request{Op::kWRITE, dram({MemRange{send, 4096, 0}}), dram({MemRange{small, 4096, 0}}), gen});
        State r = st->wait(30000);
        CHECK(r == State::kFAILURE, "a write into deregistered memory fails: state %d", static_cast<int>(r));
        std::printf("ctx: phase 4: write into deregistered memory: %s\n", st->getLastStatusStr().c_str());
    }

    // 5. wait(timeout) returns IN_PROGRESS when the timeout passes first.
    {
        pat_fill(send, kBig, 0xC0FFEE, 0);
        auto st = agent->submitTransferRequests(
            Request{Op::kWRITE, dram({MemRange{send, kBig, 0}}), dram({MemRange{recv, kBig, 0}}), gen});
        auto t0 = Clock::now();
        State s = st->wait(1);
        double dt = since(t0);
        CHECK(s == State::kIN_PROGRESS, "wait(1) on 512 MiB: state %d", static_cast<int>(s));
        CHECK(dt < 1.5, "wait(1) took %.3fs", dt);
        CHECK(!st->isCompleted(), "not completed yet");
        s = st->wait(60000);
        CHECK(s == State::kSUCCESS, "then it completes: %s", st->getLastStatusStr().c_str());
        std::printf("ctx: phase 5: wait(1) returned IN_PROGRESS after %.1f ms; 512 MiB done in %.3fs\n", dt * 1e3,
                    since(t0));
        agent->notifySyncMessage(gen, msg(kData, Wire{}.u64(++phase).u64(0xC0FFEE).u64(0).u64(0).u64(kBig)));
        expectAck(mb, gen, phase);
    }

    // 6. release() cancels a transfer in flight.
    {
        std::vector<MemRange> src, dst;
        for (int i = 0; i < 4; i++) src.emplace_back(send, kBig, 0), dst.emplace_back(recv, kBig, 0);
        auto st = agent->submitTransferRequests(Request{Op::kWRITE, dram(src), dram(dst), gen});
        auto t0 = Clock::now();
        bool released = st->release();
        double dt = since(t0);
        State s = st->wait(0);
        std::string why = st->getLastStatusStr();
        CHECK(released, "release accepted");
        CHECK(s == State::kFAILURE && st->isCompleted(), "a released 2 GiB transfer ends FAILURE: state %d",
              static_cast<int>(s));
        CHECK(!why.empty(), "the status says why");
        std::printf("ctx: phase 6: release() took %.1f ms; status: %s\n", dt * 1e3, why.c_str());
        st.reset();
        // The engine still works.
        auto ok = agent->submitTransferRequests(
            Request{Op::kWRITE, dram({MemRange{send, 4096, 0}}), dram({MemRange{recv, 4096, 0}}), gen});
        CHECK(ok->wait(30000) == State::kSUCCESS, "a transfer after the release");
    }

    // 6b. A silent peer (SIGSTOP): wait() without a timeout still returns,
    // once the transfer has made no progress for the transfer timeout (run.sh
    // forces TCP, whose peer must answer, and sets MC_TRANSFER_TIMEOUT=5 for
    // ctx).
    {
        kill(genPid, SIGSTOP);
        CHECK(waitStopped(genPid), "gen did not stop");
        auto st = agent->submitTransferRequests(
            Request{Op::kWRITE, dram({MemRange{send, 1u << 20, 0}}), dram({MemRange{recv, 1u << 20, 0}}), gen});
        auto t0 = Clock::now();
        State s = st->wait();
        double dt = since(t0);
        std::string why = st->getLastStatusStr();
        st.reset();
        kill(genPid, SIGCONT);
        CHECK(s == State::kFAILURE, "wait() on a stopped peer: state %d", static_cast<int>(s));
        CHECK(dt < 30, "wait() on a stopped peer returned after %.1fs", dt);
        std::printf("ctx: phase 6b: peer stopped; wait() returned state %d after %.1fs: %s\n", static_cast<int>(s), dt,
                    why.c_str());
    }

    // 7. The peer dies mid-transfer: wait fails within its timeout, and a
    // message to it fails loudly.
    {
        std::vector<MemRange> src, dst;
        for (int i = 0; i < 8; i++) src.emplace_back(send, kBig, 0), dst.emplace_back(recv, kBig, 0);
        auto st = agent->submitTransferRequests(Request{Op::kWRITE, dram(src), dram(dst), gen});
        kill(genPid, SIGKILL);
        auto t0 = Clock::now();
        State s = st->wait(10000);
        double dt = since(t0);
        std::string why = st->getLastStatusStr();
        CHECK(s == State::kFAILURE, "wait after the peer was killed: state %d", static_cast<int>(s));
        CHECK(dt < 10.5, "wait(10000) returned after %.3fs", dt);
        CHECK(!why.empty(), "the status says why");
        std::printf("ctx: phase 7: peer killed; wait returned FAILURE after %.3fs: %s\n", dt, why.c_str());
        bool threw = false;
        t0 = Clock::now();
        try {
            agent->notifySyncMessage(gen, msg(kAck, Wire{}.u64(0)));
        } catch (std::exception const &e) {
            threw = true;
            std::printf("ctx: phase 7: notify to the dead peer threw after %.3fs: %s\n", since(t0), e.what());
        }
        CHECK(threw, "notify to a dead peer throws");
        // A new transfer to the dead peer fails too (at submit or in wait).
        try {
            auto again = agent->submitTransferRequests(
                Request{Op::kWRITE, dram({MemRange{send, 4096, 0}}), dram({MemRange{recv, 4096, 0}}), gen});
            CHECK(again->wait(-1) == State::kFAILURE, "a new transfer to the dead peer fails");
        } catch (std::exception const &e) {
            std::printf("ctx: phase 7: submit to the dead peer threw: %s\n", e.what());
        }
    }

    mb.stop();
    CHECK(mb.left() == 0, "%zu unexpected messages", mb.left());
    // One request plus one acknowledgement per phase (1, 100, 2, 3, 4).
    CHECK(mb.received() == 6, "received %ld messages, want 6 (each exactly once)", mb.received());
    agent->deregisterMemory(dram({MemRange{send, kBig, 0}}));
    agent.reset();
    return failures ? 1 : 0;
}

// ---- kVRAM ----

// runVram: two agents of this process (one as ctx, one as gen) move kVRAM
// memory of the fake CUDA driver (tests/fakecuda, loaded by the library
// through KVFERRY_CUDA_LIB): device 0 to device 1 and back, and kDRAM to
// kVRAM, byte checked through the driver. Host memory handed over as kVRAM
// is refused.
int runVram(char const *libcuda) {
    cuda_app cu;
    if (cuda_open(&cu, libcuda) != 0) return 2;
    Factory f = loadFactory();
    auto ctx = makeAgent(f, "vram_ctx"), gen = makeAgent(f, "vram_gen");
    constexpr size_t n = 6u << 20;
    const uint32_t dev1 = static_cast<uint32_t>(cu.second); // device 1, or 0 with one GPU
    uint64_t a = cuda_malloc(&cu, 0, n), back = cuda_malloc(&cu, 0, n), b = cuda_malloc(&cu, dev1, n);
    uint8_t *host = map_lazy(n);
    CHECK(a && back && b, "device memory");
    if (!a || !back || !b) return 1;
    auto vram = [](uint64_t p, size_t len, uint32_t dev) { return MemRanges{MemKind::kVRAM, {MemRange{p, len, dev}}}; };
    ctx->registerMemory(vram(a, n, 0));
    ctx->registerMemory(vram(back, n, 0));
    ctx->registerMemory(dram({MemRange{host, n, 0}}));
    gen->registerMemory(vram(b, n, dev1));
    try {
        uint8_t *stray = map_lazy(4096);
        ctx->registerMemory(vram(reinterpret_cast<uintptr_t>(stray), 4096, 0));
        CHECK(false, "host memory registered as kVRAM");
    } catch (std::exception const &e) {
        std::printf("vram: host memory as kVRAM refused: %s\n", e.what());
    }
    ctx->loadRemoteAgent("vram_gen", gen->getLocalConnectionInfo());
    std::vector<uint8_t> want(n), got(n);
    pat_fill(want.data(), n, 0xC0DA, 0);
    cuda_current(&cu, 0);
    CHECK(cu.h2d(a, want.data(), n) == 0, "h2d");
    auto run = [&](Op op, MemRanges src, char const *what) {
        auto st = ctx->submitTransferRequests(Request{op, std::move(src), vram(b, n, dev1), "vram_gen"});
        State s = st->wait(30000);
        CHECK(s == State::kSUCCESS, "%s: state %d: %s", what, static_cast<int>(s), st->getLastStatusStr().c_str());
    };
    run(Op::kWRITE, vram(a, n, 0), "kVRAM -> kVRAM");
    cuda_current(&cu, dev1);
    CHECK(cu.d2h(got.data(), b, n) == 0 && got == want, "kVRAM -> kVRAM: bytes differ");
    run(Op::kREAD, vram(back, n, 0), "kREAD into kVRAM");
    cuda_current(&cu, 0);
    CHECK(cu.d2h(got.data(), back, n) == 0 && got == want, "kREAD into kVRAM: bytes differ");
    pat_fill(host, n, 0xD7A, 0);
    std::vector<uint8_t> hwant(host, host + n);
    run(Op::kWRITE, dram({MemRange{host, n, 0}}), "kDRAM -> kVRAM");
    cuda_current(&cu, dev1);
    CHECK(cu.d2h(got.data(), b, n) == 0 && got == hwant, "kDRAM -> kVRAM: bytes differ");
    ctx->invalidateRemoteAgent("vram_gen");
    std::printf("vram: %d failures\n", failures);
    return failures ? 1 : 0;
}

// runVramHIP: TensorRT-LLM is CUDA-only, so on the fake HIP runtime
// (tests/fakecuda/fake_hip.c; KVFERRY_HIP_LIB, KVFERRY_GPU_RUNTIME=hip)
// HIP device memory handed over as kVRAM is refused with a clear error,
// while kDRAM still registers and moves.
int runVramHIP(char const *libhip) {
    cuda_app cu;
    if (cuda_open(&cu, libhip) != 0 || !cu.hip) return 2;
    Factory f = loadFactory();
    auto ctx = makeAgent(f, "hip_ctx");
    constexpr size_t n = 1u << 20;
    uint64_t a = cuda_malloc(&cu, 0, n);
    CHECK(a != 0, "HIP device memory");
    if (!a) return 1;
    try {
        ctx->registerMemory(MemRanges{MemKind::kVRAM, {MemRange{a, n, 0}}});
        CHECK(false, "HIP memory registered as kVRAM");
    } catch (std::exception const &e) {
        std::printf("vram-hip: HIP memory as kVRAM refused: %s\n", e.what());
    }
    uint8_t *host = map_lazy(n);
    ctx->registerMemory(dram({MemRange{host, n, 0}}));
    ctx->deregisterMemory(dram({MemRange{host, n, 0}}));
    cu.free(a);
    std::printf("vram-hip: %d failures\n", failures);
    return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc == 3 && std::string(argv[1]) == "vram-hip") {
        std::setvbuf(stdout, nullptr, _IOLBF, 0);
        try {
            return runVramHIP(argv[2]);
        } catch (std::exception const &e) {
            std::fprintf(stderr, "vram-hip: uncaught exception: %s\n", e.what());
            return 1;
        }
    }
    if (argc == 3 && std::string(argv[1]) == "vram") {
        std::setvbuf(stdout, nullptr, _IOLBF, 0);
        try {
            return runVram(argv[2]);
        } catch (std::exception const &e) {
            std::fprintf(stderr, "vram: uncaught exception: %s\n", e.what());
            return 1;
        }
    }
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s ctx|gen <dir> | vram <libcuda>\n", argv[0]);
        return 2;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::string role = argv[1], dir = argv[2];
    try {
        if (role == "ctx") return runCtx(dir);
        if (role == "gen") return runGen(dir);
    } catch (std::exception const &e) {
        std::fprintf(stderr, "%s: uncaught exception: %s\n", role.c_str(), e.what());
        return 1;
    }
    std::fprintf(stderr, "unknown role %s\n", role.c_str());
    return 2;
}
