package oplog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/store/oplog/frame"
)

func recs(from, to uint64) []Record {
	var out []Record
	for s := from; s <= to; s++ {
		out = append(out, Record{Seq: s, Data: []byte(fmt.Sprintf("record %d", s))})
	}
	return out
}

func seqs(rs []Record) []uint64 {
	out := []uint64{}
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dirs returns a directory on tmpfs (/dev/shm) when there is one, and one
// on the test's temporary directory (a real filesystem on most machines).
func dirs(t *testing.T) map[string]string {
	out := map[string]string{"tempdir": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "kvferry-oplog-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			out["tmpfs"] = d
		}
	}
	return out
}

func TestDirAppendLoadSnapshot(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			d, err := OpenDir(DirConfig{Path: dir, Fsync: name == "tempdir"})
			assert.NilError(t, err)
			assert.NilError(t, d.Append(ctx, recs(1, 3)))
			assert.NilError(t, d.Append(ctx, recs(4, 10)))

			// A second master cannot open the same directory.
			_, err = OpenDir(DirConfig{Path: dir})
			assert.ErrorContains(t, err, "locked")

			assert.NilError(t, d.Snapshot(ctx, 6, []byte("state at 6")))
			assert.NilError(t, d.Append(ctx, recs(11, 12)))
			assert.NilError(t, d.Close())

			d, err = OpenDir(DirConfig{Path: dir})
			assert.NilError(t, err)
			st, err := d.Load(ctx)
			assert.NilError(t, err)
			assert.Equal(t, st.SnapshotSeq, uint64(6))
			assert.Equal(t, string(st.Snapshot), "state at 6")
			assert.DeepEqual(t, seqs(st.Records), []uint64{7, 8, 9, 10, 11, 12})
			assert.Equal(t, string(st.Records[0].Data), "record 7")
			assert.Equal(t, st.Dropped, 0)

			// A snapshot past every record removes all older files.
			assert.NilError(t, d.Append(ctx, recs(13, 13)))
			assert.NilError(t, d.Snapshot(ctx, 13, []byte("state at 13")))
			ents, err := os.ReadDir(dir)
			assert.NilError(t, err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			assert.DeepEqual(t, names, []string{"LOCK", fmt.Sprintf("snapshot-%020d.snap", 13)})
			assert.NilError(t, d.Close())
		})
	}
}

// A process killed in the middle of a write leaves a torn record: Load
// drops it (and cuts it off, so the next appends follow intact records);
// a corrupt byte inside a record ends the log there too; a corrupt newest
// snapshot falls back to nothing rather than to garbage.
func TestDirTornTail(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	d, err := OpenDir(DirConfig{Path: dir})
	assert.NilError(t, err)
	assert.NilError(t, d.Append(ctx, recs(1, 5)))
	assert.NilError(t, d.Close())
	logs, _ := filepath.Glob(filepath.Join(dir, "oplog-*.log"))
	assert.Equal(t, len(logs), 1)
	b, err := os.ReadFile(logs[0])
	assert.NilError(t, err)
	// A torn sixth record: its header and half its data.
	torn := frame.Append(nil, Record{Seq: 6, Data: []byte("record six, torn")})
	assert.NilError(t, os.WriteFile(logs[0], append(b, torn[:len(torn)-5]...), 0o644))

	d, err = OpenDir(DirConfig{Path: dir})
	assert.NilError(t, err)
	st, err := d.Load(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, seqs(st.Records), []uint64{1, 2, 3, 4, 5})
	assert.Assert(t, st.Dropped > 0)
	assert.NilError(t, d.Append(ctx, recs(6, 7)))
	assert.NilError(t, d.Close())

	d, err = OpenDir(DirConfig{Path: dir})
	assert.NilError(t, err)
	st, err = d.Load(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, seqs(st.Records), []uint64{1, 2, 3, 4, 5, 6, 7})
	assert.NilError(t, d.Close())

	// Flip a byte inside record 3: the log ends at record 2.
	b, err = os.ReadFile(logs[0])
	assert.NilError(t, err)
	one := len(frame.Append(nil, recs(1, 1)[0]))
	b[2*one+frame.HeaderBytes+1] ^= 0xff
	assert.NilError(t, os.WriteFile(logs[0], b, 0o644))
	d, err = OpenDir(DirConfig{Path: dir})
	assert.NilError(t, err)
	st, err = d.Load(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, seqs(st.Records), []uint64{1, 2})
	assert.NilError(t, d.Close())

	// A corrupt snapshot is skipped.
	assert.NilError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("snapshot-%020d.snap", 9)), []byte("KVFSNAP1 garbage"), 0o644))
	d, err = OpenDir(DirConfig{Path: dir})
	assert.NilError(t, err)
	st, err = d.Load(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.SnapshotSeq, uint64(0))
	assert.DeepEqual(t, seqs(st.Records), []uint64{1, 2})
	assert.NilError(t, d.Close())
}

