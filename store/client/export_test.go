package client

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
