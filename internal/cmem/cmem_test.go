package cmem

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/sys/cpu"

	"gotest.tools/v3/assert"
)

// TestCopyBatch covers the copy's paths: pairs aligned alike and not (the
// vector copy where the CPU has AVX2, and the stepped copy), short and long,
// every destination offset in a cache line, and overlapping ranges both
// ways (memmove).
func TestCopyBatch(t *testing.T) {
	modes := []bool{false}
	if cpu.X86.HasAVX2 {
		modes = append(modes, true)
	}
	defer setVectorCopy(cpu.X86.HasAVX2)
	for _, vector := range modes {
		setVectorCopy(vector)
		t.Run(fmt.Sprintf("vector=%v", vector), testCopyBatch)
	}
}

// copyMaps maps a source of n patterned bytes and a zeroed destination of
// n bytes, unmapped when the test ends.
func copyMaps(t *testing.T, n uint64) (src, dst *Map) {
	src, err := MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { src.Close() })
	dst, err = MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { dst.Close() })
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + i>>8)
	}
	return src, dst
}

func testCopyBatch(t *testing.T) {
	src, dst := copyMaps(t, 1<<20)
	for _, size := range []uint64{1, 63, 64, 127, 128, 129, 161, 2047, 2048, 2049, 4096, 8193, 32<<10 + 5, 256 << 10} {
		for _, so := range []uintptr{0, 8, 16, 63} {
			for _, do := range []uintptr{0, 1, 7, 8, 16, 31, 33, 40, 48, 63} {
				clear(dst.Bytes())
				CopyBatch([]Op{{Dst: dst.Addr() + do, Src: src.Addr() + so, N: size}})
				assert.Assert(t, bytes.Equal(dst.Bytes()[do:uint64(do)+size], src.Bytes()[so:uint64(so)+size]), "size %d src+%d dst+%d", size, so, do)
				assert.Equal(t, dst.Bytes()[uint64(do)+size], byte(0), "past the end")
				if do > 0 {
					assert.Equal(t, dst.Bytes()[do-1], byte(0), "before the start")
				}
				Copy(dst.Addr()+do, src.Addr()+so, size)
				assert.Assert(t, bytes.Equal(dst.Bytes()[do:uint64(do)+size], src.Bytes()[so:uint64(so)+size]))
			}
		}
	}
	// Overlapping, forward and backward, misaligned: memmove's result.
	for _, shift := range []int{8, -8, 100, -100} {
		b := dst.Bytes()
		copy(b, src.Bytes())
		want := append([]byte(nil), b...)
		at, size := 4096, 64<<10
		copy(want[at+shift:at+shift+size], want[at:at+size])
		CopyBatch([]Op{{Dst: dst.Addr() + uintptr(at+shift), Src: dst.Addr() + uintptr(at), N: uint64(size)}})
		assert.Assert(t, bytes.Equal(b, want), "overlap shift %d", shift)
	}
}

// TestCopyBatchStreaming covers batches large enough for streaming stores
// (KVF_NT_BYTES), one copy and many, misaligned, with the bytes around
// each destination untouched.
func TestCopyBatchStreaming(t *testing.T) {
	src, dst := copyMaps(t, 24<<20)
	check := func(ops []Op) {
		for _, op := range ops {
			d := op.Dst - dst.Addr()
			s := op.Src - src.Addr()
			assert.Assert(t, bytes.Equal(dst.Bytes()[d:d+uintptr(op.N)], src.Bytes()[s:s+uintptr(op.N)]), "op %+v", op)
			assert.Equal(t, dst.Bytes()[d-1], byte(0))
			assert.Equal(t, dst.Bytes()[d+uintptr(op.N)], byte(0))
		}
	}
	clear(dst.Bytes())
	one := []Op{{Dst: dst.Addr() + 16, Src: src.Addr() + 8, N: 9<<20 + 77}}
	CopyBatch(one)
	check(one)
	clear(dst.Bytes())
	Copy(one[0].Dst, one[0].Src, one[0].N)
	check(one)
	clear(dst.Bytes())
	var many []Op
	for i := uintptr(0); i < 300; i++ { // 300 x 32 KiB + 5: past the threshold
		many = append(many, Op{Dst: dst.Addr() + 64 + i*(32<<10+128) + i%7, Src: src.Addr() + i*(32<<10) + 16, N: 32<<10 + 5})
	}
	CopyBatch(many)
	check(many)
	// Past the threshold, pairs aligned alike stream too; every size class
	// of the copy's ends (partial lines, a last whole line, none) at
	// destination offsets in a line both alike and not.
	clear(dst.Bytes())
	var mixed []Op
	at := uintptr(64)
	for i := 0; len(mixed) < 400 || at < 9<<20; i++ {
		size := []uint64{1, 64, 127, 128, 129, 191, 192, 255, 4096 + 13, 32 << 10, 200 << 10}[i%11]
		do := []uintptr{0, 1, 16, 33, 63}[i%5]
		so := []uintptr{0, 16, 63}[i%3]
		if i%2 == 0 {
			so = do // aligned alike
		}
		mixed = append(mixed, Op{Dst: dst.Addr() + at + do, Src: src.Addr() + at + so, N: size})
		at += uintptr(size) + 256
	}
	CopyBatch(mixed)
	check(mixed)
	// CopyBatchStreaming streams whatever the batch's size: a small batch
	// of the same size classes and offsets, and a lone small copy.
	clear(dst.Bytes())
	small := mixed[:40]
	CopyBatchStreaming(small)
	check(small)
	clear(dst.Bytes())
	CopyBatchStreaming(one[:0])
	lone := []Op{{Dst: dst.Addr() + 4096 + 3, Src: src.Addr() + 8, N: 4096 + 61}}
	CopyBatchStreaming(lone)
	check(lone)
}

