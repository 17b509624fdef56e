package stack

import (
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/internal/spin"
)

// mapEnv is a hostenv.Env over a map.
func mapEnv(m map[string]string) hostenv.Env {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// TestMaxPolledConns reads KVFERRY_TCP_MAX_POLLED_CONNS (through the C
// getenv, as the library does) into the TCP config: unset, bad or out of
// range leaves the transport's default (0).
func TestMaxPolledConns(t *testing.T) {
	t.Setenv("KVFERRY_TCP_MAX_POLLED_CONNS", "")
	os.Unsetenv("KVFERRY_TCP_MAX_POLLED_CONNS")
	assert.Equal(t, ConfigFromEnv(hostenv.Lookup).TCP.MaxPolledConns, 0)
	for v, want := range map[string]int{"16": 16, "1": 1, "0": 0, "-5": 0, "junk": 0, "99999999": 0} {
		t.Setenv("KVFERRY_TCP_MAX_POLLED_CONNS", v)
		assert.Equal(t, ConfigFromEnv(hostenv.Lookup).TCP.MaxPolledConns, want, "KVFERRY_TCP_MAX_POLLED_CONNS=%s", v)
	}
}

// TestSpinWaitFromEnv: KVFERRY_SPIN_US becomes the engine's SpinWait.
func TestSpinWaitFromEnv(t *testing.T) {
	assert.Equal(t, spin.Budget(ConfigFromEnv(mapEnv(nil)).Engine.SpinWait), spin.Default)
	for v, want := range map[string]time.Duration{
		"0": 0, "20": 20 * time.Microsecond, "junk": spin.Default, "-3": spin.Default, "99999999": spin.Max,
	} {
		c := ConfigFromEnv(mapEnv(map[string]string{"KVFERRY_SPIN_US": v}))
		assert.Equal(t, spin.Budget(c.Engine.SpinWait), want, "KVFERRY_SPIN_US=%s", v)
	}
}

// TestConfigFromEnv reads Mooncake's names, their aliases and bounds, and
// hands the RDMA, GPU and TLS variables to their packages.
func TestConfigFromEnv(t *testing.T) {
	c := ConfigFromEnv(mapEnv(nil))
	assert.Assert(t, c.Engine.Logger != nil)
	assert.Equal(t, c.Engine.ForceTransport, "")
	assert.Equal(t, c.Engine.MinRPCPort, 0)
	assert.Equal(t, c.Engine.TransferTimeout, time.Duration(0))
	assert.Assert(t, !c.Engine.NoRequestMetrics)
	assert.Equal(t, c.RDMA.TrafficClass, -1, "rdma.ConfigFromEnv ran")

	c = ConfigFromEnv(mapEnv(map[string]string{
		"MC_FORCE_TCP": "", "MC_FORCE_HCA": "", "MC_MIN_PRC_PORT": "15000", "MC_MAX_RPC_PORT": "70000",
		"MC_TRANSFER_TIMEOUT": "2", "MC_HANDSHAKE_MAX_LENGTH": "1024", "MC_TCP_MAX_CONNECTIONS_PER_PEER": "4",
		"MC_SLICE_SIZE": "131072", "KVFERRY_GPU_HOST_PATH": "stage", "KVFERRY_METRICS": "off",
		"KVFERRY_CMA_MAP": "0", "KVFERRY_CMA_INLINE_BYTES": "0", "MC_METADATA_CLUSTER_ID": " c1 ",
		"KVFERRY_TLS_CA_FILE": "/ca.pem", "KVFERRY_CUDA": "0", "KVFERRY_CUDA_STREAMS": "3", "MC_IB_TC": "106",
	}))
	assert.Equal(t, c.Engine.ForceTransport, "tcp", "MC_FORCE_TCP set, even empty")
	assert.Assert(t, c.ForceRDMA)
	assert.Equal(t, c.Engine.MinRPCPort, 15000, "the MC_MIN_PRC_PORT alias")
	assert.Equal(t, c.Engine.MaxRPCPort, 0, "out of range")
	assert.Equal(t, c.Engine.TransferTimeout, 5*time.Second, "at least 5 s")
	assert.Equal(t, c.Engine.HandshakeMaxLength, uint64(0), "below 1 MiB")
	assert.Equal(t, c.TCP.Lanes, 4)
	assert.Equal(t, c.TCP.StripeSize, uint64(131072))
	assert.Equal(t, c.RDMA.SliceSize, uint64(131072))
	assert.Equal(t, c.Engine.PathChoice, "shm")
	assert.Assert(t, c.Engine.NoRequestMetrics)
	assert.Assert(t, c.SameHost.NoMap)
	assert.Equal(t, c.SameHost.CMAInlineBytes, int64(-1), "0: never inline")
	assert.Equal(t, c.Metadata.KV.ClusterID, "c1")
	assert.Equal(t, c.Engine.TLSFiles.CA, "/ca.pem")
	assert.Assert(t, c.GPU.Disabled)
	assert.Equal(t, c.GPU.Streams, 3)
	assert.Equal(t, c.RDMA.TrafficClass, 106)

	c = ConfigFromEnv(mapEnv(map[string]string{"MC_REDIS_USERNAME": "u", "MC_REDIS_PASSWORD": "pw",
		"MC_REDIS_DB_INDEX": "7", "KVFERRY_REDIS_KEY_TTL_SEC": "30"}))
	assert.Equal(t, c.Metadata.Redis.Username, "u")
	assert.Equal(t, c.Metadata.Redis.Password, "pw")
	assert.Equal(t, c.Metadata.Redis.DB, 7)
	assert.Equal(t, c.Metadata.Redis.KeyTTL, 30*time.Second)
	c = ConfigFromEnv(mapEnv(map[string]string{"MC_REDIS_DB_INDEX": "256"}))
	assert.Equal(t, c.Metadata.Redis.DB, 0, "out of Mooncake's range: database 0")

	c = ConfigFromEnv(mapEnv(map[string]string{"MC_FORCE_TCP": "", "KVFERRY_TRANSPORT": "CMA", "KVFERRY_GPU_HOST_PATH": "map"}))
	assert.Equal(t, c.Engine.ForceTransport, "cma", "KVFERRY_TRANSPORT wins over MC_FORCE_TCP")
	assert.Equal(t, c.Engine.PathChoice, "nvlink")
	c = ConfigFromEnv(mapEnv(map[string]string{"KVFERRY_TRANSPORT": "auto", "KVFERRY_GPU_HOST_PATH": "auto"}))
	assert.Equal(t, c.Engine.ForceTransport, "")
	assert.Equal(t, c.Engine.PathChoice, "")
}
