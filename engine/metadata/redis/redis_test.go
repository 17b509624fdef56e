package redis_test

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

	goredis "github.com/redis/go-redis/v9"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/redis"
	"github.com/kvferry/kvferry/engine/metadata/redis/redistest"
	"github.com/kvferry/kvferry/internal/testutil"
)

// helperEnv makes the test binary act as a separate engine process that
// writes a key and then waits to be killed (see TestKeyExpiresWhenOwnerDies).
const helperEnv = "KVFERRY_REDIS_TEST_HELPER"

func TestMain(m *testing.M) {
	if addr := os.Getenv(helperEnv); addr != "" {
		os.Exit(runHelper(addr))
	}
	os.Exit(testutil.VerifyNoLeaks(m))
}

func runHelper(addr string) int {
	kv, err := redis.New(context.Background(), redis.Config{Addr: addr, KeyTTL: time.Second})
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

func newKV(t *testing.T, cfg redis.Config) *redis.KV {
	t.Helper()
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 2 * time.Second
	}
	kv, err := redis.New(context.Background(), cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { kv.Close() })
	return kv
}

// rawClient reads Redis directly, independent of the KV under test.
func rawClient(t *testing.T, addr, password string, db int) *goredis.Client {
	t.Helper()
	cli := goredis.NewClient(&goredis.Options{Addr: addr, Password: password, DB: db, Protocol: 2, DisableIdentity: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { cli.Close() })
	return cli
}

func rawGet(t *testing.T, cli *goredis.Client, key string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := cli.Get(ctx, key).Result()
	return v, err == nil
}

// waitFor polls cond (each call bounded by the caller) until it holds or
// timeout passes; it returns how long that took.
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

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg redis.Config
		bad string
	}{
		{redis.Config{}, "Addr"},
		{redis.Config{Addr: "h"}, "Addr"},
		{redis.Config{Addr: "h:0"}, "Addr"},
		{redis.Config{Addr: ":1"}, "Addr"},
		{redis.Config{Addr: "h:1", Username: "u"}, "Username without Password"},
		{redis.Config{Addr: "h:1", Password: "a\r\nFLUSHALL"}, "control characters"},
		{redis.Config{Addr: "h:1", DB: -1}, "DB"},
		{redis.Config{Addr: "h:1", KeyTTL: time.Millisecond}, "KeyTTL"},
		{redis.Config{Addr: "h:1", OpTimeout: -1}, "OpTimeout"},
		{redis.Config{Addr: "h:1", Password: "pw"}, ""},
	} {
		err := tc.cfg.Validate()
		if tc.bad == "" {
			assert.NilError(t, err)
			continue
		}
		assert.ErrorContains(t, err, tc.bad)
	}
	s := redis.Config{Addr: "h:1", Username: "u", Password: "hunter2"}.String()
	assert.Assert(t, !strings.Contains(s, "hunter2"), s)
}

func TestKV(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	kv := newKV(t, redis.Config{Addr: srv.Addr(), KeyTTL: 5 * time.Second})
	raw := rawClient(t, srv.Addr(), "", 0)
	ctx := context.Background()

	_, err := kv.Get(ctx, "mooncake/ram/a")
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/a", []byte(`{"a":1}`)))
	v, err := kv.Get(ctx, "mooncake/ram/a")
	assert.NilError(t, err)
	assert.Equal(t, string(v), `{"a":1}`)

	// A plain string key, as Mooncake reads it, with the KV's TTL.
	val, ok := rawGet(t, raw, "mooncake/ram/a")
	assert.Assert(t, ok)
	assert.Equal(t, val, `{"a":1}`)
	ttl, err := raw.PTTL(ctx, "mooncake/ram/a").Result()
	assert.NilError(t, err)
	assert.Assert(t, ttl > 0 && ttl <= 5*time.Second, "ttl %v", ttl)
	assert.Equal(t, kv.Metrics().Owned, 1)

	assert.NilError(t, kv.Delete(ctx, "mooncake/ram/a"))
	assert.NilError(t, kv.Delete(ctx, "mooncake/ram/a"))
	_, ok = rawGet(t, raw, "mooncake/ram/a")
	assert.Assert(t, !ok)
	assert.Equal(t, kv.Metrics().Owned, 0)

	// A key written by someone else (Mooncake: no TTL) reads as it is.
	assert.NilError(t, raw.Set(ctx, "mooncake/rpc_meta/mc", "{\"ip_or_host_name\":\"10.0.0.1\",\"rpc_port\":12001}\n", 0).Err())
	v, err = kv.Get(ctx, "mooncake/rpc_meta/mc")
	assert.NilError(t, err)
	assert.Equal(t, string(v), "{\"ip_or_host_name\":\"10.0.0.1\",\"rpc_port\":12001}\n")

	assert.NilError(t, kv.Close())
	assert.NilError(t, kv.Close())
	assert.Assert(t, errors.Is(kv.Put(ctx, "k", nil), metadata.ErrClosed))
	_, err = kv.Get(ctx, "k")
	assert.Assert(t, errors.Is(err, metadata.ErrClosed))
	assert.Assert(t, errors.Is(kv.Delete(ctx, "k"), metadata.ErrClosed))
}

