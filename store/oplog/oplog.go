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
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Record is one entry of the log.
type Record struct {
	// Seq numbers the record: 1 for the first, consecutive after that.
	Seq uint64
	// Data is the record's payload (the master's encoding).
	Data []byte
}

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

const headerLen = 16

// maxRecord bounds one record's length (a snapshot is not a record).
const maxRecord = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func recordCRC(seq uint64, data []byte) uint32 {
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seq)
	c := crc32.Update(0, castagnoli, s[:])
	return crc32.Update(c, castagnoli, data)
}

// appendFrame appends the framed record to buf.
func appendFrame(buf []byte, r Record) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(r.Data)))
	binary.LittleEndian.PutUint32(h[4:], recordCRC(r.Seq, r.Data))
	binary.LittleEndian.PutUint64(h[8:], r.Seq)
	buf = append(buf, h[:]...)
	return append(buf, r.Data...)
}

// errTorn marks the end of the intact part of a framed buffer.
var errTorn = errors.New("torn or corrupt record")

// parseFrames decodes framed records from b. It returns the records up to
// the first torn or corrupt one, and the offset where the intact part ends
// (len(b) when all is intact). The records' Data alias b.
func parseFrames(b []byte) ([]Record, int, error) {
	var out []Record
	off := 0
	for off < len(b) {
		if len(b)-off < headerLen {
			return out, off, errTorn
		}
		n := binary.LittleEndian.Uint32(b[off:])
		crc := binary.LittleEndian.Uint32(b[off+4:])
		seq := binary.LittleEndian.Uint64(b[off+8:])
		if n > maxRecord || uint64(len(b)-off-headerLen) < uint64(n) {
			return out, off, errTorn
		}
		data := b[off+headerLen : off+headerLen+int(n)]
		if recordCRC(seq, data) != crc {
			return out, off, errTorn
		}
		out = append(out, Record{Seq: seq, Data: data})
		off += headerLen + int(n)
	}
	return out, off, nil
}

// snapHeader frames a snapshot: magic, seq, length, CRC-32C of the data.
const snapMagic = "KVFSNAP1"

const snapHeaderLen = len(snapMagic) + 8 + 8 + 4

func frameSnapshot(seq uint64, data []byte) []byte {
	out := make([]byte, snapHeaderLen, snapHeaderLen+len(data))
	copy(out, snapMagic)
	binary.LittleEndian.PutUint64(out[8:], seq)
	binary.LittleEndian.PutUint64(out[16:], uint64(len(data)))
	binary.LittleEndian.PutUint32(out[24:], crc32.Checksum(data, castagnoli))
	return append(out, data...)
}

// parseSnapshot checks a framed snapshot and returns its seq and data.
func parseSnapshot(b []byte) (uint64, []byte, error) {
	if len(b) < snapHeaderLen || string(b[:len(snapMagic)]) != snapMagic {
		return 0, nil, fmt.Errorf("snapshot: bad header: %w", errTorn)
	}
	seq := binary.LittleEndian.Uint64(b[8:])
	n := binary.LittleEndian.Uint64(b[16:])
	if n != uint64(len(b)-snapHeaderLen) {
		return 0, nil, fmt.Errorf("snapshot: %d bytes for %d: %w", len(b)-snapHeaderLen, n, errTorn)
	}
	data := b[snapHeaderLen:]
	if crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(b[24:]) {
		return 0, nil, fmt.Errorf("snapshot: checksum mismatch: %w", errTorn)
	}
	return seq, data, nil
}

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
