// nixl_core.h - a small stand-in for NIXL core, used by the KVFERRY plugin
// harness and bench. It loads a backend plugin the way NIXL's plugin manager
// does (dlopen RTLD_NOW|RTLD_LOCAL|RTLD_NODELETE, nixl_plugin_init, api_version
// check, nixl_plugin_fini before dlclose) and replays the engine calls of
// nixlAgent in NIXL's order (shared/specs/nixl.md §3), compiled against
// kvferry's own ABI declarations (plugin/nixl_abi.h).
#ifndef KVF_TEST_NIXL_CORE_H
#define KVF_TEST_NIXL_CORE_H

#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../c/kvf_test.h"
#include "nixl_abi.h"

namespace core {

using namespace kvfnixl;

// Plugin is one loaded libplugin_<NAME>.so.
struct Plugin {
    void *dl = nullptr;
    PluginTable *table = nullptr;
    void (*fini)() = nullptr;

    // load: as nixlPluginManager::loadPluginFromPath.
    bool load(const std::string &path) {
        dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (!dl) {
            fprintf(stderr, "dlopen %s: %s\n", path.c_str(), dlerror());
            return false;
        }
        auto init = reinterpret_cast<PluginTable *(*)()>(dlsym(dl, "nixl_plugin_init"));
        fini = reinterpret_cast<void (*)()>(dlsym(dl, "nixl_plugin_fini"));
        if (!init) {
            fprintf(stderr, "no nixl_plugin_init in %s\n", path.c_str());
            dlclose(dl);
            return false;
        }
        table = init();
        if (!table || table->api_version != kPluginApiVersion) {
            fprintf(stderr, "plugin api version mismatch\n");
            if (fini) fini();
            dlclose(dl);
            return false;
        }
        return true;
    }

    void unload() {
        if (fini) fini();
        if (dl) dlclose(dl);
        dl = nullptr;
        table = nullptr;
    }
};

// Desc is a user descriptor (nixlBasicDesc).
struct Desc {
    uintptr_t addr;
    size_t len;
    uint64_t dev;
};

// RemoteMD is what getLocalMD serialises for one backend.
struct AgentMD {
    std::string name;
    std::string conn;
    struct Buf {
        uintptr_t addr;
        size_t len;
        uint64_t dev;
        std::string blob;
    };
    std::vector<Buf> bufs;
};

// Xfer is nixlXferReqH.
struct Xfer {
    XferOp op;
    std::string remote;
    MetaDescList local{KVFNIXL_DRAM_SEG};
    MetaDescList targets{KVFNIXL_DRAM_SEG};
    BackendReqH *h = nullptr;
    Status status = KVFNIXL_ERR_NOT_POSTED;
    std::string notif;
    bool hasNotif = false;
};

// Agent plays nixlAgent with one backend.
class Agent {
public:
    std::string name;
    BackendEngine *eng = nullptr;
    PluginTable *table = nullptr;
    std::string conn;

    struct Reg {
        Desc d;
        BackendMD *md;
        BackendMD *selfMd;
        std::string blob;
    };
    std::vector<Reg> regs;
    struct Rmd {
        Desc d;
        BackendMD *md;
    };
    std::map<std::string, std::vector<Rmd>> remotes;

    // createBackend (specs/nixl.md §3.3). Returns the status.
    Status create(PluginTable *t, const std::string &agent, const Params &params, bool progThread,
                  const std::string &backendType = "KVFERRY") {
        name = agent;
        table = t;
        Params p = params;
        InitParams init;
        init.localAgent = agent;
        init.type = backendType;
        init.customParams = &p;
        init.enableProgTh = progThread;
        init.pthrDelay = 100;
        init.syncMode = ThreadSync::RW;
        eng = t->create_engine(&init);
        if (!eng) return KVFNIXL_ERR_BACKEND;
        if (eng->getInitErr()) return KVFNIXL_ERR_BACKEND;
        if (eng->getType() != backendType) return KVFNIXL_ERR_MISMATCH;
        if (eng->supportsRemote()) {
            if (!eng->supportsNotif()) return KVFNIXL_ERR_BACKEND;
            Status s = eng->getConnInfo(conn);
            if (s != KVFNIXL_SUCCESS) return s;
            if (conn.empty()) return KVFNIXL_ERR_MISMATCH;
        }
        if (eng->supportsLocal()) {
            Status s = eng->connect(name);
            if (s != KVFNIXL_SUCCESS) return s;
        }
        MemList mems = eng->getSupportedMems();
        if (mems.empty() || mems[0] != KVFNIXL_DRAM_SEG) return KVFNIXL_ERR_MISMATCH;
        return KVFNIXL_SUCCESS;
    }

