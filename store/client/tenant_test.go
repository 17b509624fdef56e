package client_test

import (
	"bytes"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestTenantsIsolate: clients of two tenants and of the default one on one
// master, over mux (with put grants) and over gRPC (PutStart/PutEnd): every
// key call of a client sees only its own tenant's objects.
func TestTenantsIsolate(t *testing.T) {
	for _, rpc := range []string{client.MasterRPCAuto, client.MasterRPCGRPC} {
		t.Run(rpc, func(t *testing.T) { tenantsIsolate(t, rpc) })
	}
}

func tenantsIsolate(t *testing.T, rpc string) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	noGrants := rpc == client.MasterRPCGRPC
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 32 << 20, MasterRPC: rpc,
		NoPutGrants: noGrants})
	a := newClient(t, client.Config{MasterServerAddr: srv.Addr(), TenantID: "tenant-a", MasterRPC: rpc, NoPutGrants: noGrants})
	b := newClient(t, client.Config{MasterServerAddr: srv.Addr(), TenantID: "tenant-b", MasterRPC: rpc, NoPutGrants: noGrants})
	assert.Equal(t, holder.TenantID(), wire.DefaultTenant)
	assert.Equal(t, a.TenantID(), "tenant-a")

	// The same key names three objects.
	for i, c := range []*client.Client{holder, a, b} {
		assert.NilError(t, c.Put(ctx, "k", pattern(1000+i, byte(i)), client.ReplicateConfig{}))
	}
	for i, c := range []*client.Client{holder, a, b} {
		got, err := c.Get(ctx, "k")
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, pattern(1000+i, byte(i))), "tenant %s", c.TenantID())
		size, err := c.GetSize(ctx, "k")
		assert.NilError(t, err)
		assert.Equal(t, size, uint64(1000+i))
	}

	// Batch put from registered memory in tenant a only.
	src := cbuf(t, 4<<10)
	assert.NilError(t, a.RegisterBuffer(src.Addr(), src.Len()))
	copy(src.Bytes(), pattern(4<<10, 5))
	keys := []string{"x0", "x1", "y0"}
	addrs := []uintptr{src.Addr(), src.Addr() + 1024, src.Addr() + 2048}
	sizes := []uint64{1024, 1024, 1024}
	for i, err := range a.BatchPutFrom(ctx, keys, addrs, sizes, client.ReplicateConfig{}) {
		assert.NilError(t, err, "key %s", keys[i])
	}
	for _, c := range []*client.Client{holder, b} {
		ex, err := c.BatchIsExist(ctx, keys)
		assert.NilError(t, err)
		assert.DeepEqual(t, ex, []bool{false, false, false})
		ok, err := c.IsExist(ctx, "x0")
		assert.NilError(t, err)
		assert.Assert(t, !ok)
		_, err = c.Get(ctx, "x0")
		assert.Equal(t, code(err), wire.ErrObjectNotFound)
		descs, err := c.ReplicaDescs(ctx, []string{"x0"})
		assert.NilError(t, err)
		assert.Equal(t, code(descs[0].Err), wire.ErrObjectNotFound)
		dst := cbuf(t, 4096)
		_, errs := c.BatchGetInto(ctx, keys, []uintptr{dst.Addr(), dst.Addr(), dst.Addr()}, []uint64{1024, 1024, 1024})
		assert.Equal(t, code(errs[0]), wire.ErrObjectNotFound)
		// Removal by others touches nothing of a's.
		assert.Equal(t, code(c.Remove(ctx, "x0", true)), wire.ErrObjectNotFound)
		errs, err = c.BatchRemove(ctx, keys, true)
		assert.NilError(t, err)
		assert.Equal(t, code(errs[1]), wire.ErrObjectNotFound)
		n, err := c.RemoveByRegex(ctx, "^x", true)
		assert.NilError(t, err)
		assert.Equal(t, n, int64(0))
	}
	ex, err := a.BatchIsExist(ctx, keys)
	assert.NilError(t, err)
	assert.DeepEqual(t, ex, []bool{true, true, true})

	// Tenant a's own removals.
	n, err := a.RemoveByRegex(ctx, "^x", true)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(2))
	assert.NilError(t, a.Remove(ctx, "y0", true))
	// Remove-all of b leaves a and the default tenant alone.
	n, err = b.RemoveAll(ctx, true)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	for _, c := range []*client.Client{holder, a} {
		ok, err := c.IsExist(ctx, "k")
		assert.NilError(t, err)
		assert.Assert(t, ok, "tenant %s lost k", c.TenantID())
	}
	keysA, err := srv.Service().Keys("tenant-a")
	assert.NilError(t, err)
	assert.DeepEqual(t, keysA, []string{"k"})
}

// TestTenantIDValidated: a reserved or malformed tenant id is refused at
// New, before anything is started.
func TestTenantIDValidated(t *testing.T) {
	for _, id := range []string{"_reserved", "a\nb"} {
		err := client.Config{TenantID: id, MasterServerAddr: "127.0.0.1:1"}.Validate()
		assert.Equal(t, code(err), wire.ErrInvalidParams, "tenant %q", id)
	}
	assert.NilError(t, client.Config{TenantID: "ok", MasterServerAddr: "127.0.0.1:1"}.Validate())
}
