// Package oplog keeps what a store master knows across restarts and leader
// changes: an operation log of numbered records plus periodic snapshots
// (Mooncake's OpLog/snapshot design, specs/mooncake.md §7.6), in a local
// directory for one master (Dir) or in etcd for an HA cluster (Etcd).
//
// A Backend stores opaque records; store/master decides what they say. The
// contract every backend keeps:
//   - Append stores records in sequence order; when it returns nil they
//     survive the master process (and, where the backend says so, the
//     machine). Sequence numbers are consecutive, starting at 1.
//   - Snapshot(seq, data) stores a state that covers every record up to seq;
//     records up to seq may be dropped afterwards, never before the
//     snapshot is durable.
//   - Load returns the newest intact snapshot and every intact record after
//     it, in order, stopping at the first torn or corrupt record (a
//     process killed in the middle of a write leaves a torn tail, which is
//     dropped, never returned).
//
// Records are framed alike in files and in etcd values: a 16-byte header
// (length u32, CRC-32C u32 of seq and data, seq u64, little endian), then
// the data.
package oplog

import (
	"context"
	"errors"
	"hash/crc32"

	"github.com/kvferry/kvferry/store/oplog/frame"
)

// Record is one entry of the log (framed by package frame).
type Record = frame.Record

// State is what Load found.
type State struct {
	// SnapshotSeq is the last sequence number the snapshot covers (0: no
	// snapshot).
	SnapshotSeq uint64
	// Snapshot is the snapshot's data (nil when none).
	Snapshot []byte
	// Records are the records after SnapshotSeq, in order.
	Records []Record
	// Dropped counts bytes or records that Load found torn or corrupt and
	// left out (a tail written by a process that died).
	Dropped int
}

// LastSeq returns the last sequence number State holds.
func (s State) LastSeq() uint64 {
	if n := len(s.Records); n > 0 {
		return s.Records[n-1].Seq
	}
	return s.SnapshotSeq
}

// Backend stores a master's log and snapshots. Calls are made by one
// master at a time and are not concurrent with each other (the master's
// journal serializes them).
type Backend interface {
	// Load reads the newest intact snapshot and the records after it.
	Load(ctx context.Context) (State, error)
	// Append stores records durably, in order.
	Append(ctx context.Context, recs []Record) error
	// Snapshot stores data as the state after record seq and then drops
	// the records it covers.
	Snapshot(ctx context.Context, seq uint64, data []byte) error
	// Close releases the backend (a directory's lock, …).
	Close() error
}

// ErrFenced is returned by a backend that another master took over (an
// HA leader whose leadership ended): nothing was written.
var ErrFenced = errors.New("oplog: another master leads; nothing written")

// ErrBroken is returned by a backend that can no longer append safely
// (a log file it could not cut back after a failed write, a failed
// fsync): the master stops logging. Other errors are passing, and the
// failed batch may be appended again.
var ErrBroken = errors.New("oplog: the log cannot be appended to safely any more")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// contiguous keeps the records of recs that follow after (skipping those at
// or below it) up to the first gap in the sequence. A record numbered below
// the next one expected is a batch appended again (its first write's
// outcome was unknown to the master, which wrote it again, as it was): the
// copy is skipped, not taken for a gap.
func contiguous(recs []Record, after uint64) (out []Record, gap bool) {
	next := after + 1
	for _, r := range recs {
		if r.Seq < next {
			continue
		}
		if r.Seq != next {
			return out, true
		}
		out = append(out, r)
		next++
	}
	return out, false
}