    // registerMem of a list (§3.4): per descriptor registerMem, loadLocalMD,
    // getPublicData; roll back this call's registrations on failure.
    Status registerMem(const std::vector<Desc> &ds, MemType mem = KVFNIXL_DRAM_SEG) {
        size_t first = regs.size();
        for (const Desc &d : ds) {
            BlobDesc bd(d.addr, d.len, d.dev, "");
            Reg r{d, nullptr, nullptr, ""};
            Status s = eng->registerMem(bd, mem, r.md);
            if (s == KVFNIXL_SUCCESS) s = eng->loadLocalMD(r.md, r.selfMd);
            if (s == KVFNIXL_SUCCESS) s = eng->getPublicData(r.md, r.blob);
            if (s != KVFNIXL_SUCCESS) {
                if (r.selfMd && r.selfMd != r.md) eng->unloadMD(r.selfMd);
                if (r.md) eng->deregisterMem(r.md);
                while (regs.size() > first) {
                    eng->unloadMD(regs.back().selfMd);
                    eng->deregisterMem(regs.back().md);
                    regs.pop_back();
                }
                return s;
            }
            regs.push_back(r);
        }
        return KVFNIXL_SUCCESS;
    }

    // deregisterMem of everything (§3.13).
    void deregisterAll() {
        for (Reg &r : regs) {
            if (r.selfMd != r.md) eng->unloadMD(r.selfMd);
            eng->deregisterMem(r.md);
        }
        regs.clear();
    }

    AgentMD localMD() const {
        AgentMD md{name, conn, {}};
        for (const Reg &r : regs) md.bufs.push_back({r.d.addr, r.d.len, r.d.dev, r.blob});
        return md;
    }

    // loadRemoteMD (§3.6), of descriptors of memory type mem.
    Status loadRemoteMD(const AgentMD &md, MemType mem = KVFNIXL_DRAM_SEG) {
        Status s = eng->loadRemoteConnInfo(md.name, md.conn);
        if (s != KVFNIXL_SUCCESS) return s;
        auto &list = remotes[md.name];
        for (const auto &b : md.bufs) {
            BlobDesc bd(b.addr, b.len, b.dev, b.blob);
            BackendMD *out = nullptr;
            s = eng->loadRemoteMD(bd, mem, md.name, out);
            if (s != KVFNIXL_SUCCESS) return s;
            list.push_back({{b.addr, b.len, b.dev}, out});
        }
        return KVFNIXL_SUCCESS;
    }

    // invalidateRemoteMD (§3.14).
    Status invalidate(const std::string &remote) {
        auto it = remotes.find(remote);
        if (it != remotes.end()) {
            for (Rmd &r : it->second) eng->unloadMD(r.md);
            remotes.erase(it);
        }
        return eng->disconnect(remote);
    }

    BackendMD *coverLocal(const Desc &d) const {
        for (const Reg &r : regs)
            if (d.addr >= r.d.addr && d.addr + d.len <= r.d.addr + r.d.len) return r.md;
        return nullptr;
    }
    BackendMD *coverRemote(const std::string &remote, const Desc &d) const {
        if (remote == name) {
            for (const Reg &r : regs)
                if (d.addr >= r.d.addr && d.addr + d.len <= r.d.addr + r.d.len) return r.selfMd;
            return nullptr;
        }
        auto it = remotes.find(remote);
        if (it == remotes.end()) return nullptr;
        for (const Rmd &r : it->second)
            if (d.addr >= r.d.addr && d.addr + d.len <= r.d.addr + r.d.len) return r.md;
        return nullptr;
    }

    // createXferReq (§3.8). With force, descriptors nobody covers are passed
    // with metadataP = nullptr instead of failing (to test the backend's own
    // checks, as a direct backend user would).
    Status createXfer(XferOp op, const std::vector<Desc> &local, const std::vector<Desc> &remote,
                      const std::string &agent, std::unique_ptr<Xfer> &out, const std::string *notif = nullptr,
                      bool force = false, BackendMD *forceRemoteMd = nullptr) {
        auto x = std::make_unique<Xfer>();
        x->op = op;
        x->remote = agent;
        for (size_t i = 0; i < local.size(); i++) {
            BackendMD *lm = coverLocal(local[i]);
            if (!lm && !force) return KVFNIXL_ERR_INVALID_PARAM;
            x->local.append(MetaDesc(local[i].addr, local[i].len, local[i].dev, lm));
        }
        for (size_t i = 0; i < remote.size(); i++) {
            BackendMD *rm = forceRemoteMd ? forceRemoteMd : coverRemote(agent, remote[i]);
            if (!rm && !force) return KVFNIXL_ERR_NOT_FOUND;
            x->targets.append(MetaDesc(remote[i].addr, remote[i].len, remote[i].dev, rm));
        }
        OptArgs opt;
        if (notif) {
            x->notif = *notif;
            x->hasNotif = true;
            opt.notifMsg = *notif;
            opt.hasNotif = true;
        }
        Status s = eng->prepXfer(op, x->local, x->targets, agent, x->h, &opt);
        if (s != KVFNIXL_SUCCESS) return s;
        out = std::move(x);
        return KVFNIXL_SUCCESS;
    }

