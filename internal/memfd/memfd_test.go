package memfd

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

func TestFindAndClose(t *testing.T) {
	m, err := New("kvferry-test", 3*4096, true)
	assert.NilError(t, err)
	base := uint64(m.Addr())
	m.Bytes()[4096+7] = 42

	fd, off, size, err := Find(base+4096, 100)
	assert.NilError(t, err)
	assert.Equal(t, off, uint64(4096))
	assert.Equal(t, size, uint64(3*4096))
	// The fd is the same memory: a second mapping sees the byte.
	b, err := unix.Mmap(fd, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	assert.NilError(t, err)
	assert.Equal(t, b[4096+7], byte(42))
	b[5] = 9
	assert.Equal(t, m.Bytes()[5], byte(9))
	// Sealed: nobody can shrink it under another's mapping.
	assert.Assert(t, unix.Ftruncate(fd, 4096) != nil)
	assert.NilError(t, unix.Munmap(b))
	unix.Close(fd)

	// A range that runs past the map, and one before it, are not shared.
	_, _, _, err = Find(base+2*4096, 2*4096)
	assert.Assert(t, errors.Is(err, ErrNotShared))
	_, _, _, err = Find(base-1, 2)
	assert.Assert(t, errors.Is(err, ErrNotShared))

	assert.NilError(t, m.Close())
	assert.NilError(t, m.Close())
	_, _, _, err = Find(base, 1)
	assert.Assert(t, errors.Is(err, ErrNotShared))
}
