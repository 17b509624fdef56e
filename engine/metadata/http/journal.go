package http

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
)

// journal keeps a server's entries durable at the cost of the change, not
// of the whole store: a snapshot file (every entry, rewritten atomically)
// and an append-only log of the changes made since, each synced before it
// is acknowledged. When the log outgrows the snapshot (and
// compactMinBytes) the snapshot is rewritten and the log emptied, so each
// byte is rewritten a bounded number of times.
//
// Log record: u32 payload length, u32 CRC-32C of the payload, payload;
// payload: op (journalPut, journalDelete), u32 key length, key, value. A
// torn or corrupt tail (a crash during an unacknowledged append) is cut
// off at load.
type journal struct {
	path, logPath string
	f             *os.File // the log, open for appending; nil until first use
	logBytes      int64
	snapBytes     int64
}

const (
	journalPut    = 1
	journalDelete = 2
	// compactMinBytes is the least log size that triggers a compaction.
	compactMinBytes = 4 << 20
	// maxRecordBytes bounds one record read back (key and value caps are
	// far lower).
	maxRecordBytes = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func newJournal(path string) *journal { return &journal{path: path, logPath: path + ".log"} }

// load reads the snapshot (missing means empty) and replays the log over
// it; a bad tail of the log is truncated away.
func (j *journal) load() (map[string][]byte, error) {
	entries := map[string][]byte{}
	data, err := os.ReadFile(j.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("load metadata snapshot %q: %w", j.path, err)
	default:
		if entries, err = decodeSnapshot(data); err != nil {
			return nil, fmt.Errorf("load metadata snapshot %q: %w", j.path, err)
		}
		j.snapBytes = int64(len(data))
	}
	log, err := os.ReadFile(j.logPath)
	if errors.Is(err, fs.ErrNotExist) {
		return entries, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load metadata log %q: %w", j.logPath, err)
	}
	good := replay(log, entries)
	if good < len(log) {
		if err := os.Truncate(j.logPath, int64(good)); err != nil {
			return nil, fmt.Errorf("cut torn tail of metadata log %q: %w", j.logPath, err)
		}
	}
	j.logBytes = int64(good)
	return entries, nil
}

// replay applies the records of log to entries and returns the length of
// the good prefix.
func replay(log []byte, entries map[string][]byte) int {
	off := 0
	for len(log)-off >= 8 {
		n := int64(binary.LittleEndian.Uint32(log[off:]))
		sum := binary.LittleEndian.Uint32(log[off+4:])
		if n < 5 || n > maxRecordBytes || int64(len(log)-off-8) < n {
			break
		}
		p := log[off+8 : off+8+int(n)]
		if crc32.Checksum(p, castagnoli) != sum {
			break
		}
		kl := int64(binary.LittleEndian.Uint32(p[1:]))
		if kl == 0 || 5+kl > n {
			break
		}
		key := string(p[5 : 5+kl])
		switch p[0] {
		case journalPut:
			entries[key] = bytes.Clone(p[5+kl:])
		case journalDelete:
			delete(entries, key)
		default:
			return off
		}
		off += 8 + int(n)
	}
	return off
}

// append writes one change and syncs it.
func (j *journal) append(op byte, key string, value []byte) error {
	if j.f == nil {
		f, err := os.OpenFile(j.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("open metadata log: %w", err)
		}
		j.f = f
	}
	rec := make([]byte, 8, 8+5+len(key)+len(value))
	rec = append(rec, op)
	rec = binary.LittleEndian.AppendUint32(rec, uint32(len(key)))
	rec = append(rec, key...)
	rec = append(rec, value...)
	binary.LittleEndian.PutUint32(rec[0:], uint32(len(rec)-8))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
	if _, err := j.f.Write(rec); err != nil {
		return fmt.Errorf("write metadata log %q: %w", j.logPath, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("sync metadata log %q: %w", j.logPath, err)
	}
	j.logBytes += int64(len(rec))
	return nil
}

// wantsCompaction reports whether the log has outgrown the snapshot.
func (j *journal) wantsCompaction() bool {
	return j.logBytes > max(j.snapBytes, compactMinBytes)
}

// compact writes entries as the new snapshot and empties the log. A crash
// between the two leaves a log whose replay over the new snapshot changes
// nothing (it ends in the state the snapshot holds).
func (j *journal) compact(entries map[string][]byte) error {
	data, err := json.Marshal(&snapshotFile{Format: snapshotFormat, Entries: entries})
	if err != nil {
		return fmt.Errorf("encode metadata snapshot: %w", err)
	}
	if err := writeFileAtomic(j.path, data); err != nil {
		return err
	}
	j.snapBytes = int64(len(data))
	if j.f != nil {
		if err := j.f.Truncate(0); err != nil {
			return fmt.Errorf("empty metadata log %q: %w", j.logPath, err)
		}
		if _, err := j.f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("empty metadata log %q: %w", j.logPath, err)
		}
		_ = j.f.Sync()
	} else if err := os.Truncate(j.logPath, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("empty metadata log %q: %w", j.logPath, err)
	}
	j.logBytes = 0
	return nil
}

func (j *journal) close() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
