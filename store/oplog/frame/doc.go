// Package frame is the framing of a store master's operation log
// (package oplog), alike in files and in etcd values: each record is a
// 16-byte header (length u32, CRC-32C u32 of seq and data, seq u64, little
// endian), then the data; a snapshot is a magic, its seq, length and
// CRC-32C, then the data. It is pure data with no dependencies beyond the
// standard library, so its fuzz targets run in a small binary.
package frame