// TestRenew: keys outlive several TTLs while their owner lives.
func TestRenew(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	kv := newKV(t, redis.Config{Addr: srv.Addr(), KeyTTL: 2 * time.Second})
	raw := rawClient(t, srv.Addr(), "", 0)
	assert.NilError(t, kv.Put(context.Background(), "mooncake/ram/live", []byte(`1`)))
	// Renewed every third of the TTL: 6 renewals span two TTLs.
	waitFor(t, 30*time.Second, "several renewals", func() bool { return kv.Metrics().Refreshes >= 6 })
	_, ok := rawGet(t, raw, "mooncake/ram/live")
	assert.Assert(t, ok, "key expired while its owner renewed it")
	assert.Equal(t, kv.Metrics().RePuts, uint64(0))
}

// TestFlush: keys removed behind the owner's back (FLUSHALL, DEL) are
// written again by the refresh loop.
func TestFlush(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	kv := newKV(t, redis.Config{Addr: srv.Addr(), KeyTTL: 3 * time.Second})
	raw := rawClient(t, srv.Addr(), "", 0)
	ctx := context.Background()
	keys := []string{"mooncake/ram/a", "mooncake/rpc_meta/a", "mooncake/c1/ram/b"}
	for _, k := range keys {
		assert.NilError(t, kv.Put(ctx, k, []byte(`{"k":"`+k+`"}`)))
	}
	assert.NilError(t, kv.Delete(ctx, "mooncake/c1/ram/b"))
	assert.NilError(t, raw.FlushAll(ctx).Err())
	took := waitFor(t, 20*time.Second, "flushed keys back", func() bool {
		for _, k := range keys[:2] {
			if v, ok := rawGet(t, raw, k); !ok || v != `{"k":"`+k+`"}` {
				return false
			}
		}
		return true
	})
	t.Logf("keys back %v after FLUSHALL (TTL 3 s)", took)
	_, ok := rawGet(t, raw, "mooncake/c1/ram/b")
	assert.Assert(t, !ok, "a deleted key came back")
	assert.Assert(t, kv.Metrics().RePuts >= 2)
	ttl, err := raw.PTTL(ctx, keys[0]).Result()
	assert.NilError(t, err)
	assert.Assert(t, ttl > 0, "rewritten key has no TTL: %v", ttl)
}

// TestRestart: Redis is killed (calls fail with ErrUnavailable, within
// the op timeout) and restarted empty; the keys come back without a call
// of the owner, and a change made while Redis was down is what comes back.
func TestRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	kv := newKV(t, redis.Config{Addr: srv.Addr(), KeyTTL: 3 * time.Second, OpTimeout: time.Second, DialTimeout: time.Second})
	ctx := context.Background()
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/a", []byte(`old`)))
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/gone", []byte(`x`)))
	srv.Kill()

	start := time.Now()
	_, err := kv.Get(ctx, "mooncake/ram/a")
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	err = kv.Put(ctx, "mooncake/ram/a", []byte(`new`))
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	err = kv.Delete(ctx, "mooncake/ram/gone")
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	// The bound only tells a hang from a busy machine.
	assert.Assert(t, time.Since(start) < 30*time.Second, "calls with Redis down took %v", time.Since(start))

	srv.Restart()
	raw := rawClient(t, srv.Addr(), "", 0)
	took := waitFor(t, 20*time.Second, "keys back after the restart", func() bool {
		v, ok := rawGet(t, raw, "mooncake/ram/a")
		return ok && v == "new"
	})
	t.Logf("keys back %v after the restart", took)
	_, ok := rawGet(t, raw, "mooncake/ram/gone")
	assert.Assert(t, !ok)
	v, err := kv.Get(ctx, "mooncake/ram/a")
	assert.NilError(t, err)
	assert.Equal(t, string(v), "new")
}

