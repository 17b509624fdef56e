package master

import (
	"errors"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
)

func TestParseTenantQuotas(t *testing.T) {
	q, err := ParseTenantQuotas("a=1g:10, b=512k ,c=0:3")
	assert.NilError(t, err)
	assert.DeepEqual(t, q, map[string]Quota{"a": {Bytes: 1 << 30, Objects: 10}, "b": {Bytes: 512 << 10}, "c": {Objects: 3}})
	for _, bad := range []string{"a", "a=x", "a=1:y", "_x=1", "a=99999999999999999999t"} {
		_, err := ParseTenantQuotas(bad)
		assert.Assert(t, err != nil, bad)
	}
}

// Quotas are enforced at allocation, per tenant, counted from allocation
// to removal; other tenants are untouched; usage is listed.
func TestTenantQuota(t *testing.T) {
	svc, err := NewService(Config{Clock: newFakeClock(), Seed: 3, DisableGrants: true,
		TenantQuotas: map[string]Quota{"small": {Bytes: 10000, Objects: 3}}}, 1)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("c", SegmentInfo{ID: "s", Name: "h:1", Base: 1 << 30, Size: 1 << 20}))
	put := func(tenant, key string, size uint64, upsert bool) error {
		if _, err := svc.PutStart("c", tenant, key, size, ReplicateConfig{}, upsert); err != nil {
			return err
		}
		return svc.PutEnd("c", tenant, key)
	}
	assert.NilError(t, put("small", "a", 4000, false))
	assert.NilError(t, put("small", "b", 4000, false))
	err = put("small", "c", 4000, false) // 12000 bytes > 10000
	assert.Assert(t, errors.Is(err, wire.ErrNoAvailableHandle), err)
	assert.NilError(t, put("small", "c", 1000, false))
	err = put("small", "d", 10, false) // a fourth object
	assert.Assert(t, errors.Is(err, wire.ErrNoAvailableHandle), err)
	// An upsert replaces: only the difference counts.
	assert.NilError(t, put("small", "a", 5000, true))
	// Other tenants have no quota here.
	for _, k := range []string{"1", "2", "3", "4", "5"} {
		assert.NilError(t, put("", k, 4000, false))
	}
	// A removal gives the room back.
	assert.NilError(t, svc.Remove("small", "b", true))
	assert.NilError(t, put("small", "d", 10, false))
	assert.NilError(t, svc.SetTenantQuota("small", Quota{Objects: 3}))
	err = put("small", "e", 10, false)
	assert.Assert(t, errors.Is(err, wire.ErrNoAvailableHandle), err)

	use := svc.TenantUsage()
	assert.DeepEqual(t, use, []TenantUsage{
		{Tenant: "default", Objects: 5, Bytes: 20000},
		{Tenant: "small", Objects: 3, Bytes: 6010, Quota: Quota{Objects: 3}, Refused: 3},
	})
}
