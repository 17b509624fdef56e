package etcd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/etcd"
	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/testutil"
)

// helperEnv makes the test binary act as a separate engine process that
// writes a key and then waits to be killed (see TestLeaseExpiresWhenOwnerDies).
const helperEnv = "KVFERRY_ETCD_TEST_HELPER"

func TestMain(m *testing.M) {
	if ep := os.Getenv(helperEnv); ep != "" {
		os.Exit(runHelper(ep))
	}
	os.Exit(testutil.VerifyNoLeaks(m))
}

func runHelper(ep string) int {
	kv, err := etcd.New(context.Background(), etcd.Config{Endpoints: []string{ep}, LeaseTTL: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	if err := kv.Put(context.Background(), "mooncake/ram/dead-engine", []byte(`{"x":1}`)); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	fmt.Println("ready")
	time.Sleep(time.Minute) // killed by the test long before
	return 0
}

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "etcd://127.0.0.1:2379", want: []string{"127.0.0.1:2379"}},
		{in: "127.0.0.1:2379", want: []string{"127.0.0.1:2379"}},
		{in: "etcd://h1:1,h2:2", want: []string{"h1:1", "h2:2"}},
		{in: "h1:1; h2:2 ,", want: []string{"h1:1", "h2:2"}},
		{in: "etcd://[::1]:2379", want: []string{"[::1]:2379"}},
		{in: "etcd://", bad: true},
		{in: "", bad: true},
		{in: "etcd://host", bad: true},
		{in: "etcd://host:0", bad: true},
		{in: "etcd://host:99999", bad: true},
		{in: "etcd://:2379", bad: true},
		{in: "etcd://h:1/path", bad: true},
		{in: "etcd://http://h:1", bad: true},
		{in: "h:1,h2", bad: true},
	} {
		got, err := etcd.ParseEndpoints(tc.in)
		if tc.bad {
			assert.Assert(t, err != nil, "%q accepted as %v", tc.in, got)
			continue
		}
		assert.NilError(t, err, tc.in)
		assert.DeepEqual(t, got, tc.want)
	}
}

func newKV(t *testing.T, ep string, ttl time.Duration) *etcd.KV {
	t.Helper()
	kv, err := etcd.New(context.Background(), etcd.Config{Endpoints: []string{ep}, LeaseTTL: ttl, OpTimeout: 2 * time.Second})
	assert.NilError(t, err)
	t.Cleanup(func() { kv.Close() })
	return kv
}

// rawClient reads etcd directly, independent of the KV under test.
func rawClient(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	return etcdtest.Client(t, ep)
}

// waitFor polls cond (each call bounded by the caller) until it holds or
// timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
	return time.Since(start)
}

func rawGet(t *testing.T, cli *clientv3.Client, key string) (string, int64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return "", 0, false
	}
	if len(resp.Kvs) == 0 {
		return "", 0, false
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].Lease, true
}

// mustGet reads key from etcd directly: its value and lease, or ok false
// when it does not exist. Unlike rawGet, a failed read fails the test
// rather than reading as a missing key.
func mustGet(t *testing.T, cli *clientv3.Client, key string) (string, int64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	assert.NilError(t, err, "read %q from etcd", key)
	if len(resp.Kvs) == 0 {
		return "", 0, false
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].Lease, true
}

// TestKV: get, put under the KV's lease, delete, and Close revoking the
// lease. It checks results, not speed: every call has a generous deadline
// (with newKV's 2 s a loaded machine failed a call or the revoke, so a
// key outlived Close until its TTL: flaky under load), reads fail the
// test instead of reading as "missing", and the key's lease is compared
// with the KV's once the two agree (a lease the KV lost under load and
// replaced moves the key to the new one).
func TestKV(t *testing.T) {
	srv := etcdtest.Start(t)
	kv, err := etcd.New(context.Background(), etcd.Config{Endpoints: []string{srv.Endpoint()}, LeaseTTL: 5 * time.Second,
		OpTimeout: 20 * time.Second, DialTimeout: 20 * time.Second})
	assert.NilError(t, err)
	t.Cleanup(func() { kv.Close() })
	cli := rawClient(t, srv.Endpoint())
	ctx := context.Background()

	_, err = kv.Get(ctx, "mooncake/ram/a")
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/a", []byte(`{"a":1}`)))
	v, err := kv.Get(ctx, "mooncake/ram/a")
	assert.NilError(t, err)
	assert.Equal(t, string(v), `{"a":1}`)

	val, _, ok := mustGet(t, cli, "mooncake/ram/a")
	assert.Assert(t, ok)
	assert.Equal(t, val, `{"a":1}`)
	waitFor(t, 20*time.Second, "key under the KV's lease", func() bool {
		_, lease, ok := mustGet(t, cli, "mooncake/ram/a")
		assert.Assert(t, ok, "key vanished")
		return lease == kv.Metrics().Lease
	})

	assert.NilError(t, kv.Delete(ctx, "mooncake/ram/a"))
	assert.NilError(t, kv.Delete(ctx, "mooncake/ram/a"))
	_, _, ok = mustGet(t, cli, "mooncake/ram/a")
	assert.Assert(t, !ok)

	// Close revokes the lease: the keys vanish at once.
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/b", []byte(`1`)))
	assert.NilError(t, kv.Close())
	assert.NilError(t, kv.Close())
	_, _, ok = mustGet(t, cli, "mooncake/ram/b")
	assert.Assert(t, !ok, "key outlived Close (lease not revoked)")
	assert.Assert(t, errors.Is(kv.Put(ctx, "k", nil), metadata.ErrClosed))
	_, err = kv.Get(ctx, "k")
	assert.Assert(t, errors.Is(err, metadata.ErrClosed))
}

