package ha

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/testutil"
)

func TestMasterViewKey(t *testing.T) {
	assert.Equal(t, MasterViewKey(""), "mooncake-store/mooncake_cluster/master_view")
	assert.Equal(t, MasterViewKey("prod/"), "mooncake-store/prod/master_view")
}

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"etcd://h1:2379;h2:2379", []string{"h1:2379", "h2:2379"}},
		{"h1:2379,h2:2379", []string{"h1:2379", "h2:2379"}},
		{"127.0.0.1:2379", []string{"127.0.0.1:2379"}},
		{"http://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}},
	} {
		got, err := ParseEndpoints(tc.in)
		assert.NilError(t, err)
		assert.DeepEqual(t, got, tc.want)
	}
	_, err := ParseEndpoints("etcd://")
	assert.Assert(t, err != nil)
}

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

// FuzzParseEndpoints: any input either fails or yields non-empty endpoints
// without separators.
func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"etcd://h1:2379;h2:2379", "a,b", "", "etcd://", ";;;", "h:1 h:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		eps, err := ParseEndpoints(s)
		if (err == nil) != (len(eps) > 0) {
			t.Fatalf("%q: err %v with %d endpoints", s, err, len(eps))
		}
		for _, e := range eps {
			if e == "" || strings.ContainsAny(e, ";, ") {
				t.Fatalf("%q: bad endpoint %q", s, e)
			}
		}
	})
}
