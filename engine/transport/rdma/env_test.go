package rdma_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// mapEnv is a hostenv.Env over a map.
func mapEnv(m map[string]string) hostenv.Env {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// TestConfigFromEnvGPUDirectAndLimits reads the GPUDirect switch
// (kvferry's, then Mooncake's WITH_NVIDIA_PEERMEM), MC_MAX_MR_SIZE,
// MC_ENDPOINT_STORE_TYPE and MC_AUTO_GID_MAX_RETRIES.
func TestConfigFromEnvGPUDirectAndLimits(t *testing.T) {
	env := map[string]string{"KVFERRY_LOG_LEVEL": "off"} // the refusals below warn
	c := rdma.ConfigFromEnv(mapEnv(env))
	assert.Equal(t, c.GPUDirect, "")
	assert.Equal(t, c.MaxMRSize, uint64(0))
	assert.Equal(t, c.EndpointStore, "")
	assert.Equal(t, c.AutoGIDRetries, 0)

	env["WITH_NVIDIA_PEERMEM"] = "0"
	assert.Equal(t, rdma.ConfigFromEnv(mapEnv(env)).GPUDirect, rdma.GPUDirectDmaBuf)
	env["WITH_NVIDIA_PEERMEM"] = "1"
	assert.Equal(t, rdma.ConfigFromEnv(mapEnv(env)).GPUDirect, rdma.GPUDirectPeerMem)
	env["KVFERRY_RDMA_GPUDIRECT"] = "OFF" // kvferry's wins
	assert.Equal(t, rdma.ConfigFromEnv(mapEnv(env)).GPUDirect, rdma.GPUDirectOff)
	env["KVFERRY_RDMA_GPUDIRECT"] = "sometimes"
	assert.Equal(t, rdma.ConfigFromEnv(mapEnv(env)).GPUDirect, "")

	env["MC_MAX_MR_SIZE"] = "1073741824"
	env["MC_ENDPOINT_STORE_TYPE"] = "FIFO"
	env["MC_AUTO_GID_MAX_RETRIES"] = "0"
	c = rdma.ConfigFromEnv(mapEnv(env))
	assert.Equal(t, c.MaxMRSize, uint64(1<<30))
	assert.Equal(t, c.EndpointStore, rdma.EndpointStoreFIFO)
	assert.Equal(t, c.AutoGIDRetries, -1, "0 retries")
	env["MC_ENDPOINT_STORE_TYPE"] = "LRU"
	env["MC_AUTO_GID_MAX_RETRIES"] = "17"
	c = rdma.ConfigFromEnv(mapEnv(env))
	assert.Equal(t, c.EndpointStore, "")
	assert.Equal(t, c.AutoGIDRetries, 0, "out of range: the default")
}

// TestConfigFromEnvResources reads the NIC filter, the topology file and
// Mooncake's per-context resources, with their bounds.
func TestConfigFromEnvResources(t *testing.T) {
	c := rdma.ConfigFromEnv(mapEnv(nil))
	assert.Equal(t, c.TrafficClass, -1, "unset: the NIC's")
	assert.Equal(t, c.ServiceLevel, -1)
	assert.Assert(t, !c.FixedGID)

	topo := filepath.Join(t.TempDir(), "topo.json")
	assert.NilError(t, os.WriteFile(topo, []byte(`{"cpu:0":[["mlx5_0"],[]]}`), 0o644))
	c = rdma.ConfigFromEnv(mapEnv(map[string]string{
		"MC_TE_FILTERS": " mlx5_0, ,mlx5_1 ", "MC_CUSTOM_TOPO_JSON": topo, "NCCL_IB_GID_INDEX": "3",
		"MC_MTU": "1024", "MC_NUM_QP_PER_EP": "256", "MC_MAX_INLINE": "0", "MC_IB_SL": "16",
		"MC_PATH_ROUNDROBIN": "true", "MC_RDMA_BIND_ADDRESS": " 10.0.0.1 ", "KVFERRY_RDMA_POLL_SPIN_US": "0",
		"KVFERRY_IBVERBS_LIB": "/x/libibverbs.so.1",
	}))
	assert.DeepEqual(t, c.Devices, []string{"mlx5_0", "mlx5_1"})
	assert.Equal(t, c.Matrix, `{"cpu:0":[["mlx5_0"],[]]}`)
	assert.Assert(t, c.FixedGID)
	assert.Equal(t, c.GIDIndex, 3, "the NCCL_IB_GID_INDEX alias")
	assert.Equal(t, c.MTU, ibv.MTU1024)
	assert.Equal(t, c.QPsPerEP, 0, "out of range")
	assert.Equal(t, c.MaxInline, -1, "0: no inline data")
	assert.Equal(t, c.ServiceLevel, -1, "out of range")
	assert.Assert(t, c.RoundRobin)
	assert.Equal(t, c.ServerName, "10.0.0.1")
	assert.Equal(t, c.PollSpin, time.Duration(-1), "0: park at once")
	assert.Equal(t, c.Library, "/x/libibverbs.so.1")

	c = rdma.ConfigFromEnv(mapEnv(map[string]string{
		"MC_CUSTOM_TOPO_JSON": filepath.Join(t.TempDir(), "missing"), "MC_MTU": "9000", "KVFERRY_LOG_LEVEL": "off",
	}))
	assert.Equal(t, c.Matrix, "", "unreadable: discovered")
	assert.Equal(t, c.MTU, ibv.MTU(0), "not an IB MTU: the default")
}
