// nixl_plugin.cpp - the NIXL backend plugin "KVFERRY" (libplugin_KVFERRY.so is
// a symlink to libkvferry.so).
//
// A thin shim: each engine method converts NIXL's C++ arguments into plain C
// values and makes one call of kvferry.h's "NIXL support" API; the semantics
// live in Go (agent/nixl). No exception leaves this file (every entry has a
// catch-all) and no Go panic reaches it (every Go export recovers). The only
// state kept here is the integer handle each C++ object carries.
// See specs/nixl.md §1-3 for what NIXL calls and when.
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kvferry.h"
#include "nixl_abi.h"

namespace kvfnixl {
namespace {

constexpr char kPluginName[] = "KVFERRY";
constexpr size_t kInlineDescs = 64;

// Md carries the handle of a registration or of a loaded buffer.
class Md final : public BackendMD {
public:
    Md() : BackendMD(true) {}
    kvferry_nixl_md_t handle = 0;
};

// ReqH carries the handle of a transfer request.
class ReqH final : public BackendReqH {
public:
    kvferry_nixl_xfer_t handle = 0;
};

inline kvferry_nixl_md_t mdHandle(const BackendMD *m) {
    return m ? static_cast<const Md *>(m)->handle : 0;
}

inline Status status(int rc) { return static_cast<Status>(rc); }

// Runs f, turning any exception into NIXL_ERR_BACKEND.
template <class F> Status guarded(F &&f) noexcept {
    try {
        return f();
    } catch (...) {
        return kErrBackend;
    }
}

// A descriptor list as the C API takes it: on the stack up to kInlineDescs.
class Descs {
public:
    explicit Descs(const MetaDescList &l) : n_(static_cast<size_t>(l.descCount())) {
        p_ = inline_;
        if (n_ > kInlineDescs) {
            heap_.resize(n_);
            p_ = heap_.data();
        }
        for (size_t i = 0; i < n_; i++) {
            const MetaDesc &d = l[i];
            p_[i] = kvferry_nixl_desc_t{d.addr, d.len, d.devId, mdHandle(d.metadataP)};
        }
    }
    const kvferry_nixl_desc_t *data() const { return p_; }
    size_t size() const { return n_; }

private:
    kvferry_nixl_desc_t inline_[kInlineDescs];
    std::vector<kvferry_nixl_desc_t> heap_;
    kvferry_nixl_desc_t *p_;
    size_t n_;
};

MemList supportedMems() {
    int mems[8];
    int n = kvferry_nixl_supported_mems(mems, 8);
    MemList out;
    for (int i = 0; i < n && i < 8; i++) out.push_back(static_cast<MemType>(mems[i]));
    return out;
}

// Copies a byte string the C API reports as (size, copy) into out.
template <class F> Status fetchBytes(F &&get, std::string &out) {
    int64_t n = get(nullptr, 0);
    if (n < 0) return status(static_cast<int>(n));
    std::string s(static_cast<size_t>(n), '\0');
    if (n > 0) {
        int64_t m = get(s.data(), s.size());
        if (m < 0) return status(static_cast<int>(m));
        s.resize(static_cast<size_t>(m < n ? m : n));
    }
    out = std::move(s);
    return kSuccess;
}

class Engine final : public BackendEngine {
public:
    explicit Engine(const InitParams *p) : BackendEngine(p) {
        try {
            kvferry_nixl_backend_name(p->type.data(), p->type.size());
            std::vector<const char *> keys, values;
            for (const auto &kv : *p->customParams) {
                keys.push_back(kv.first.c_str());
                values.push_back(kv.second.c_str());
            }
            int rc = kvferry_nixl_create(p->localAgent.data(), p->localAgent.size(), keys.data(), values.data(),
                                         keys.size(), p->enableProgTh ? 1 : 0, p->pthrDelay, &h_);
            if (rc != 0) initErr = true;
        } catch (...) {
            initErr = true;
        }
    }

