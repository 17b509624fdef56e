// nixl_abi.h - kvferry's own declarations of the NIXL backend-plugin ABI.
//
// NIXL (1.0-1.4, plugin api_version 1) loads a backend from
// libplugin_<NAME>.so, calls nixl_plugin_init() for a table of function
// pointers, and drives the engine that create_engine returns through its
// vtable, reading three base-class fields inline. This header declares types
// with exactly that layout (specs/nixl.md §2) under our own names, in
// namespace kvfnixl, so the shim builds without NIXL or Abseil headers. Every
// size and offset of the spec is pinned by a static_assert below.
//
// With -DKVFERRY_WITH_NIXL_HEADERS (and NIXL's include directory on the path)
// the same names become aliases of NIXL's own types instead.
//
// Requirements shared with NIXL: g++/libstdc++ with the C++11 string ABI,
// -std=c++20, libstdc++ linked dynamically (one copy in the process).
#ifndef KVFERRY_PLUGIN_NIXL_ABI_H
#define KVFERRY_PLUGIN_NIXL_ABI_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#ifdef KVFERRY_WITH_NIXL_HEADERS

#include "backend/backend_engine.h"
#include "backend/backend_plugin.h"

namespace kvfnixl {
using Status = nixl_status_t;
using MemType = nixl_mem_t;
using XferOp = nixl_xfer_op_t;
using ThreadSync = nixl_thread_sync_t;
using Params = nixl_b_params_t;
using MemList = nixl_mem_list_t;
using NotifList = notif_list_t;
using BasicDesc = nixlBasicDesc;
using BlobDesc = nixlBlobDesc;
using MetaDesc = nixlMetaDesc;
using MetaDescList = nixl_meta_dlist_t;
using BackendMD = nixlBackendMD;
using BackendReqH = nixlBackendReqH;
using OptArgs = nixl_opt_b_args_t;
using InitParams = nixlBackendInitParams;
using BackendEngine = nixlBackendEngine;
using PluginTable = nixlBackendPlugin;
constexpr int kPluginApiVersion = NIXL_PLUGIN_API_VERSION;
} // namespace kvfnixl

#else // our own declarations

// Status values (nixl_status_t): any negative value is an error.
enum kvfnixl_status_t {
    KVFNIXL_IN_PROG = 1,
    KVFNIXL_SUCCESS = 0,
    KVFNIXL_ERR_NOT_POSTED = -1,
    KVFNIXL_ERR_INVALID_PARAM = -2,
    KVFNIXL_ERR_BACKEND = -3,
    KVFNIXL_ERR_NOT_FOUND = -4,
    KVFNIXL_ERR_MISMATCH = -5,
    KVFNIXL_ERR_NOT_ALLOWED = -6,
    KVFNIXL_ERR_REPOST_ACTIVE = -7,
    KVFNIXL_ERR_UNKNOWN = -8,
    KVFNIXL_ERR_NOT_SUPPORTED = -9,
    KVFNIXL_ERR_REMOTE_DISCONNECT = -10,
    KVFNIXL_ERR_CANCELED = -11,
    KVFNIXL_ERR_NO_TELEMETRY = -12,
};

// Memory types (nixl_mem_t) and operations (nixl_xfer_op_t).
enum kvfnixl_mem_t { KVFNIXL_DRAM_SEG, KVFNIXL_VRAM_SEG, KVFNIXL_BLK_SEG, KVFNIXL_OBJ_SEG, KVFNIXL_FILE_SEG };
enum kvfnixl_xfer_op_t { KVFNIXL_READ, KVFNIXL_WRITE };

