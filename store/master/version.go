package master

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Versioned publish (a kvferry extension; Mooncake's pub/sub relies on
// callers keeping "write, then publish" and detects no conflict).
//
// Every object gets a version when it completes: larger than any version
// this master handed out before (a hybrid clock: the larger of the last
// version plus one and the time in microseconds, so versions keep growing
// across restarts too, and a restored object keeps its own). A put that
// asks for it (ReplicateConfig.Versioned) replaces the key only when the
// key's current version is ExpectedVersion (0: the key must not exist;
// AnyVersion: whatever it is), and fails with INVALID_VERSION otherwise,
// also while another put of the key is being written: two publishers
// racing on one key get a conflict, never a silent overwrite. The put
// returns the version it published; WaitObject answers once a key reaches
// a version. Puts that do not ask behave exactly as Mooncake's.

// AnyVersion as ExpectedVersion publishes over whatever version the key has.
const AnyVersion = math.MaxUint64

// maxObjectWait bounds one WaitObject.
const maxObjectWait = 60 * time.Second

// nextVersionLocked returns a new version.
func (s *Service) nextVersionLocked(now time.Time) uint64 {
	v := max(s.mu.lastVersion+1, uint64(now.UnixMicro()))
	s.mu.lastVersion = v
	return v
}

// checkVersionLocked applies a versioned put's condition to the key.
func (s *Service) checkVersionLocked(id objectKey, expected uint64) error {
	if expected == AnyVersion {
		return nil
	}
	o, ok := s.mu.objects[id]
	var cur uint64
	switch {
	case ok && !o.complete:
		return fmt.Errorf("versioned put %v: another put of the key is being written: %w", id, wire.ErrInvalidVersion)
	case ok:
		cur = o.version
	}
	if cur != expected {
		return fmt.Errorf("versioned put %v: the key is at version %d, not %d: %w", id, cur, expected, wire.ErrInvalidVersion)
	}
	return nil
}

// versionOfLocked returns the version of the complete object id (0: none).
func (s *Service) versionOfLocked(id objectKey) uint64 {
	if o, ok := s.mu.objects[id]; ok && o.complete {
		return o.version
	}
	return 0
}

// published wakes the waiters of a key that just completed.
func (s *Service) publishedLocked(id objectKey) {
	for _, ch := range s.mu.versionWaiters[id] {
		close(ch)
	}
	delete(s.mu.versionWaiters, id)
}

// PutEndVersion is PutEnd returning the version published.
func (s *Service) PutEndVersion(clientID, tenant, key string) (_ uint64, err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return 0, fmt.Errorf("put end %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	if err := s.putEndLocked(clientID, id, now); err != nil {
		return 0, err
	}
	return s.versionOfLocked(id), nil
}

// PutCommitVersion is PutCommit returning what it published (Committed).
func (s *Service) PutCommitVersion(clientID, tenant, key string, size uint64, cfg ReplicateConfig, upsert bool,
	reps []GrantedReplica) (Committed, error) {
	return s.putCommitVersion(clientID, tenant, key, size, cfg, upsert, reps, nil)
}

// putCommitVersion is PutCommitVersion with the tags appended to tags.
func (s *Service) putCommitVersion(clientID, tenant, key string, size uint64, cfg ReplicateConfig, upsert bool,
	reps []GrantedReplica, tags []uint64) (c Committed, err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return c, fmt.Errorf("put commit %q: %w", key, err)
	}
	g, err := groupOf(cfg)
	if err != nil {
		return c, fmt.Errorf("put commit %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	s.mu.counters.commits++
	c.Gen, err = s.putCommitLocked(clientID, id, size, cfg, g, upsert, reps, now)
	if err != nil {
		s.mu.counters.commitFails++
		return c, err
	}
	if o, ok := s.mu.objects[id]; ok && o.complete {
		c.Version, c.UID = o.version, o.uid
		c.Tags = tags[:0]
		for _, r := range o.replicas {
			c.Tags = append(c.Tags, r.tag)
		}
	}
	return c, nil
}

// Committed is what PutCommitVersion published: the client's grant
// generation, the object's version and uid, and the tags of its replicas
// in the order of the request's.
type Committed struct {
	Gen, Version, UID uint64
	Tags              []uint64
}

// WaitObject returns the replica list of the object once its version is
// at least minVersion, waiting up to wait (at most a minute) for a put to
// publish it; past that it is OBJECT_NOT_FOUND (no such key) or
// INVALID_VERSION (an older version).
func (s *Service) WaitObject(ctx context.Context, tenant, key string, minVersion uint64, wait time.Duration) (ReplicaList, error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return ReplicaList{}, fmt.Errorf("wait object %q: %w", key, err)
	}
	timer := time.NewTimer(min(wait, maxObjectWait))
	defer timer.Stop()
	for {
		now := s.clock.Now()
		s.mu.Lock()
		v := s.versionOfLocked(id)
		if v >= minVersion && v > 0 {
			l, err := s.getLocked(id, now)
			s.mu.Unlock()
			return l, err
		}
		ch := make(chan struct{})
		s.mu.versionWaiters[id] = append(s.mu.versionWaiters[id], ch)
		s.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-ctx.Done():
		case <-timer.C:
		}
		s.mu.Lock()
		ws := s.mu.versionWaiters[id]
		for i, w := range ws {
			if w == ch {
				s.mu.versionWaiters[id] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(s.mu.versionWaiters[id]) == 0 {
			delete(s.mu.versionWaiters, id)
		}
		v = s.versionOfLocked(id)
		s.mu.Unlock()
		if v == 0 {
			return ReplicaList{}, fmt.Errorf("wait object %v for version %d: %w", id, minVersion, wire.ErrObjectNotFound)
		}
		if v < minVersion {
			return ReplicaList{}, fmt.Errorf("wait object %v: at version %d, not yet %d: %w", id, v, minVersion, wire.ErrInvalidVersion)
		}
	}
}
