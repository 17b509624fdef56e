// nixl_test.cpp - acceptance harness of the KVFERRY NIXL backend plugin.
//
// It loads build/lib/nixl/libplugin_KVFERRY.so as NIXL's plugin manager does
// and drives the engine in NIXL core's call order (nixl_core.h).
//
//   nixl_test single <plugin> [transport]
//       Two agents in one process (progress thread on and off), intra-agent
//       transfers, the plugin load/unload/load cycle and the error cases,
//       over the given transport ("auto": the engine's choice, "tcp").
//   nixl_test target <plugin> <ready-file> <MiB>
//       Agent "target" (progress thread on) registers <MiB> x 1 MiB, writes
//       its metadata to <ready-file> and serves requests sent as
//       notifications: "md:<file>" (load a peer's metadata), "fill:<seed>",
//       "verify:<seed>", "count:<msg>" (how many times msg arrived), "quit".
//       Each is answered "ack:...".
//   nixl_test initiator <plugin> <target-md> <dir> [transport]
//       Agent "initiator" (no progress thread) against a target process,
//       over the given transport ("auto": the engine's choice, "tcp").
//   nixl_test vram <plugin> <libcuda> [transport]
//       Two agents in one process move VRAM_SEG memory (devId 0 and 1) on
//       the fake CUDA driver (tests/fakecuda, loaded by the plugin through
//       KVFERRY_CUDA_LIB) or the fake HIP runtime (<libcuda> the fake
//       libamdhip64.so; KVFERRY_HIP_LIB, KVFERRY_GPU_RUNTIME=hip): VRAM to
//       VRAM, DRAM to VRAM, reads back, byte checked through the runtime,
//       over the given transport.
//   nixl_test fault <plugin> <target-md> <pid> [transport]
//       Posts a large WRITE (over the given transport: "auto", "tcp"),
//       SIGKILLs the target mid-flight, and checks that the transfer, a
//       repost and a notification all fail within deadlines.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>

#include "kvf_test.h"
#include "nixl_core.h"
#include "../fakecuda/cuda_app.h"

using namespace core;

