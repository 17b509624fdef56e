// Package crashtest kills store masters with SIGKILL in the middle of a put
// storm and checks what the operation log promises (store/master
// persist.go): every put that returned nil is readable afterwards with its
// bytes, every remove that returned nil stays removed, and a put that
// failed is either wholly readable or absent, never wrong bytes.
//
// The masters are this test binary run again as a child process
// (TestMain, crashMasterEnv), so a kill loses everything the process held
// in memory, as a real crash does.
package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/ha"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// crashMasterEnv carries a child master's configuration (JSON of
// childConfig); its presence makes the test binary a master.
const crashMasterEnv = "KVFERRY_CRASHTEST_MASTER"

type childConfig struct {
	Addr        string
	OplogDir    string
	Etcd        []string
	ClusterID   string
	SnapRecords int
}

func TestMain(m *testing.M) {
	if v := os.Getenv(crashMasterEnv); v != "" {
		os.Exit(runChildMaster(v))
	}
	os.Exit(m.Run())
}

// masterConfig is the master configuration of the test: short lifetimes,
// so a restart heals in a second or two.
func masterConfig(c childConfig) master.Config {
	cfg := master.Config{
		RPCAddr:            c.Addr,
		ClientTTL:          4 * time.Second,
		GrantLease:         time.Second,
		RestoreWindow:      8 * time.Second,
		SnapshotRecords:    c.SnapRecords,
		OplogDir:           c.OplogDir,
		MasterViewLeaseTTL: 2 * time.Second,
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if len(c.Etcd) > 0 {
		cfg.EnableHA, cfg.EnableOplog, cfg.EtcdEndpoints, cfg.ClusterID = true, true, c.Etcd, c.ClusterID
	}
	return cfg
}

func runChildMaster(v string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintln(os.Stderr, "crash master:", err)
		return 2
	}
	srv, err := master.NewServer(masterConfig(c))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash master:", err)
		return 1
	}
	fmt.Printf("listening on %s\n", srv.Addr())
	select {} // until killed
}

// child is a master process.
type child struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChild(t *testing.T, c childConfig) *child {
	t.Helper()
	js, err := json.Marshal(c)
	assert.NilError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashMasterEnv+"="+string(js))
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	ch := &child{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = ch.stderr
	assert.NilError(t, cmd.Start())
	t.Cleanup(func() { ch.kill() })
	lines := make(chan string, 1)
	go func() { // ends when the child's stdout closes
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- a
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ch.addr = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("master did not start; stderr:\n%s", ch.stderr)
	}
	return ch
}

// kill sends SIGKILL and reaps the process.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// value is the deterministic content of a key.
func value(key string) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	seed := h.Sum64()
	r := rand.New(rand.NewPCG(seed, seed>>7))
	b := make([]byte, 512+r.IntN(12<<10))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newClient(t *testing.T, addr, cluster string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: addr, ClusterID: cluster,
		GlobalSegmentSize: 32 << 20, PingInterval: 200 * time.Millisecond, RPCTimeout: 3 * time.Second})
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// outcome of one key's operations in the storm.
type outcome struct {
	put     error
	removed bool // a remove after the put returned nil
	// unsure: a remove after the put failed, so the object may or may
	// not be there (the master may have died after applying it).
	unsure bool
}