// TestLeaseExpiresWhenOwnerDies kills a separate process that wrote a key;
// the key must vanish within the lease TTL (plus etcd's expiry tick).
func TestLeaseExpiresWhenOwnerDies(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := rawClient(t, srv.Endpoint())
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Endpoint())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	ready := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		ready <- s.Scan() && s.Text() == "ready"
		for s.Scan() {
		}
	}()
	select {
	case ok := <-ready:
		assert.Assert(t, ok, "helper did not start")
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("helper not ready within 20 s")
	}
	_, _, ok := rawGet(t, cli, "mooncake/ram/dead-engine")
	assert.Assert(t, ok)
	// Still there after more than one TTL while the owner lives.
	time.Sleep(3 * time.Second) // longer than the TTL, to prove the keep-alive
	_, _, ok = rawGet(t, cli, "mooncake/ram/dead-engine")
	assert.Assert(t, ok, "key vanished while its owner was alive")

	assert.NilError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	took := waitFor(t, 10*time.Second, "dead engine's key vanishes", func() bool {
		_, _, ok := rawGet(t, cli, "mooncake/ram/dead-engine")
		return !ok
	})
	t.Logf("key vanished %v after the owner was killed (TTL 2 s)", took)
	assert.Assert(t, took < 4*time.Second, "took %v", took)
}

// TestEtcdRestart restarts etcd with its data (the lease survives) and
// without it (the lease is gone): in both cases the keys are there
// afterwards and the KV keeps working, without a new KV.
func TestEtcdRestart(t *testing.T) {
	for _, wipe := range []bool{false, true} {
		t.Run(fmt.Sprintf("wipe=%v", wipe), func(t *testing.T) {
			srv := etcdtest.Start(t)
			kv := newKV(t, srv.Endpoint(), 2*time.Second)
			ctx := context.Background()
			assert.NilError(t, kv.Put(ctx, "mooncake/ram/a", []byte(`a`)))
			assert.NilError(t, kv.Put(ctx, "mooncake/rpc_meta/a", []byte(`r`)))

			srv.Kill()
			// While etcd is down, calls fail with ErrUnavailable within
			// their timeout.
			start := time.Now()
			short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			err := kv.Put(short, "mooncake/ram/b", []byte(`b`))
			cancel()
			assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
			assert.Assert(t, time.Since(start) < 2*time.Second)

			srv.Restart(wipe)
			cli := rawClient(t, srv.Endpoint())
			took := waitFor(t, 15*time.Second, "keys back after restart", func() bool {
				a, _, ok1 := rawGet(t, cli, "mooncake/ram/a")
				r, _, ok2 := rawGet(t, cli, "mooncake/rpc_meta/a")
				b, _, ok3 := rawGet(t, cli, "mooncake/ram/b")
				return ok1 && ok2 && ok3 && a == "a" && r == "r" && b == "b"
			})
			t.Logf("keys back %v after restart; metrics %+v", took, kv.Metrics())
			// Keys stay beyond a TTL: the (new or surviving) lease is kept alive.
			time.Sleep(3 * time.Second) // longer than the TTL
			_, lease, ok := rawGet(t, cli, "mooncake/ram/a")
			assert.Assert(t, ok, "key lost after restart")
			assert.Equal(t, lease, kv.Metrics().Lease)
			if wipe {
				assert.Assert(t, kv.Metrics().LeaseGrants >= 2)
			}
			assert.NilError(t, kv.Put(ctx, "mooncake/ram/c", []byte(`c`)))
			v, err := kv.Get(ctx, "mooncake/ram/c")
			assert.NilError(t, err)
			assert.Equal(t, string(v), "c")
		})
	}
}

// TestDeleteDuringOutage: a key deleted while etcd is down must not be
// brought back by the re-put after the lease is replaced.
func TestDeleteDuringOutage(t *testing.T) {
	for _, wipe := range []bool{false, true} {
		t.Run(fmt.Sprintf("wipe=%v", wipe), func(t *testing.T) { testDeleteDuringOutage(t, wipe) })
	}
}

func testDeleteDuringOutage(t *testing.T, wipe bool) {
	srv := etcdtest.Start(t)
	kv := newKV(t, srv.Endpoint(), 2*time.Second)
	ctx := context.Background()
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/keep", []byte(`1`)))
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/drop", []byte(`1`)))
	srv.Kill()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_ = kv.Delete(short, "mooncake/ram/drop") // fails: etcd is down
	cancel()
	srv.Restart(wipe)
	cli := rawClient(t, srv.Endpoint())
	waitFor(t, 15*time.Second, "kept key back, deleted key gone", func() bool {
		_, _, keep := rawGet(t, cli, "mooncake/ram/keep")
		_, _, drop := rawGet(t, cli, "mooncake/ram/drop")
		return keep && !drop
	})
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err = etcd.New(context.Background(), etcd.Config{Endpoints: []string{addr}, DialTimeout: time.Second})
	took := time.Since(start)
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	assert.Assert(t, strings.Contains(err.Error(), addr), "error does not name the endpoint: %v", err)
	assert.Assert(t, took < 3*time.Second, "took %v", took)
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []etcd.Config{
		{},
		{Endpoints: []string{"nohost"}},
		{Endpoints: []string{"h:1"}, LeaseTTL: -1},
		{Endpoints: []string{"h:1"}, DialTimeout: -1},
		{Endpoints: []string{"h:1"}, OpTimeout: -1},
	} {
		_, err := etcd.New(context.Background(), c)
		assert.Assert(t, err != nil, "%+v", c)
		assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable), "%+v: %v", c, err)
	}
}