#define CHECK_ST(expr, want)                                                    \
    do {                                                                        \
        int got_ = (expr);                                                      \
        CHECK(got_ == (want), "%s = %d, want %d", #expr, got_, (int)(want));    \
    } while (0)

static constexpr size_t MiB = 1 << 20;

static bool matches(const uint8_t *p, size_t n, uint64_t seed) {
    std::vector<uint8_t> want(n);
    pattern(want.data(), n, seed);
    return memcmp(p, want.data(), n) == 0;
}

static std::vector<Desc> blocks(uint8_t *base, size_t count, size_t size, size_t stride = 0) {
    std::vector<Desc> v;
    if (!stride) stride = size;
    for (size_t i = 0; i < count; i++) v.push_back({reinterpret_cast<uintptr_t>(base + i * stride), size, 0});
    return v;
}

static std::vector<Desc> remoteBlocks(const AgentMD &md, size_t count, size_t off = 0, size_t size = 0) {
    std::vector<Desc> v;
    for (size_t i = 0; i < count && i < md.bufs.size(); i++)
        v.push_back({md.bufs[i].addr + off, size ? size : md.bufs[i].len, md.bufs[i].dev});
    return v;
}

static Params params() { return Params{{"local_server_name", "127.0.0.1"}}; }

// Loads the plugin as getPluginParams then createBackend do: load, read the
// options, unload, load again (specs/nixl.md §1 load/unload cycles).
static bool loadPlugin(const char *path, Plugin &pl) {
    for (int cycle = 0; cycle < 2; cycle++) {
        Plugin probe;
        if (!probe.load(path)) return false;
        CHECK(strcmp(probe.table->get_plugin_name(), "KVFERRY") == 0, "name %s", probe.table->get_plugin_name());
        CHECK(strlen(probe.table->get_plugin_version()) > 0, "empty version");
        Params opts = probe.table->get_backend_options();
        for (const char *k : {"metadata", "local_server_name", "transport", "tcp_lanes", "slice_size", "timeout_ms"})
            CHECK(opts.count(k) == 1, "option %s missing", k);
        CHECK(opts["metadata"] == "P2PHANDSHAKE", "metadata default %s", opts["metadata"].c_str());
        MemList mems = probe.table->get_backend_mems();
        CHECK(mems.size() == 1 && mems[0] == KVFNIXL_DRAM_SEG, "mems");
        probe.unload();
    }
    return pl.load(path);
}

static void expectNotif(Agent &a, const std::string &from, const std::string &want) {
    bool ok;
    double t0 = now_s();
    std::string got = a.waitNotif(from, ok);
    double took = now_s() - t0;
    CHECK(ok && got == want, "%s: notification from %s = %s (ok %d, %.3fs), want %s", a.name.c_str(),
          from.c_str(), got.c_str(), ok, took, want.c_str());
}

// ---- single process ----

static void transferPair(Agent &src, uint8_t *sbuf, Agent &dst, uint8_t *dbuf, const AgentMD &dmd) {
    const size_t n = 64;
    auto local = blocks(sbuf, n, MiB);
    auto remote = remoteBlocks(dmd, n);
    // WRITE without and with notification.
    for (int notif = 0; notif < 2; notif++) {
        pattern(sbuf, n * MiB, 10 + notif);
        std::unique_ptr<Xfer> x;
        std::string msg = "write-" + std::to_string(notif);
        CHECK_ST(src.createXfer(KVFNIXL_WRITE, local, remote, dst.name, x, notif ? &msg : nullptr), KVFNIXL_SUCCESS);
        if (!x) return;
        Status s = src.post(*x);
        CHECK(s == KVFNIXL_IN_PROG || s == KVFNIXL_SUCCESS, "post %d", s);
        CHECK_ST(src.wait(*x), KVFNIXL_SUCCESS);
        if (notif) expectNotif(dst, src.name, msg);
        CHECK(matches(dbuf, n * MiB, 10 + notif), "WRITE %s->%s notif %d: data differs", src.name.c_str(),
              dst.name.c_str(), notif);
        CHECK_ST(src.release(x), KVFNIXL_SUCCESS);
    }
    // READ without and with notification.
    for (int notif = 0; notif < 2; notif++) {
        pattern(dbuf, n * MiB, 20 + notif);
        memset(sbuf, 0, n * MiB);
        std::unique_ptr<Xfer> x;
        std::string msg = "read-" + std::to_string(notif);
        CHECK_ST(src.createXfer(KVFNIXL_READ, local, remote, dst.name, x, notif ? &msg : nullptr), KVFNIXL_SUCCESS);
        if (!x) return;
        src.post(*x);
        CHECK_ST(src.wait(*x), KVFNIXL_SUCCESS);
        if (notif) expectNotif(dst, src.name, msg);
        CHECK(matches(sbuf, n * MiB, 20 + notif), "READ %s<-%s notif %d: data differs", src.name.c_str(),
              dst.name.c_str(), notif);
        CHECK_ST(src.release(x), KVFNIXL_SUCCESS);
    }
    // Ten reposts of one handle, each with "0xBEEF", each seen once.
    {
        std::unique_ptr<Xfer> x;
        std::string msg = "0xBEEF";
        CHECK_ST(src.createXfer(KVFNIXL_WRITE, local, remote, dst.name, x, &msg), KVFNIXL_SUCCESS);
        for (int k = 0; x && k < 10; k++) {
            pattern(sbuf, n * MiB, 100 + k);
            Status s = src.post(*x);
            CHECK(s == KVFNIXL_IN_PROG || s == KVFNIXL_SUCCESS, "repost %d: %d", k, s);
            CHECK_ST(src.wait(*x), KVFNIXL_SUCCESS);
            CHECK(matches(dbuf, n * MiB, 100 + k), "repost %d: data differs", k);
        }
        if (x) CHECK_ST(src.release(x), KVFNIXL_SUCCESS);
        int seen = 0;
        double end = now_s() + 20;
        while (seen < 10 && now_s() < end) {
            std::map<std::string, std::vector<std::string>> m;
            dst.getNotifs(m);
            for (auto &s : m[src.name]) seen += s == msg;
            usleep(1000);
        }
        usleep(50000);
        std::map<std::string, std::vector<std::string>> m;
        dst.getNotifs(m);
        for (auto &s : m[src.name]) seen += s == msg;
        CHECK(seen == 10, "reposts: %d notifications, want 10", seen);
    }
    // Sub-ranges of registered buffers (metadataP is the covering md).
    {
        pattern(sbuf, n * MiB, 30);
        memset(dbuf, 0, n * MiB);
        std::vector<Desc> l, r;
        for (size_t i = 0; i < 32; i++) {
            l.push_back({reinterpret_cast<uintptr_t>(sbuf) + i * MiB + 4096, 8192, 0});
            r.push_back({dmd.bufs[i].addr + 12288, 8192, 0});
        }
        std::unique_ptr<Xfer> x;
        CHECK_ST(src.createXfer(KVFNIXL_WRITE, l, r, dst.name, x), KVFNIXL_SUCCESS);
        if (x) {
            src.post(*x);
            CHECK_ST(src.wait(*x), KVFNIXL_SUCCESS);
            bool ok = true;
            for (size_t i = 0; i < 32; i++)
                ok = ok && memcmp(sbuf + i * MiB + 4096, dbuf + i * MiB + 12288, 8192) == 0 &&
                     dbuf[i * MiB + 12287] == 0 && dbuf[i * MiB + 12288 + 8192] == 0;
            CHECK(ok, "sub-range WRITE: data differs");
            CHECK_ST(src.release(x), KVFNIXL_SUCCESS);
        }
    }
}

static void releaseInFlight(Agent &src, uint8_t *sbuf, Agent &dst, const AgentMD &dmd) {
    auto local = blocks(sbuf, 64, MiB);
    auto remote = remoteBlocks(dmd, 64);
    std::unique_ptr<Xfer> x;
    // Its notification is sent only if the write finished before the
    // release (a loaded host): the later checks must not take it for theirs.
    std::string msg = "never";
    dst.allowed.insert(msg);
    CHECK_ST(src.createXfer(KVFNIXL_WRITE, local, remote, dst.name, x, &msg), KVFNIXL_SUCCESS);
    if (!x) return;
    Status s = src.post(*x);
    CHECK(s == KVFNIXL_IN_PROG || s == KVFNIXL_SUCCESS, "post %d", s);
    // A repost while in flight is refused by the backend itself.
    Status again = src.eng->postXfer(x->op, x->local, x->targets, x->remote, x->h, nullptr);
    CHECK(again == KVFNIXL_ERR_REPOST_ACTIVE || again == KVFNIXL_IN_PROG, "repost in flight: %d", again);
    if (again == KVFNIXL_IN_PROG) x->status = KVFNIXL_IN_PROG;
    double t0 = now_s();
    CHECK_ST(src.release(x), KVFNIXL_SUCCESS);
    CHECK(now_s() - t0 < 35, "release took %.1fs", now_s() - t0);
    // The engine still works afterwards.
    pattern(sbuf, 64 * MiB, 40);
    std::unique_ptr<Xfer> y;
    CHECK_ST(src.createXfer(KVFNIXL_WRITE, local, remote, dst.name, y), KVFNIXL_SUCCESS);
    if (y) {
        src.post(*y);
        CHECK_ST(src.wait(*y), KVFNIXL_SUCCESS);
        CHECK_ST(src.release(y), KVFNIXL_SUCCESS);
    }
}

static void intraAgent(Agent &a, uint8_t *buf) {
    // First half -> second half of the agent's own registered memory.
    pattern(buf, 32 * MiB, 50);
    memset(buf + 32 * MiB, 0, 32 * MiB);
    auto local = blocks(buf, 32, MiB);
    auto remote = blocks(buf + 32 * MiB, 32, MiB);
    std::unique_ptr<Xfer> x;
    std::string msg = "self-write";
    CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remote, a.name, x, &msg), KVFNIXL_SUCCESS);
    if (!x) return;
    for (int k = 0; k < 3; k++) {
        pattern(buf, 32 * MiB, 50 + k);
        a.post(*x);
        CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
        CHECK(matches(buf + 32 * MiB, 32 * MiB, 50 + k), "intra-agent WRITE %d: data differs", k);
        expectNotif(a, a.name, msg);
    }
    CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
    // READ back into the first half.
    memset(buf, 0, 32 * MiB);
    CHECK_ST(a.createXfer(KVFNIXL_READ, local, remote, a.name, x), KVFNIXL_SUCCESS);
    if (x) {
        a.post(*x);
        CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
        CHECK(matches(buf, 32 * MiB, 52), "intra-agent READ: data differs");
        CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
    }
    CHECK_ST(a.eng->genNotif(a.name, "self-notif"), KVFNIXL_SUCCESS);
    expectNotif(a, a.name, "self-notif");
}

