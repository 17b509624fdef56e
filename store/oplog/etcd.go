package oplog

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvferry/kvferry/store/oplog/frame"
)

// EtcdConfig configures an Etcd backend.
type EtcdConfig struct {
	// Client is the etcd client (the caller's; Close leaves it open).
	Client *clientv3.Client
	// Prefix is the key prefix of this cluster's log
	// ("kvferry-store/<cluster_id>/oplog/").
	Prefix string
	// Guard, when set, is a comparison every write is made under: the HA
	// leader passes "my leader key still has the revision I created it
	// at", so a master that lost its leadership writes nothing (ErrFenced).
	Guard *clientv3.Cmp
}

// Etcd keeps the log in etcd: one key per appended batch,
// <prefix>log/<last seq> (20 digits), and snapshots in chunks under
// <prefix>snap/<seq>/<n> with a manifest at <prefix>snap/manifest written
// last. Every write is one transaction under Guard. etcd stores what it
// acknowledged on a quorum's disks, so records survive the machine too.
type Etcd struct {
	cfg EtcdConfig
}

// etcdChunk bounds one value (etcd refuses requests over 1.5 MiB by
// default); a variable so tests chunk small snapshots.
var etcdChunk = 1 << 20

// EtcdPrefix returns the log prefix of an HA cluster.
func EtcdPrefix(clusterID string) string {
	return "kvferry-store/" + strings.TrimSuffix(clusterID, "/") + "/oplog/"
}

// NewEtcd returns an etcd backend.
func NewEtcd(cfg EtcdConfig) *Etcd { return &Etcd{cfg: cfg} }

func (e *Etcd) logKey(seq uint64) string { return fmt.Sprintf("%slog/%020d", e.cfg.Prefix, seq) }

func (e *Etcd) manifestKey() string { return e.cfg.Prefix + "snap/manifest" }

func (e *Etcd) chunkPrefix(seq uint64) string { return fmt.Sprintf("%ssnap/%020d/", e.cfg.Prefix, seq) }

// txn commits ops under the guard.
func (e *Etcd) txn(ctx context.Context, ops ...clientv3.Op) error {
	t := e.cfg.Client.Txn(ctx)
	if e.cfg.Guard != nil {
		t = t.If(*e.cfg.Guard)
	}
	resp, err := t.Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("oplog etcd: %w", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	return nil
}

// Append puts the records, one transaction per value of at most about
// 1 MiB.
func (e *Etcd) Append(ctx context.Context, recs []Record) error {
	var buf []byte
	for i, r := range recs {
		buf = frame.Append(buf, r)
		if len(buf) >= etcdChunk || i == len(recs)-1 {
			if err := e.txn(ctx, clientv3.OpPut(e.logKey(r.Seq), string(buf))); err != nil {
				return err
			}
			buf = nil
		}
	}
	return nil
}

// manifest is the snapshot's index: seq, chunk count, total length, CRC-32C.
func encodeManifest(seq uint64, chunks int, total int, crc uint32) []byte {
	b := make([]byte, 8+8+8+4)
	binary.LittleEndian.PutUint64(b[0:], seq)
	binary.LittleEndian.PutUint64(b[8:], uint64(chunks))
	binary.LittleEndian.PutUint64(b[16:], uint64(total))
	binary.LittleEndian.PutUint32(b[24:], crc)
	return b
}

// Snapshot writes the chunks, then the manifest together with the removal
// of the log keys it covers, then removes the previous snapshot's chunks.
func (e *Etcd) Snapshot(ctx context.Context, seq uint64, data []byte) error {
	prev, _, _, _, _ := e.manifest(ctx)
	n := 0
	for off := 0; off < len(data) || n == 0; off += etcdChunk {
		end := min(off+etcdChunk, len(data))
		if err := e.txn(ctx, clientv3.OpPut(fmt.Sprintf("%s%06d", e.chunkPrefix(seq), n), string(data[off:end]))); err != nil {
			return err
		}
		n++
		if end == len(data) {
			break
		}
	}
	man := encodeManifest(seq, n, len(data), crc32.Checksum(data, castagnoli))
	if err := e.txn(ctx, clientv3.OpPut(e.manifestKey(), string(man)),
		clientv3.OpDelete(e.cfg.Prefix+"log/", clientv3.WithRange(e.logKey(seq)+"\x00"))); err != nil {
		return err
	}
	if prev != 0 && prev != seq {
		_ = e.txn(ctx, clientv3.OpDelete(e.chunkPrefix(prev), clientv3.WithPrefix()))
	}
	return nil
}

// manifest reads the snapshot manifest (seq 0: none).
func (e *Etcd) manifest(ctx context.Context) (seq uint64, chunks, total int, crc uint32, err error) {
	resp, err := e.cfg.Client.Get(ctx, e.manifestKey())
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("oplog etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, 0, 0, nil
	}
	b := resp.Kvs[0].Value
	if len(b) != 28 {
		return 0, 0, 0, 0, fmt.Errorf("oplog etcd: manifest of %d bytes: %w", len(b), frame.ErrTorn)
	}
	return binary.LittleEndian.Uint64(b), int(binary.LittleEndian.Uint64(b[8:])),
		int(binary.LittleEndian.Uint64(b[16:])), binary.LittleEndian.Uint32(b[24:]), nil
}

// Load reads the manifest's snapshot and the log keys after it.
func (e *Etcd) Load(ctx context.Context) (State, error) {
	var st State
	seq, chunks, total, crc, err := e.manifest(ctx)
	if err != nil {
		return st, err
	}
	if seq != 0 {
		data := make([]byte, 0, total)
		err := e.scan(ctx, e.chunkPrefix(seq), clientv3.GetPrefixRangeEnd(e.chunkPrefix(seq)), func(_ string, v []byte) {
			data = append(data, v...)
		})
		if err != nil {
			return st, err
		}
		if len(data) != total || crc32.Checksum(data, castagnoli) != crc || chunks == 0 {
			return st, fmt.Errorf("oplog etcd: snapshot %d: %d bytes for %d, or checksum mismatch: %w",
				seq, len(data), total, frame.ErrTorn)
		}
		st.SnapshotSeq, st.Snapshot = seq, data
	}
	var all []Record
	var perr error
	err = e.scan(ctx, e.logKey(seq+1), clientv3.GetPrefixRangeEnd(e.cfg.Prefix+"log/"), func(_ string, v []byte) {
		if perr != nil {
			return
		}
		recs, _, err := frame.Parse(v)
		all = append(all, recs...)
		if err != nil {
			perr = err
			st.Dropped++
		}
	})
	if err != nil {
		return st, err
	}
	recs, gap := contiguous(all, seq)
	if gap {
		st.Dropped++
	}
	st.Records = recs
	return st, nil
}

// scan reads [from, end) in pages, in key order.
func (e *Etcd) scan(ctx context.Context, from, end string, fn func(k string, v []byte)) error {
	for {
		resp, err := e.cfg.Client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(256))
		if err != nil {
			return fmt.Errorf("oplog etcd: %w", err)
		}
		for _, kv := range resp.Kvs {
			fn(string(kv.Key), kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Close does nothing: the client is the caller's.
func (e *Etcd) Close() error { return nil }
