package coro

import (
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// MasterInfoProtocol is the kvferry master protocol version that
// kvferry_master_info answers: 1 is mux, falling back to gRPC, with
// kvferry's extensions (tenants, groups, put grants, disk tier).
const MasterInfoProtocol uint32 = 1

// MethodKvferryMasterInfo is a coro_rpc function only kvferry-master
// registers. Its function id is derived from its handler name the way
// coro_rpc derives every id (FuncID), outside Mooncake's ServicePrefix, so
// mooncake_master answers it with ErrcFunctionNotRegistered at once: a
// store client probing with it tells the two masters apart in one round
// trip. It takes no arguments.
var MethodKvferryMasterInfo = Method{Name: "kvferry_master_info", ID: FuncID("kvferry_master_info")}

// MasterInfo is kvferry_master_info's answer: the protocol version and the
// names of the features the master serves.
type MasterInfo struct {
	Protocol uint32
	Features []string
}

// MasterInfoCodec is MasterInfo's struct_pack codec (a struct of uint32
// and std::vector<std::string>).
var MasterInfoCodec = sp.Define(sp.StructLit(sp.Uint32.Literal(), vecString.Literal()), 4+vecString.MinBytes(),
	func(e *sp.Encoder, v *MasterInfo) { e.U32(v.Protocol); vecString.Encode(e, &v.Features) },
	func(d *sp.Decoder, v *MasterInfo) { v.Protocol = d.U32(); vecString.Decode(d, &v.Features) })
