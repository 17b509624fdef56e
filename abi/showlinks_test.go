package abi

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

func TestPortCountersLine(t *testing.T) {
	c := engine.NICCounters{Device: "mlx5_0", Port: 1, XmitBytes: 4096, RcvBytes: 8192, XmitPackets: 3, RcvPackets: 4,
		LinkDowned: 1, Errors: map[string]uint64{"symbol_error": 2, "port_rcv_errors": 0, "port_xmit_discards": 5},
		HW: map[string]uint64{"out_of_buffer": 7, "rnr_nak_retry_err": 0}}
	assert.Equal(t, portCountersLine(c), "port 1 counters: xmit 4096 B (3 packets) rcv 8192 B (4 packets) link_downed 1 errors 7"+
		" (port_xmit_discards 5, symbol_error 2) hw_counters: out_of_buffer 7")
	c = engine.NICCounters{Device: "mlx5_1", Port: 1}
	assert.Equal(t, portCountersLine(c), "port 1 counters: xmit 0 B (0 packets) rcv 0 B (0 packets) link_downed 0 errors 0")
	c.Err = "rdma port counters mlx5_1/1: no such file"
	assert.Equal(t, portCountersLine(c), "port 1 counters: unavailable (rdma port counters mlx5_1/1: no such file)")
}
