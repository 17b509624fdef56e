package handshake

import (
	"reflect"
	"testing"
)

// The Connection body as Mooncake's TransferHandshakeUtil::encode writes it
// through jsoncpp's FastWriter (sorted keys, compact, newline), with the
// fields of specs/mooncake.md §3.6.
const goldenHandshake = `{"local_gid":"fe:80:00:00:00:00:00:00:00:00:00:00:0a:00:00:01","local_lid":0,"local_nic_path":"10.0.0.1:15321@mlx5_0","payload":"","peer_nic_path":"10.0.0.2:16002@mlx5_1","qp_num":[4660,4661],"ready_ack":false,"reply_msg":""}` + "\n"

func TestHandshakeGolden(t *testing.T) {
	f := false
	h := &Desc{LocalNICPath: "10.0.0.1:15321@mlx5_0", LocalGID: "fe:80:00:00:00:00:00:00:00:00:00:00:0a:00:00:01",
		PeerNICPath: "10.0.0.2:16002@mlx5_1", QPNum: []uint32{4660, 4661}, ReadyAck: &f}
	if got := string(Encode(h)); got != goldenHandshake {
		t.Fatalf("encoded %s, want %s", got, goldenHandshake)
	}
	back, err := Decode([]byte(goldenHandshake))
	if err != nil || !reflect.DeepEqual(back, h) {
		t.Fatalf("decoded %+v (%v), want %+v", back, err, h)
	}
	if !back.ReadyAckSupported() || back.IsReadyAck() {
		t.Fatal("ready_ack false: supported, not an ack")
	}

	// An older peer: no ready_ack field, lid as a number, extra fields.
	old, err := Decode([]byte(`{"local_nic_path":"a:1@mlx5_0","peer_nic_path":"b:2@mlx5_0","local_lid":7,"local_gid":"x","qp_num":[1],"reply_msg":"","barex_port":9}`))
	if err != nil || old.ReadyAckSupported() || old.LocalLID != 7 {
		t.Fatalf("older peer: %+v (%v)", old, err)
	}
	// A rejection carries only reply_msg.
	rej, err := Decode(Encode(&Desc{ReplyMsg: "no"}))
	if err != nil || rej.ReplyMsg != "no" || rej.QPNum == nil || len(rej.QPNum) != 0 {
		t.Fatalf("rejection: %+v (%v)", rej, err)
	}

	s, n, ok := SplitNICPath("[fe80::1]:15000@mlx5_3")
	if !ok || s != "[fe80::1]:15000" || n != "mlx5_3" {
		t.Fatalf("split: %q %q %v", s, n, ok)
	}
	if _, _, ok = SplitNICPath("nonic@"); ok {
		t.Fatal("nonic@ split")
	}
}
