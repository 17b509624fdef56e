package ssd

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
)

// dirs: tmpfs (no O_DIRECT) and the test's temporary directory (a real
// filesystem on most machines).
func dirs(t *testing.T) map[string]string {
	out := map[string]string{"tempdir": t.TempDir()}
	if d, err := os.MkdirTemp("/dev/shm", "kvferry-ssd-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		out["tmpfs"] = d
	}
	return out
}

func data(n int, seed uint64) []byte {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func TestWriteReadReopen(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			s, err := Open(Config{Dir: dir, Capacity: 64 << 20})
			assert.NilError(t, err)
			t.Logf("o_direct=%v", s.Direct())
			sizes := []int{1, 4095, 4096, 4097, chunk - headerLen, chunk - headerLen + 1, 3*chunk + 17}
			for i, n := range sizes {
				fb, err := s.Write("t", string(rune('a'+i)), uint64(i+1), data(n, uint64(i)))
				assert.NilError(t, err)
				assert.Equal(t, fb, FileBytes(uint64(n)))
			}
			// The same key under another tenant is another file.
			_, err = s.Write("other", "a", 99, data(10, 99))
			assert.NilError(t, err)
			check := func(s *Store) {
				for i, n := range sizes {
					got := make([]byte, n)
					assert.NilError(t, s.Read("t", string(rune('a'+i)), uint64(i+1), got))
					assert.Assert(t, bytes.Equal(got, data(n, uint64(i))), "size %d", n)
				}
				got := make([]byte, 10)
				assert.NilError(t, s.Read("other", "a", 99, got))
				assert.Assert(t, bytes.Equal(got, data(10, 99)))
				// Another version is not served.
				err := s.Read("t", "a", 7, make([]byte, 1))
				assert.Assert(t, errors.Is(err, wire.ErrObjectNotFound), err)
			}
			check(s)
			used := s.Used()

			// A restarted client finds the same files.
			s2, err := Open(Config{Dir: dir, Capacity: 64 << 20})
			assert.NilError(t, err)
			assert.Equal(t, s2.ID(), s.ID())
			assert.Equal(t, s2.Used(), used)
			assert.Equal(t, len(s2.Entries()), len(sizes)+1)
			check(s2)

			// Replacing and deleting.
			_, err = s2.Write("t", "a", 50, data(5000, 5))
			assert.NilError(t, err)
			got := make([]byte, 5000)
			assert.NilError(t, s2.Read("t", "a", 50, got))
			assert.Assert(t, bytes.Equal(got, data(5000, 5)))
			s2.Delete("t", "a", 1) // an older version: nothing happens
			assert.NilError(t, s2.Read("t", "a", 50, got))
			s2.Delete("t", "a", 50)
			assert.Assert(t, errors.Is(s2.Read("t", "a", 50, got), wire.ErrObjectNotFound))

			// A full tier refuses.
			_, err = s2.Write("t", "big", 1, make([]byte, 64<<20))
			assert.Assert(t, errors.Is(err, wire.ErrNoAvailableHandle), err)
		})
	}
}

// A torn file (a short write) is dropped at Open; a corrupt byte in the
// data fails the read with CHECKSUM_MISMATCH and deletes the file; a
// corrupt header is dropped at Open. None is ever served.
func TestTornAndCorruptFiles(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			s, err := Open(Config{Dir: dir, Capacity: 64 << 20})
			assert.NilError(t, err)
			for i, k := range []string{"torn", "flip", "hdr", "good"} {
				_, err := s.Write("", k, uint64(i+1), data(20000, uint64(i)))
				assert.NilError(t, err)
			}
			torn := s.path("", "torn")
			st, err := os.Stat(torn)
			assert.NilError(t, err)
			assert.NilError(t, os.Truncate(torn, st.Size()-Align))
			flip := s.path("", "flip")
			b, err := os.ReadFile(flip)
			assert.NilError(t, err)
			b[headerLen+100] ^= 1
			assert.NilError(t, os.WriteFile(flip, b, 0o644))
			hdr := s.path("", "hdr")
			b, err = os.ReadFile(hdr)
			assert.NilError(t, err)
			b[45] ^= 1
			assert.NilError(t, os.WriteFile(hdr, b, 0o644))
			// A temporary file of a write cut short.
			assert.NilError(t, os.WriteFile(filepath.Join(dir, "x.kvd.7.tmp"), []byte("partial"), 0o644))

			s2, err := Open(Config{Dir: dir, Capacity: 64 << 20})
			assert.NilError(t, err)
			keys := map[string]bool{}
			for _, e := range s2.Entries() {
				keys[e.Key] = true
			}
			assert.DeepEqual(t, keys, map[string]bool{"flip": true, "good": true})
			err = s2.Read("", "flip", 2, make([]byte, 20000))
			assert.Assert(t, errors.Is(err, wire.ErrChecksumMismatch), err)
			_, err = os.Stat(flip)
			assert.Assert(t, os.IsNotExist(err))
			got := make([]byte, 20000)
			assert.NilError(t, s2.Read("", "good", 4, got))
			assert.Assert(t, bytes.Equal(got, data(20000, 3)))
			_, err = os.Stat(filepath.Join(dir, "x.kvd.7.tmp"))
			assert.Assert(t, os.IsNotExist(err))
		})
	}
}
