// abi_probe.cpp - prints the NIXL plugin ABI as the compiler lays it out:
// sizes, public offsets and the vtable slot of every engine method. run.sh
// compares the output for kvferry's declarations (plugin/nixl_abi.h) with
// abi_probe.golden, written from shared/specs/nixl.md §2. Built with
// -DKVFERRY_WITH_NIXL_HEADERS against a NIXL install, the same program must
// print the same lines; that is how to re-check a new NIXL release.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "nixl_abi.h"

using namespace kvfnixl;

#ifdef KVFERRY_WITH_NIXL_HEADERS
using RemoteList = nixl_remote_meta_dlist_t;
using RegList = nixl_reg_dlist_t;
using QueryVec = std::vector<nixl_query_resp_t>;
using Cost = nixl_cost_t;
using AgentOpt = nixl_opt_args_t;
#else
using RemoteList = RemoteMetaDescList;
using RegList = RegDescList;
using QueryVec = std::vector<QueryResp>;
using Cost = CostMethod;
using AgentOpt = AgentOptArgsOpaque;
#endif

// slot returns the vtable index of a virtual member function (Itanium C++
// ABI: the pointer-to-member holds 1 + the byte offset in the vtable).
template <class M> static long slot(M m) {
    struct {
        uintptr_t ptr;
        ptrdiff_t adj;
    } r;
    static_assert(sizeof(m) == sizeof(r));
    memcpy(&r, &m, sizeof r);
    return static_cast<long>((r.ptr - 1) / sizeof(void *));
}

#define SIZE(T) printf("sizeof %s %zu\n", #T, sizeof(T))
#define OFF(T, m) printf("offsetof %s.%s %zu\n", #T, #m, offsetof(T, m))

int main() {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
    SIZE(PluginTable);
    OFF(PluginTable, api_version);
    OFF(PluginTable, create_engine);
    OFF(PluginTable, destroy_engine);
    OFF(PluginTable, get_plugin_name);
    OFF(PluginTable, get_plugin_version);
    OFF(PluginTable, get_backend_options);
    OFF(PluginTable, get_backend_mems);
    SIZE(InitParams);
    OFF(InitParams, localAgent);
    OFF(InitParams, type);
    OFF(InitParams, customParams);
    OFF(InitParams, enableProgTh);
    OFF(InitParams, pthrDelay);
    OFF(InitParams, syncMode);
    OFF(InitParams, enableTelemetry_);
    SIZE(BackendEngine);
    SIZE(BasicDesc);
    SIZE(BlobDesc);
    OFF(BlobDesc, metaInfo);
    SIZE(MetaDesc);
    OFF(MetaDesc, metadataP);
    SIZE(MetaDescList);
    SIZE(BackendMD);
    SIZE(BackendReqH);
    SIZE(OptArgs);
    OFF(OptArgs, notifMsg);
    OFF(OptArgs, hasNotif);
    OFF(OptArgs, customParam);
    SIZE(Params);
    SIZE(MemList);
    SIZE(NotifList);
#pragma GCC diagnostic pop
    using E = BackendEngine;
    printf("slot supportsRemote %ld\n", slot(&E::supportsRemote));
    printf("slot supportsLocal %ld\n", slot(&E::supportsLocal));
    printf("slot supportsNotif %ld\n", slot(&E::supportsNotif));
    printf("slot getSupportedMems %ld\n", slot(&E::getSupportedMems));
    printf("slot registerMem %ld\n", slot(&E::registerMem));
    printf("slot deregisterMem %ld\n", slot(&E::deregisterMem));
    printf("slot connect %ld\n", slot(&E::connect));
    printf("slot disconnect %ld\n", slot(&E::disconnect));
    printf("slot unloadMD %ld\n", slot(&E::unloadMD));
    printf("slot prepXfer %ld\n", slot(&E::prepXfer));
    printf("slot postXfer %ld\n", slot(&E::postXfer));
    printf("slot checkXfer %ld\n", slot(&E::checkXfer));
    printf("slot releaseReqH %ld\n", slot(&E::releaseReqH));
    printf("slot prepMemView(remote) %ld\n",
           slot(static_cast<Status (E::*)(const RemoteList &, void *&, const OptArgs *) const>(&E::prepMemView)));
    printf("slot prepMemView(local) %ld\n",
           slot(static_cast<Status (E::*)(const MetaDescList &, void *&, const OptArgs *) const>(&E::prepMemView)));
    printf("slot releaseMemView %ld\n", slot(&E::releaseMemView));
    printf("slot getPublicData %ld\n", slot(&E::getPublicData));
    printf("slot getConnInfo %ld\n", slot(&E::getConnInfo));
    printf("slot loadRemoteConnInfo %ld\n", slot(&E::loadRemoteConnInfo));
    printf("slot loadRemoteMD %ld\n", slot(&E::loadRemoteMD));
    printf("slot loadLocalMD %ld\n", slot(&E::loadLocalMD));
    printf("slot getNotifs %ld\n", slot(&E::getNotifs));
    printf("slot genNotif %ld\n", slot(&E::genNotif));
    printf("slot queryMem %ld\n", slot(static_cast<Status (E::*)(const RegList &, QueryVec &) const>(&E::queryMem)));
    printf("slot estimateXferCost %ld\n",
           slot(static_cast<Status (E::*)(const XferOp &, const MetaDescList &, const MetaDescList &,
                                          const std::string &, BackendReqH *const &, std::chrono::microseconds &,
                                          std::chrono::microseconds &, Cost &, const AgentOpt *) const>(
               &E::estimateXferCost)));
    return 0;
}