static void errorCases(Agent &a, uint8_t *buf, Agent &b, const AgentMD &bmd) {
    auto local = blocks(buf, 1, 4096);
    // Unknown remote agent: prep, notification, remote md.
    {
        std::unique_ptr<Xfer> x;
        auto remote = remoteBlocks(bmd, 1, 0, 4096);
        BackendMD *rm = a.coverRemote(b.name, remote[0]);
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remote, "nobody", x, nullptr, true, rm), KVFNIXL_ERR_NOT_FOUND);
        CHECK_ST(a.eng->genNotif("nobody", "x"), KVFNIXL_ERR_NOT_FOUND);
        BlobDesc bd(bmd.bufs[0].addr, bmd.bufs[0].len, 0, bmd.bufs[0].blob);
        BackendMD *out = nullptr;
        CHECK_ST(a.eng->loadRemoteMD(bd, KVFNIXL_DRAM_SEG, "nobody", out), KVFNIXL_ERR_NOT_FOUND);
        CHECK_ST(a.eng->connect("nobody"), KVFNIXL_ERR_NOT_FOUND);
        CHECK_ST(a.eng->disconnect("nobody"), KVFNIXL_ERR_NOT_FOUND);
    }
    // Connection info: same again is a no-op, different is refused.
    CHECK_ST(a.eng->loadRemoteConnInfo(b.name, b.conn), KVFNIXL_SUCCESS);
    CHECK_ST(a.eng->loadRemoteConnInfo(b.name, "127.0.0.1:1"), KVFNIXL_ERR_NOT_ALLOWED);
    // Public data that does not belong to the agent, or does not cover.
    {
        BackendMD *out = nullptr;
        BlobDesc wrong(bmd.bufs[0].addr, bmd.bufs[0].len, 0, a.regs[0].blob);
        CHECK_ST(a.eng->loadRemoteMD(wrong, KVFNIXL_DRAM_SEG, b.name, out), KVFNIXL_ERR_MISMATCH);
        BlobDesc garbage(bmd.bufs[0].addr, bmd.bufs[0].len, 0, std::string("\0\1garbage", 9));
        CHECK_ST(a.eng->loadRemoteMD(garbage, KVFNIXL_DRAM_SEG, b.name, out), KVFNIXL_ERR_INVALID_PARAM);
        BlobDesc big(bmd.bufs[0].addr, bmd.bufs[0].len * 2, 0, bmd.bufs[0].blob);
        CHECK_ST(a.eng->loadRemoteMD(big, KVFNIXL_DRAM_SEG, b.name, out), KVFNIXL_ERR_MISMATCH);
    }
    // Descriptors outside the registered ranges.
    {
        std::unique_ptr<Xfer> x;
        const auto &last = bmd.bufs.back();
        std::vector<Desc> outside = {{last.addr + last.len - 1024, 4096, 0}};
        BackendMD *rm = a.coverRemote(b.name, {last.addr, 4096, 0});
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, outside, b.name, x, nullptr, true, rm),
                 KVFNIXL_ERR_INVALID_PARAM);
        // Without a covering md the backend checks the peer's descriptor.
        std::vector<Desc> far = {{last.addr + 64 * MiB, 4096, 0}};
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, far, b.name, x, nullptr, true, nullptr),
                 KVFNIXL_ERR_INVALID_PARAM);
        std::vector<Desc> badLocal = {{reinterpret_cast<uintptr_t>(buf) + 64 * MiB, 4096, 0}};
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, badLocal, remoteBlocks(bmd, 1, 0, 4096), b.name, x, nullptr, true),
                 KVFNIXL_ERR_INVALID_PARAM);
        // Mismatched list lengths.
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, blocks(buf, 2, 4096), remoteBlocks(bmd, 1, 0, 4096), b.name, x),
                 KVFNIXL_ERR_INVALID_PARAM);
    }
    // Unsupported memory, null and double release, bad md.
    {
        BackendMD *out = nullptr;
        BlobDesc vram(reinterpret_cast<uintptr_t>(buf), 4096, 0, "");
        CHECK_ST(a.eng->registerMem(vram, KVFNIXL_VRAM_SEG, out), KVFNIXL_ERR_NOT_SUPPORTED);
        CHECK_ST(a.eng->releaseReqH(nullptr), KVFNIXL_ERR_INVALID_PARAM);
        CHECK_ST(a.eng->checkXfer(nullptr), KVFNIXL_ERR_INVALID_PARAM);
        CHECK_ST(a.eng->deregisterMem(nullptr), KVFNIXL_ERR_INVALID_PARAM);
        std::unique_ptr<Xfer> x;
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remoteBlocks(bmd, 1, 0, 4096), b.name, x), KVFNIXL_SUCCESS);
        if (x) {
            // Released while in flight (the core then clears its pointer so
            // the request destructor does not release it again).
            a.post(*x);
            CHECK_ST(a.eng->releaseReqH(x->h), KVFNIXL_SUCCESS);
            x->h = nullptr;
            x->status = KVFNIXL_SUCCESS;
            CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        }
        // A never-posted request reports NOT_POSTED.
        CHECK_ST(a.createXfer(KVFNIXL_READ, local, remoteBlocks(bmd, 1, 0, 4096), b.name, x), KVFNIXL_SUCCESS);
        if (x) {
            CHECK_ST(a.eng->checkXfer(x->h), KVFNIXL_ERR_NOT_POSTED);
            CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        }
    }
    // Binary notification payloads survive: every byte value, by genNotif
    // and with a transfer. A transfer reported done has its notification
    // delivered already (the target reads it without waiting).
    {
        std::string bin("\0\xff\xfe binary \x80", 13);
        CHECK_ST(a.eng->genNotif(b.name, bin), KVFNIXL_SUCCESS);
        expectNotif(b, a.name, bin);
        std::string all;
        for (int i = 0; i < 256; i++) all.push_back(static_cast<char>(i));
        CHECK_ST(a.eng->genNotif(b.name, all), KVFNIXL_SUCCESS);
        expectNotif(b, a.name, all);
        std::unique_ptr<Xfer> x;
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remoteBlocks(bmd, 1, 0, 4096), b.name, x, &all), KVFNIXL_SUCCESS);
        if (x) {
            a.post(*x);
            CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
            std::map<std::string, std::vector<std::string>> m;
            b.getNotifs(m);
            CHECK(m[a.name].size() == 1 && m[a.name][0] == all, "transfer done, but its notification is not there yet (%zu)",
                  m[a.name].size());
            CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        }
    }
}

