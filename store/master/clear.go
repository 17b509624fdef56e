package master

import (
	"fmt"
)

// BatchReplicaClear clears the replicas of keys that clientID wrote and no
// reader holds (Mooncake's MasterService::BatchReplicaClear, specs/
// mooncake.md): with segment "" it removes each object whole; otherwise it
// drops only the memory replicas on the segment named segment (the
// holder's transfer-engine name, as replicas report it), and an object
// left with no replica at all is removed. A key that is empty, absent,
// another client's, leased, not complete, or (with segment) has no replica
// there is skipped. It returns the keys cleared, in order; a bad tenant is
// INVALID_PARAMS.
func (s *Service) BatchReplicaClear(clientID, tenant string, keys []string, segment string) (cleared []string, err error) {
	ids, err := objectKeys(tenant, keys)
	if err != nil {
		return nil, fmt.Errorf("replica clear: %w", err)
	}
	now := s.clock.Now()
	defer func() {
		s.durable(&err)
		if err != nil {
			cleared = nil
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	for i, id := range ids {
		if keys[i] == "" {
			continue
		}
		o, ok := s.mu.objects[id]
		if !ok || o.writer != clientID || !o.complete || o.leaseEnd().After(now) {
			continue
		}
		if segment == "" {
			s.dropObjectLocked(o, o.leaseEnd(), now)
			s.supersedeAwayLocked(id)
			s.mu.counters.removes++
			cleared = append(cleared, keys[i])
			continue
		}
		var on []*replica
		for _, r := range o.replicas {
			if r.seg.info.Name == segment {
				on = append(on, r)
			}
		}
		if len(on) == 0 {
			continue
		}
		if len(on) == len(o.replicas) && len(o.disk) == 0 && len(o.pending) == 0 {
			s.dropObjectLocked(o, o.leaseEnd(), now)
			s.supersedeAwayLocked(id)
			s.mu.counters.removes++
		} else {
			for _, r := range on {
				s.dropReplicaLocked(o, r, now)
			}
			s.logObjectLocked(o)
		}
		cleared = append(cleared, keys[i])
	}
	return cleared, nil
}
