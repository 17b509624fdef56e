package cuda

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// TestChunkedVMM: memory made like PyTorch's expandable segments (one
// reservation, one cuMemCreate and cuMemMap per chunk) classifies chunk by
// chunk, copies run across chunks, and the chunks exported one by one map
// side by side into one SharedMapping that holds the same bytes.
func TestChunkedVMM(t *testing.T) {
	d, _ := driver(t)
	const chunk, n = 2 << 20, 3
	second := fakecuda.Second(t)
	p, size, err := d.VMMAllocChunks(second, chunk, n, HandlePosixFD)
	assert.NilError(t, err)
	assert.Equal(t, size, uint64(chunk*n))
	defer func() { assert.NilError(t, d.VMMFreeChunks(second, p, size)) }()
	for i := range n {
		pi, err := d.Pointer(p + uint64(i*chunk) + 100)
		assert.NilError(t, err)
		assert.Equal(t, pi.Device, second)
		assert.Equal(t, pi.MappingBase, p+uint64(i*chunk))
		assert.Equal(t, pi.MappingSize, uint64(chunk))
	}

	host, err := cmem.Malloc(size)
	assert.NilError(t, err)
	defer cmem.Free(host)
	want := pattern(int(size), 9)
	copy(cmem.Bytes(host, size), want)
	// One copy over all three chunks, in and out.
	assert.NilError(t, d.MemcpySync(second, p, uint64(host), size))
	clear(cmem.Bytes(host, size))
	assert.NilError(t, d.MemcpySync(second, uint64(host)+4096, p+4096, size-8192))
	assert.Assert(t, bytes.Equal(cmem.Bytes(host, size)[4096:size-4096], want[4096:size-4096]))
	// Past the reservation's end: refused.
	assert.Assert(t, d.MemcpySync(second, uint64(host), p+size-4096, 8192) != nil)

	// Export each chunk, map them side by side on device 0.
	m, err := d.ReserveShared(0, size)
	assert.NilError(t, err)
	for i := range n {
		fd, base, sz, err := d.ExportFD(p + uint64(i*chunk))
		assert.NilError(t, err)
		assert.Equal(t, base, p+uint64(i*chunk))
		assert.Equal(t, sz, uint64(chunk))
		assert.NilError(t, m.MapFD(base-p, sz, fd))
		unix.Close(fd)
		if i == 0 {
			// Overlapping parts and parts past the end are refused.
			assert.Assert(t, m.MapFD(0, chunk, 0) != nil)
			assert.Assert(t, m.MapFD(size, chunk, 0) != nil)
		}
	}
	assert.NilError(t, m.Finish())
	clear(cmem.Bytes(host, size))
	assert.NilError(t, d.MemcpySync(0, uint64(host), m.Addr(), size))
	assert.Assert(t, bytes.Equal(cmem.Bytes(host, size), want))
	assert.NilError(t, m.Close())

	// A mapping with a hole cannot be finished (no access to a hole).
	m, err = d.ReserveShared(0, size)
	assert.NilError(t, err)
	fd, _, _, err := d.ExportFD(p)
	assert.NilError(t, err)
	assert.NilError(t, m.MapFD(0, chunk, fd))
	assert.NilError(t, m.MapFD(2*chunk, chunk, fd))
	unix.Close(fd)
	assert.Assert(t, m.Finish() != nil)
	assert.NilError(t, m.Close())
}
