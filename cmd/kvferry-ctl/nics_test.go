package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

const nicMetrics = `# TYPE kvferry_rdma_nic_up gauge
kvferry_rdma_nic_up{device="mlx5_0"} 1
kvferry_rdma_nic_up{device="mlx5_1"} 0
# TYPE kvferry_rdma_nic_bandwidth_bytes_per_second gauge
kvferry_rdma_nic_bandwidth_bytes_per_second{device="mlx5_0"} 2.5e+10
# TYPE kvferry_rdma_nic_endpoints gauge
kvferry_rdma_nic_endpoints{device="mlx5_0"} 3
# TYPE kvferry_rdma_port_xmit_bytes_total counter
kvferry_rdma_port_xmit_bytes_total{device="mlx5_0",port="1"} 4096
# TYPE kvferry_rdma_port_rcv_bytes_total counter
kvferry_rdma_port_rcv_bytes_total{device="mlx5_0",port="1"} 8192
# TYPE kvferry_rdma_port_link_downed_total counter
kvferry_rdma_port_link_downed_total{device="mlx5_0",port="1"} 1
# TYPE kvferry_rdma_port_errors_total counter
kvferry_rdma_port_errors_total{counter="symbol_error",device="mlx5_0",port="1"} 2
kvferry_rdma_port_errors_total{counter="port_rcv_errors",device="mlx5_0",port="1"} 3
# TYPE kvferry_rdma_port_hw_counters_total counter
kvferry_rdma_port_hw_counters_total{counter="out_of_buffer",device="mlx5_0",port="1"} 7
kvferry_rdma_port_hw_counters_total{counter="rnr_nak_retry_err",device="mlx5_0",port="1"} 0
`

func TestMetricNICRows(t *testing.T) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(nicMetrics))
	assert.NilError(t, err)
	rows := metricNICRows("p1", mfs)
	assert.Equal(t, len(rows), 2)
	r := rows[0]
	assert.Equal(t, r.Device, "mlx5_0")
	assert.Equal(t, r.Port, "1")
	assert.Assert(t, r.Up != nil && *r.Up)
	assert.Equal(t, r.Bandwidth, 2.5e10)
	assert.Equal(t, r.Endpoints, 3.0)
	assert.Equal(t, r.XmitBytes, 4096.0)
	assert.Equal(t, r.RcvBytes, 8192.0)
	assert.Equal(t, r.LinkDowned, 1.0)
	assert.Equal(t, r.errorTotal(), 5.0)
	assert.Equal(t, hwSummary(r.HW), "out_of_buffer 7")
	// A NIC whose port counters are not exported: one row of its gauges.
	assert.Equal(t, rows[1].Device, "mlx5_1")
	assert.Equal(t, rows[1].Port, "-")
	assert.Assert(t, rows[1].Up != nil && !*rows[1].Up)
	assert.Equal(t, rows[1].Note, "no port counters")
}

func TestHostNICRows(t *testing.T) {
	sys := fstest.MapFS{
		"class/infiniband/mlx5_0/ports/1/counters/port_xmit_data":       {Data: []byte("10\n")},
		"class/infiniband/mlx5_0/ports/1/counters/symbol_error":         {Data: []byte("1\n")},
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0":             {Data: []byte("ens1f0\n")},
		"class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer":     {Data: []byte("4\n")},
		"class/infiniband/mlx5_0/device/numa_node":                      {Data: []byte("1\n")},
		"class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0":               {Data: []byte("eth0\n")},
		"class/infiniband/mlx5_9/node_guid":                             {Data: []byte("0000:0000:0000:0001\n")},
		"class/infiniband/mlx5_0/ports/1/counters/port_rcv_data":        {Data: []byte("20\n")},
		"class/infiniband/mlx5_0/ports/1/counters/link_downed":          {Data: []byte("0\n")},
		"class/infiniband/mlx5_0/ports/1/counters/port_xmit_discards":   {Data: []byte("2\n")},
		"class/infiniband/mlx5_0/ports/1/counters/port_rcv_packets":     {Data: []byte("5\n")},
		"class/infiniband/mlx5_0/ports/1/counters/port_xmit_packets":    {Data: []byte("6\n")},
		"class/infiniband/mlx5_0/ports/1/hw_counters/rnr_nak_retry_err": {Data: []byte("0\n")},
	}
	rows := hostNICRows(rdma.SysfsClass{FS: sys}, sys)
	assert.Equal(t, len(rows), 3)
	r := rows[0]
	assert.Equal(t, r.Device, "mlx5_0")
	assert.Equal(t, *r.NUMA, 1)
	assert.DeepEqual(t, r.Netdevs, []string{"ens1f0"})
	assert.Equal(t, r.XmitBytes, 40.0) // 4-byte words
	assert.Equal(t, r.RcvBytes, 80.0)
	assert.Equal(t, r.errorTotal(), 3.0)
	assert.Equal(t, hwSummary(r.HW), "out_of_buffer 4")
	assert.Equal(t, rows[1].Device, "mlx5_9")
	assert.Equal(t, rows[1].Note, "no ports")
	assert.Equal(t, rows[2].Device, "rxe0")
	assert.Assert(t, strings.HasPrefix(rows[2].Note, "counters unavailable"), rows[2].Note)
}

// TestHW: the probe finds the CUDA driver KVFERRY_CUDA_LIB names (the fake
// here; the machine's own in a hardware run) with its devices, and says
// why RDMA is missing where it is.
func TestHW(t *testing.T) {
	lib := fakecuda.Path(t)
	t.Setenv("KVFERRY_CUDA_LIB", lib)
	var out bytes.Buffer
	assert.NilError(t, run([]string{"--json", "hw"}, &out))
	var r hwReport
	assert.NilError(t, json.Unmarshal(out.Bytes(), &r))
	assert.Equal(t, r.CUDA.Library, lib)
	assert.Assert(t, r.CUDA.Available, "%+v", r.CUDA)
	assert.Equal(t, len(r.CUDA.Devices), fakecuda.Devices(t))
	assert.Assert(t, r.CUDA.Devices[0].UnifiedAddressing)
	if _, err := os.Stat("/sys/class/infiniband"); err != nil {
		assert.Assert(t, !r.RDMA.Available)
		assert.Equal(t, len(r.RDMA.Sysfs), 0)
		assert.Assert(t, r.RDMA.Error != "")
	}
	out.Reset()
	assert.NilError(t, run([]string{"hw"}, &out))
	assert.Assert(t, strings.HasPrefix(out.String(), "cuda: "+lib), out.String())
}
