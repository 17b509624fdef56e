package client

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Versioned publish (a kvferry extension; store/master version.go). Plain
// Put, Upsert and Mooncake's pub_tensor behave exactly as Mooncake's; these
// calls add what Mooncake's pub/sub lacks: every publish returns the
// object's version (monotonic per key), a publisher names the version it
// publishes over and gets INVALID_VERSION instead of a silent overwrite
// when another publisher got there first, and a reader can wait for a
// version.

// AnyVersion as the expected version publishes over whatever the key holds.
const AnyVersion = math.MaxUint64

// versionedPut is a put's version request and, once done, its result.
type versionedPut struct {
	want uint64 // the expected version
	got  uint64 // the version published
}

func (v *versionedPut) expected() uint64 {
	if v == nil {
		return 0
	}
	return v.want
}

func (v *versionedPut) set(version uint64) {
	if v != nil {
		v.got = version
	}
}

// Publish stores value under key when the key's current version is
// expected (0: the key must not exist yet; AnyVersion: whatever it is),
// replacing it, and returns the version published. Another publisher's
// version in between, or one being written, is INVALID_VERSION (-300):
// read the key again and retry over its version.
func (c *Client) Publish(ctx context.Context, key string, value []byte, expected uint64, cfg ReplicateConfig) (uint64, error) {
	return c.publish(ctx, key, goSpan(value), expected, cfg)
}

// PublishFrom is Publish of size bytes of C memory at addr.
func (c *Client) PublishFrom(ctx context.Context, key string, addr uintptr, size uint64, expected uint64, cfg ReplicateConfig) (uint64, error) {
	return c.publish(ctx, key, cSpan(addr, size), expected, cfg)
}

func (c *Client) publish(ctx context.Context, key string, data span, expected uint64, cfg ReplicateConfig) (uint64, error) {
	v := &versionedPut{want: expected}
	cfg.ver = v
	if err := c.put(ctx, key, data, cfg, true); err != nil {
		return 0, err
	}
	return v.got, nil
}

// GetVersioned returns a copy of the object stored under key and its
// version, once its version is at least minVersion, waiting up to wait
// for a publish (0: no wait). An older version after the wait is
// INVALID_VERSION; no object, OBJECT_NOT_FOUND.
func (c *Client) GetVersioned(ctx context.Context, key string, minVersion uint64, wait time.Duration) ([]byte, uint64, error) {
	var out []byte
	version, _, err := c.getVersioned(ctx, key, minVersion, wait, func(size uint64) (span, error) {
		out = make([]byte, size)
		return goSpan(out), nil
	})
	return out, version, err
}

// GetIntoVersioned is GetVersioned into size bytes of C memory at addr; it
// returns the version and the object's size.
func (c *Client) GetIntoVersioned(ctx context.Context, key string, addr uintptr, size, minVersion uint64, wait time.Duration) (uint64, uint64, error) {
	return c.getVersioned(ctx, key, minVersion, wait, func(objSize uint64) (span, error) {
		if size < objSize || addr == 0 {
			return span{}, fmt.Errorf("get %q: object of %d bytes, buffer of %d: %w", key, objSize, size, wire.ErrInvalidParams)
		}
		return cSpan(addr, objSize), nil
	})
}

func (c *Client) getVersioned(ctx context.Context, key string, minVersion uint64, wait time.Duration,
	dest func(size uint64) (span, error)) (uint64, uint64, error) {
	start := time.Now()
	var resp *wire.GetReplicaListResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout+wait)
		defer cancel()
		var err error
		resp, err = mc.mc.WaitObject(rctx, &wire.WaitObjectRequest{TenantId: c.tenant, Key: key, MinVersion: minVersion,
			WaitMs: uint32(min(wait, time.Hour) / time.Millisecond)})
		return c.rpcErr(err)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("get %q at version %d: %w", key, minVersion, err)
	}
	// The lease was granted when the object reached the version, at most
	// one one-way delay ago (not when the wait began).
	start = time.Now()
	size := resp.GetSize()
	d, err := dest(size)
	if err != nil {
		return 0, 0, err
	}
	d = c.gpuSpan(d)
	if served, err := c.readDisk(ctx, key, resp.GetUid(), size, resp.GetReplicas(), d); served {
		if err != nil {
			return 0, 0, err
		}
		return resp.GetVersion(), size, nil
	}
	reps, err := c.memoryReplicas(ctx, key, nil, resp.GetReplicas(), &start)
	if err != nil {
		return 0, 0, err
	}
	if _, err := c.readAny(ctx, key, reps, d, size, start, time.Duration(resp.GetLeaseTtlMs())*time.Millisecond); err != nil {
		return 0, 0, err
	}
	return resp.GetVersion(), size, nil
}