namespace kvfnixl {

using Status = kvfnixl_status_t;
using MemType = kvfnixl_mem_t;
using XferOp = kvfnixl_xfer_op_t;

// nixl_thread_sync_t
enum class ThreadSync : int { None = 0, Strict = 1, RW = 2 };

using Params = std::unordered_map<std::string, std::string>; // nixl_b_params_t
using MemList = std::vector<MemType>;                         // nixl_mem_list_t
using NotifList = std::vector<std::pair<std::string, std::string>>; // (agent, msg)

// nixlBasicDesc: not polymorphic.
class BasicDesc {
public:
    uintptr_t addr = 0;
    size_t len = 0;
    uint64_t devId = 0;
    BasicDesc() = default;
    BasicDesc(uintptr_t a, size_t l, uint64_t d) : addr(a), len(l), devId(d) {}
};

// nixlBlobDesc: registerMem / loadRemoteMD input.
class BlobDesc : public BasicDesc {
public:
    std::string metaInfo;
    BlobDesc() = default;
    BlobDesc(uintptr_t a, size_t l, uint64_t d, std::string m) : BasicDesc(a, l, d), metaInfo(std::move(m)) {}
};

// nixlBackendMD: opaque to the core, handed back through deregisterMem /
// unloadMD, never deleted by the core.
class BackendMD {
protected:
    bool isPrivateMD;

public:
    explicit BackendMD(bool isPrivate) : isPrivateMD(isPrivate) {}
    virtual ~BackendMD() {}
};

// nixlBackendReqH: opaque to the core, handed back through releaseReqH.
class BackendReqH {
public:
    BackendReqH() {}
    virtual ~BackendReqH() {}
};

// nixlMetaDesc: element of the prep/post lists.
class MetaDesc : public BasicDesc {
public:
    BackendMD *metadataP = nullptr;
    MetaDesc() = default;
    MetaDesc(uintptr_t a, size_t l, uint64_t d, BackendMD *md) : BasicDesc(a, l, d), metadataP(md) {}
};

// nixlDescList<T>: polymorphic; a plugin reads only type and descs, through
// inline accessors. The core's further virtuals (resize, ...) are never
// called by a plugin, so only the virtual destructor is declared here.
template <class T> class DescList {
protected:
    MemType type;
    std::vector<T> descs;

public:
    explicit DescList(MemType t) : type(t) {}
    virtual ~DescList() = default;
    MemType getType() const { return type; }
    int descCount() const { return static_cast<int>(descs.size()); }
    const T &operator[](size_t i) const { return descs[i]; }
    T &operator[](size_t i) { return descs[i]; }
    // For harnesses that play NIXL core: append a descriptor.
    void append(const T &d) { descs.push_back(d); }
};
using MetaDescList = DescList<MetaDesc>; // nixl_meta_dlist_t

// nixlBackendOptionalArgs (nixl_opt_b_args_t).
struct OptArgs {
    std::string notifMsg;
    bool hasNotif = false;
    std::string customParam;
};

// nixlBackendInitParams: lives for the duration of create_engine.
class InitParams {
public:
    std::string localAgent;
    std::string type;
    Params *customParams = nullptr;
    bool enableProgTh = false;
    uint64_t pthrDelay = 0; // microseconds
    ThreadSync syncMode = ThreadSync::None;
    bool enableTelemetry_ = false;
};

// Element of the base's telemetry queue (16 bytes); the core never reads it.
struct TelemetryEventLayout {
    uint32_t type;
    uint64_t value;
};

// Placeholder types of the two optional virtuals a plugin leaves at their
// defaults; only their ABI matters (passed by reference or pointer).
struct AgentOptArgsOpaque;                        // nixl_opt_args_t
enum class CostMethod : int { Analytical = 0 };  // nixl_cost_t
using QueryResp = std::optional<Params>;         // nixl_query_resp_t
using RegDescList = DescList<BlobDesc>;          // nixl_reg_dlist_t
struct RemoteMetaDesc : public MetaDesc {        // nixlRemoteMetaDesc
    std::string remoteAgent;
};
using RemoteMetaDescList = DescList<RemoteMetaDesc>;
using MemViewH = void *;

// nixlBackendEngine: 208 bytes, 27 vtable slots in this order.
class BackendEngine {
private:
    std::string backendType;                          // @8, read by the core
    Params customParams;                              // @40, read by the core
    std::vector<TelemetryEventLayout> telemetryEvents_; // @96
    std::mutex telemetryEventsMutex_;                 // @120

protected:
    bool initErr = false;          // @160, read by the core
    const std::string localAgent;  // @168
    const bool enableTelemetry_;   // @200

public:
    explicit BackendEngine(const InitParams *p)
        : backendType(p->type), customParams(*p->customParams), localAgent(p->localAgent),
          enableTelemetry_(p->enableTelemetry_) {}
    BackendEngine(BackendEngine &&) = delete;
    BackendEngine(const BackendEngine &) = delete;
    void operator=(BackendEngine &&) = delete;
    void operator=(const BackendEngine &) = delete;

    virtual ~BackendEngine() = default; // slots 0, 1

    bool getInitErr() const noexcept { return initErr; }
    const std::string &getType() const noexcept { return backendType; }
    const Params &getCustomParams() const noexcept { return customParams; }

