package master

import (
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// coroMasterFeatures are the kvferry features kvferry_master_info names:
// what a kvferry store client gets by calling the master in its native
// protocol rather than in Mooncake's.
var coroMasterFeatures = []string{"mux", "grpc", "tenants", "groups", "put-grants", "disk-tier"}

// coroKvferryCall answers kvferry_master_info, the coro_rpc function only
// kvferry-master registers (issue 36): a kvferry store client calls it
// first on a master it has not identified, and mooncake_master answers it
// "function not registered", so one round trip tells them apart. It is
// answered before the leader check: a standby is a kvferry master too, and
// the client then speaks mux or gRPC to it, which say who leads. ok is
// false for every other function id.
func (h *coroServer) coroKvferryCall(out []byte, req coro.Request) (_ []byte, ok bool) {
	if req.Header.FuncID != coro.MethodKvferryMasterInfo.ID {
		return out, false
	}
	info := coro.MasterInfo{Protocol: coro.MasterInfoProtocol, Features: coroMasterFeatures}
	return coro.AppendResponse(out, req.Header.Seq, sp.Marshal(coro.MasterInfoCodec, &info)), true
}