// BenchmarkCopyMisaligned copies 16 blocks a call between a source 64-byte
// aligned and a destination 8 or 16 bytes past a page boundary (numpy's
// placement), with the vector copy and without it (glibc's memcpy, in 2 KiB
// steps above 8 KiB): `go test -bench CopyMisaligned ./internal/cmem`.
func BenchmarkCopyMisaligned(b *testing.B) {
	const region = 33 << 20 // 16 blocks of the largest size
	src, err := MapAnonPopulate(region)
	assert.NilError(b, err)
	defer src.Close()
	dst, err := MapAnonPopulate(region + 4096)
	assert.NilError(b, err)
	defer dst.Close()
	defer setVectorCopy(cpu.X86.HasAVX2)
	for _, size := range []uint64{4 << 10, 32 << 10, 256 << 10, 2 << 20} {
		for _, off := range []uintptr{8, 16} {
			ops := make([]Op, 16)
			for i := range ops {
				ops[i] = Op{Dst: dst.Addr() + off + uintptr(i)*uintptr(size), Src: src.Addr() + uintptr(i)*uintptr(size), N: size}
			}
			for _, vector := range []bool{false, true} {
				if vector && !cpu.X86.HasAVX2 {
					continue
				}
				b.Run(fmt.Sprintf("size=%d/off=%d/vector=%v", size, off, vector), func(b *testing.B) {
					setVectorCopy(vector)
					b.SetBytes(int64(size) * int64(len(ops)))
					for b.Loop() {
						CopyBatch(ops)
					}
				})
			}
		}
	}
}

// BenchmarkCopyPieces copies one 32 MiB batch (streaming stores) from a
// source 16 bytes past a page boundary (numpy's placement) into a 64-byte
// aligned destination, as a multi-buffer store put does: 16 blocks of
// 2 MiB (the single-buffer call), 1,024 blocks of 32 KiB cut from the same
// contiguous source, and 1,024 blocks of 32 KiB strided 512 KiB apart (the
// per-layer KV blocks of 16 keys): `go test -bench CopyPieces ./internal/cmem`.
// The ratio against the 2 MiB blocks is what the piece count and the layout
// cost.
func BenchmarkCopyPieces(b *testing.B) {
	b.Run("64x32KiB", func(b *testing.B) { benchPieces(b, 64, 32<<10, 16) })
	b.Run("16x4KiB", func(b *testing.B) { benchPieces(b, 16, 4<<10, 0) })
	b.Run("16x4KiB-colddst", func(b *testing.B) { benchPiecesCold(b, 16, 4<<10) })
}

func benchPiecesCold(b *testing.B, pieces, piece uintptr) {
	const keys = 16
	obj := pieces * piece
	src, err := MapAnonPopulate(uint64(2*keys*obj + 4096))
	assert.NilError(b, err)
	defer src.Close()
	const span = 512 << 20
	dst, err := MapAnonPopulate(span)
	assert.NilError(b, err)
	defer dst.Close()
	at := src.Addr()
	for _, c := range []struct {
		name    string
		strided bool
		stream  bool
	}{{"whole", false, false}, {"strided", true, false}, {"whole-nt", false, true}, {"strided-nt", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(keys * obj))
			var ops []Op
			base := uintptr(0)
			for b.Loop() {
				ops = ops[:0]
				d0 := dst.Addr() + base
				base = (base + keys*obj) % (span - keys*obj)
				for k := uintptr(0); k < keys; k++ {
					d := d0 + k*obj
					if !c.strided {
						ops = append(ops, Op{Dst: d, Src: at + k*obj, N: uint64(obj)})
						continue
					}
					for l := uintptr(0); l < pieces; l++ {
						ops = append(ops, Op{Dst: d + l*piece, Src: at + (l*keys+k)*piece, N: uint64(piece)})
					}
				}
				if c.stream {
					CopyBatchStreaming(ops)
				} else {
					CopyBatch(ops)
				}
			}
		})
	}
}

func benchPieces(b *testing.B, pieces, piece, off uintptr) {
	const keys = 16
	obj := pieces * piece
	src, err := MapAnonPopulate(uint64(2*keys*obj + 4096))
	assert.NilError(b, err)
	defer src.Close()
	dst, err := MapAnonPopulate(uint64(keys * obj))
	assert.NilError(b, err)
	defer dst.Close()
	at := src.Addr() + off
	var whole, cut, strided []Op
	for k := uintptr(0); k < keys; k++ {
		d := dst.Addr() + k*obj
		whole = append(whole, Op{Dst: d, Src: at + k*obj, N: uint64(obj)})
		for l := uintptr(0); l < pieces; l++ {
			cut = append(cut, Op{Dst: d + l*piece, Src: at + k*obj + l*piece, N: uint64(piece)})
			strided = append(strided, Op{Dst: d + l*piece, Src: at + (l*keys+k)*piece, N: uint64(piece)})
		}
	}
	for _, c := range []struct {
		name string
		ops  []Op
	}{{"whole", whole}, {"contiguous", cut}, {"strided", strided}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(keys * obj))
			for b.Loop() {
				CopyBatch(c.ops)
			}
		})
	}
}
