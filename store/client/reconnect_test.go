package client_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestFirstCallAfterMasterBack: while the master is away calls fail with
// RPC_FAIL; the first call after a master listens on the address again
// succeeds, however long the outage was (no call waits out, or fails on, a
// reconnect backoff left by earlier failures), over mux and gRPC.
func TestFirstCallAfterMasterBack(t *testing.T) {
	for _, rpc := range []string{client.MasterRPCMux, client.MasterRPCGRPC} {
		t.Run(rpc, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			srv := startMaster(t, master.Config{})
			addr := srv.Addr()
			c := newClient(t, client.Config{MasterServerAddr: addr, MasterRPC: rpc, PingInterval: time.Hour})
			_, err := c.IsExist(ctx, "k")
			assert.NilError(t, err)
			assert.NilError(t, srv.Close())
			// An outage long enough for gRPC's backoff to grow near its
			// maximum (1 s), with calls failing all along.
			down := time.Now()
			for time.Since(down) < 1500*time.Millisecond {
				_, err = c.IsExist(ctx, "k")
				assert.Equal(t, code(err), wire.ErrRPCFail, "%v", err)
				time.Sleep(50 * time.Millisecond)
			}
			startMaster(t, master.Config{RPCAddr: addr})
			_, err = c.IsExist(ctx, "k")
			assert.NilError(t, err, "first call after the master came back")
		})
	}
}
