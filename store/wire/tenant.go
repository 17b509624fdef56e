package wire

import "fmt"

// Tenants. Every key a client puts, reads or removes lives in the namespace
// of one tenant (Mooncake's tenant_id, specs/mooncake.md §6.2 setup): the
// same key under two tenants names two objects, and no call of one tenant
// sees, lists or removes another's. Every key request carries the tenant;
// "" means DefaultTenant, so a client that never names one shares the
// default namespace with every other such client, as Mooncake's do.

// DefaultTenant is the tenant of requests that name none.
const DefaultTenant = "default"

// MaxTenantIDBytes bounds a tenant id (Mooncake sets no bound; ours keeps a
// hostile request from making the master keep a huge string per object).
const MaxTenantIDBytes = 256

// TenantID returns the tenant a request names: raw itself, or DefaultTenant
// for "". An id is valid, as in Mooncake, when it does not start with '_'
// (reserved) and holds no control character (below 0x20, or 0x7f); an
// invalid id is INVALID_PARAMS.
func TenantID(raw string) (string, error) {
	if raw == "" {
		return DefaultTenant, nil
	}
	if err := checkTenantID(raw); err != nil {
		return "", err
	}
	return raw, nil
}

// CheckTenantID is TenantID's check of a raw id held as bytes ("" is the
// default tenant, valid), without making a string of it.
func CheckTenantID(raw []byte) error { return checkTenantID(raw) }

func checkTenantID[T string | []byte](raw T) error {
	if len(raw) == 0 {
		return nil
	}
	if len(raw) > MaxTenantIDBytes {
		return fmt.Errorf("tenant id of %d bytes (at most %d): %w", len(raw), MaxTenantIDBytes, ErrInvalidParams)
	}
	if raw[0] == '_' {
		return fmt.Errorf("tenant id %q: ids starting with '_' are reserved: %w", raw, ErrInvalidParams)
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("tenant id %q: control character at byte %d: %w", raw, i, ErrInvalidParams)
		}
	}
	return nil
}
