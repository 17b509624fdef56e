// nixl_agent_demo: kvferry as a NIXL backend ("KVFERRY"), two agents in two
// processes of this host.
//
// A real program uses NIXL's nixlAgent and lets NIXL find the plugin:
//
//     export NIXL_PLUGIN_DIR=$PWD/build/lib/nixl     # libplugin_KVFERRY.so
//     nixlAgent agent("initiator", nixlAgentConfig(true));
//     nixl_b_params_t params; nixl_mem_list_t mems;
//     agent.getPluginParams("KVFERRY", mems, params);
//     params["local_server_name"] = "10.0.0.5";
//     nixlBackendH *kvferry;
//     agent.createBackend("KVFERRY", params, kvferry);
//     agent.registerMem(dlist);                      // nixl_reg_dlist_t
//     agent.getLocalMD(md);  /* to the peer */  agent.loadRemoteMD(peer_md, peer_name);
//     agent.createXferReq(NIXL_WRITE, local, remote, "target", req, &extra);
//     agent.postXferReq(req);  while (agent.getXferStatus(req) == NIXL_IN_PROG) {}
//     agent.getNotifs(notifs);  agent.genNotif("target", "bye");
//
// NIXL is not needed to build or run this file: it loads
// build/lib/nixl/libplugin_KVFERRY.so as NIXL's plugin manager does and
// makes the backend calls nixlAgent makes for each of those lines, in the
// same order, through core::Agent (tests/nixl/nixl_core.h, compiled against
// kvferry's own declarations of NIXL's plugin ABI, plugin/nixl_abi.h). The
// comments name the nixlAgent call each step stands for.
//
// The target registers 16 MiB and publishes its metadata; the initiator
// writes a pattern into it with a notification, the target checks every byte
// and answers, and the initiator reads the bytes back and checks them too.
//
// Build: g++ -std=c++20 -Iplugin -Itests/nixl examples/nixl/nixl_agent_demo.cpp -ldl
// Run:   ./a.out [build/lib/nixl/libplugin_KVFERRY.so]
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nixl_core.h"

using namespace core;

namespace {

constexpr size_t kBlocks = 16, kBlock = 1 << 20; // 16 descriptors of 1 MiB
constexpr double kWaitS = 60;                     // bound of every wait

uint8_t *mapBuf(size_t n) {
    void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return static_cast<uint8_t *>(p);
}

void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = static_cast<uint8_t>((i * 131) ^ (i >> 12));
}

bool matches(const uint8_t *p, size_t n) {
    std::vector<uint8_t> want(n);
    fill(want.data(), n);
    return memcmp(p, want.data(), n) == 0;
}

// The list of kBlocks descriptors covering [base, base + kBlocks*kBlock).
std::vector<Desc> blocks(uintptr_t base) {
    std::vector<Desc> v;
    for (size_t i = 0; i < kBlocks; i++) v.push_back({base + i * kBlock, kBlock, 0});
    return v;
}

// nixlAgent(name) + getPluginParams("KVFERRY") + createBackend("KVFERRY").
bool startAgent(Plugin &pl, const char *path, Agent &a, const std::string &name, bool progressThread) {
    if (!pl.load(path)) return false;
    Params params = pl.table->get_backend_options(); // the defaults, as getPluginParams
    params["local_server_name"] = "127.0.0.1";       // this host's address to advertise
    Status s = a.create(pl.table, name, params, progressThread);
    if (s != KVFNIXL_SUCCESS) {
        fprintf(stderr, "[%s] createBackend(KVFERRY) failed: %d\n", name.c_str(), s);
        return false;
    }
    return true;
}

// Waits for a file the other process writes (its metadata), kWaitS at most.
bool readPeerMD(const std::string &path, AgentMD &md) {
    for (double end = now_s() + kWaitS; now_s() < end; usleep(10000))
        if (access(path.c_str(), F_OK) == 0) return readMD(path, md);
    fprintf(stderr, "no %s within %.0f s\n", path.c_str(), kWaitS);
    return false;
}

int target(const char *plugin, const std::string &dir) {
    Plugin pl;
    Agent a;
    if (!startAgent(pl, plugin, a, "target", true)) return 1;
    uint8_t *buf = mapBuf(kBlocks * kBlock);
    // registerMem(dlist): one DRAM descriptor of 16 MiB.
    if (a.registerMem({{reinterpret_cast<uintptr_t>(buf), kBlocks * kBlock, 0}}) != KVFNIXL_SUCCESS) return 1;
    // getLocalMD: name, connection info and the registered descriptors. Any
    // channel carries it (NIXL's sendLocalMD/fetchRemoteMD, etcd, ...): here
    // a file.
    if (!writeMD(a.localMD(), dir + "/target.md")) return 1;
    printf("[target] backend KVFERRY at %s, 16 MiB registered\n", a.conn.c_str());

    // getNotifs: the initiator's write carries a notification, which arrives
    // after the data.
    bool ok;
    std::string m = a.waitNotif("initiator", ok, kWaitS);
    if (!ok || m != "written") {
        fprintf(stderr, "[target] no notification from the initiator (got \"%s\")\n", m.c_str());
        return 1;
    }
    bool good = matches(buf, kBlocks * kBlock);
    printf("[target] notification \"%s\" from initiator: %s\n", m.c_str(),
           good ? "all 16 MiB match" : "MISMATCH");

    // loadRemoteMD(initiator) so that genNotif can reach it, then answer.
    AgentMD peer;
    if (!readPeerMD(dir + "/initiator.md", peer) || a.loadRemoteMD(peer) != KVFNIXL_SUCCESS) return 1;
    if (a.eng->genNotif("initiator", good ? "ok" : "bad") != KVFNIXL_SUCCESS) return 1;

    // Keep the memory registered until the initiator has read it back.
    m = a.waitNotif("initiator", ok, kWaitS);
    a.destroy(); // ~nixlAgent: deregisterMem, invalidate remotes, destroy_engine
    pl.unload();
    return good && ok && m == "bye" ? 0 : 1;
}