// storm runs writers on clients until stop is closed: each puts fresh
// keys, and removes every tenth one it put.
func storm(clients []*client.Client, writersPer int, stop <-chan struct{}, okPuts *atomic.Int64) map[string]outcome {
	var mu sync.Mutex
	res := map[string]outcome{}
	var wg sync.WaitGroup
	for ci, c := range clients {
		for w := range writersPer {
			wg.Add(1)
			go func() { // ends when stop closes
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("c%d-w%d-%d", ci, w, i)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err := c.Put(ctx, key, value(key), client.ReplicateConfig{})
					o := outcome{put: err}
					if err == nil {
						okPuts.Add(1)
						if i%10 == 9 {
							rerr := c.Remove(ctx, key, true)
							o.removed, o.unsure = rerr == nil, rerr != nil
						}
					} else {
						time.Sleep(20 * time.Millisecond) // the master is away
					}
					cancel()
					mu.Lock()
					res[key] = o
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return res
}

// waitPuts returns once n more puts succeeded.
func waitPuts(t *testing.T, ok *atomic.Int64, n int64, what string, logs func() string) {
	t.Helper()
	target := ok.Load() + n
	deadline := time.Now().Add(60 * time.Second)
	for ok.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("%s: only %d of %d puts succeeded; master log:\n%s", what, ok.Load(), target, logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// verify reads every key through reader and checks the promises.
func verify(t *testing.T, reader *client.Client, res map[string]outcome, logs func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var acked, failedVisible, failedAbsent, removed int
	for key, o := range res {
		var got []byte
		var err error
		// Holders remount within a few heartbeats of the restart.
		for deadline := time.Now().Add(20 * time.Second); ; {
			got, err = reader.Get(ctx, key)
			code := wire.CodeOf(err)
			if err == nil || code == wire.ErrObjectNotFound || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		switch {
		case o.unsure:
			assert.Assert(t, err != nil || bytes.Equal(got, value(key)), "key %q: wrong bytes", key)
		case o.removed:
			assert.Equal(t, wire.CodeOf(err), wire.ErrObjectNotFound, "removed key %q came back; master log:\n%s", key, logs())
			removed++
		case o.put == nil:
			assert.NilError(t, err, "acknowledged put of %q lost; master log:\n%s", key, logs())
			assert.Assert(t, bytes.Equal(got, value(key)), "acknowledged put of %q: wrong bytes", key)
			acked++
		case err == nil:
			assert.Assert(t, bytes.Equal(got, value(key)), "failed put of %q visible with wrong bytes", key)
			failedVisible++
		default:
			assert.Equal(t, wire.CodeOf(err), wire.ErrObjectNotFound, "failed put of %q: %v", key, err)
			failedAbsent++
		}
	}
	t.Logf("%d acknowledged puts readable, %d removed stayed removed; failed puts: %d visible whole, %d absent",
		acked, removed, failedVisible, failedAbsent)
	assert.Assert(t, acked > 0)
}

// TestKillMasterInPutStorm: a master with --oplog_dir is killed (SIGKILL)
// twice in the middle of a put storm and restarted on the same address
// and directory (tmpfs and a real directory).
func TestKillMasterInPutStorm(t *testing.T) {
	dirs := map[string]string{"tempdir": t.TempDir()}
	if d, err := os.MkdirTemp("/dev/shm", "kvferry-crash-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		dirs["tmpfs"] = d
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			cfg := childConfig{Addr: freeAddr(t), OplogDir: dir, SnapRecords: 200}
			m := startChild(t, cfg)
			logs := func() string { return m.stderr.String() }
			clients := []*client.Client{newClient(t, m.addr, ""), newClient(t, m.addr, "")}
			var ok atomic.Int64
			stop := make(chan struct{})
			done := make(chan map[string]outcome)
			go func() { done <- storm(clients, 2, stop, &ok) }()
			for round := range 2 {
				waitPuts(t, &ok, 150, fmt.Sprintf("round %d", round), logs)
				m.kill()
				time.Sleep(100 * time.Millisecond)
				m = startChild(t, cfg)
			}
			waitPuts(t, &ok, 150, "after the last restart", logs)
			close(stop)
			res := <-done
			verify(t, clients[1], res, logs)
		})
	}
}

// TestKillHALeaderInPutStorm: two masters with --enable_ha --enable_oplog
// (the log in a real etcd); the leader is killed in the middle of a put
// storm; the standby takes over and serves every committed object.
func TestKillHALeaderInPutStorm(t *testing.T) {
	etcdtest.SkipIfAbsent(t)
	etcd := etcdtest.Start(t)
	cfg := childConfig{Addr: "127.0.0.1:0", Etcd: []string{etcd.Endpoint()}, ClusterID: "crash", SnapRecords: 200}
	m1 := startChild(t, cfg)
	m2 := startChild(t, cfg)
	logs := func() string { return "m1:\n" + m1.stderr.String() + "\nm2:\n" + m2.stderr.String() }
	addr := "etcd://" + etcd.Endpoint()
	// A master prints its address before it has won the election.
	cli, err := ha.Dial([]string{etcd.Endpoint()}, 5*time.Second)
	assert.NilError(t, err)
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := ha.Leader(ctx, cli, "crash")
		cancel()
		if err == nil {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "no leader: %v; %s", err, logs())
		time.Sleep(20 * time.Millisecond)
	}
	clients := []*client.Client{newClient(t, addr, "crash"), newClient(t, addr, "crash")}
	leader := m1
	if clients[0].MasterAddr() == m2.addr {
		leader = m2
	}
	var ok atomic.Int64
	stop := make(chan struct{})
	done := make(chan map[string]outcome)
	go func() { done <- storm(clients, 2, stop, &ok) }()
	waitPuts(t, &ok, 200, "before the kill", logs)
	leader.kill()
	waitPuts(t, &ok, 200, "after the failover", logs)
	close(stop)
	res := <-done
	verify(t, clients[1], res, logs)
}