func TestParseFramesBounds(t *testing.T) {
	// A header that claims more than there is, or than maxRecord.
	b := frame.Append(nil, Record{Seq: 1, Data: []byte("x")})
	b[0], b[1], b[2], b[3] = 0xff, 0xff, 0xff, 0x7f
	out, end, err := frame.Parse(b)
	assert.Equal(t, len(out), 0)
	assert.Equal(t, end, 0)
	assert.Assert(t, errors.Is(err, frame.ErrTorn))
}

func TestEtcdBackend(t *testing.T) {
	etcdtest.SkipIfAbsent(t)
	srv := etcdtest.Start(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	ctx := ctxT(t)

	// The guard: a leader key with the revision it was created at.
	put, err := cli.Put(ctx, "leader", "me")
	assert.NilError(t, err)
	guard := clientv3.Compare(clientv3.CreateRevision("leader"), "=", put.Header.Revision)
	e := NewEtcd(EtcdConfig{Client: cli, Prefix: EtcdPrefix("t"), Guard: &guard})
	st, err := e.Load(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.LastSeq(), uint64(0))

	assert.NilError(t, e.Append(ctx, recs(1, 4)))
	// A snapshot larger than one etcd value is chunked (small chunks here:
	// etcd syncs every value, slowly on a busy machine).
	defer func(n int) { etcdChunk = n }(etcdChunk)
	etcdChunk = 4 << 10
	big := make([]byte, 2*etcdChunk+123)
	for i := range big {
		big[i] = byte(i * 7)
	}
	assert.NilError(t, e.Snapshot(ctx, 3, big))
	assert.NilError(t, e.Append(ctx, recs(5, 6)))
	st, err = e.Load(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.SnapshotSeq, uint64(3))
	assert.DeepEqual(t, st.Snapshot, big)
	assert.DeepEqual(t, seqs(st.Records), []uint64{4, 5, 6})

	// Covered records are gone from etcd.
	resp, err := cli.Get(ctx, EtcdPrefix("t")+"log/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	assert.NilError(t, err)
	assert.Equal(t, len(resp.Kvs), 2) // the batch ending at 4, the one ending at 6

	// A new snapshot replaces the old chunks.
	assert.NilError(t, e.Snapshot(ctx, 6, []byte("small")))
	st, err = e.Load(ctx)
	assert.NilError(t, err)
	assert.Equal(t, string(st.Snapshot), "small")
	assert.Equal(t, len(st.Records), 0)
	resp, err = cli.Get(ctx, EtcdPrefix("t")+"snap/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	assert.NilError(t, err)
	assert.Equal(t, len(resp.Kvs), 2) // manifest and one chunk

	// Another leader takes over: the old one writes nothing.
	_, err = cli.Delete(ctx, "leader")
	assert.NilError(t, err)
	_, err = cli.Put(ctx, "leader", "other")
	assert.NilError(t, err)
	assert.Assert(t, errors.Is(e.Append(ctx, recs(7, 7)), ErrFenced))
	assert.Assert(t, errors.Is(e.Snapshot(ctx, 7, []byte("x")), ErrFenced))
	st, err = e.Load(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.LastSeq(), uint64(6))
}