static int runSingle(const char *path, const std::string &transport) {
    Plugin pl;
    if (!loadPlugin(path, pl)) return 2;
    uint8_t *abuf = map_buf(64 * MiB), *bbuf = map_buf(64 * MiB);
    Agent a, b;
    Params p = params();
    p["transport"] = transport;
    CHECK_ST(a.create(pl.table, "alice", p, true), KVFNIXL_SUCCESS);
    CHECK_ST(b.create(pl.table, "bob", p, false), KVFNIXL_SUCCESS);
    if (failures) return 1;
    // Keys of other backends are ignored (NIXL's examples pass UCX's);
    // a malformed value of one of ours fails creation (initErr).
    {
        Params other = params();
        other["num_workers"] = "4";
        other["ucx_error_handling_mode"] = "none";
        Agent c;
        CHECK_ST(c.create(pl.table, "carol", other, false), KVFNIXL_SUCCESS);
        c.destroy();
        Params bad = params();
        bad["tcp_lanes"] = "lots";
        Agent d;
        CHECK(d.create(pl.table, "dave", bad, false) != KVFNIXL_SUCCESS, "malformed tcp_lanes accepted");
        if (d.eng) pl.table->destroy_engine(d.eng);
    }
    CHECK_ST(a.registerMem(blocks(abuf, 64, MiB)), KVFNIXL_SUCCESS);
    CHECK_ST(b.registerMem(blocks(bbuf, 64, MiB)), KVFNIXL_SUCCESS);
    AgentMD amd = a.localMD(), bmd = b.localMD();
    CHECK_ST(b.loadRemoteMD(amd), KVFNIXL_SUCCESS);
    CHECK_ST(a.loadRemoteMD(bmd), KVFNIXL_SUCCESS);
    double tp = now_s();
    // Stand-alone notifications both ways.
    CHECK_ST(a.eng->genNotif("bob", "hello bob"), KVFNIXL_SUCCESS);
    expectNotif(b, "alice", "hello bob");
    CHECK_ST(b.eng->genNotif("alice", "hello alice"), KVFNIXL_SUCCESS);
    expectNotif(a, "bob", "hello alice");

    fprintf(stderr, "single: alice -> bob\n");
    transferPair(a, abuf, b, bbuf, bmd);
    fprintf(stderr, "single: bob -> alice (%.1fs)\n", now_s() - tp);
    transferPair(b, bbuf, a, abuf, amd);
    fprintf(stderr, "single: release in flight (%.1fs)\n", now_s() - tp);
    releaseInFlight(a, abuf, b, bmd);
    fprintf(stderr, "single: intra-agent (%.1fs)\n", now_s() - tp);
    intraAgent(a, abuf);
    intraAgent(b, bbuf);
    fprintf(stderr, "single: error cases (%.1fs)\n", now_s() - tp);
    errorCases(a, abuf, b, bmd);
    // Re-connect after invalidation: the same info loads again.
    CHECK_ST(a.invalidate("bob"), KVFNIXL_SUCCESS);
    CHECK_ST(a.loadRemoteMD(bmd), KVFNIXL_SUCCESS);
    {
        std::unique_ptr<Xfer> x;
        pattern(abuf, MiB, 60);
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, blocks(abuf, 1, MiB), remoteBlocks(bmd, 1), "bob", x), KVFNIXL_SUCCESS);
        if (x) {
            a.post(*x);
            CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
            CHECK(matches(bbuf, MiB, 60), "after reconnect: data differs");
            a.release(x);
        }
    }
    a.destroy();
    b.destroy();
    pl.unload();
    return failures ? 1 : 0;
}