    virtual bool supportsRemote() const = 0;   // 2
    virtual bool supportsLocal() const = 0;    // 3
    virtual bool supportsNotif() const = 0;    // 4
    virtual MemList getSupportedMems() const = 0; // 5
    virtual Status registerMem(const BlobDesc &mem, const MemType &nixl_mem, BackendMD *&out) = 0; // 6
    virtual Status deregisterMem(BackendMD *meta) = 0;                                               // 7
    virtual Status connect(const std::string &remote_agent) = 0;                                     // 8
    virtual Status disconnect(const std::string &remote_agent) = 0;                                  // 9
    virtual Status unloadMD(BackendMD *input) = 0;                                                   // 10
    virtual Status prepXfer(const XferOp &op, const MetaDescList &local, const MetaDescList &remote,
                            const std::string &remote_agent, BackendReqH *&handle,
                            const OptArgs *opt_args = nullptr) const = 0; // 11
    virtual Status postXfer(const XferOp &op, const MetaDescList &local, const MetaDescList &remote,
                            const std::string &remote_agent, BackendReqH *&handle,
                            const OptArgs *opt_args = nullptr) const = 0; // 12
    virtual Status checkXfer(BackendReqH *handle) const = 0;              // 13
    virtual Status releaseReqH(BackendReqH *handle) const = 0;            // 14
    virtual Status prepMemView(const RemoteMetaDescList &, MemViewH &, const OptArgs * = nullptr) const {
        return KVFNIXL_ERR_NOT_SUPPORTED; // 15
    }
    virtual Status prepMemView(const MetaDescList &, MemViewH &, const OptArgs * = nullptr) const {
        return KVFNIXL_ERR_NOT_SUPPORTED; // 16
    }
    virtual void releaseMemView(MemViewH) const {} // 17
    virtual Status getPublicData(const BackendMD *, std::string &) const { return KVFNIXL_ERR_BACKEND; } // 18
    virtual Status getConnInfo(std::string &) const { return KVFNIXL_ERR_BACKEND; }                    // 19
    virtual Status loadRemoteConnInfo(const std::string &, const std::string &) { return KVFNIXL_ERR_BACKEND; } // 20
    virtual Status loadRemoteMD(const BlobDesc &, const MemType &, const std::string &, BackendMD *&) {
        return KVFNIXL_ERR_BACKEND; // 21
    }
    virtual Status loadLocalMD(BackendMD *, BackendMD *&) { return KVFNIXL_ERR_BACKEND; } // 22
    virtual Status getNotifs(NotifList &) { return KVFNIXL_ERR_BACKEND; }                 // 23
    virtual Status genNotif(const std::string &, const std::string &) const { return KVFNIXL_ERR_BACKEND; } // 24
    virtual Status queryMem(const RegDescList &, std::vector<QueryResp> &) const {
        return KVFNIXL_ERR_NOT_SUPPORTED; // 25
    }
    virtual Status estimateXferCost(const XferOp &, const MetaDescList &, const MetaDescList &, const std::string &,
                                    BackendReqH *const &, std::chrono::microseconds &, std::chrono::microseconds &,
                                    CostMethod &, const AgentOptArgsOpaque * = nullptr) const {
        return KVFNIXL_ERR_NOT_SUPPORTED; // 26
    }

