package client

import "time"

// StopHeartbeatForTest stops c's heartbeat without unmounting, as if the
// process had died.
func StopHeartbeatForTest(c *Client) {
	c.cancel()
	c.wg.Wait()
}

// MasterRPCForTest returns how c calls its master: MasterRPCMux,
// MasterRPCGRPC, or "" in process.
func MasterRPCForTest(c *Client) string {
	return c.conn.Load().rpc
}

// HoldStagingForTest takes every chunk of c's staging buffer, so that
// staged transfers wait for one; release gives them back.
func HoldStagingForTest(c *Client) (release func()) {
	var held []uintptr
	for range cap(c.staging.free) {
		held = append(held, <-c.staging.free)
	}
	return func() {
		for _, a := range held {
			c.staging.put(a)
		}
	}
}

// RemountForTest re-mounts c's segments (and disk tier) as the heartbeat
// does after a NEED_REMOUNT answer.
func RemountForTest(c *Client) {
	c.remount(c.conn.Load())
}

// DiskServeGrabForTest takes size bytes of c's disk serve buffer as a
// reader would, with a lease, and never gives them back: a reader that
// died after its holder read the file for it.
func DiskServeGrabForTest(c *Client, size uint64, lease time.Duration) error {
	_, g, err := c.diskSrv.grant(size)
	if err != nil {
		return err
	}
	c.diskSrv.mu.Lock()
	c.diskSrv.mu.reading--
	g.expiry = time.Now().Add(lease)
	c.diskSrv.mu.Unlock()
	c.diskSrv.inflight.Done()
	return nil
}