// ---- two processes ----

static int runTarget(const char *path, const char *ready, size_t mib) {
    Plugin pl;
    if (!pl.load(path)) return 2;
    uint8_t *buf = map_buf(mib * MiB);
    Agent t;
    if (t.create(pl.table, "target", params(), true) != KVFNIXL_SUCCESS) return 2;
    if (t.registerMem(blocks(buf, mib, MiB)) != KVFNIXL_SUCCESS) return 2;
    if (!writeMD(t.localMD(), ready)) return 2;
    std::map<std::string, int> counts;
    double end = now_s() + 600;
    bool quit = false;
    while (!quit && now_s() < end) {
        NotifList l;
        if (t.eng->getNotifs(l) != KVFNIXL_SUCCESS) return 2;
        for (auto &[from, msg] : l) {
            std::string reply;
            if (msg.rfind("md:", 0) == 0) {
                AgentMD md;
                Status s = readMD(msg.substr(3), md) ? t.loadRemoteMD(md) : KVFNIXL_ERR_INVALID_PARAM;
                reply = "ack:md:" + std::to_string(s);
            } else if (msg.rfind("fill:", 0) == 0) {
                pattern(buf, mib * MiB, std::stoull(msg.substr(5)));
                reply = "ack:fill";
            } else if (msg.rfind("verify:", 0) == 0) {
                reply = matches(buf, mib * MiB, std::stoull(msg.substr(7))) ? "ack:verify:ok" : "ack:verify:bad";
            } else if (msg.rfind("count:", 0) == 0) {
                reply = "ack:count:" + std::to_string(counts[msg.substr(6)]);
            } else if (msg == "quit") {
                reply = "ack:quit";
                quit = true;
            } else {
                counts[msg]++;
                continue;
            }
            Status s = t.eng->genNotif(from, reply);
            if (s != KVFNIXL_SUCCESS) fprintf(stderr, "target: reply to %s: %d\n", from.c_str(), s);
        }
        usleep(200);
    }
    t.destroy();
    pl.unload();
    return quit ? 0 : 3;
}

static std::string ask(Agent &a, const std::string &msg) {
    if (a.eng->genNotif("target", msg) != KVFNIXL_SUCCESS) return "send failed";
    bool ok;
    std::string r = a.waitNotif("target", ok, 60);
    return ok ? r : "timeout";
}

