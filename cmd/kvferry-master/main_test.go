package main

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/master"
)

func TestParseDefaults(t *testing.T) {
	o, err := parse(nil)
	assert.NilError(t, err)
	c := o.cfg
	assert.Equal(t, c.RPCAddr, "0.0.0.0:50051")
	assert.Equal(t, c.MetricsAddr, "127.0.0.1:9003") // admin on loopback by default
	assert.Equal(t, c.DefaultKVLeaseTTL, 10*time.Second)
	assert.Equal(t, c.DefaultKVSoftPinTTL, 30*time.Minute)
	assert.Equal(t, c.EvictionRatio, 0.05)
	assert.Equal(t, c.EvictionHighWatermarkRatio, 0.90)
	assert.Equal(t, c.ClientTTL, 10*time.Second)
	assert.Equal(t, c.PutStartDiscardTimeout, 30*time.Second)
	assert.Equal(t, c.PutStartReleaseTimeout, 600*time.Second)
	assert.Equal(t, c.AllocationStrategy, master.StrategyRandom)
	assert.Equal(t, c.EnableHA, false)
	assert.Equal(t, c.KeepSoftPinned, false)
	assert.Equal(t, o.enableHTTPMeta, false)
	assert.Equal(t, c.GrantBytes, uint64(master.DefaultGrantBytes))
	assert.Equal(t, c.DisableGrants, false)
	assert.NilError(t, c.Validate())
}

func TestParseMooncakeFlags(t *testing.T) {
	o, err := parse([]string{
		"--rpc_port=6000", "--rpc_address=127.0.0.1", "--metrics_port", "0",
		"--default_kv_lease_ttl=500", "--default_kv_soft_pin_ttl=2m",
		"--eviction_ratio=0.1", "--eviction_high_watermark_ratio=0.8",
		"--client_ttl=3", "--put_start_discard_timeout_sec=5", "--put_start_release_timeout_sec=20s",
		"--allocation_strategy=free_ratio_first", "--allow_evict_soft_pinned_objects=false",
		"--enable_ha", "--etcd_endpoints=127.0.0.1:2379;127.0.0.2:2379", "--cluster_id=c7",
		"--max_threads=8", "-enable_http_metadata_server=true", "--http_metadata_server_port=0",
	})
	assert.NilError(t, err)
	c := o.cfg
	assert.Equal(t, c.RPCAddr, "127.0.0.1:6000")
	assert.Equal(t, c.MetricsAddr, "127.0.0.1:0")
	assert.Equal(t, c.DefaultKVLeaseTTL, 500*time.Millisecond)
	assert.Equal(t, c.DefaultKVSoftPinTTL, 2*time.Minute)
	assert.Equal(t, c.EvictionRatio, 0.1)
	assert.Equal(t, c.EvictionHighWatermarkRatio, 0.8)
	assert.Equal(t, c.ClientTTL, 3*time.Second)
	assert.Equal(t, c.PutStartDiscardTimeout, 5*time.Second)
	assert.Equal(t, c.PutStartReleaseTimeout, 20*time.Second)
	assert.Equal(t, c.AllocationStrategy, master.StrategyFreeRatioFirst)
	assert.Equal(t, c.KeepSoftPinned, true)
	assert.Equal(t, c.EnableHA, true)
	assert.DeepEqual(t, c.EtcdEndpoints, []string{"127.0.0.1:2379", "127.0.0.2:2379"})
	assert.Equal(t, c.ClusterID, "c7")
	assert.Equal(t, o.enableHTTPMeta, true)
	assert.Equal(t, o.httpMetaAddr, "0.0.0.0:0")

	o, err = parse([]string{"--put_grant_bytes=1048576", "--put_grant_lease=800"})
	assert.NilError(t, err)
	assert.Equal(t, o.cfg.GrantBytes, uint64(1<<20))
	assert.Equal(t, o.cfg.GrantLease, 800*time.Millisecond)
	assert.NilError(t, o.cfg.Validate())
	o, err = parse([]string{"--put_grant_bytes=0"})
	assert.NilError(t, err)
	assert.Equal(t, o.cfg.DisableGrants, true)

	o, err = parse([]string{"--port=7000", "--ha_backend_connstring=etcd://h:1", "--enable_ha", "--enable_metric_reporting=false"})
	assert.NilError(t, err)
	assert.Equal(t, o.cfg.RPCAddr, "0.0.0.0:7000")
	assert.Equal(t, o.cfg.MetricsAddr, "")
	assert.DeepEqual(t, o.cfg.EtcdEndpoints, []string{"h:1"})
}

func TestParseErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--enable_ha"},
		{"--ha_backend_type=redis", "--enable_ha", "--etcd_endpoints=h:1"},
		{"--memory_allocator=cachelib"},
		{"--rpc_port=70000"},
		{"--default_kv_lease_ttl=-5"},
		{"--client_ttl=soon"},
		{"--log_level=loud"},
		{"extra"},
		{"--nosuchflag"},
	} {
		_, err := parse(args)
		assert.Assert(t, err != nil, "args %q", args)
	}
}