    // Offsets of the private members, for the layout checks below.
    static constexpr size_t offBackendType();
    static constexpr size_t offCustomParams();
    static constexpr size_t offTelemetry();
    static constexpr size_t offMutex();
    static constexpr size_t offInitErr();
    static constexpr size_t offLocalAgent();
    static constexpr size_t offEnableTelemetry();
};

// nixlBackendPlugin: what nixl_plugin_init returns.
struct PluginTable {
    int api_version;
    BackendEngine *(*create_engine)(const InitParams *);
    void (*destroy_engine)(BackendEngine *);
    const char *(*get_plugin_name)();
    const char *(*get_plugin_version)();
    Params (*get_backend_options)();
    MemList (*get_backend_mems)();
};

constexpr int kPluginApiVersion = 1;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
constexpr size_t BackendEngine::offBackendType() { return offsetof(BackendEngine, backendType); }
constexpr size_t BackendEngine::offCustomParams() { return offsetof(BackendEngine, customParams); }
constexpr size_t BackendEngine::offTelemetry() { return offsetof(BackendEngine, telemetryEvents_); }
constexpr size_t BackendEngine::offMutex() { return offsetof(BackendEngine, telemetryEventsMutex_); }
constexpr size_t BackendEngine::offInitErr() { return offsetof(BackendEngine, initErr); }
constexpr size_t BackendEngine::offLocalAgent() { return offsetof(BackendEngine, localAgent); }
constexpr size_t BackendEngine::offEnableTelemetry() { return offsetof(BackendEngine, enableTelemetry_); }

// specs/nixl.md §2.1-2.4, measured with g++ 12 / libstdc++ on x86_64.
static_assert(sizeof(PluginTable) == 56);
static_assert(offsetof(PluginTable, api_version) == 0);
static_assert(offsetof(PluginTable, create_engine) == 8);
static_assert(offsetof(PluginTable, destroy_engine) == 16);
static_assert(offsetof(PluginTable, get_plugin_name) == 24);
static_assert(offsetof(PluginTable, get_plugin_version) == 32);
static_assert(offsetof(PluginTable, get_backend_options) == 40);
static_assert(offsetof(PluginTable, get_backend_mems) == 48);

static_assert(sizeof(InitParams) == 96);
static_assert(offsetof(InitParams, localAgent) == 0);
static_assert(offsetof(InitParams, type) == 32);
static_assert(offsetof(InitParams, customParams) == 64);
static_assert(offsetof(InitParams, enableProgTh) == 72);
static_assert(offsetof(InitParams, pthrDelay) == 80);
static_assert(offsetof(InitParams, syncMode) == 88);
static_assert(offsetof(InitParams, enableTelemetry_) == 92);

static_assert(sizeof(BackendEngine) == 208);
static_assert(BackendEngine::offBackendType() == 8);
static_assert(BackendEngine::offCustomParams() == 40);
static_assert(BackendEngine::offTelemetry() == 96);
static_assert(BackendEngine::offMutex() == 120);
static_assert(BackendEngine::offInitErr() == 160);
static_assert(BackendEngine::offLocalAgent() == 168);
static_assert(BackendEngine::offEnableTelemetry() == 200);
static_assert(sizeof(TelemetryEventLayout) == 16);
static_assert(sizeof(std::mutex) == 40);

static_assert(sizeof(Status) == 4 && sizeof(MemType) == 4 && sizeof(XferOp) == 4 && sizeof(ThreadSync) == 4);
static_assert(sizeof(std::string) == 32);
static_assert(sizeof(Params) == 56);
static_assert(sizeof(MemList) == 24);
static_assert(sizeof(NotifList) == 24);

static_assert(sizeof(BasicDesc) == 24);
static_assert(offsetof(BasicDesc, addr) == 0);
static_assert(offsetof(BasicDesc, len) == 8);
static_assert(offsetof(BasicDesc, devId) == 16);
static_assert(sizeof(BlobDesc) == 56);
static_assert(offsetof(BlobDesc, metaInfo) == 24);
static_assert(sizeof(MetaDesc) == 32);
static_assert(offsetof(MetaDesc, metadataP) == 24);
static_assert(sizeof(RemoteMetaDesc) == 64);
static_assert(offsetof(RemoteMetaDesc, remoteAgent) == 32);
static_assert(sizeof(MetaDescList) == 40);
static_assert(sizeof(BackendMD) == 16);
static_assert(sizeof(BackendReqH) == 8);

struct DescListProbe : MetaDescList {
    static constexpr size_t offType() { return offsetof(DescListProbe, type); }
    static constexpr size_t offDescs() { return offsetof(DescListProbe, descs); }
};
static_assert(DescListProbe::offType() == 8);
static_assert(DescListProbe::offDescs() == 16);
struct MDProbe : BackendMD {
    static constexpr size_t offPrivate() { return offsetof(MDProbe, isPrivateMD); }
};
static_assert(MDProbe::offPrivate() == 8);

static_assert(sizeof(OptArgs) == 72);
static_assert(offsetof(OptArgs, notifMsg) == 0);
static_assert(offsetof(OptArgs, hasNotif) == 32);
static_assert(offsetof(OptArgs, customParam) == 40);
#pragma GCC diagnostic pop

} // namespace kvfnixl

#endif // KVFERRY_WITH_NIXL_HEADERS

namespace kvfnixl {
// The status values the shim itself returns (same numbers in both modes).
inline constexpr Status kSuccess = static_cast<Status>(0);
inline constexpr Status kErrInvalidParam = static_cast<Status>(-2);
inline constexpr Status kErrBackend = static_cast<Status>(-3);
} // namespace kvfnixl

#endif // KVFERRY_PLUGIN_NIXL_ABI_H
