package oplog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvferry/kvferry/store/oplog/frame"
)

// DirConfig configures a Dir backend.
type DirConfig struct {
	// Path is the directory (created if missing). One master at a time may
	// use it: OpenDir takes an exclusive lock on it.
	Path string
	// Fsync makes every Append and Snapshot reach the device before it
	// returns (fdatasync), so what was acknowledged survives a machine
	// crash too. Without it an acknowledged record is in the kernel's page
	// cache before the master answers: it survives the master process
	// being killed, not the machine losing power.
	Fsync bool
}

// Dir keeps the log in files of a local directory: snapshot-<seq>.snap
// (written to a temporary name, synced, renamed) and oplog-<first>.log,
// appended with one write per batch. A snapshot starts a new log file and
// removes the files (and older snapshots) it covers.
type Dir struct {
	cfg  DirConfig
	lock *os.File

	cur      *os.File // the log file appended to; nil until the first Append
	curName  string
	curMax   uint64            // last seq written to cur
	fileMax  map[string]uint64 // last seq of each closed log file
	lastSnap string
}

// OpenDir opens (creating) the directory and locks it.
func OpenDir(cfg DirConfig) (*Dir, error) {
	if cfg.Path == "" {
		return nil, errors.New("oplog dir: empty path")
	}
	if err := os.MkdirAll(cfg.Path, 0o755); err != nil {
		return nil, fmt.Errorf("oplog dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Path, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("oplog dir: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("oplog dir %s: locked by another master: %w", cfg.Path, err)
	}
	return &Dir{cfg: cfg, lock: lock, fileMax: make(map[string]uint64)}, nil
}

func (d *Dir) path(name string) string { return filepath.Join(d.cfg.Path, name) }

// listed returns the names with prefix and suffix, sorted by the number
// between them.
func (d *Dir) listed(prefix, suffix string) ([]string, error) {
	ents, err := os.ReadDir(d.cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("oplog dir: %w", err)
	}
	type named struct {
		name string
		n    uint64
	}
	var out []named
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, named{name, n})
	}
	slices.SortFunc(out, func(a, b named) int {
		switch {
		case a.n < b.n:
			return -1
		case a.n > b.n:
			return 1
		}
		return 0
	})
	names := make([]string, len(out))
	for i, n := range out {
		names[i] = n.name
	}
	return names, nil
}

// Load reads the newest intact snapshot, then the log files in order. A
// torn tail is cut off the file it is in (so later appends follow intact
// records), and nothing after it is read.
func (d *Dir) Load(context.Context) (State, error) {
	var st State
	snaps, err := d.listed("snapshot-", ".snap")
	if err != nil {
		return st, err
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		b, err := os.ReadFile(d.path(snaps[i]))
		if err != nil {
			return st, fmt.Errorf("oplog dir: %w", err)
		}
		seq, data, err := frame.ParseSnapshot(b)
		if err != nil {
			st.Dropped++
			continue
		}
		st.SnapshotSeq, st.Snapshot, d.lastSnap = seq, data, snaps[i]
		break
	}
	logs, err := d.listed("oplog-", ".log")
	if err != nil {
		return st, err
	}
	var all []Record
	for i, name := range logs {
		b, err := os.ReadFile(d.path(name))
		if err != nil {
			return st, fmt.Errorf("oplog dir: %w", err)
		}
		recs, end, perr := frame.Parse(b)
		all = append(all, recs...)
		var last uint64
		if len(recs) > 0 {
			last = recs[len(recs)-1].Seq
		}
		d.fileMax[name] = last
		if perr != nil {
			st.Dropped += len(b) - end
			if err := os.Truncate(d.path(name), int64(end)); err != nil {
				return st, fmt.Errorf("oplog dir: cut torn tail of %s: %w", name, err)
			}
			// Files after a torn one cannot follow it: drop them.
			for _, later := range logs[i+1:] {
				st.Dropped++
				_ = os.Remove(d.path(later))
				delete(d.fileMax, later)
			}
			break
		}
	}
	recs, gap := contiguous(all, st.SnapshotSeq)
	if gap {
		st.Dropped++
	}
	st.Records = recs
	return st, nil
}

// Append writes the records with one write to the current log file.
func (d *Dir) Append(_ context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	if d.cur == nil {
		name := fmt.Sprintf("oplog-%020d.log", recs[0].Seq)
		f, err := os.OpenFile(d.path(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("oplog dir: %w", err)
		}
		if err := d.syncDir(); err != nil {
			f.Close()
			return err
		}
		d.cur, d.curName, d.curMax = f, name, 0
	}
	var buf []byte
	for _, r := range recs {
		buf = frame.Append(buf, r)
	}
	end, err := d.cur.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("oplog dir: %s: %w", d.curName, err)
	}
	if _, err := d.cur.Write(buf); err != nil {
		// Cut a partial frame off, so the batch can be appended again
		// (replay stops at the first torn frame).
		if terr := d.cur.Truncate(end); terr != nil {
			return fmt.Errorf("oplog dir: append to %s: %w, and cutting it back: %w: %w", d.curName, err, terr, ErrBroken)
		}
		return fmt.Errorf("oplog dir: append to %s: %w", d.curName, err)
	}
	if d.cfg.Fsync {
		if err := syscall.Fdatasync(int(d.cur.Fd())); err != nil {
			// What reached the disk is unknown after a failed sync.
			return fmt.Errorf("oplog dir: sync %s: %w: %w", d.curName, err, ErrBroken)
		}
	}
	d.curMax = recs[len(recs)-1].Seq
	return nil
}

// Snapshot writes snapshot-<seq>.snap durably (always synced, whatever
// Fsync says: it replaces log files), starts a new log file and removes
// the log files and snapshots it covers.
func (d *Dir) Snapshot(_ context.Context, seq uint64, data []byte) error {
	name := fmt.Sprintf("snapshot-%020d.snap", seq)
	tmp := d.path(name + ".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("oplog dir: %w", err)
	}
	_, err = f.Write(frame.Snapshot(seq, data))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, d.path(name))
	}
	if err == nil {
		err = d.syncDir()
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("oplog dir: snapshot %s: %w", name, err)
	}
	// Rotate: the next Append starts a new file. The current one may hold
	// records after seq; it goes at a later snapshot.
	if d.cur != nil {
		_ = d.cur.Close()
		d.fileMax[d.curName] = d.curMax
		d.cur = nil
	}
	for f, last := range d.fileMax {
		if last <= seq {
			_ = os.Remove(d.path(f))
			delete(d.fileMax, f)
		}
	}
	if d.lastSnap != "" && d.lastSnap != name {
		_ = os.Remove(d.path(d.lastSnap))
	}
	d.lastSnap = name
	return nil
}

func (d *Dir) syncDir() error {
	f, err := os.Open(d.cfg.Path)
	if err != nil {
		return fmt.Errorf("oplog dir: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("oplog dir: sync %s: %w", d.cfg.Path, err)
	}
	return nil
}

// Close closes the log file and releases the lock.
func (d *Dir) Close() error {
	if d.cur != nil {
		_ = d.cur.Close()
		d.cur = nil
	}
	if d.lock != nil {
		_ = d.lock.Close()
		d.lock = nil
	}
	return nil
}

// Path returns the directory.
func (d *Dir) Path() string { return d.cfg.Path }
