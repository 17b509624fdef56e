package hostenv

import (
	"os"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/rdma"
)

// TestRDMAGPUDirectAndLimits reads the GPUDirect switch (kvferry's, then
// Mooncake's WITH_NVIDIA_PEERMEM), MC_MAX_MR_SIZE, MC_ENDPOINT_STORE_TYPE
// and MC_AUTO_GID_MAX_RETRIES.
func TestRDMAGPUDirectAndLimits(t *testing.T) {
	vars := []string{"KVFERRY_RDMA_GPUDIRECT", "WITH_NVIDIA_PEERMEM", "MC_MAX_MR_SIZE", "MC_ENDPOINT_STORE_TYPE", "MC_AUTO_GID_MAX_RETRIES"}
	for _, k := range vars {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	c := RDMAConfig()
	assert.Equal(t, c.GPUDirect, "")
	assert.Equal(t, c.MaxMRSize, uint64(0))
	assert.Equal(t, c.EndpointStore, "")
	assert.Equal(t, c.AutoGIDRetries, 0)

	t.Setenv("WITH_NVIDIA_PEERMEM", "0")
	assert.Equal(t, RDMAConfig().GPUDirect, rdma.GPUDirectDmaBuf)
	t.Setenv("WITH_NVIDIA_PEERMEM", "1")
	assert.Equal(t, RDMAConfig().GPUDirect, rdma.GPUDirectPeerMem)
	t.Setenv("KVFERRY_RDMA_GPUDIRECT", "OFF") // kvferry's wins
	assert.Equal(t, RDMAConfig().GPUDirect, rdma.GPUDirectOff)
	t.Setenv("KVFERRY_RDMA_GPUDIRECT", "sometimes")
	assert.Equal(t, RDMAConfig().GPUDirect, "")

	t.Setenv("MC_MAX_MR_SIZE", "1073741824")
	t.Setenv("MC_ENDPOINT_STORE_TYPE", "FIFO")
	t.Setenv("MC_AUTO_GID_MAX_RETRIES", "0")
	c = RDMAConfig()
	assert.Equal(t, c.MaxMRSize, uint64(1<<30))
	assert.Equal(t, c.EndpointStore, rdma.EndpointStoreFIFO)
	assert.Equal(t, c.AutoGIDRetries, -1, "0 retries")
	t.Setenv("MC_ENDPOINT_STORE_TYPE", "LRU")
	t.Setenv("MC_AUTO_GID_MAX_RETRIES", "17")
	c = RDMAConfig()
	assert.Equal(t, c.EndpointStore, "")
	assert.Equal(t, c.AutoGIDRetries, 0, "out of range: the default")
}