    ~Engine() override { kvferry_nixl_destroy(h_); }

    bool supportsRemote() const override { return true; }
    bool supportsLocal() const override { return true; }
    bool supportsNotif() const override { return true; }

    MemList getSupportedMems() const override {
        try {
            return supportedMems();
        } catch (...) {
            return MemList();
        }
    }

    Status registerMem(const BlobDesc &mem, const MemType &type, BackendMD *&out) override {
        return guarded([&] {
            auto m = std::make_unique<Md>();
            int rc = kvferry_nixl_register(h_, static_cast<int>(type), mem.addr, mem.len, mem.devId, &m->handle);
            if (rc == 0) out = m.release();
            return status(rc);
        });
    }

    Status deregisterMem(BackendMD *meta) override {
        return guarded([&] {
            if (!meta) return kErrInvalidParam;
            int rc = kvferry_nixl_deregister(h_, mdHandle(meta));
            delete static_cast<Md *>(meta); // the handle is gone either way
            return status(rc);
        });
    }

    Status connect(const std::string &agent) override {
        return guarded([&] { return status(kvferry_nixl_connect(h_, agent.data(), agent.size())); });
    }

    Status disconnect(const std::string &agent) override {
        return guarded([&] { return status(kvferry_nixl_disconnect(h_, agent.data(), agent.size())); });
    }

    Status unloadMD(BackendMD *input) override {
        return guarded([&] {
            if (!input) return kErrInvalidParam;
            int rc = kvferry_nixl_unload_md(h_, mdHandle(input));
            delete static_cast<Md *>(input);
            return status(rc);
        });
    }

    Status prepXfer(const XferOp &op, const MetaDescList &local, const MetaDescList &remote, const std::string &agent,
                    BackendReqH *&handle, const OptArgs *) const override {
        return guarded([&] {
            Descs l(local), r(remote);
            auto req = std::make_unique<ReqH>();
            int rc = kvferry_nixl_xfer_prep(h_, static_cast<int>(op), agent.data(), agent.size(), l.data(), l.size(),
                                            r.data(), r.size(), &req->handle);
            if (rc == 0) handle = req.release();
            return status(rc);
        });
    }

    Status postXfer(const XferOp &op, const MetaDescList &local, const MetaDescList &remote, const std::string &,
                    BackendReqH *&handle, const OptArgs *opt) const override {
        return guarded([&] {
            if (!handle) return kErrInvalidParam;
            Descs l(local), r(remote);
            const bool notif = opt && opt->hasNotif;
            return status(kvferry_nixl_xfer_post(h_, static_cast<ReqH *>(handle)->handle, static_cast<int>(op),
                                                 l.data(), l.size(), r.data(), r.size(), notif ? 1 : 0,
                                                 notif ? opt->notifMsg.data() : nullptr,
                                                 notif ? opt->notifMsg.size() : 0));
        });
    }

    Status checkXfer(BackendReqH *handle) const override {
        return guarded([&] {
            if (!handle) return kErrInvalidParam;
            return status(kvferry_nixl_xfer_check(h_, static_cast<ReqH *>(handle)->handle));
        });
    }

    Status releaseReqH(BackendReqH *handle) const override {
        return guarded([&] {
            if (!handle) return kErrInvalidParam;
            int rc = kvferry_nixl_xfer_release(h_, static_cast<ReqH *>(handle)->handle);
            // On any other error the request is still live and NIXL releases
            // it again later (specs/nixl.md §3.11).
            if (rc == KVFERRY_NIXL_SUCCESS || rc == KVFERRY_NIXL_ERR_INVALID_PARAM) delete static_cast<ReqH *>(handle);
            return status(rc);
        });
    }

    Status getPublicData(const BackendMD *meta, std::string &out) const override {
        return guarded([&] {
            const kvferry_nixl_md_t m = mdHandle(meta);
            return fetchBytes([&](char *b, size_t n) { return kvferry_nixl_public_data(h_, m, b, n); }, out);
        });
    }