// Runs one transfer of every block: createXferReq, postXferReq, polling
// getXferStatus, releaseXferReq. Returns the seconds it took, or -1.
double transfer(Agent &a, XferOp op, uint8_t *local, const AgentMD &remote, const std::string *notif) {
    std::unique_ptr<Xfer> x;
    double t0 = now_s();
    Status s = a.createXfer(op, blocks(reinterpret_cast<uintptr_t>(local)), blocks(remote.bufs[0].addr), "target", x,
                            notif);
    if (s == KVFNIXL_SUCCESS) s = a.post(*x);
    if (s == KVFNIXL_IN_PROG || s == KVFNIXL_SUCCESS) s = a.wait(*x, kWaitS);
    double dt = now_s() - t0;
    if (x) a.release(x);
    if (s != KVFNIXL_SUCCESS) {
        fprintf(stderr, "[initiator] %s failed: %d\n", op == KVFNIXL_WRITE ? "WRITE" : "READ", s);
        return -1;
    }
    return dt;
}

// The target process, and its exit status once it is reaped.
struct Child {
    pid_t pid;
    int status = 0;
    bool reaped = false;

    // Waits for it to exit (kWaitS at most, then kills it).
    void wait() {
        for (double end = now_s() + kWaitS; !reaped && waitpid(pid, &status, WNOHANG) == 0; usleep(10000)) {
            if (now_s() > end) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                break;
            }
        }
        reaped = true;
    }
};

int initiator(const char *plugin, const std::string &dir, Child &target) {
    Plugin pl;
    Agent a;
    // No progress thread: the backend progresses on its own either way.
    if (!startAgent(pl, plugin, a, "initiator", false)) return 1;
    uint8_t *src = mapBuf(kBlocks * kBlock), *back = mapBuf(kBlocks * kBlock);
    fill(src, kBlocks * kBlock);
    if (a.registerMem({{reinterpret_cast<uintptr_t>(src), kBlocks * kBlock, 0},
                       {reinterpret_cast<uintptr_t>(back), kBlocks * kBlock, 0}}) != KVFNIXL_SUCCESS)
        return 1;
    if (!writeMD(a.localMD(), dir + "/initiator.md")) return 1;

    // loadRemoteMD(target's metadata): connection info, then its descriptors.
    AgentMD peer;
    if (!readPeerMD(dir + "/target.md", peer) || a.loadRemoteMD(peer) != KVFNIXL_SUCCESS) return 1;

    // WRITE 16 x 1 MiB into the target, with a notification.
    std::string msg = "written";
    double w = transfer(a, KVFNIXL_WRITE, src, peer, &msg);
    if (w < 0) return 1;
    printf("[initiator] WRITE 16 x 1 MiB with notification: %.2f ms, %.2f GB/s\n", w * 1e3,
           kBlocks * kBlock / w / 1e9);
    bool ok;
    std::string answer = a.waitNotif("target", ok, kWaitS);
    printf("[initiator] the target answered \"%s\"\n", answer.c_str());

    // READ it back and compare.
    double r = transfer(a, KVFNIXL_READ, back, peer, nullptr);
    bool same = r >= 0 && memcmp(src, back, kBlocks * kBlock) == 0;
    if (r >= 0)
        printf("[initiator] READ 16 x 1 MiB back: %.2f ms, %.2f GB/s, %s\n", r * 1e3, kBlocks * kBlock / r / 1e9,
               same ? "all bytes match" : "MISMATCH");
    a.eng->genNotif("target", "bye");
    // Let the target tear down first: its agent tells this one when the
    // memory this one read from goes away.
    target.wait();
    a.destroy();
    pl.unload();
    return ok && answer == "ok" && same ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IONBF, 0);
    const char *plugin = argc > 1 ? argv[1] : "build/lib/nixl/libplugin_KVFERRY.so";
    char tmpl[] = "/tmp/nixl_agent_demo.XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    std::string dir = tmpl;
    // Fork before either side loads the plugin: each process then starts
    // its own Go runtime inside the library.
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) _exit(target(plugin, dir));
    Child target{pid};
    int rc = initiator(plugin, dir, target);
    if (!target.reaped) kill(pid, SIGKILL); // the initiator gave up early
    target.wait();
    int status = target.status;
    for (const char *f : {"/target.md", "/initiator.md"}) unlink((dir + f).c_str());
    rmdir(dir.c_str());
    bool targetOK = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (rc != 0 || !targetOK) {
        fprintf(stderr, "nixl_agent_demo: FAILED (initiator %d, target %s)\n", rc, targetOK ? "ok" : "failed");
        return 1;
    }
    printf("nixl_agent_demo: OK\n");
    return 0;
}
