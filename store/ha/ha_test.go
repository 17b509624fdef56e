package ha

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/testutil"
)

func TestCampaignAndLeader(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli, err := Dial([]string{etcd.Endpoint()}, 5*time.Second)
	assert.NilError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Leader(ctx, cli, "c")
	assert.Assert(t, errors.Is(err, ErrNoLeader))

	campCtx, stop := context.WithCancel(ctx)
	elected := make(chan View, 1)
	done := make(chan error, 1)
	go func() {
		done <- Campaign(campCtx, cli, "c", "10.0.0.1:50051", time.Second, nil, func(lctx context.Context, v View) {
			elected <- v
			<-lctx.Done()
		})
	}()
	var v View
	select {
	case v = <-elected:
	case <-ctx.Done():
		t.Fatal("not elected")
	}
	got, err := Leader(ctx, cli, "c")
	assert.NilError(t, err)
	assert.Equal(t, got, v)
	assert.Equal(t, got.Address, "10.0.0.1:50051")
	stop()
	select {
	case err := <-done:
		assert.Assert(t, errors.Is(err, context.Canceled))
	case <-ctx.Done():
		t.Fatal("campaign did not stop")
	}
	// Giving up the leadership deletes the key.
	_, err = Leader(ctx, cli, "c")
	assert.Assert(t, errors.Is(err, ErrNoLeader))
}

func TestMain(m *testing.M) {
	os.Exit(testutil.VerifyNoLeaks(m))
}