    Status getConnInfo(std::string &out) const override {
        return guarded([&] {
            return fetchBytes([&](char *b, size_t n) { return kvferry_nixl_conn_info(h_, b, n); }, out);
        });
    }

    Status loadRemoteConnInfo(const std::string &agent, const std::string &info) override {
        return guarded([&] {
            return status(kvferry_nixl_load_conn_info(h_, agent.data(), agent.size(), info.data(), info.size()));
        });
    }

    Status loadRemoteMD(const BlobDesc &desc, const MemType &type, const std::string &agent,
                        BackendMD *&out) override {
        return guarded([&] {
            auto m = std::make_unique<Md>();
            int rc = kvferry_nixl_load_remote_md(h_, agent.data(), agent.size(), static_cast<int>(type), desc.addr,
                                                 desc.len, desc.devId, desc.metaInfo.data(), desc.metaInfo.size(),
                                                 &m->handle);
            if (rc == 0) out = m.release();
            return status(rc);
        });
    }

    Status loadLocalMD(BackendMD *in, BackendMD *&out) override {
        return guarded([&] {
            auto m = std::make_unique<Md>();
            int rc = kvferry_nixl_load_local_md(h_, mdHandle(in), &m->handle);
            if (rc == 0) out = m.release();
            return status(rc);
        });
    }

    Status getNotifs(NotifList &list) override {
        return guarded([&] {
            kvferry_nixl_notif_t *arr = nullptr;
            size_t n = 0;
            int rc = kvferry_nixl_get_notifs(h_, &arr, &n);
            std::unique_ptr<kvferry_nixl_notif_t, void (*)(kvferry_nixl_notif_t *)> own(arr, kvferry_nixl_free_notifs);
            if (rc != 0) return status(rc);
            list.reserve(list.size() + n);
            for (size_t i = 0; i < n; i++)
                list.emplace_back(std::string(arr[i].agent, arr[i].agent_len), std::string(arr[i].msg, arr[i].msg_len));
            return kSuccess;
        });
    }

    Status genNotif(const std::string &agent, const std::string &msg) const override {
        return guarded([&] {
            return status(kvferry_nixl_gen_notif(h_, agent.data(), agent.size(), msg.data(), msg.size()));
        });
    }

private:
    kvferry_nixl_t h_ = 0;
};

BackendEngine *createEngine(const InitParams *p) {
    try {
        if (!p || !p->customParams) return nullptr;
        return new Engine(p);
    } catch (...) {
        return nullptr;
    }
}

void destroyEngine(BackendEngine *e) { delete e; }

const char *pluginName() { return kPluginName; }

const char *pluginVersion() { return kvferry_version(); }

Params backendOptions() {
    try {
        Params out;
        char key[128], value[1024];
        for (size_t i = 0; kvferry_nixl_option(i, key, sizeof key, value, sizeof value) == 1; i++) out.emplace(key, value);
        return out;
    } catch (...) {
        return Params();
    }
}

MemList backendMems() {
    try {
        return supportedMems();
    } catch (...) {
        return MemList();
    }
}

// Constant-initialized: no code runs at load, and every init returns it.
PluginTable plugin = {kPluginApiVersion, createEngine,   destroyEngine, pluginName,
                      pluginVersion,     backendOptions, backendMems};

} // namespace
} // namespace kvfnixl

extern "C" {

// The plugin manager's entry point (specs/nixl.md §1). Idempotent: NIXL loads
// and unloads the plugin several times, and the table never changes.
__attribute__((visibility("default"))) kvfnixl::PluginTable *nixl_plugin_init() { return &kvfnixl::plugin; }

// Called before NIXL drops the plugin; engines are destroyed through
// destroy_engine, so there is nothing to release here.
__attribute__((visibility("default"))) void nixl_plugin_fini() {}
}
