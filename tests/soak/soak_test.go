//go:build soak

// Package soak_test is the soak (issue 15): four peer processes (C, the
// library loaded with dlopen) mix transfer-engine traffic and store
// traffic with churn for KVFERRY_SOAK_DURATION (make soak: 1 h; make test:
// 50 s, tests/soak/run.sh), a kvferry-master and a kvferry-metadata server beside them. Every
// cycle a peer opens each other peer's segment, registers a scratch
// region, writes and reads back 1 MiB (checked), unregisters and closes
// the segment, then puts, gets (checked) and removes four store objects
// with two replicas; peers 1-3 are restarted in turn every
// KVFERRY_SOAK_RESTART (peer 0 never: it sees every restart). RSS, fds,
// threads and goroutines of every peer are sampled between cycles every
// KVFERRY_SOAK_SAMPLE; after the warm-up (a quarter of the run, at most
// 5 min; KVFERRY_SOAK_WARMUP) a value whose median grows by more than 2 %
// from the first to the last quarter fails the test (counts: and by more
// than two, the fds or goroutines of one peer's connection pair). A transfer or store failure after the warm-up that no restart
// explains fails it too. The samples go to build/soak.tsv and
// build/soak.png.
package soak_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/tests/internal/proc"
	"github.com/kvferry/kvferry/tests/internal/servers"
	"github.com/kvferry/kvferry/tests/internal/suite"
)

func envDur(k string, def time.Duration) time.Duration {
	if v := os.Getenv(k); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil {
			return d
		}
	}
	return def
}

// start starts a child speaking one JSON line per command.
func start(t *testing.T, name string, argv []string, env []string) *proc.Proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = suite.Root()
	cmd.Env = append(os.Environ(), env...)
	return proc.Start(t, name, cmd, proc.Config{Quit: "quit", Grace: 30 * time.Second})
}

// sample is one reading of a peer incarnation.
type sample struct {
	at                        time.Duration // since the soak began
	peer, life                int
	rss, fds, threads, gorout float64
}

type peer struct {
	idx, life int
	p         *proc.Proc
	addr      uint64
	// down is when the last restart began and up when it ended (zero:
	// never restarted).
	down, up time.Time
}

