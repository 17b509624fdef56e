package oplog

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
)

// appendAgain is what the master's journal does after an Append whose
// outcome it does not know (an etcd request that timed out after the
// cluster committed it): the same batch is appended a second time before
// anything newer. Load returns every record once, in order, and the
// records after the repeated batch are not lost.
func appendAgain(t *testing.T, be Backend) {
	ctx := ctxT(t)
	assert.NilError(t, be.Append(ctx, recs(1, 3)))
	assert.NilError(t, be.Append(ctx, recs(4, 6)))
	assert.NilError(t, be.Append(ctx, recs(4, 6))) // again: the first answer was lost
	assert.NilError(t, be.Append(ctx, recs(7, 8)))
	st, err := be.Load(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, seqs(st.Records), []uint64{1, 2, 3, 4, 5, 6, 7, 8})
	assert.Equal(t, st.Dropped, 0)
}

func TestDirAppendAgain(t *testing.T) {
	for name, dir := range dirs(t) {
		t.Run(name, func(t *testing.T) {
			d, err := OpenDir(DirConfig{Path: dir})
			assert.NilError(t, err)
			defer d.Close()
			appendAgain(t, d)
			// And once more after a restart, which reads the file again.
			assert.NilError(t, d.Close())
			d2, err := OpenDir(DirConfig{Path: dir})
			assert.NilError(t, err)
			defer d2.Close()
			st, err := d2.Load(ctxT(t))
			assert.NilError(t, err)
			assert.Equal(t, st.LastSeq(), uint64(8))
		})
	}
}

func TestEtcdAppendAgain(t *testing.T) {
	etcdtest.SkipIfAbsent(t)
	srv := etcdtest.Start(t)
	cli := etcdtest.Client(t, srv.Endpoint())
	appendAgain(t, NewEtcd(EtcdConfig{Client: cli, Prefix: EtcdPrefix("again")}))
}
