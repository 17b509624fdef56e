package master

import (
	"fmt"
	"strconv"

	"github.com/kvferry/kvferry/store/wire"
)

// objectKey names an object: a key in the namespace of a tenant
// (wire.TenantID). The same key under two tenants names two objects; every
// index of objects is keyed by objectKey, so no operation of one tenant can
// reach another's objects (Mooncake scopes keys the same way, as tenant ‖
// NUL ‖ key).
type objectKey struct {
	tenant string // a valid tenant id, never ""
	key    string
}

// String quotes the key, and names the tenant unless it is the default, for
// logs and error texts.
func (k objectKey) String() string {
	if k.tenant == wire.DefaultTenant {
		return strconv.Quote(k.key)
	}
	return fmt.Sprintf("%q (tenant %q)", k.key, k.tenant)
}

// tenantOf validates the tenant a request names ("" is the default).
func tenantOf(raw string) (string, error) {
	return wire.TenantID(raw)
}

// objectKeys returns the objectKeys of keys in tenant, or the tenant's
// error.
func objectKeys(tenant string, keys []string) ([]objectKey, error) {
	t, err := tenantOf(tenant)
	if err != nil {
		return nil, err
	}
	out := make([]objectKey, len(keys))
	for i, k := range keys {
		out[i] = objectKey{tenant: t, key: k}
	}
	return out, nil
}

// objectKeyOf is objectKeys for one key.
func objectKeyOf(tenant, key string) (objectKey, error) {
	t, err := tenantOf(tenant)
	if err != nil {
		return objectKey{}, err
	}
	return objectKey{tenant: t, key: key}, nil
}
