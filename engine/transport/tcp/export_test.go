package tcp

import "github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"

// SetHooks sets t's test hooks: serve runs before its server serves each
// request (with the request's header), write before each piece its lanes
// write. Call it before any traffic.
func SetHooks(t *Transport, serve func(h tcpwire.Header), write func()) {
	t.beforeServe, t.beforeWrite = serve, write
}
