package http

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

func TestJournalReplayAndTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.json")
	j := newJournal(path)
	_, err := j.load()
	assert.NilError(t, err)
	assert.NilError(t, j.append(journalPut, "a", []byte("1")))
	assert.NilError(t, j.append(journalPut, "b", []byte("2")))
	assert.NilError(t, j.append(journalDelete, "a", nil))
	assert.NilError(t, j.append(journalPut, "c", []byte("3")))
	assert.NilError(t, j.close())
	// A crash in the middle of the last append leaves half a record.
	fi, err := os.Stat(j.logPath)
	assert.NilError(t, err)
	assert.NilError(t, os.Truncate(j.logPath, fi.Size()-3))

	j2 := newJournal(path)
	got, err := j2.load()
	assert.NilError(t, err)
	assert.DeepEqual(t, got, map[string][]byte{"b": []byte("2")})
	fi2, err := os.Stat(j.logPath)
	assert.NilError(t, err)
	assert.Equal(t, fi2.Size(), j2.logBytes, "torn tail cut off")

	// After compaction the snapshot holds everything and the log is empty;
	// replaying a stale log over it changes nothing.
	assert.NilError(t, j2.append(journalPut, "d", []byte("4")))
	stale, err := os.ReadFile(j.logPath)
	assert.NilError(t, err)
	assert.NilError(t, j2.compact(map[string][]byte{"b": []byte("2"), "d": []byte("4")}))
	assert.NilError(t, j2.close())
	assert.NilError(t, os.WriteFile(j.logPath, stale, 0o600))
	got, err = newJournal(path).load()
	assert.NilError(t, err)
	assert.DeepEqual(t, got, map[string][]byte{"b": []byte("2"), "d": []byte("4")})
}

// A PUT into a large store appends a record; it does not rewrite the
// store (the finding: every PUT rewrote and synced a 78 MB file).
func TestJournalPutCostIsTheChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.json")
	s, err := NewServer(ServerConfig{SnapshotPath: path})
	assert.NilError(t, err)
	big := []byte(strings.Repeat("x", 1<<20))
	s.jmu.Lock()
	for i := range 8 {
		key := fmt.Sprintf("k%d", i)
		s.mu.entries[key] = serverEntry{value: big}
		assert.NilError(t, s.j.append(journalPut, key, big))
	}
	assert.NilError(t, s.j.compact(s.snapshotEntries()))
	s.jmu.Unlock()
	snap, err := os.Stat(path)
	assert.NilError(t, err)
	for i := range 100 {
		s.jmu.Lock()
		assert.NilError(t, s.j.append(journalPut, fmt.Sprintf("small%d", i), []byte("v")))
		s.maybeCompact()
		s.jmu.Unlock()
	}
	after, err := os.Stat(path)
	assert.NilError(t, err)
	assert.Equal(t, after.ModTime(), snap.ModTime(), "small puts did not rewrite the snapshot")
	assert.Assert(t, s.j.logBytes < 100*64, "log grew by %d bytes", s.j.logBytes)
	assert.NilError(t, s.Close())
}

func FuzzJournalReplay(f *testing.F) {
	j := newJournal(filepath.Join(f.TempDir(), "s"))
	_, _ = j.load()
	_ = j.append(journalPut, "key", []byte("value"))
	_ = j.append(journalDelete, "key", nil)
	_ = j.close()
	seed, _ := os.ReadFile(j.logPath)
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, log []byte) {
		m := map[string][]byte{}
		n := replay(log, m)
		if n < 0 || n > len(log) {
			t.Fatalf("good prefix %d of %d", n, len(log))
		}
		// The good prefix replays to the same state on its own.
		m2 := map[string][]byte{}
		if replay(log[:n], m2) != n || len(m2) != len(m) {
			t.Fatal("prefix replay differs")
		}
	})
}
