package frame

import (
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

// HeaderBytes is the size of a record's frame header.
const HeaderBytes = 16

// MaxRecordBytes bounds one record's length (a snapshot is not a record).
const MaxRecordBytes = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordCRC is the CRC-32C of a record's seq and data.
func recordCRC(seq uint64, data []byte) uint32 {
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seq)
	c := crc32.Update(0, castagnoli, s[:])
	return crc32.Update(c, castagnoli, data)
}

// Append appends the framed record to buf.
func Append(buf []byte, r Record) []byte {
	var h [HeaderBytes]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(r.Data)))
	binary.LittleEndian.PutUint32(h[4:], recordCRC(r.Seq, r.Data))
	binary.LittleEndian.PutUint64(h[8:], r.Seq)
	buf = append(buf, h[:]...)
	return append(buf, r.Data...)
}

// ErrTorn marks the end of the intact part of a framed buffer.
var ErrTorn = errors.New("torn or corrupt record")

// Parse decodes framed records from b. It returns the records up to
// the first torn or corrupt one, and the offset where the intact part ends
// (len(b) when all is intact). The records' Data alias b.
func Parse(b []byte) ([]Record, int, error) {
	var out []Record
	off := 0
	for off < len(b) {
		if len(b)-off < HeaderBytes {
			return out, off, ErrTorn
		}
		n := binary.LittleEndian.Uint32(b[off:])
		crc := binary.LittleEndian.Uint32(b[off+4:])
		seq := binary.LittleEndian.Uint64(b[off+8:])
		if n > MaxRecordBytes || uint64(len(b)-off-HeaderBytes) < uint64(n) {
			return out, off, ErrTorn
		}
		data := b[off+HeaderBytes : off+HeaderBytes+int(n)]
		if recordCRC(seq, data) != crc {
			return out, off, ErrTorn
		}
		out = append(out, Record{Seq: seq, Data: data})
		off += HeaderBytes + int(n)
	}
	return out, off, nil
}

// A snapshot's frame is: magic, seq, length, CRC-32C of the data.
const snapMagic = "KVFSNAP1"

const snapHeaderLen = len(snapMagic) + 8 + 8 + 4

// Snapshot frames a snapshot of the state after record seq.
func Snapshot(seq uint64, data []byte) []byte {
	out := make([]byte, snapHeaderLen, snapHeaderLen+len(data))
	copy(out, snapMagic)
	binary.LittleEndian.PutUint64(out[8:], seq)
	binary.LittleEndian.PutUint64(out[16:], uint64(len(data)))
	binary.LittleEndian.PutUint32(out[24:], crc32.Checksum(data, castagnoli))
	return append(out, data...)
}

// ParseSnapshot checks a framed snapshot and returns its seq and data.
func ParseSnapshot(b []byte) (uint64, []byte, error) {
	if len(b) < snapHeaderLen || string(b[:len(snapMagic)]) != snapMagic {
		return 0, nil, fmt.Errorf("snapshot: bad header: %w", ErrTorn)
	}
	seq := binary.LittleEndian.Uint64(b[8:])
	n := binary.LittleEndian.Uint64(b[16:])
	if n != uint64(len(b)-snapHeaderLen) {
		return 0, nil, fmt.Errorf("snapshot: %d bytes for %d: %w", len(b)-snapHeaderLen, n, ErrTorn)
	}
	data := b[snapHeaderLen:]
	if crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(b[24:]) {
		return 0, nil, fmt.Errorf("snapshot: checksum mismatch: %w", ErrTorn)
	}
	return seq, data, nil
}
