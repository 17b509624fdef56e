package cmem

import (
	"bytes"
	"testing"

	"gotest.tools/v3/assert"
)

// TestCopyBatch covers the copy's paths: pairs aligned alike and not (the
// stepped copy), short and long, and overlapping ranges both ways
// (memmove).
func TestCopyBatch(t *testing.T) {
	const n = 1 << 20
	src, err := MapAnon(n)
	assert.NilError(t, err)
	defer src.Close()
	dst, err := MapAnon(n)
	assert.NilError(t, err)
	defer dst.Close()
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + i>>8)
	}
	for _, size := range []uint64{1, 2047, 2048, 2049, 4096, 32<<10 + 5, 256 << 10} {
		for _, so := range []uintptr{0, 8, 16, 63} {
			for _, do := range []uintptr{0, 16, 40} {
				clear(dst.Bytes())
				CopyBatch([]Op{{Dst: dst.Addr() + do, Src: src.Addr() + so, N: size}})
				assert.Assert(t, bytes.Equal(dst.Bytes()[do:uint64(do)+size], src.Bytes()[so:uint64(so)+size]), "size %d src+%d dst+%d", size, so, do)
				assert.Equal(t, dst.Bytes()[uint64(do)+size], byte(0), "past the end")
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