// TestUnreachable: New fails with ErrUnavailable when nothing listens and
// when the server accepts but never answers, within DialTimeout.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	closed := ln.Addr().String()
	ln.Close()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer silent.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c
		}
	}()
	defer func() {
		silent.Close()
		for c := range held {
			c.Close()
		}
	}()

	for _, addr := range []string{closed, silent.Addr().String()} {
		start := time.Now()
		_, err := redis.New(context.Background(), redis.Config{Addr: addr, DialTimeout: time.Second})
		assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "%s: got %v", addr, err)
		assert.ErrorContains(t, err, addr)
		t.Logf("%s: failed after %v: %v", addr, time.Since(start), err)
		assert.Assert(t, time.Since(start) < 30*time.Second, "New took %v", time.Since(start))
	}
}

// TestPassword: a Redis with requirepass accepts the right password and
// refuses a wrong or missing one with an error that is not
// ErrUnavailable and does not show the password.
func TestPassword(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "s3cret-pw"})
	kv := newKV(t, redis.Config{Addr: srv.Addr(), Password: "s3cret-pw"})
	ctx := context.Background()
	assert.NilError(t, kv.Put(ctx, "mooncake/ram/a", []byte(`1`)))
	raw := rawClient(t, srv.Addr(), "s3cret-pw", 0)
	_, ok := rawGet(t, raw, "mooncake/ram/a")
	assert.Assert(t, ok)

	for _, tc := range []struct {
		name string
		cfg  redis.Config
	}{
		{"wrong password", redis.Config{Addr: srv.Addr(), Password: "wrong-pw"}},
		{"wrong user", redis.Config{Addr: srv.Addr(), Username: "nobody", Password: "s3cret-pw"}},
		{"no password", redis.Config{Addr: srv.Addr()}},
	} {
		_, err := redis.New(ctx, tc.cfg)
		assert.Assert(t, err != nil, tc.name)
		assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable), "%s: %v", tc.name, err)
		assert.ErrorContains(t, err, "refused", tc.name)
		assert.Assert(t, !strings.Contains(err.Error(), "pw"), "%s: %v", tc.name, err)
		t.Logf("%s: %v", tc.name, err)
	}
}

// TestDB: the KV works in its own database.
func TestDB(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	kv := newKV(t, redis.Config{Addr: srv.Addr(), DB: 3})
	assert.NilError(t, kv.Put(context.Background(), "mooncake/ram/a", []byte(`1`)))
	_, ok := rawGet(t, rawClient(t, srv.Addr(), "", 3), "mooncake/ram/a")
	assert.Assert(t, ok)
	_, ok = rawGet(t, rawClient(t, srv.Addr(), "", 0), "mooncake/ram/a")
	assert.Assert(t, !ok)
	_, err := redis.New(context.Background(), redis.Config{Addr: srv.Addr(), DB: 99})
	assert.ErrorContains(t, err, "refused")
	assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable), "got %v", err)
}

// TestKeyExpiresWhenOwnerDies kills a separate process that wrote a key;
// the key must vanish once its TTL (1 s) runs out.
func TestKeyExpiresWhenOwnerDies(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	raw := rawClient(t, srv.Addr(), "", 0)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr())
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
	_, ok := rawGet(t, raw, "mooncake/ram/dead-engine")
	assert.Assert(t, ok)
	assert.NilError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	took := waitFor(t, 20*time.Second, "dead engine's key vanishes", func() bool {
		_, ok := rawGet(t, raw, "mooncake/ram/dead-engine")
		return !ok
	})
	t.Logf("key vanished %v after the owner was killed (TTL 1 s)", took)
}
