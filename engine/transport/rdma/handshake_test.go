package rdma

import (
	"testing"

	"gotest.tools/v3/assert"
)

// The Connection body as Mooncake's TransferHandshakeUtil::encode writes it
// through jsoncpp's FastWriter (sorted keys, compact, newline), with the
// fields of specs/mooncake.md §3.6.
const goldenHandshake = `{"local_gid":"fe:80:00:00:00:00:00:00:00:00:00:00:0a:00:00:01","local_lid":0,"local_nic_path":"10.0.0.1:15321@mlx5_0","payload":"","peer_nic_path":"10.0.0.2:16002@mlx5_1","qp_num":[4660,4661],"ready_ack":false,"reply_msg":""}` + "\n"

func TestHandshakeGolden(t *testing.T) {
	f := false
	h := &handshake{LocalNICPath: "10.0.0.1:15321@mlx5_0", LocalGID: "fe:80:00:00:00:00:00:00:00:00:00:00:0a:00:00:01",
		PeerNICPath: "10.0.0.2:16002@mlx5_1", QPNum: []uint32{4660, 4661}, ReadyAck: &f}
	assert.Equal(t, string(encodeHandshake(h)), goldenHandshake)
	back, err := decodeHandshake([]byte(goldenHandshake))
	assert.NilError(t, err)
	assert.DeepEqual(t, back, h)
	assert.Assert(t, back.readyAckSupported() && !back.isReadyAck())

	// An older peer: no ready_ack field, lid as a number, extra fields.
	old, err := decodeHandshake([]byte(`{"local_nic_path":"a:1@mlx5_0","peer_nic_path":"b:2@mlx5_0","local_lid":7,"local_gid":"x","qp_num":[1],"reply_msg":"","barex_port":9}`))
	assert.NilError(t, err)
	assert.Assert(t, !old.readyAckSupported())
	assert.Equal(t, old.LocalLID, uint16(7))
	// A rejection carries only reply_msg.
	rej, err := decodeHandshake(encodeHandshake(&handshake{ReplyMsg: "no"}))
	assert.NilError(t, err)
	assert.Equal(t, rej.ReplyMsg, "no")
	assert.DeepEqual(t, rej.QPNum, []uint32{})

	s, n, ok := splitNICPath("[fe80::1]:15000@mlx5_3")
	assert.Assert(t, ok)
	assert.Equal(t, s, "[fe80::1]:15000")
	assert.Equal(t, n, "mlx5_3")
	_, _, ok = splitNICPath("nonic@")
	assert.Assert(t, !ok)
}