static int runInitiator(const char *path, const char *mdfile, const char *dir, const std::string &transport) {
    Plugin pl;
    if (!loadPlugin(path, pl)) return 2;
    const size_t n = 64;
    uint8_t *buf = map_buf(n * MiB);
    Agent a;
    Params p = params();
    p["transport"] = transport;
    CHECK_ST(a.create(pl.table, "initiator", p, false), KVFNIXL_SUCCESS);
    CHECK_ST(a.registerMem(blocks(buf, n, MiB)), KVFNIXL_SUCCESS);
    AgentMD tmd;
    if (!readMD(mdfile, tmd) || failures) return 2;
    CHECK_ST(a.loadRemoteMD(tmd), KVFNIXL_SUCCESS);
    std::string mine = std::string(dir) + "/initiator.md";
    writeMD(a.localMD(), mine);
    CHECK(ask(a, "md:" + mine) == "ack:md:0", "target did not load our metadata");
    auto local = blocks(buf, n, MiB);
    auto remote = remoteBlocks(tmd, n);
    // WRITE and READ, with and without notification.
    for (int notif = 0; notif < 2; notif++) {
        std::string msg = "w" + std::to_string(notif);
        pattern(buf, n * MiB, 1 + notif);
        std::unique_ptr<Xfer> x;
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remote, "target", x, notif ? &msg : nullptr), KVFNIXL_SUCCESS);
        if (!x) break;
        a.post(*x);
        CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
        CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        CHECK(ask(a, "verify:" + std::to_string(1 + notif)) == "ack:verify:ok", "WRITE notif %d: data", notif);
        std::string want = "ack:count:" + std::to_string(notif);
        std::string got = ask(a, "count:" + msg);
        CHECK(got == want, "WRITE notif %d: %s, want %s", notif, got.c_str(), want.c_str());
    }
    for (int notif = 0; notif < 2; notif++) {
        std::string msg = "r" + std::to_string(notif);
        CHECK(ask(a, "fill:" + std::to_string(3 + notif)) == "ack:fill", "fill");
        memset(buf, 0, n * MiB);
        std::unique_ptr<Xfer> x;
        CHECK_ST(a.createXfer(KVFNIXL_READ, local, remote, "target", x, notif ? &msg : nullptr), KVFNIXL_SUCCESS);
        if (!x) break;
        a.post(*x);
        CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
        CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        CHECK(matches(buf, n * MiB, 3 + notif), "READ notif %d: data differs", notif);
        std::string want = "ack:count:" + std::to_string(notif);
        CHECK(ask(a, "count:" + msg) == want, "READ notif %d: notification count", notif);
    }
    // Ten reposts of one handle with "0xBEEF": ten notifications.
    {
        std::string msg = "0xBEEF";
        std::unique_ptr<Xfer> x;
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remote, "target", x, &msg), KVFNIXL_SUCCESS);
        for (int k = 0; x && k < 10; k++) {
            pattern(buf, n * MiB, 100 + k);
            Status s = a.post(*x);
            CHECK(s == KVFNIXL_IN_PROG || s == KVFNIXL_SUCCESS, "repost %d: %d", k, s);
            CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
            CHECK(ask(a, "verify:" + std::to_string(100 + k)) == "ack:verify:ok", "repost %d: data", k);
        }
        if (x) CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        std::string got = ask(a, "count:0xBEEF");
        CHECK(got == "ack:count:10", "reposts: %s", got.c_str());
    }
    // Release during flight, then the engine still works.
    {
        std::unique_ptr<Xfer> x;
        std::string msg = "cancelled";
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remote, "target", x, &msg), KVFNIXL_SUCCESS);
        if (x) {
            a.post(*x);
            CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        }
        pattern(buf, n * MiB, 7);
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, local, remote, "target", x), KVFNIXL_SUCCESS);
        if (x) {
            a.post(*x);
            CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
            CHECK_ST(a.release(x), KVFNIXL_SUCCESS);
        }
        CHECK(ask(a, "verify:7") == "ack:verify:ok", "after release in flight: data");
        CHECK(ask(a, "count:cancelled") == "ack:count:0", "a released transfer notified");
    }
    // Error cases against the remote process.
    {
        std::unique_ptr<Xfer> x;
        auto one = remoteBlocks(tmd, 1, 0, 4096);
        BackendMD *rm = a.coverRemote("target", one[0]);
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, blocks(buf, 1, 4096), one, "ghost", x, nullptr, true, rm),
                 KVFNIXL_ERR_NOT_FOUND);
        const auto &last = tmd.bufs.back();
        std::vector<Desc> outside = {{last.addr + last.len - 100, 4096, 0}};
        CHECK_ST(a.createXfer(KVFNIXL_WRITE, blocks(buf, 1, 4096), outside, "target", x, nullptr, true,
                              a.coverRemote("target", {last.addr, 1, 0})),
                 KVFNIXL_ERR_INVALID_PARAM);
    }
    CHECK(ask(a, "quit") == "ack:quit", "quit");
    a.destroy();
    pl.unload();
    return failures ? 1 : 0;
}

