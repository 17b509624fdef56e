package master

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvferry/kvferry/store/wire"
)

// Tenant quotas (with tenant scoping, tenant.go): a tenant may be limited
// to a number of objects and of bytes (the objects' sizes, whatever their
// replicas). A put that would go past its tenant's quota fails with
// NO_AVAILABLE_HANDLE at allocation (PutStart, PutCommit), before any
// space is taken; nothing is evicted to make room for it. An object counts
// from its allocation to its removal (eviction, removal, an unmount that
// took its last replica), in-flight puts included. Quotas come from
// Config.TenantQuotas (--tenant_quota) or SetTenantQuota; TenantUsage lists
// every tenant (the admin endpoint /api/v1/tenants, per-tenant metrics).

// Quota limits one tenant; 0 means no limit.
type Quota struct {
	Bytes   uint64
	Objects uint64
}

// TenantUsage is a tenant's use and quota.
type TenantUsage struct {
	Tenant  string
	Objects uint64
	Bytes   uint64
	Quota   Quota
	// Refused counts the puts its quota refused.
	Refused uint64
}

type tenantState struct {
	objects, bytes uint64
	quota          Quota
	refused        uint64
}

// ParseTenantQuotas parses "tenant=bytes[:objects],..." (bytes with an
// optional k, m, g or t suffix; 0 for no limit), as --tenant_quota takes.
func ParseTenantQuotas(s string) (map[string]Quota, error) {
	out := map[string]Quota{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, spec, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("tenant quota %q: want tenant=bytes[:objects]", item)
		}
		tenant, err := wire.TenantID(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("tenant quota %q: %w", item, err)
		}
		bs, objs, _ := strings.Cut(spec, ":")
		var q Quota
		if q.Bytes, err = parseBytes(bs); err != nil {
			return nil, fmt.Errorf("tenant quota %q: %w", item, err)
		}
		if objs != "" {
			if q.Objects, err = strconv.ParseUint(strings.TrimSpace(objs), 10, 64); err != nil {
				return nil, fmt.Errorf("tenant quota %q: objects: %w", item, err)
			}
		}
		out[tenant] = q
	}
	return out, nil
}

func parseBytes(s string) (uint64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	mult := uint64(1)
	for suffix, m := range map[string]uint64{"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40} {
		if t, ok := strings.CutSuffix(strings.TrimSuffix(strings.TrimSuffix(s, "b"), "i"), suffix); ok && t != s {
			s, mult = t, m
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bytes %q: %w", s, err)
	}
	if mult > 1 && n > (1<<64-1)/mult {
		return 0, fmt.Errorf("bytes %q overflow", s)
	}
	return n * mult, nil
}

func (s *Service) tenantLocked(t string) *tenantState {
	ts, ok := s.mu.tenants[t]
	if !ok {
		ts = &tenantState{quota: s.cfg.TenantQuotas[t]}
		s.mu.tenants[t] = ts
	}
	return ts
}

// quotaLocked fails when one more object of size bytes would take tenant
// past its quota.
func (s *Service) quotaLocked(id objectKey, size uint64) error {
	ts := s.tenantLocked(id.tenant)
	q := ts.quota
	// A replaced object (upsert) stops counting: leave room for it.
	var objs, bytes uint64 = 1, size
	if o, ok := s.mu.objects[id]; ok && ts.objects > 0 && ts.bytes >= o.size {
		objs, bytes = 0, size-min(size, o.size)
	}
	if q.Objects > 0 && ts.objects+objs > q.Objects || q.Bytes > 0 && ts.bytes+bytes > q.Bytes {
		ts.refused++
		return fmt.Errorf("tenant %q at its quota (%d of %d objects, %d of %d bytes; %d more bytes asked): %w",
			id.tenant, ts.objects, q.Objects, ts.bytes, q.Bytes, size, wire.ErrNoAvailableHandle)
	}
	return nil
}

// chargeLocked counts o (just indexed) against its tenant.
func (s *Service) chargeLocked(o *object) {
	ts := s.tenantLocked(o.id.tenant)
	ts.objects++
	ts.bytes += o.size
}

// refundLocked stops counting o (just forgotten).
func (s *Service) refundLocked(o *object) {
	ts := s.tenantLocked(o.id.tenant)
	ts.objects--
	ts.bytes -= o.size
}

// SetTenantQuota sets (or with a zero Quota lifts) a tenant's quota; it
// applies to the puts that follow.
func (s *Service) SetTenantQuota(tenant string, q Quota) error {
	t, err := wire.TenantID(tenant)
	if err != nil {
		return fmt.Errorf("set tenant quota: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenantLocked(t).quota = q
	return nil
}

// TenantUsage lists every tenant that has objects, a quota or refused
// puts, sorted by name.
func (s *Service) TenantUsage() []TenantUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.cfg.TenantQuotas {
		s.tenantLocked(t)
	}
	out := make([]TenantUsage, 0, len(s.mu.tenants))
	for t, ts := range s.mu.tenants {
		out = append(out, TenantUsage{Tenant: t, Objects: ts.objects, Bytes: ts.bytes, Quota: ts.quota, Refused: ts.refused})
	}
	slices.SortFunc(out, func(a, b TenantUsage) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}
