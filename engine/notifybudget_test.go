package engine_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/stack"
)

// notifyFrom sends one notification to e's RPC port from the local
// address src and reports whether e kept it.
func notifyFrom(t *testing.T, e *engine.Engine, src string, msg string) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(e.RPCPort())))
	assert.NilError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body, _ := json.Marshal(map[string]string{"name": "x", "notify_msg": msg})
	assert.NilError(t, rpc.WriteFrame(c, rpc.TypeNotify, body))
	_, reply, err := rpc.ReadFrame(c, 1<<20)
	assert.NilError(t, err)
	return strings.Contains(string(reply), "success")
}

// Notifications are capped in bytes per sending address and in total: a
// flood from one address is refused once it passes its share, others still
// get through, and draining the queue frees the budget.
func TestNotificationByteCaps(t *testing.T) {
	e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
		NotifyQueueBytes: 4 << 20, NotifyPeerBytes: 1 << 20}})
	assert.NilError(t, err)
	defer e.Close()
	big := strings.Repeat("x", 200<<10)
	kept := 0
	for range 20 {
		if notifyFrom(t, e, "127.0.0.2", big) {
			kept++
		}
	}
	assert.Equal(t, kept, 5, "1 MiB per peer holds five 200 KiB notifications")
	assert.Assert(t, notifyFrom(t, e, "127.0.0.3", big), "another peer still gets through")
	for _, src := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		for range 5 {
			notifyFrom(t, e, src, big)
		}
	}
	assert.Assert(t, !notifyFrom(t, e, "127.0.0.7", big), "4 MiB in total")
	n := e.Notifications()
	assert.Assert(t, len(n) >= 19 && len(n) <= 20, "%d kept", len(n))
	assert.Assert(t, notifyFrom(t, e, "127.0.0.2", big), "draining frees the budget")
}