func TestSoak(t *testing.T) {
	duration := envDur("KVFERRY_SOAK_DURATION", 75*time.Second)
	every := envDur("KVFERRY_SOAK_SAMPLE", 10*time.Second)
	restartEvery := envDur("KVFERRY_SOAK_RESTART", 3*time.Minute)
	// One cycle per peer at most every pace: the load of a busy serving
	// node, not of a benchmark (a removed object's space comes back when
	// its read lease ends: 1 s here).
	pace := envDur("KVFERRY_SOAK_PACE", 200*time.Millisecond)
	warm := envDur("KVFERRY_SOAK_WARMUP", min(duration/4, 5*time.Minute))
	// restartsUntil: no restart after it (the short form restarts during
	// the warm-up only: a restart's TCP lanes, opened while the peer was
	// away, close after two idle minutes, longer than its measured part).
	restartsUntil := envDur("KVFERRY_SOAK_RESTART_UNTIL", duration)
	lib := suite.Built("lib", "libkvferry.so.1")
	assert.NilError(t, suite.Missing(lib, suite.Built("bin", "kvferry-master"), suite.Built("bin", "kvferry-metadata")))
	bin := filepath.Join(t.TempDir(), "soak_peer")
	assert.NilError(t, suite.Compile("KVFERRY_SOAK_CFLAGS", "gcc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11",
		"-Iinclude", "-Itests/c", "-o", bin, "tests/soak/peer/soak_peer.c", "-ldl"))

	meta := servers.StartMetadata(t, suite.Built("bin", "kvferry-metadata"), "", proc.Config{}).Conn()
	masterAddr := servers.StartMaster(t, suite.Built("bin", "kvferry-master"), 0, nil, proc.Config{},
		append([]string{"--client_ttl=5", "--default_kv_lease_ttl=1000"}, strings.Fields(os.Getenv("KVFERRY_SOAK_MASTER_ARGS"))...)...).Addr
	env := append(suite.EngineEnv(10*time.Second, suite.Env("KVFERRY_SOAK_LOG", "warn")), "KVFERRY_METADATA_REPUBLISH_SEC=1")

	var mu sync.Mutex // guards peers, samples, failures
	peers := make([]*peer, 4)
	var samples []sample
	var problems []string
	t0 := time.Now()
	launch := func(i, life int) *peer {
		penv := env
		if addr := os.Getenv("KVFERRY_SOAK_P0_PPROF"); addr != "" && i == 0 && life == 0 {
			// Diagnosis: the never-restarted peer serves /debug/pprof/ there.
			penv = append(slices.Clip(env), "KVFERRY_METRICS_ADDR="+addr, "KVFERRY_METRICS_PPROF=1")
		}
		p := start(t, fmt.Sprintf("p%d.%d", i, life), []string{bin, lib, meta, fmt.Sprintf("p%d", i), masterAddr, "16"}, penv)
		r, err := p.TryReply(120 * time.Second)
		assert.NilError(t, err)
		assert.Assert(t, r["ok"] == true, "p%d did not start: %v", i, r)
		return &peer{idx: i, life: life, p: p, addr: uint64(r["addr"].(float64))}
	}
	for i := range peers {
		peers[i] = launch(i, 0)
	}
	t0 = time.Now()
	cycles := make([]int, 4)
	longest := make([]time.Duration, 4)
	// A cycle makes about 20 calls, each bounded by the 10 s transfer
	// timeout; one that takes longer than this blocked somewhere.
	const slowCycle = 90 * time.Second
	teFails, stFails := 0, 0
	// excused reports whether a failure against peer j (-1: any: a store
	// operation) in a cycle that began at from is explained by a restart.
	excused := func(j int, from time.Time) bool {
		for k, q := range peers {
			if (j >= 0 && k != j) || q.down.IsZero() {
				continue
			}
			// Up to the other peers' next look at the metadata and the
			// master's client TTL after it came back.
			if (q.up.IsZero() || from.Before(q.up.Add(15*time.Second))) && time.Now().After(q.down.Add(-time.Second)) {
				return true
			}
		}
		return false
	}
	// unexplained records a failure no restart explains: a problem after
	// the warm-up, a note during it (peers start and restart under load).
	unexplained := func(began time.Time, msg string) {
		if began.Sub(t0) < warm {
			t.Logf("during the warm-up: %s", msg)
			return
		}
		problems = append(problems, msg)
	}
	stopAt := t0.Add(duration)
	var wg sync.WaitGroup
	for i := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lastSample, lastCycle time.Time
			nextRestart := t0.Add(restartEvery * time.Duration(i))
			seed := uint64(i+1) << 32
			for time.Now().Before(stopAt) {
				mu.Lock()
				me := peers[i]
				var args []string
				for j, q := range peers {
					if j != i {
						args = append(args, fmt.Sprintf("p%d=%d", j, q.addr))
					}
				}
				mu.Unlock()
				seed++
				if d := pace - time.Since(lastCycle); d > 0 {
					time.Sleep(d)
				}
				lastCycle = time.Now()
				began := time.Now()
				r, err := me.p.TryCall(5*time.Minute, "cycle %d %d %s", seed, i, strings.Join(args, " "))
				if err != nil {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("p%d: %v", i, err))
					mu.Unlock()
					return
				}
				took := time.Since(began)
				mu.Lock()
				cycles[i]++
				longest[i] = max(longest[i], took)
				if took > slowCycle {
					problems = append(problems, fmt.Sprintf("%s: p%d: a cycle took %s (%v)", time.Since(t0).Round(time.Second), i, took.Round(time.Millisecond), r))
				}
				if r["ok"] != true {
					failed, _ := r["failed"].([]any)
					for k, f := range failed {
						j, _ := strconv.Atoi(strings.TrimPrefix(f.(string), "p"))
						teFails++
						if k == 0 { // every failure's reason, explained or not
							t.Logf("%s: p%d -> %s failed: %v", time.Since(t0).Round(time.Second), i, f, r["te_err"])
						}
						if !excused(j, began) {
							unexplained(began, fmt.Sprintf("%s: p%d -> %s failed with no restart to explain it (first failure: %v)", time.Since(t0).Round(time.Second), i, f, r["te_err"]))
						}
					}
					if n := int(r["st_fail"].(float64)); n > 0 {
						stFails += n
						if !excused(-1, began) {
							unexplained(began, fmt.Sprintf("%s: p%d: %d store operations failed with no restart to explain them (first: %v: %v)", time.Since(t0).Round(time.Second), i, n, r["st_rc"], r["st_err"]))
						}
					}
				}
				mu.Unlock()
				if time.Since(lastSample) >= every {
					lastSample = time.Now()
					s, err := me.p.TryCall(time.Minute, "stats")
					if err == nil {
						mu.Lock()
						samples = append(samples, sample{at: time.Since(t0), peer: i, life: me.life,
							rss: s["rss_kb"].(float64) * 1024, fds: s["fds"].(float64), threads: s["threads"].(float64), gorout: s["goroutines"].(float64)})
						mu.Unlock()
					}
				}
				if i > 0 && restartEvery > 0 && time.Now().After(nextRestart) && time.Until(stopAt) > restartEvery/2 &&
					time.Since(t0) < restartsUntil {
					nextRestart = time.Now().Add(3 * restartEvery)
					mu.Lock()
					me.down, me.up = time.Now(), time.Time{} // restarting now
					mu.Unlock()
					me.p.Stop()
					np := launch(i, me.life+1)
					np.down, np.up = me.down, time.Now()
					mu.Lock()
					peers[i] = np
					mu.Unlock()
					lastSample = time.Time{}
				}
			}
		}()
	}
	wg.Wait()
	restarts := 0
	for _, q := range peers {
		restarts += q.life
	}
	t.Logf("soak of %s: cycles per peer %v (longest %v), %d peer restarts, %d transfer and %d store failures during restarts",
		duration, cycles, longest, restarts, teFails, stFails)
	for _, p := range problems {
		t.Error(p)
	}
	assert.NilError(t, writeTSV(suite.Built("soak.tsv"), samples))
	assert.NilError(t, plotSamples(suite.Built("soak.png"), samples, warm))
	// Growth after the warm-up, per incarnation long enough to judge; a
	// restarted peer's incarnation has a warm-up of its own.
	type key struct{ peer, life int }
	byLife := map[key][]sample{}
	born := map[key]time.Duration{}
	for _, s := range samples {
		k := key{s.peer, s.life}
		if _, ok := born[k]; !ok {
			born[k] = s.at
		}
		if s.at >= warm && (s.life == 0 || s.at >= born[k]+warm) {
			byLife[k] = append(byLife[k], s)
		}
	}
	// KVFERRY_SOAK_RSS_SLACK (bytes; 0 in make soak) is RSS growth that
	// counts as noise however large its share: the short form judges 25 s,
	// in which one step of the Go heap's size (1-2 MiB) is 2 %.
	slack, _ := strconv.ParseFloat(suite.Env("KVFERRY_SOAK_RSS_SLACK", "0"), 64)
	judged := 0
	for k, ss := range byLife {
		if len(ss) < 8 {
			continue
		}
		judged++
		for _, m := range []struct {
			name  string
			get   func(sample) float64
			count bool
		}{{"RSS", func(s sample) float64 { return s.rss }, false}, {"fds", func(s sample) float64 { return s.fds }, true},
			{"threads", func(s sample) float64 { return s.threads }, true}, {"goroutines", func(s sample) float64 { return s.gorout }, true}} {
			early, late := growth(ss, m.get)
			pct := 100 * (late - early) / early
			line := fmt.Sprintf("p%d.%d %s: %.0f -> %.0f (%+.2f %%) over %d samples after the warm-up", k.peer, k.life, m.name, early, late, pct, len(ss))
			t.Log(line)
			if pct > 2 && (!m.count || late-early > 2) && (m.count || late-early > slack) {
				t.Errorf("growth beyond 2 %%: %s", line)
			}
		}
	}
	assert.Assert(t, judged > 0, "no peer ran long enough after the warm-up to judge growth (%d samples)", len(samples))
}

// growth returns the medians of the first and the last quarter of ss: a
// leak moves the median; what comes and goes for a sample or two (the
// garbage collector's heap, the sessions of a peer being restarted) does
// not.
func growth(ss []sample, get func(sample) float64) (early, late float64) {
	q := max(len(ss)/4, 2)
	med := func(part []sample) float64 {
		v := make([]float64, len(part))
		for i, s := range part {
			v[i] = get(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return med(ss[:q]), med(ss[len(ss)-q:])
}

func writeTSV(path string, ss []sample) error {
	var b strings.Builder
	b.WriteString("seconds\tpeer\tincarnation\trss_bytes\tfds\tthreads\tgoroutines\n")
	for _, s := range ss {
		fmt.Fprintf(&b, "%.1f\tp%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\n", s.at.Seconds(), s.peer, s.life, s.rss, s.fds, s.threads, s.gorout)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
