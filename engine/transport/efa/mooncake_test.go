package efa_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/efa"
	"github.com/kvferry/kvferry/engine/transport/rdma/handshake"
)

// mooncakeEFADescriptor is a segment descriptor in the shape Mooncake's
// EFA build writes it (transfer_metadata.cpp, jsoncpp's sorted keys): two
// EFA devices named as their verbs devices, lid 0, gid the hex of the
// provider's source address, one 64-bit fi_mr_key per device and buffer
// (0 where a chunk is not registered on a device), a priority matrix.
const mooncakeEFADescriptor = `{"buffers":[` +
	`{"addr":140737316421632,"length":1073741824,"lkey":[12884901889,17179869185],"name":"cpu:0","rkey":[12884901889,17179869185]},` +
	`{"addr":140738390163456,"length":4096,"lkey":[0,17179869186],"name":"cpu:0","rkey":[0,17179869186]}],` +
	`"devices":[{"gid":"fe800000000000000401aefffe9d6d3a0e00000000000000a1b2c3d4","lid":0,"name":"rdmap16s27"},` +
	`{"gid":"fe800000000000000404f3fffe5e7c1b0e00000000000000a1b2c3d4","lid":0,"name":"rdmap32s27"}],` +
	`"name":"10.0.0.7:15428","priority_matrix":{"cpu:0":[["rdmap16s27","rdmap32s27"],[]]},"protocol":"efa",` +
	`"tcp_data_port":0,"tcp_proto_version":1,"timestamp":"2026-12-07 06:00:00.000000"}`

// TestMooncakeDescriptor decodes Mooncake's EFA descriptor: 64-bit keys
// survive, the decoder's rules hold, and re-encoding keeps every field
// Mooncake reads.
func TestMooncakeDescriptor(t *testing.T) {
	d, err := descriptor.Unmarshal([]byte(mooncakeEFADescriptor))
	assert.NilError(t, err)
	assert.Equal(t, d.Protocol, efa.Name)
	assert.Equal(t, len(d.Devices), 2)
	assert.Equal(t, d.Devices[1].Name, "rdmap32s27")
	assert.DeepEqual(t, d.Buffers[0].RKey, []uint64{12884901889, 17179869185})
	assert.DeepEqual(t, d.Buffers[1].RKey, []uint64{0, 17179869186})
	raw, err := descriptor.Marshal(d)
	assert.NilError(t, err)
	for _, want := range []string{`"rkey":[12884901889,17179869185]`, `"lkey":[0,17179869186]`, `"priority_matrix":{"cpu:0":[["rdmap16s27","rdmap32s27"],[]]}`,
		`"name":"rdmap16s27","lid":0,"gid":"fe800000000000000401aefffe9d6d3a0e00000000000000a1b2c3d4"`} {
		assert.Assert(t, strings.Contains(string(raw), want), "%s lacks %s", raw, want)
	}
	// A key count that differs from the device count is refused, as
	// Mooncake's decodeSegmentDesc refuses it.
	bad := strings.Replace(mooncakeEFADescriptor, `"rkey":[0,17179869186]`, `"rkey":[17179869186]`, 1)
	bad = strings.Replace(bad, `"lkey":[0,17179869186]`, `"lkey":[17179869186]`, 1)
	_, err = descriptor.Unmarshal([]byte(bad))
	assert.ErrorIs(t, err, descriptor.ErrMalformed)
}

// TestMooncakeHandshakeBytes: the Connection request Mooncake's EFA
// endpoint sends (setupConnectionsByActive through TransferHandshakeUtil:
// no ready_ack, an empty local_gid, efa_addr the hex of fi_getname) is
// what handshake.Encode writes, byte for byte, and decodes back.
func TestMooncakeHandshakeBytes(t *testing.T) {
	const wire = `{"efa_addr":"fe800000000000000401aefffe9d6d3a0e00000000000000a1b2c3d4","local_gid":"","local_lid":0,` +
		`"local_nic_path":"10.0.0.8:15430@rdmap16s27","payload":"","peer_nic_path":"10.0.0.7:15428@rdmap32s27","qp_num":[],"reply_msg":""}` + "\n"
	h := &handshake.Desc{EFAAddr: "fe800000000000000401aefffe9d6d3a0e00000000000000a1b2c3d4",
		LocalNICPath: "10.0.0.8:15430@rdmap16s27", PeerNICPath: "10.0.0.7:15428@rdmap32s27"}
	assert.Equal(t, string(handshake.Encode(h)), wire)
	back, err := handshake.Decode([]byte(wire))
	assert.NilError(t, err)
	assert.Equal(t, back.EFAAddr, h.EFAAddr)
	assert.Assert(t, !back.ReadyAckSupported())
	// The rdma transport's handshakes stay as they were: no efa_addr.
	assert.Assert(t, !strings.Contains(string(handshake.Encode(&handshake.Desc{LocalNICPath: "a@mlx5_0"})), "efa_addr"))
}

