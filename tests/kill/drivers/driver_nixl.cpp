// Kill-matrix driver for the NIXL plugin (tests/kill): an agent of the
// KVFERRY backend loaded as NIXL core loads it (tests/nixl/nixl_core.h),
// answering the commands of tests/kill's protocol with one JSON line each.
//
//   driver_nixl <plugin> <metadata> <name> <MiB> <md-file>
//       Agent <name> with <MiB> registered as 1 MiB descriptors; writes its
//       metadata to <md-file>; prints {"ok","info":<md-file>,"addr","pid"}.
//         connect <md-file>             loadRemoteMD of a peer
//         batch <addr> <bytes> <seed>   WRITE [0,n) to the peer, READ it
//                                       back into [n,2n), compare
//         stats | unreg | quit
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <iostream>
#include <sstream>

#include "kvf_test.h"
#include "nixl_core.h"

using namespace core;

static constexpr size_t MiB = 1 << 20;

// One transfer of the whole list; "completed", "failed" or "hang".
static std::string xfer(Agent &a, XferOp op, const std::vector<Desc> &local, const std::vector<Desc> &remote,
                        const std::string &peer) {
    std::unique_ptr<Xfer> x;
    if (a.createXfer(op, local, remote, peer, x) != KVFNIXL_SUCCESS || !x) return "failed";
    Status s = a.post(*x);
    if (s == KVFNIXL_IN_PROG) s = a.wait(*x, 60);
    std::string r = s == KVFNIXL_SUCCESS ? "completed" : s == KVFNIXL_IN_PROG ? "hang" : "failed";
    if (a.release(x) != KVFNIXL_SUCCESS && r == "completed") r = "failed";
    return r;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: driver_nixl <plugin> <metadata> <name> <MiB> <md-file>\n");
        return 2;
    }
    Plugin pl;
    if (!pl.load(argv[1])) return 2;
    std::string name = argv[3], mdfile = argv[5];
    size_t mib = strtoull(argv[4], nullptr, 0);
    Params p{{"local_server_name", strcmp(argv[2], "P2PHANDSHAKE") == 0 ? "127.0.0.1" : name}, {"metadata", argv[2]}};
    Agent a;
    if (a.create(pl.table, name, p, true) != KVFNIXL_SUCCESS) {
        printf("{\"ok\":false,\"err\":\"createBackend\"}\n");
        return 1;
    }
    uint8_t *buf = map_buf(2 * mib * MiB);
    std::vector<Desc> mine;
    for (size_t i = 0; i < 2 * mib; i++) mine.push_back({reinterpret_cast<uintptr_t>(buf + i * MiB), MiB, 0});
    if (a.registerMem(mine) != KVFNIXL_SUCCESS || !writeMD(a.localMD(), mdfile)) {
        printf("{\"ok\":false,\"err\":\"registerMem\"}\n");
        return 1;
    }
    printf("{\"ok\":true,\"info\":\"%s\",\"addr\":%" PRIu64 ",\"pid\":%d}\n", mdfile.c_str(), (uint64_t)(uintptr_t)buf,
           getpid());
    fflush(stdout);
    AgentMD peer;
    kvf_serve([&](const std::string &cmd, std::istringstream &in) {
        double t0 = now_s();
        if (cmd == "connect") {
            std::string f;
            in >> f;
            peer = AgentMD{};
            bool ok = readMD(f, peer) && a.loadRemoteMD(peer) == KVFNIXL_SUCCESS;
            printf("{\"ok\":%s,\"ms\":%.1f}\n", ok ? "true" : "false", (now_s() - t0) * 1e3);
        } else if (cmd == "batch") {
            uint64_t addr = 0, n = 0, seed = 0;
            in >> addr >> n >> seed;
            size_t k = std::min<size_t>(n / MiB, mib);
            // The peer's descriptors from addr on, k of them; ours [0,k) and [mib, mib+k).
            std::vector<Desc> remote, src, dst;
            for (auto &b : peer.bufs)
                if (b.addr >= addr && remote.size() < k) remote.push_back({b.addr, b.len, b.dev});
            for (size_t i = 0; i < remote.size(); i++) {
                src.push_back(mine[i]);
                dst.push_back(mine[mib + i]);
            }
            pattern(buf, k * MiB, seed);
            memset(buf + mib * MiB, 0, k * MiB);
            std::string st = xfer(a, KVFNIXL_WRITE, src, remote, peer.name);
            bool match = false;
            if (st == "completed") {
                st = xfer(a, KVFNIXL_READ, dst, remote, peer.name);
                match = st == "completed" && memcmp(buf, buf + mib * MiB, k * MiB) == 0;
            }
            printf("{\"ok\":%s,\"state\":\"%s\",\"match\":%s,\"ms\":%.1f}\n", match ? "true" : "false", st.c_str(),
                   match ? "true" : "false", (now_s() - t0) * 1e3);
        } else if (cmd == "stats") {
            printf("{\"ok\":true,\"fds\":%d,\"goroutines\":%ld}\n", count_fds(), dl_goroutines(pl.dl));
        } else if (cmd == "unreg") {
            a.deregisterAll();
            printf("{\"ok\":true,\"ms\":%.1f}\n", (now_s() - t0) * 1e3);
        } else {
            printf("{\"ok\":false,\"err\":\"unknown command\"}\n");
        }
    });
    a.destroy();
    pl.unload();
    return 0;
}