    // postXferReq (§3.9).
    Status post(Xfer &x, const std::string *notif = nullptr, bool clearNotif = false) {
        if (x.status == KVFNIXL_IN_PROG) {
            x.status = eng->checkXfer(x.h);
            if (x.status == KVFNIXL_IN_PROG) return KVFNIXL_ERR_REPOST_ACTIVE;
        }
        if (notif) {
            x.notif = *notif;
            x.hasNotif = true;
        } else if (clearNotif) {
            x.hasNotif = false;
        }
        OptArgs opt;
        opt.hasNotif = x.hasNotif;
        opt.notifMsg = x.notif;
        x.status = eng->postXfer(x.op, x.local, x.targets, x.remote, x.h, &opt);
        return x.status;
    }

    // getXferStatus (§3.10).
    Status status(Xfer &x) {
        if (x.status == KVFNIXL_IN_PROG) x.status = eng->checkXfer(x.h);
        return x.status;
    }

    // Polls until not in progress or deadline (seconds); returns the status.
    Status wait(Xfer &x, double deadline = 60) {
        double end = now_s() + deadline;
        Status s;
        while ((s = status(x)) == KVFNIXL_IN_PROG && now_s() < end) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, nullptr);
        }
        return s;
    }

    // releaseXferReq (§3.11) plus the request destructor.
    Status release(std::unique_ptr<Xfer> &x) {
        if (x->status == KVFNIXL_IN_PROG) {
            x->status = eng->checkXfer(x->h);
            if (x->status == KVFNIXL_IN_PROG) {
                Status s = eng->releaseReqH(x->h);
                if (s < 0) return KVFNIXL_ERR_REPOST_ACTIVE;
                x->h = nullptr;
            }
        }
        Status s = KVFNIXL_SUCCESS;
        if (x->h) s = eng->releaseReqH(x->h); // ~nixlXferReqH
        x.reset();
        return s;
    }

    // getNotifs (§3.12): appends into the per-sender map.
    Status getNotifs(std::map<std::string, std::vector<std::string>> &out) {
        NotifList l;
        Status s = eng->getNotifs(l);
        for (auto &p : l) out[p.first].push_back(p.second);
        return s;
    }

    // Waits for one notification from sender (deadline seconds); returns it,
    // or "" with ok=false.
    std::string waitNotif(const std::string &sender, bool &ok, double deadline = 30) {
        double end = now_s() + deadline;
        ok = false;
        while (now_s() < end) {
            auto it = pending.find(sender);
            if (it != pending.end() && !it->second.empty()) {
                std::string m = it->second.front();
                it->second.erase(it->second.begin());
                if (allowed.count(m)) continue;
                ok = true;
                return m;
            }
            getNotifs(pending);
            struct timespec ts = {0, 200000};
            nanosleep(&ts, nullptr);
        }
        return "";
    }
    std::map<std::string, std::vector<std::string>> pending;
    // Notifications that may come but are not waited for: a transfer
    // released in flight that finished first sends its own (releaseInFlight).
    std::set<std::string> allowed;

    // ~nixlAgent (§3.15): local section, remote sections, then the engine.
    void destroy() {
        if (!eng) return;
        deregisterAll();
        std::vector<std::string> names;
        for (auto &r : remotes) names.push_back(r.first);
        for (auto &n : names) invalidate(n);
        table->destroy_engine(eng);
        eng = nullptr;
    }
};

// Metadata as text: name, conn, then one line per buffer (blob hex-encoded).
inline std::string hex(const std::string &s) {
    static const char *d = "0123456789abcdef";
    std::string o;
    for (unsigned char c : s) {
        o += d[c >> 4];
        o += d[c & 15];
    }
    return o;
}
inline std::string unhex(const std::string &s) {
    std::string o;
    for (size_t i = 0; i + 1 < s.size(); i += 2) o += static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16));
    return o;
}

inline bool writeMD(const AgentMD &md, const std::string &path) {
    std::string tmp = path + ".tmp";
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f) return false;
    fprintf(f, "%s\n%s\n%zu\n", hex(md.name).c_str(), hex(md.conn).c_str(), md.bufs.size());
    for (auto &b : md.bufs)
        fprintf(f, "%llx %zu %llu %s\n", (unsigned long long)b.addr, b.len, (unsigned long long)b.dev,
                hex(b.blob).c_str());
    fclose(f);
    return rename(tmp.c_str(), path.c_str()) == 0;
}

inline bool readMD(const std::string &path, AgentMD &md) {
    FILE *f = fopen(path.c_str(), "r");
    if (!f) return false;
    char line[1 << 16];
    auto next = [&](std::string &s) {
        if (!fgets(line, sizeof line, f)) return false;
        s = line;
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
        return true;
    };
    std::string s;
    bool ok = next(s);
    md.name = unhex(s);
    ok = ok && next(s);
    md.conn = unhex(s);
    ok = ok && next(s);
    size_t n = ok ? std::stoul(s) : 0;
    for (size_t i = 0; ok && i < n; i++) {
        ok = next(s);
        if (!ok) break;
        unsigned long long a, dv;
        size_t l;
        char blob[1 << 15];
        if (sscanf(s.c_str(), "%llx %zu %llu %32767s", &a, &l, &dv, blob) != 4) {
            ok = false;
            break;
        }
        md.bufs.push_back({static_cast<uintptr_t>(a), l, dv, unhex(blob)});
    }
    fclose(f);
    return ok;
}

} // namespace core

#endif