// TestMooncakeOnlyPeer runs a peer that publishes only Mooncake's EFA
// fields (no kvferry record): this engine learns its endpoint address in
// the Connection handshake, as it would from a Mooncake node, then writes
// and reads its memory; warmupEfaSegment does the handshakes up front.
func TestMooncakeOnlyPeer(t *testing.T) {
	skipWithoutLibfabric(t)
	o := startOwner(t, 8<<20, 0, "EFA_TEST_MOONCAKE=1")
	l := newLocal(t, 4<<20, nil)
	seg := l.open(t, o.segment)
	d, err := l.e.SegmentDescriptor(seg)
	assert.NilError(t, err)
	_, has := d.Extra[efa.Name]
	assert.Assert(t, !has, "the owner published a kvferry record")
	assert.Equal(t, d.Protocol, efa.Name)
	assert.Assert(t, len(d.Devices) == 1 && len(d.Buffers) > 0 && len(d.Buffers[0].RKey) == 1)
	assert.Assert(t, len(d.PriorityMatrix) > 2, "no priority matrix: %s", d.PriorityMatrix)

	tr := l.e.Transport(efa.Name).(*efa.Transport)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	assert.NilError(t, tr.Warmup(ctx, o.segment))
	assert.NilError(t, tr.Warmup(ctx, o.segment))

	for i, n := range []uint64{4 << 10, 1 << 20, 3 << 20} {
		seed := uint64(40 + i)
		pattern(l.buf[:n], seed)
		assert.NilError(t, l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr + 8192, Length: n}}))
		assert.Equal(t, o.do(t, "check", seed, 8192, n), "ok", "write of %d bytes", n)
		assert.Equal(t, o.do(t, "fill", seed+100, 4096, n), "ok")
		clear(l.buf[:n])
		assert.NilError(t, l.transfer(t, []engine.Request{{Op: engine.OpRead, Source: l.addr, Target: seg, TargetOffset: o.addr + 4096, Length: n}}))
		want := make([]byte, n)
		pattern(want, seed+100)
		assert.Assert(t, bytes.Equal(l.buf[:n], want), "read of %d bytes", n)
	}
	// A range outside the peer's buffers is refused before posting.
	err = l.transfer(t, []engine.Request{{Op: engine.OpRead, Source: l.addr, Target: seg, TargetOffset: o.addr + 8<<20 - 4096, Length: 8192}})
	assert.ErrorIs(t, err, engine.ErrAddressNotRegistered)
}

// TestMooncakeHandshakePassive sends this engine the Connection request a
// Mooncake EFA node sends and checks the reply: the device's own address
// as efa_addr, the NIC paths swapped, no reply_msg; a request naming a
// device this engine lacks gets Mooncake's refusal text.
func TestMooncakeHandshakePassive(t *testing.T) {
	skipWithoutLibfabric(t)
	l := newLocal(t, 1<<20, nil)
	d := l.e.LocalDescriptor()
	dev := d.Devices[0].Name
	pub, err := efa.ParsePublished(d.Extra[efa.Name])
	assert.NilError(t, err)
	peerAddr := pub.Devices[0].Addr // any valid address of this provider
	addr := fmt.Sprintf("127.0.0.1:%d", l.e.RPCPort())
	call := func(h *handshake.Desc) *handshake.Desc {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := rpc.Call(ctx, addr, rpc.TypeConnection, handshake.Encode(h), l.e.RPCClientConfig())
		assert.NilError(t, err)
		r, err := handshake.Decode(raw)
		assert.NilError(t, err)
		return r
	}
	r := call(&handshake.Desc{LocalNICPath: "10.0.0.8:15430@rdmap16s27", PeerNICPath: l.e.SegmentName() + "@" + dev, EFAAddr: peerAddr})
	assert.Equal(t, r.ReplyMsg, "")
	assert.Equal(t, r.EFAAddr, pub.Devices[0].Addr)
	assert.Equal(t, r.LocalNICPath, l.e.SegmentName()+"@"+dev)
	assert.Equal(t, r.PeerNICPath, "10.0.0.8:15430@rdmap16s27")
	_, err = hex.DecodeString(r.EFAAddr)
	assert.NilError(t, err)

	r = call(&handshake.Desc{LocalNICPath: "10.0.0.8:15430@rdmap16s27", PeerNICPath: l.e.SegmentName() + "@rdmap99s0", EFAAddr: peerAddr})
	assert.Equal(t, r.ReplyMsg, "EFA nic path inconsistency")
	r = call(&handshake.Desc{LocalNICPath: "10.0.0.8:15430@rdmap16s27", PeerNICPath: l.e.SegmentName() + "@" + dev, EFAAddr: "zz"})
	assert.Equal(t, r.ReplyMsg, "Failed to insert peer address")
	// Without efa_addr the request is the rdma transport's (not installed).
	r = call(&handshake.Desc{LocalNICPath: "10.0.0.8:15430@mlx5_0", PeerNICPath: l.e.SegmentName() + "@mlx5_0"})
	assert.Assert(t, strings.Contains(r.ReplyMsg, "rdma transport not installed"), "%q", r.ReplyMsg)
}
