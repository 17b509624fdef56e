package client

// StopHeartbeatForTest stops c's heartbeat without unmounting, as if the
// process had died.
func StopHeartbeatForTest(c *Client) {
	c.cancel()
	c.wg.Wait()
}