static int runFault(const char *path, const char *mdfile, pid_t pid, const std::string &transport) {
    alarm(240); // a hang is a failure: SIGALRM ends the process
    Plugin pl;
    if (!pl.load(path)) return 2;
    AgentMD tmd;
    if (!readMD(mdfile, tmd)) return 2;
    const size_t n = tmd.bufs.size();
    uint8_t *buf = map_buf(n * MiB);
    Agent a;
    Params p = params();
    p["timeout_ms"] = "10000";
    p["transport"] = transport;
    CHECK_ST(a.create(pl.table, "faulter", p, false), KVFNIXL_SUCCESS);
    CHECK_ST(a.registerMem(blocks(buf, n, MiB)), KVFNIXL_SUCCESS);
    CHECK_ST(a.loadRemoteMD(tmd), KVFNIXL_SUCCESS);
    if (failures) return 1;
    std::unique_ptr<Xfer> x;
    std::string msg = "doomed";
    CHECK_ST(a.createXfer(KVFNIXL_WRITE, blocks(buf, n, MiB), remoteBlocks(tmd, n), "target", x, &msg),
             KVFNIXL_SUCCESS);
    if (!x) return 1;
    Status s = a.post(*x);
    CHECK(s == KVFNIXL_IN_PROG, "post %d", s);
    kill(pid, SIGKILL);
    double t0 = now_s();
    s = a.wait(*x, 90);
    double took = now_s() - t0;
    fprintf(stderr, "fault (%s): transfer ended %d after %.2fs\n", transport.c_str(), s, took);
    CHECK(s < 0, "transfer to a killed peer: %d", s);
    // A repost and a notification fail too, within deadlines.
    t0 = now_s();
    Status r = a.post(*x);
    if (r == KVFNIXL_IN_PROG) r = a.wait(*x, 90);
    fprintf(stderr, "fault: repost ended %d after %.2fs\n", r, now_s() - t0);
    CHECK(r < 0, "repost to a killed peer: %d", r);
    t0 = now_s();
    Status g = a.eng->genNotif("target", "anyone?");
    fprintf(stderr, "fault: notification %d after %.2fs\n", g, now_s() - t0);
    CHECK(g < 0, "notification to a killed peer: %d", g);
    a.release(x);
    a.destroy();
    pl.unload();
    return failures ? 1 : 0;
}

// Creates a backend with a malformed parameter and nothing else, so that
// run.sh can read what the failure logs at the default level.
static int runBadParam(const char *path) {
    Plugin pl;
    if (!pl.load(path)) return 2;
    Params bad = params();
    bad["num_workers"] = "4";
    bad["tcp_lanes"] = "lots";
    Agent a;
    CHECK(a.create(pl.table, "erin", bad, false) != KVFNIXL_SUCCESS, "malformed tcp_lanes accepted");
    if (a.eng) pl.table->destroy_engine(a.eng);
    pl.unload();
    return failures ? 1 : 0;
}

// A plugin NIXL loaded under another file name (libplugin_BOGUS.so) is
// created as backend BOGUS: it works, and says so (run.sh checks the log).
static int runBogusName(const char *path) {
    Plugin pl;
    if (!pl.load(path)) return 2;
    for (int i = 0; i < 2; i++) { // warned once per name
        Agent a;
        CHECK(a.create(pl.table, "bogus" + std::to_string(i), params(), false, "BOGUS") == KVFNIXL_SUCCESS,
              "creation under another backend name failed");
        a.destroy();
    }
    Agent k;
    CHECK(k.create(pl.table, "plain", params(), false) == KVFNIXL_SUCCESS, "creation as KVFERRY failed");
    k.destroy();
    pl.unload();
    return failures ? 1 : 0;
}

// ---- VRAM ----

