package master

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/oplog"
)

// flakyLog fails Append while failing > 0 (with err), else stores.
type flakyLog struct {
	memLog
	failing int
	err     error
}

func (f *flakyLog) Append(ctx context.Context, r []oplog.Record) error {
	if f.failing > 0 {
		f.failing--
		return f.err
	}
	return f.memLog.Append(ctx, r)
}

// TestJournalSurvivesAPassingFailure is tests/kill's "etcd member"
// finding: one oplog write that failed when an etcd member died (a reset
// connection, "request timed out" during the election) made the journal
// refuse every later write, so the leading master failed every put until
// it was restarted. A passing failure fails only the calls that waited
// for that write; the batch is written again, in order, with the next.
func TestJournalSurvivesAPassingFailure(t *testing.T) {
	be := &flakyLog{err: errors.New("rpc error: code = Unavailable desc = connection reset by peer")}
	s, err := newService(Config{Clock: newFakeClock(), Seed: 1, ClientTTL: 30 * time.Second, DisableGrants: true, RestoreWindow: time.Second}, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, s.restore(oplog.State{}, be))
	assert.NilError(t, s.MountSegment("h", SegmentInfo{ID: "s", Name: "h:1", Protocol: "tcp", Base: 1 << 30, Size: 64 << 20, ClientID: "h"}))
	mustPut(t, s, "c", "a", 4096, ReplicateConfig{}, false)

	_, err = s.PutStart("c", "", "b", 4096, ReplicateConfig{}, false)
	assert.NilError(t, err)
	be.failing = 1
	err = s.PutEnd("c", "", "b")
	assert.Assert(t, err != nil, "a put whose record was not stored answered success")
	mustPut(t, s, "c", "c", 4096, ReplicateConfig{}, false) // the journal goes on

	// What the log holds restores every change, b's included, in order.
	st, err := be.Load(context.Background())
	assert.NilError(t, err)
	var last uint64
	for _, r := range st.Records {
		assert.Assert(t, r.Seq == last+1, "record %d after %d", r.Seq, last)
		last = r.Seq
	}
	r, err := replay(st)
	assert.NilError(t, err)
	var keys []string
	for id := range r.objs {
		keys = append(keys, id.key)
	}
	assert.Equal(t, len(r.objs), 3, "restored objects %v", keys) // b's record was written again with c's

	// A fenced master (another leads) stops for good.
	be.failing, be.err = 1, fmt.Errorf("txn: %w", oplog.ErrFenced)
	_, _ = s.PutStart("c", "", "d", 4096, ReplicateConfig{}, false)
	assert.Assert(t, s.PutEnd("c", "", "d") != nil)
	_, _ = s.PutStart("c", "", "e", 4096, ReplicateConfig{}, false)
	assert.Assert(t, s.PutEnd("c", "", "e") != nil, "a fenced journal went on writing")
}

// lostAnswerLog stores every Append in a real oplog directory, then
// answers the next lose calls with a timeout anyway: an etcd request that
// the cluster committed while the client's deadline passed.
type lostAnswerLog struct {
	*oplog.Dir
	lose int
}

func (l *lostAnswerLog) Append(ctx context.Context, r []oplog.Record) error {
	if err := l.Dir.Append(ctx, r); err != nil {
		return err
	}
	if l.lose > 0 {
		l.lose--
		return fmt.Errorf("append: %w", context.DeadlineExceeded)
	}
	return nil
}

// TestJournalAppendAgainAfterLostAnswer: the batch written again after a
// write that did commit is in the log twice; a restarted master restores
// every object, those put after the repeated batch included.
func TestJournalAppendAgainAfterLostAnswer(t *testing.T) {
	dir := t.TempDir()
	d, err := oplog.OpenDir(oplog.DirConfig{Path: dir})
	assert.NilError(t, err)
	be := &lostAnswerLog{Dir: d}
	cfg := Config{Clock: newFakeClock(), Seed: 1, ClientTTL: 30 * time.Second, DisableGrants: true, RestoreWindow: time.Second}
	s, err := newService(cfg, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, s.restore(oplog.State{}, be))
	assert.NilError(t, s.MountSegment("h", SegmentInfo{ID: "s", Name: "h:1", Protocol: "tcp", Base: 1 << 30, Size: 64 << 20, ClientID: "h"}))
	mustPut(t, s, "c", "a", 4096, ReplicateConfig{}, false)
	_, err = s.PutStart("c", "", "b", 4096, ReplicateConfig{}, false)
	assert.NilError(t, err)
	be.lose = 1
	assert.Assert(t, s.PutEnd("c", "", "b") != nil, "a put whose write timed out answered success")
	mustPut(t, s, "c", "c", 4096, ReplicateConfig{}, false)
	mustPut(t, s, "c", "d", 4096, ReplicateConfig{}, false)
	assert.NilError(t, d.Close())

	d2, err := oplog.OpenDir(oplog.DirConfig{Path: dir})
	assert.NilError(t, err)
	defer d2.Close()
	st, err := d2.Load(context.Background())
	assert.NilError(t, err)
	assert.Equal(t, st.Dropped, 0)
	r, err := replay(st)
	assert.NilError(t, err)
	for _, key := range []string{"a", "b", "c", "d"} {
		found := false
		for id := range r.objs {
			found = found || id.key == key
		}
		assert.Assert(t, found, "object %s lost on restore", key)
	}
}
