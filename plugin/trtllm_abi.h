// trtllm_abi.h - kvferry's own declarations of the TensorRT-LLM transfer-agent
// ABI.
//
// TensorRT-LLM loads libtensorrt_llm_mooncake_wrapper.so by name, looks up
// the C-linkage factory createMooncakeTransferAgent, and drives the object it
// returns (a std::unique_ptr, returned through the hidden result pointer)
// through the BaseTransferAgent vtable; each submit returns a TransferStatus
// driven through its vtable too (specs/tensorrt-llm.md §1, §2.2, §5.1). This
// header declares types with exactly that layout and slot order, for the
// current upstream interface (transferAgent.h with TransferStatus::release
// and getLastStatusStr, AgentDesc with VMM regions and the bounce handshake,
// BaseAgentConfig up to bounceParams), under our own names in namespace
// kvftrt, so the shim builds without TensorRT-LLM headers. The sizes of the
// spec are pinned by static_asserts below.
//
// With -DKVFERRY_WITH_TRTLLM_HEADERS (and TensorRT-LLM's cpp/include on the
// include path) the same names become aliases of TensorRT-LLM's own types, so
// the shim takes the layouts of the release those headers come from. That
// builds for every release whose BaseTransferAgent has the slot order below
// and whose TransferStatus::wait takes a timeout (release and
// getLastStatusStr may be absent); older headers fail to compile.
//
// Requirements shared with TensorRT-LLM: g++/libstdc++ with the C++11 string
// ABI, libstdc++ linked dynamically (one copy in the process).
#ifndef KVFERRY_PLUGIN_TRTLLM_ABI_H
#define KVFERRY_PLUGIN_TRTLLM_ABI_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#ifdef KVFERRY_WITH_TRTLLM_HEADERS

#include "tensorrt_llm/executor/transferAgent.h"

namespace kvftrt {
namespace up = tensorrt_llm::executor::kv_cache;
using MemKind = up::MemoryType;
using MemRange = up::MemoryDesc;
using MemRanges = up::MemoryDescs;
using AgentInfo = up::AgentDesc;
using Op = up::TransferOp;
using Request = up::TransferRequest;
using State = up::TransferState;
using StatusBase = up::TransferStatus;
using Config = up::BaseAgentConfig;
using AgentBase = up::BaseTransferAgent;
using Message = up::SyncMessage;
using ConnInfo = up::ConnectionInfoType;
} // namespace kvftrt

#else // our own declarations

