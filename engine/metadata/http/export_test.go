package http

import nethttp "net/http"

// SetRoundTripper sends c's requests to rt instead of its transport (the
// fuzz target's replies come from memory, not a server).
func SetRoundTripper(c *Client, rt nethttp.RoundTripper) { c.hc.Transport = rt }
