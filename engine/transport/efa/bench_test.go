package efa_test

import (
	"fmt"
	"testing"

	"github.com/kvferry/kvferry/engine"
)

// BenchmarkWrite writes batches of 32 blocks of each size to an owner
// process over tcp;ofi_rxm on loopback (a software provider: the figures
// measure it, not EFA hardware).
func BenchmarkWrite(b *testing.B) {
	for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
		for _, size := range []uint64{64 << 10, 1 << 20, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%d", op, size), func(b *testing.B) {
				benchTransfer(b, op, size)
			})
		}
	}
}

func benchTransfer(b *testing.B, op engine.OpCode, size uint64) {
	skipWithoutLibfabric(b)
	const count = 32
	o := startOwner(b, size*count, 0)
	l := newLocal(b, size*count, nil)
	seg := l.open(b, o.segment)
	var reqs []engine.Request
	for i := uint64(0); i < count; i++ {
		reqs = append(reqs, engine.Request{Op: op, Source: l.addr + uintptr(i*size), Target: seg, TargetOffset: o.addr + i*size, Length: size})
	}
	b.SetBytes(int64(size * count))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := l.e.Transfer(contextWithTimeout(b), reqs); err != nil {
			b.Fatal(err)
		}
	}
}