namespace kvftrt {

// MemoryType: where a range lives. kvferry registers every kind the same way
// (the engine detects the location).
enum class MemKind : uint8_t { kDRAM, kVRAM, kBLK, kOBJ, kFILE };

// MemoryDesc: one range (24 bytes).
class MemRange {
public:
    MemRange(uintptr_t addr, size_t len, uint32_t deviceId) : mAddr{addr}, mLen{len}, mDeviceId{deviceId} {}
    MemRange(void *addr, size_t len, uint32_t deviceId)
        : mAddr{reinterpret_cast<uintptr_t>(addr)}, mLen{len}, mDeviceId{deviceId} {}
    [[nodiscard]] uintptr_t getAddr() const noexcept { return mAddr; }
    [[nodiscard]] size_t getLen() const noexcept { return mLen; }
    [[nodiscard]] uint32_t getDeviceId() const noexcept { return mDeviceId; }

private:
    uintptr_t mAddr;
    size_t mLen;
    uint32_t mDeviceId;
};

// MemoryDescs (also TransferDescs, RegisterDescs): a kind and its ranges.
class MemRanges {
public:
    MemRanges(MemKind type, std::vector<MemRange> descs) : mType{type}, mDescs{std::move(descs)} {}
    [[nodiscard]] MemKind getType() const noexcept { return mType; }
    [[nodiscard]] std::vector<MemRange> const &getDescs() const noexcept { return mDescs; }

private:
    MemKind mType;
    std::vector<MemRange> mDescs;
};

// VramRegionMeta: cuMem VMM chunking of one registered region.
struct VramRegion {
    uintptr_t baseAddr;
    size_t totalLen;
    size_t chunkSize;
};

// AgentDesc: returned by value (the caller sizes the result), so the three
// members must match exactly.
class AgentInfo final {
public:
    AgentInfo(std::string backendAgentDesc) : mBackendAgentDesc{std::move(backendAgentDesc)} {}
    AgentInfo(std::string backendAgentDesc, std::vector<VramRegion> vramRegions, std::string bounceHandshake = {})
        : mBackendAgentDesc{std::move(backendAgentDesc)}, mVramRegions{std::move(vramRegions)},
          mBounceHandshake{std::move(bounceHandshake)} {}
    [[nodiscard]] std::string const &getBackendAgentDesc() const noexcept { return mBackendAgentDesc; }
    [[nodiscard]] std::vector<VramRegion> const &getVramRegions() const noexcept { return mVramRegions; }
    [[nodiscard]] std::string const &getBounceHandshake() const noexcept { return mBounceHandshake; }

private:
    std::string mBackendAgentDesc;
    std::vector<VramRegion> mVramRegions;
    std::string mBounceHandshake;
};

using Message = std::string;  // SyncMessage: opaque bytes
using ConnInfo = std::string; // ConnectionInfoType: "ip:port"

// TransferOp.
enum class Op : uint8_t { kREAD, kWRITE };

// TransferRequest: read through inline getters, so the member order counts.
class Request {
public:
    Request(Op op, MemRanges src, MemRanges dst, std::string const &remoteName,
            std::optional<Message> syncMessage = std::nullopt)
        : mOp{op}, mSrcDescs{std::move(src)}, mDstDescs{std::move(dst)}, mRemoteName{remoteName},
          mSyncMessage{std::move(syncMessage)} {}
    [[nodiscard]] Op getOp() const noexcept { return mOp; }
    [[nodiscard]] MemRanges const &getSrcDescs() const noexcept { return mSrcDescs; }
    [[nodiscard]] MemRanges const &getDstDescs() const noexcept { return mDstDescs; }
    [[nodiscard]] std::string const &getRemoteName() const noexcept { return mRemoteName; }
    [[nodiscard]] std::optional<Message> getSyncMessage() const noexcept { return mSyncMessage; }

private:
    Op mOp;
    MemRanges mSrcDescs;
    MemRanges mDstDescs;
    std::string mRemoteName;
    std::optional<Message> mSyncMessage;
};

// TransferState.
enum class State : uint8_t { kIN_PROGRESS, kSUCCESS, kFAILURE };

// TransferStatus: vtable slots 0-1 destructor, 2 isCompleted, 3 wait,
// 4 release, 5 getLastStatusStr.
class StatusBase {
public:
    virtual ~StatusBase() = default;
    [[nodiscard]] virtual bool isCompleted() const = 0;
    virtual State wait(int64_t timeout_ms = -1) const = 0;
    [[nodiscard]] virtual bool release() { return false; }
    [[nodiscard]] virtual std::string getLastStatusStr() const { return {}; }
};

// BaseAgentConfig. Only mName (offset 0) has kept its place in every
// release; the shim reads nothing else.
struct Config {
    std::string mName;
    bool useProgThread;
    bool multiThread;
    bool useListenThread;
    bool enableTelemetry;
    std::unordered_map<std::string, std::string> backendParams;
    std::optional<int> rank;
    std::optional<int> worldSize;
    size_t agentBufferSizeMb{0};
    std::unordered_map<std::string, std::string> bounceParams;
};

// BaseTransferAgent: vtable slots 0-1 destructor, then the methods in this
// order (2 registerMemory ... 12 checkRemoteDescs).
class AgentBase {
public:
    virtual ~AgentBase() = default;
    virtual void registerMemory(MemRanges const &descs) = 0;
    virtual void deregisterMemory(MemRanges const &descs) = 0;
    virtual void loadRemoteAgent(std::string const &name, AgentInfo const &agentDesc) = 0;
    virtual void loadRemoteAgent(std::string const &name, ConnInfo const &connectionInfo) = 0;
    virtual void invalidateRemoteAgent(std::string const &name) = 0;
    virtual AgentInfo getLocalAgentDesc() = 0;
    virtual ConnInfo getLocalConnectionInfo() = 0;
    [[nodiscard]] virtual std::unique_ptr<StatusBase> submitTransferRequests(Request const &request) = 0;
    virtual void notifySyncMessage(std::string const &name, Message const &syncMessage) = 0;
    virtual std::unordered_map<std::string, std::vector<Message>> getNotifiedSyncMessages() = 0;
    virtual bool checkRemoteDescs(std::string const &name, MemRanges const &memoryDescs) = 0;
};

// Layout of the spec (specs/tensorrt-llm.md §1.3), x86-64 and aarch64
// libstdc++: a change here breaks the ABI with TensorRT-LLM.
static_assert(sizeof(MemRange) == 24 && alignof(MemRange) == 8, "MemoryDesc is 24 bytes");
static_assert(sizeof(MemRanges) == 32, "MemoryDescs is a byte enum and a vector");
static_assert(sizeof(VramRegion) == 24, "VramRegionMeta is 24 bytes");
static_assert(sizeof(AgentInfo) == 88, "AgentDesc: string, vector, string");
static_assert(sizeof(Request) == 144, "TransferRequest: op, two MemoryDescs, name, optional message");
static_assert(sizeof(Config) == 176, "BaseAgentConfig up to bounceParams");
static_assert(sizeof(StatusBase) == sizeof(void *) && sizeof(AgentBase) == sizeof(void *),
              "the interfaces hold only a vtable pointer");

} // namespace kvftrt

#endif // KVFERRY_WITH_TRTLLM_HEADERS

namespace kvftrt {
// What the shim relies on in either mode.
static_assert(sizeof(std::string) == 32, "libstdc++ with the C++11 string ABI");
static_assert(sizeof(State) == 1 && sizeof(Op) == 1 && sizeof(MemKind) == 1, "byte enums");
static_assert(static_cast<int>(State::kIN_PROGRESS) == 0 && static_cast<int>(State::kSUCCESS) == 1 &&
                  static_cast<int>(State::kFAILURE) == 2,
              "TransferState values are KVFERRY_XFER_*");
static_assert(static_cast<int>(Op::kREAD) == 0 && static_cast<int>(Op::kWRITE) == 1,
              "TransferOp values are OPCODE_*");
} // namespace kvftrt

#endif // KVFERRY_PLUGIN_TRTLLM_ABI_H