static int runVram(const char *path, const char *libcuda, const std::string &transport) {
    cuda_app cu;
    if (cuda_open(&cu, libcuda) != 0) return 2;
    Plugin pl;
    if (!pl.load(path)) return 2;
    MemList mems = pl.table->get_backend_mems();
    CHECK(mems.size() == 2 && mems[0] == KVFNIXL_DRAM_SEG && mems[1] == KVFNIXL_VRAM_SEG, "mems with a driver");
    const size_t n = 8, blk = MiB;
    uint64_t av = cuda_malloc(&cu, 0, n * blk), back = cuda_malloc(&cu, 0, n * blk);
    auto vmm = reinterpret_cast<void *(*)(ssize_t, int, void *)>(dlsym(pl.dl, "kvferry_cuda_malloc"));
    CHECK(vmm != nullptr, "kvferry_cuda_malloc");
    if (!vmm || !av || !back) return 1;
    const int dev1 = cu.second; // device 1, or 0 on a machine with one GPU
    uint64_t bv = reinterpret_cast<uint64_t>(vmm(n * blk, dev1, nullptr));
    uint8_t *host = map_buf(n * blk);
    Agent a, b;
    Params p = params();
    p["transport"] = transport;
    CHECK_ST(a.create(pl.table, "alice", p, true), KVFNIXL_SUCCESS);
    CHECK_ST(b.create(pl.table, "bob", p, false), KVFNIXL_SUCCESS);
    if (failures) return 1;
    auto vblocks = [](uint64_t base, size_t count, uint64_t dev) {
        std::vector<Desc> v;
        for (size_t i = 0; i < count; i++) v.push_back({static_cast<uintptr_t>(base + i * MiB), MiB, dev});
        return v;
    };
    CHECK_ST(a.registerMem(vblocks(av, n, 0), KVFNIXL_VRAM_SEG), KVFNIXL_SUCCESS);
    CHECK_ST(a.registerMem(vblocks(back, n, 0), KVFNIXL_VRAM_SEG), KVFNIXL_SUCCESS);
    CHECK_ST(a.registerMem(blocks(host, n, MiB)), KVFNIXL_SUCCESS);
    CHECK_ST(b.registerMem(vblocks(bv, n, dev1), KVFNIXL_VRAM_SEG), KVFNIXL_SUCCESS);
    // Host memory handed over as VRAM is refused.
    {
        BackendMD *out = nullptr;
        uint8_t *stray = map_buf(MiB);
        BlobDesc bd(reinterpret_cast<uintptr_t>(stray), MiB, 0, "");
        CHECK_ST(a.eng->registerMem(bd, KVFNIXL_VRAM_SEG, out), KVFNIXL_ERR_INVALID_PARAM);
    }
    AgentMD bmd = b.localMD();
    CHECK_ST(a.loadRemoteMD(bmd, KVFNIXL_VRAM_SEG), KVFNIXL_SUCCESS);
    std::vector<uint8_t> want(n * blk), got(n * blk);
    auto remote = remoteBlocks(bmd, n);
    auto run = [&](XferOp op, const std::vector<Desc> &local, const char *what) {
        std::unique_ptr<Xfer> x;
        std::string msg = std::string("vram-") + what;
        CHECK_ST(a.createXfer(op, local, remote, "bob", x, op == KVFNIXL_WRITE ? &msg : nullptr), KVFNIXL_SUCCESS);
        if (!x) return;
        Status s = a.post(*x);
        CHECK(s == KVFNIXL_IN_PROG || s == KVFNIXL_SUCCESS, "post %s: %d", what, s);
        CHECK_ST(a.wait(*x), KVFNIXL_SUCCESS);
        a.eng->releaseReqH(x->h);
        x->h = nullptr;
        if (op == KVFNIXL_WRITE) expectNotif(b, "alice", msg);
    };
    // VRAM (device 0) -> VRAM (device 1, VMM), then READ back into VRAM.
    pattern(want.data(), want.size(), 77);
    cuda_current(&cu, 0);
    CHECK(cu.h2d(av, want.data(), want.size()) == 0, "h2d");
    run(KVFNIXL_WRITE, vblocks(av, n, 0), "vram");
    cuda_current(&cu, dev1);
    CHECK(cu.d2h(got.data(), bv, got.size()) == 0 && got == want, "VRAM -> VRAM: bytes differ");
    run(KVFNIXL_READ, vblocks(back, n, 0), "read");
    cuda_current(&cu, 0);
    CHECK(cu.d2h(got.data(), back, got.size()) == 0 && got == want, "READ into VRAM: bytes differ");
    // DRAM -> VRAM, READ back into DRAM.
    pattern(host, n * blk, 78);
    std::vector<uint8_t> hwant(host, host + n * blk);
    run(KVFNIXL_WRITE, blocks(host, n, MiB), "dram");
    cuda_current(&cu, dev1);
    CHECK(cu.d2h(got.data(), bv, got.size()) == 0 && got == hwant, "DRAM -> VRAM: bytes differ");
    memset(host, 0, n * blk);
    run(KVFNIXL_READ, blocks(host, n, MiB), "read-dram");
    CHECK(memcmp(host, hwant.data(), n * blk) == 0, "READ into DRAM: bytes differ");
    a.invalidate("bob");
    a.deregisterAll();
    b.deregisterAll();
    a.destroy();
    b.destroy();
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    setvbuf(stderr, nullptr, _IONBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: nixl_test single|target|initiator|fault|badparam|bogusname|vram <plugin> ...\n");
        return 2;
    }
    std::string mode = argv[1];
    int rc = 2;
    if (mode == "single" && (argc == 3 || argc == 4)) {
        rc = runSingle(argv[2], argc == 4 ? argv[3] : "auto");
    } else if (mode == "target" && argc == 5) {
        rc = runTarget(argv[2], argv[3], std::stoul(argv[4]));
    } else if (mode == "initiator" && (argc == 5 || argc == 6)) {
        rc = runInitiator(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : "auto");
    } else if (mode == "vram" && (argc == 4 || argc == 5)) {
        rc = runVram(argv[2], argv[3], argc == 5 ? argv[4] : "auto");
    } else if (mode == "badparam" && argc == 3) {
        rc = runBadParam(argv[2]);
    } else if (mode == "bogusname" && argc == 3) {
        rc = runBogusName(argv[2]);
    } else if (mode == "fault" && (argc == 5 || argc == 6)) {
        rc = runFault(argv[2], argv[3], static_cast<pid_t>(std::stol(argv[4])), argc == 6 ? argv[5] : "auto");
    }
    fprintf(stderr, "%s: %s (%d failures)\n", mode.c_str(), rc == 0 ? "PASS" : "FAIL", failures);
    return rc;
}
