//go:build deployproc

package deploy_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/tests/internal/suite"
)

// ctl runs build/bin/kvferry-ctl and returns its standard output.
func ctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(suite.BinDir(), "kvferry-ctl"), args...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("kvferry-ctl %s: %v\n%s%s", strings.Join(args, " "), err, out, ee.Stderr)
	}
	assert.NilError(t, err)
	return string(out)
}

func ctlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := ctl(t, append([]string{"--json"}, args...)...)
	assert.NilError(t, json.Unmarshal([]byte(out), v), out)
}

// checkCtl runs every kvferry-ctl command against the cluster.
func checkCtl(t *testing.T, c *cluster) {
	md := "--metadata=" + c.mdConn
	admin := "--master_admin=" + c.masterMetrics

	var segs []struct {
		Name       string   `json:"name"`
		Transports []string `json:"transports"`
		Bytes      uint64   `json:"registered_bytes"`
		Buffers    []any    `json:"buffers"`
		Error      string   `json:"error"`
	}
	ctlJSON(t, &segs, md, "segments", "node-t", "node-i")
	assert.Equal(t, len(segs), 2)
	assert.Equal(t, segs[0].Name, "node-t")
	assert.Equal(t, segs[0].Error, "")
	assert.Equal(t, segs[0].Bytes, uint64(64<<20))
	assert.Assert(t, strings.Contains(strings.Join(segs[0].Transports, ","), "tcp"), "%v", segs[0].Transports)
	table := ctl(t, md, "segments", "node-t")
	assert.Assert(t, strings.Contains(table, "SEGMENT") && strings.Contains(table, "node-t") && strings.Contains(table, "64.0 MiB"), table)
	table = ctl(t, md, "transports", "node-t")
	assert.Assert(t, strings.Contains(table, "tcp") && strings.Contains(table, "data port"), table)
	var bufs []struct {
		Length uint64 `json:"length"`
		Memory string `json:"memory"`
	}
	ctlJSON(t, &bufs, md, "buffers", "node-t")
	assert.Equal(t, len(bufs), 1)
	assert.Equal(t, bufs[0].Length, uint64(64<<20))
	assert.Equal(t, bufs[0].Memory, "host")
	// The store holder's segment through the master's list (P2P names).
	ctlJSON(t, &segs, admin, "segments")
	assert.Equal(t, len(segs), 1)
	assert.Equal(t, segs[0].Error, "")
	assert.Assert(t, segs[0].Bytes >= 32<<20, "%+v", segs[0]) // the segment and the client's local buffer

	var probes []struct {
		Path  string  `json:"path"`
		Count int     `json:"count"`
		MinUs float64 `json:"min_us"`
		Error string  `json:"error"`
	}
	ctlJSON(t, &probes, md, "probe", "--count=3", "node-t")
	paths := map[string]bool{}
	for _, p := range probes {
		if p.Path != "rpc" && p.Path != "tcp" {
			continue // same-host paths depend on the kernel's ptrace policy
		}
		assert.Equal(t, p.Error, "", "probe %s", p.Path)
		assert.Equal(t, p.Count, 3)
		assert.Assert(t, p.MinUs > 0)
		paths[p.Path] = true
	}
	assert.Assert(t, paths["rpc"] && paths["tcp"], "%v", probes)
	table = ctl(t, md, "probe", "--count=2", "node-t")
	assert.Assert(t, strings.Contains(table, "rpc") && strings.Contains(table, "tcp"), table)

	metrics := "--metrics=" + c.tgtMetrics + "," + c.iniMetrics
	var links []struct {
		Endpoint  string  `json:"endpoint"`
		Transport string  `json:"transport"`
		Peer      string  `json:"peer"`
		Requests  float64 `json:"requests"`
		Conns     float64 `json:"connections"`
	}
	ctlJSON(t, &links, metrics, "links")
	found := false
	for _, l := range links {
		if l.Endpoint == c.iniMetrics && l.Transport == "tcp" && l.Peer == "node-t" {
			found = true
			assert.Assert(t, l.Requests > 0 && l.Conns > 0, "%+v", l)
		}
	}
	assert.Assert(t, found, "no tcp link to node-t: %+v", links)
	var top []struct {
		Peer        string  `json:"peer"`
		BytesPerSec float64 `json:"bytes_per_s"`
		P99         float64 `json:"p99_s"`
	}
	ctlJSON(t, &top, metrics, "top", "--iterations=1", "--interval=500ms")
	assert.Assert(t, len(top) > 0)
	assert.Equal(t, top[0].Peer, "node-t") // the busiest link
	assert.Assert(t, top[0].BytesPerSec > 0 && top[0].P99 > 0, "%+v", top[0])
	table = ctl(t, metrics, "top", "--iterations=2", "--interval=300ms")
	assert.Assert(t, strings.Count(table, "kvferry-ctl top") == 2 && strings.Contains(table, "THROUGHPUT"), table)

	var objs []struct {
		Key      string `json:"key"`
		Size     uint64 `json:"size"`
		Replicas []any  `json:"replicas"`
	}
	ctlJSON(t, &objs, admin, "objects")
	assert.Assert(t, len(objs) > 0)
	for _, o := range objs {
		assert.Assert(t, o.Size == 1<<20 && len(o.Replicas) == 1 || o.Size == 0, "%+v", o) // 0: evicted since the listing
	}
	var use []struct {
		Capacity float64 `json:"capacity_bytes"`
		Used     float64 `json:"used_bytes"`
	}
	ctlJSON(t, &use, admin, "usage")
	assert.Equal(t, len(use), 1)
	assert.Equal(t, use[0].Capacity, float64(32<<20))
	assert.Assert(t, use[0].Used > 0)
	table = ctl(t, admin, "usage")
	assert.Assert(t, strings.Contains(table, "32.0 MiB"), table)

	var views []struct {
		Leader string `json:"leader"`
		Role   string `json:"role"`
	}
	ctlJSON(t, &views, admin, "master")
	assert.Equal(t, views[0].Role, "leader")
	assert.Equal(t, views[0].Leader, c.masterAddr)

	// Under HA: the leader recorded in a real etcd.
	etcd := etcdtest.Start(t)
	ha := start(t, nil, filepath.Join(suite.BinDir(), "kvferry-master"), "--port=0", "--rpc_address=127.0.0.1",
		"--metrics_host=127.0.0.1", "--metrics_port=0", "--enable_ha", "--etcd_endpoints="+etcd.Endpoint(), "--cluster_id=ctltest")
	haAddr := ha.want(t, `^listening on (\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(filepath.Join(suite.BinDir(), "kvferry-ctl"), "--json", "--master=etcd://"+etcd.Endpoint(),
			"--cluster_id=ctltest", "master").Output()
		if err == nil && json.Unmarshal(out, &views) == nil && len(views) == 1 && views[0].Leader == haAddr {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "no HA leader %s in etcd: %s %v", haAddr, out, err)
		time.Sleep(200 * time.Millisecond)
	}
}
