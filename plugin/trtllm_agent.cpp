// trtllm_agent.cpp - TensorRT-LLM's Mooncake transfer agent, served by
// kvferry (libtensorrt_llm_mooncake_wrapper.so is a symlink to
// libkvferry.so).
//
// A thin shim: each BaseTransferAgent and TransferStatus method converts its
// C++ arguments into plain C values and makes one call of kvferry.h's
// "TensorRT-LLM support" API; the semantics live in Go (agent/trtllm). The
// only state kept here is the agent handle and the transfer id. Failures reach
// TensorRT-LLM as std::runtime_error carrying kvferry's error text, as the
// stock agent reports them; the TransferStatus methods and the destructors
// never throw. Every entry has a catch-all, and no Go panic reaches this file
// (every Go export recovers). See specs/tensorrt-llm.md §1-4.
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvferry.h"
#include "trtllm_abi.h"

#if !defined(_GLIBCXX_USE_CXX11_ABI) || _GLIBCXX_USE_CXX11_ABI != 1
#error "TensorRT-LLM uses libstdc++'s C++11 string ABI"
#endif

namespace kvftrt {
namespace {

static_assert(sizeof(kvferry_trtllm_desc_t) == 24, "kvferry_trtllm_desc_t has MemoryDesc's size");
static_assert(static_cast<int>(MemKind::kDRAM) == KVFERRY_TRTLLM_DRAM && static_cast<int>(MemKind::kVRAM) == KVFERRY_TRTLLM_VRAM,
              "MemoryType values are KVFERRY_TRTLLM_*");

// Throws the calling thread's last kvferry error for call `what`.
[[noreturn]] void fail(char const *what, int rc) {
    char buf[1024];
    kvferry_trtllm_last_error(buf, sizeof buf);
    throw std::runtime_error(std::string("kvferry ") + what + ": " + buf + " (code " + std::to_string(rc) + ")");
}

inline void check(char const *what, int rc) {
    if (rc < 0) fail(what, rc);
}

// Runs f for entry `what`: std::exceptions pass through (TensorRT-LLM catches
// them), anything else becomes a std::runtime_error.
template <class F> auto entry(char const *what, F &&f) -> decltype(f()) {
    try {
        return f();
    } catch (std::exception const &) {
        throw;
    } catch (...) {
        throw std::runtime_error(std::string("kvferry ") + what + ": unknown exception");
    }
}

// A range list as the C API takes it.
std::vector<kvferry_trtllm_desc_t> ranges(MemRanges const &d) {
    std::vector<kvferry_trtllm_desc_t> out;
    out.reserve(d.getDescs().size());
    for (MemRange const &r : d.getDescs())
        out.push_back(kvferry_trtllm_desc_t{r.getAddr(), r.getLen(), r.getDeviceId(), 0});
    return out;
}

// Status is one submitted transfer.
class Status final : public StatusBase {
public:
    Status(kvferry_trtllm_t agent, uint64_t xfer) : agent_(agent), xfer_(xfer) {}
    Status(Status const &) = delete;
    Status &operator=(Status const &) = delete;

    // Cancels the transfer if it still runs (the engine stops touching its
    // memory) and frees its id.
    ~Status() override { kvferry_trtllm_xfer_free(agent_, xfer_); }

    [[nodiscard]] bool isCompleted() const override {
        return kvferry_trtllm_poll(agent_, xfer_) != KVFERRY_XFER_IN_PROGRESS;
    }

    State wait(int64_t timeout_ms) const override {
        int s = kvferry_trtllm_wait(agent_, xfer_, timeout_ms);
        return s == KVFERRY_XFER_IN_PROGRESS || s == KVFERRY_XFER_SUCCESS ? static_cast<State>(s) : State::kFAILURE;
    }

    // release and getLastStatusStr carry no `override`: built against the
    // headers of a release whose TransferStatus lacks them (with
    // -DKVFERRY_WITH_TRTLLM_HEADERS) they are simply extra methods.
    [[nodiscard]] virtual bool release() { return kvferry_trtllm_cancel(agent_, xfer_) == 0; }

    [[nodiscard]] virtual std::string getLastStatusStr() const {
        try {
            char buf[512];
            int n = kvferry_trtllm_xfer_error(agent_, xfer_, buf, sizeof buf);
            if (n < static_cast<int>(sizeof buf)) return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
            std::string s(static_cast<size_t>(n) + 1, '\0');
            n = kvferry_trtllm_xfer_error(agent_, xfer_, s.data(), s.size());
            s.resize(n > 0 && static_cast<size_t>(n) < s.size() ? static_cast<size_t>(n) : s.size() - 1);
            return s;
        } catch (...) {
            return {};
        }
    }

private:
    kvferry_trtllm_t agent_;
    uint64_t xfer_;
};

// Agent is one transfer agent.
class Agent final : public AgentBase {
public:
    explicit Agent(kvferry_trtllm_t h) : h_(h) {}
    Agent(Agent const &) = delete;
    Agent &operator=(Agent const &) = delete;

    // Closes the engine; transfers still running end FAILED.
    ~Agent() override { kvferry_trtllm_destroy(h_); }

    void registerMemory(MemRanges const &descs) override {
        entry("registerMemory", [&] {
            auto r = ranges(descs);
            check("registerMemory",
                  kvferry_trtllm_register(h_, static_cast<int>(descs.getType()), r.data(), r.size()));
        });
    }

    void deregisterMemory(MemRanges const &descs) override {
        entry("deregisterMemory", [&] {
            auto r = ranges(descs);
            check("deregisterMemory", kvferry_trtllm_deregister(h_, r.data(), r.size()));
        });
    }

