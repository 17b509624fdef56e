package tcp_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// authPair is pair with a cluster key on both engines when key is set.
func authPair(tb testing.TB, size uint64, key string) (a *engine.Engine, seg engine.SegmentID, src, dst *cmem.Map) {
	tb.Helper()
	ec := engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"tcp"}}
	if key != "" {
		p := filepath.Join(tb.TempDir(), "key")
		assert.NilError(tb, os.WriteFile(p, []byte(key), 0o600))
		ec.AuthKeyFile = p
	}
	mk := func() *engine.Engine {
		e, err := stack.New(context.Background(), stack.Config{Engine: ec})
		assert.NilError(tb, err)
		tb.Cleanup(func() { e.Close() })
		return e
	}
	a, b := mk(), mk()
	var err error
	src, err = cmem.MapAnon(size)
	assert.NilError(tb, err)
	dst, err = cmem.MapAnon(size)
	assert.NilError(tb, err)
	tb.Cleanup(func() { src.Close(); dst.Close() })
	assert.NilError(tb, a.RegisterMemory(src.Addr(), size, "*", true))
	assert.NilError(tb, b.RegisterMemory(dst.Addr(), size, "*", true))
	seg, err = a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(tb, err)
	return a, seg, src, dst
}

// cpuTime is the CPU this process used so far (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAuthCost measures what the cluster key costs the data path: the
// same transfers between two engines without a key and between two with
// one, in alternating rounds within one run, so both see the same machine.
// It reports the median per-round ratios of throughput and of CPU time per
// byte (authenticated / plain); the handshake is once per connection, so
// both should be 1.
func BenchmarkAuthCost(b *testing.B) {
	for _, c := range []struct {
		name  string
		op    engine.OpCode
		block uint64
		batch int
	}{
		{"write-4K-b1", engine.OpWrite, 4 << 10, 1},
		{"write-4K-b128", engine.OpWrite, 4 << 10, 128},
		{"write-1M-b16", engine.OpWrite, 1 << 20, 16},
		{"read-4K-b1", engine.OpRead, 4 << 10, 1},
		{"read-4K-b128", engine.OpRead, 4 << 10, 128},
		{"read-1M-b16", engine.OpRead, 1 << 20, 16},
	} {
		b.Run(c.name, func(b *testing.B) {
			const size = 64 << 20
			type side struct {
				e    *engine.Engine
				reqs []engine.Request
			}
			mk := func(key string) side {
				e, seg, src, dst := authPair(b, size, key)
				reqs := make([]engine.Request, c.batch)
				for i := range reqs {
					off := uint64(i) * c.block % size
					reqs[i] = engine.Request{Op: c.op, Source: src.Addr() + uintptr(off), Target: seg,
						TargetOffset: uint64(dst.Addr()) + off, Length: c.block}
				}
				return side{e, reqs}
			}
			plain, auth := mk(""), mk("YmVuY2htYXJrLWNsdXN0ZXIta2V5LTAxMjM0NTY3ODk=")
			round := func(s side, n int) (time.Duration, time.Duration) {
				t0, c0 := time.Now(), cpuTime()
				for range n {
					if err := s.e.Transfer(context.Background(), s.reqs); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(t0), cpuTime() - c0
			}
			n := max(1, int((8<<20)/(c.block*uint64(c.batch)))) // ~8 MiB per round, at least one batch
			round(plain, n)
			round(auth, n)
			var rt, rc []float64
			b.ResetTimer()
			for i := range b.N {
				var pw, pc, aw, ac time.Duration
				if i%2 == 0 {
					pw, pc = round(plain, n)
					aw, ac = round(auth, n)
				} else {
					aw, ac = round(auth, n)
					pw, pc = round(plain, n)
				}
				rt = append(rt, float64(pw)/float64(aw)) // throughput ratio = inverse time ratio
				rc = append(rc, float64(ac)/float64(pc))
			}
			b.StopTimer()
			slices.Sort(rt)
			slices.Sort(rc)
			b.SetBytes(int64(2 * n * c.batch * int(c.block)))
			b.ReportMetric(rt[len(rt)/2], "auth/plain-throughput")
			b.ReportMetric(rc[len(rc)/2], "auth/plain-cpu")
		})
	}
}
