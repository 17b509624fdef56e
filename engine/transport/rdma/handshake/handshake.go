package handshake

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Desc is Mooncake's HandShakeDesc, the JSON body of a Connection
// request and its reply on the RPC port (transfer_metadata.cpp's
// TransferHandshakeUtil). Fields are in the order jsoncpp's FastWriter
// writes them (sorted keys), so the encoding matches Mooncake's bytes.
// ready_ack is present only from peers that support the ready-ACK phase
// (its presence, not its value, says so). efa_addr is the hex endpoint
// address (fi_getname) that Mooncake's EFA builds add (efa_transport's
// EfaEndPoint): present only in the EFA transport's handshakes.
type Desc struct {
	EFAAddr      string   `json:"efa_addr,omitempty"`
	LocalGID     string   `json:"local_gid"`
	LocalLID     uint16   `json:"local_lid"`
	LocalNICPath string   `json:"local_nic_path"`
	Payload      string   `json:"payload"`
	PeerNICPath  string   `json:"peer_nic_path"`
	QPNum        []uint32 `json:"qp_num"`
	ReadyAck     *bool    `json:"ready_ack,omitempty"`
	ReplyMsg     string   `json:"reply_msg"`
}

// ReadyAckSupported reports whether the peer that sent h supports the
// ready-ACK phase.
func (h *Desc) ReadyAckSupported() bool { return h.ReadyAck != nil }

// IsReadyAck reports whether h is a ready-ACK.
func (h *Desc) IsReadyAck() bool { return h.ReadyAck != nil && *h.ReadyAck }

// Encode returns h's JSON body in Mooncake's bytes (a nil QPNum is sent as
// an empty list).
func Encode(h *Desc) []byte {
	if h.QPNum == nil {
		h.QPNum = []uint32{}
	}
	b, _ := json.Marshal(h)
	return append(b, '\n') // FastWriter ends with a newline
}

// Decode parses a HandShakeDesc leniently, as jsoncpp's accessors
// do: a missing or mistyped field reads as its zero value.
func Decode(b []byte) (*Desc, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("rdma handshake: %w", err)
	}
	h := &Desc{}
	str := func(k string) string {
		var s string
		if v, ok := raw[k]; ok {
			_ = json.Unmarshal(v, &s)
		}
		return s
	}
	h.Payload = str("payload")
	h.LocalNICPath = str("local_nic_path")
	h.LocalGID = str("local_gid")
	h.PeerNICPath = str("peer_nic_path")
	h.ReplyMsg = str("reply_msg")
	h.EFAAddr = str("efa_addr")
	if v, ok := raw["local_lid"]; ok {
		var n uint16
		if json.Unmarshal(v, &n) == nil {
			h.LocalLID = n
		}
	}
	if v, ok := raw["qp_num"]; ok {
		var qs []uint32
		if err := json.Unmarshal(v, &qs); err != nil {
			return nil, fmt.Errorf("rdma handshake: qp_num: %w", err)
		}
		h.QPNum = qs
	}
	if v, ok := raw["ready_ack"]; ok {
		b := false
		_ = json.Unmarshal(v, &b)
		h.ReadyAck = &b
	}
	return h, nil
}

// NICPath is Mooncake's "<server>@<nic>" name of a NIC.
func NICPath(server, nic string) string { return server + "@" + nic }

// SplitNICPath splits a NIC path at its last '@'.
func SplitNICPath(p string) (server, nic string, ok bool) {
	i := strings.LastIndexByte(p, '@')
	if i <= 0 || i == len(p)-1 {
		return "", "", false
	}
	return p[:i], p[i+1:], true
}