    void loadRemoteAgent(std::string const &name, AgentInfo const &agentDesc) override {
        entry("loadRemoteAgent", [&] {
            std::string const &info = agentDesc.getBackendAgentDesc();
            check("loadRemoteAgent", kvferry_trtllm_load(h_, name.data(), name.size(), info.data(), info.size()));
        });
    }

    void loadRemoteAgent(std::string const &name, ConnInfo const &connectionInfo) override {
        entry("loadRemoteAgent", [&] {
            check("loadRemoteAgent", kvferry_trtllm_load(h_, name.data(), name.size(), connectionInfo.data(),
                                                         connectionInfo.size()));
        });
    }

    void invalidateRemoteAgent(std::string const &name) override {
        entry("invalidateRemoteAgent",
              [&] { check("invalidateRemoteAgent", kvferry_trtllm_invalidate(h_, name.data(), name.size())); });
    }

    AgentInfo getLocalAgentDesc() override {
        return entry("getLocalAgentDesc", [&] { return AgentInfo{connInfo("getLocalAgentDesc")}; });
    }

    ConnInfo getLocalConnectionInfo() override {
        return entry("getLocalConnectionInfo", [&] { return connInfo("getLocalConnectionInfo"); });
    }

    [[nodiscard]] std::unique_ptr<StatusBase> submitTransferRequests(Request const &request) override {
        return entry("submitTransferRequests", [&]() -> std::unique_ptr<StatusBase> {
            auto src = ranges(request.getSrcDescs());
            auto dst = ranges(request.getDstDescs());
            if (src.size() != dst.size())
                throw std::invalid_argument("kvferry submitTransferRequests: " + std::to_string(src.size()) +
                                            " source and " + std::to_string(dst.size()) +
                                            " destination descriptors");
            std::string const &remote = request.getRemoteName();
            std::optional<Message> msg = request.getSyncMessage();
            uint64_t xfer = 0;
            check("submitTransferRequests",
                  kvferry_trtllm_submit(h_, static_cast<int>(request.getOp()), remote.data(), remote.size(),
                                        src.data(), dst.data(), src.size(), msg.has_value() ? 1 : 0,
                                        msg ? msg->data() : nullptr, msg ? msg->size() : 0, &xfer));
            try {
                return std::make_unique<Status>(h_, xfer);
            } catch (...) {
                kvferry_trtllm_xfer_free(h_, xfer);
                throw;
            }
        });
    }

    void notifySyncMessage(std::string const &name, Message const &syncMessage) override {
        entry("notifySyncMessage", [&] {
            check("notifySyncMessage",
                  kvferry_trtllm_notify(h_, name.data(), name.size(), syncMessage.data(), syncMessage.size()));
        });
    }

    std::unordered_map<std::string, std::vector<Message>> getNotifiedSyncMessages() override {
        return entry("getNotifiedSyncMessages", [&] {
            std::unordered_map<std::string, std::vector<Message>> out;
            kvferry_trtllm_notif_t *n = nullptr;
            size_t count = 0;
            check("getNotifiedSyncMessages", kvferry_trtllm_get_notifs(h_, &n, &count));
            if (count == 0) return out;
            std::unique_ptr<kvferry_trtllm_notif_t, decltype(&kvferry_trtllm_free_notifs)> block(
                n, &kvferry_trtllm_free_notifs);
            for (size_t i = 0; i < count; i++)
                out[std::string(n[i].agent, n[i].agent_len)].emplace_back(n[i].msg, n[i].msg_len);
            return out;
        });
    }

    bool checkRemoteDescs(std::string const &name, MemRanges const &memoryDescs) override {
        return entry("checkRemoteDescs", [&] {
            auto r = ranges(memoryDescs);
            int rc = kvferry_trtllm_check_remote(h_, name.data(), name.size(), r.data(), r.size());
            check("checkRemoteDescs", rc);
            return rc == 1;
        });
    }

private:
    std::string connInfo(char const *what) {
        char buf[128];
        int n = kvferry_trtllm_conn_info(h_, buf, sizeof buf);
        check(what, n);
        if (n >= static_cast<int>(sizeof buf)) {
            std::string s(static_cast<size_t>(n) + 1, '\0');
            n = kvferry_trtllm_conn_info(h_, s.data(), s.size());
            check(what, n);
            s.resize(static_cast<size_t>(n));
            return s;
        }
        return std::string(buf, static_cast<size_t>(n));
    }

    kvferry_trtllm_t h_;
};

} // namespace
} // namespace kvftrt

// The factory TensorRT-LLM looks up with dlsym: C linkage, but a C++ return
// value (std::unique_ptr, through the hidden result pointer). Only
// config->mName is read; it sits at offset 0 of BaseAgentConfig in every
// release.
extern "C" __attribute__((visibility("default"))) std::unique_ptr<kvftrt::AgentBase>
createMooncakeTransferAgent(kvftrt::Config const *config) {
    return kvftrt::entry("createMooncakeTransferAgent", [&]() -> std::unique_ptr<kvftrt::AgentBase> {
        if (config == nullptr) throw std::invalid_argument("kvferry createMooncakeTransferAgent: NULL config");
        std::string const &name = config->mName;
        kvferry_trtllm_t h = 0;
        kvftrt::check("createMooncakeTransferAgent",
                      kvferry_trtllm_create(name.data(), name.size(), nullptr, nullptr, 0, &h));
        try {
            return std::make_unique<kvftrt::Agent>(h);
        } catch (...) {
            kvferry_trtllm_destroy(h);
            throw;
        }
    });
}
