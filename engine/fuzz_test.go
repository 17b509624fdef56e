package engine

import (
	"context"
	"encoding/json"
	"net"
	"testing"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/rpc"
)

// FuzzHandleRPC sends arbitrary frames to an engine's RPC handler (the
// handshake port's dispatcher: metadata, notify, probe, connection): it
// answers or refuses, never panics, and a reply it sends is JSON (empty
// for a store request while no store client serves).
func FuzzHandleRPC(f *testing.F) {
	e, err := New(context.Background(), Config{Metadata: metadata.NewP2P(rpc.ClientConfig{}), LocalServerName: "127.0.0.1", NotifyQueueLimit: 64})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Add(uint8(rpc.TypeNotify), []byte(`{"name":"n","notify_msg":"m"}`))
	f.Add(uint8(rpc.TypeMetadata), []byte(`{}`))
	f.Add(uint8(rpc.TypeProbe), []byte(`{}`))
	f.Add(uint8(rpc.TypeStore), []byte{1, 2})
	f.Add(uint8(rpc.TypeConnection), []byte(`{"local_nic_path":"x"}`))
	f.Add(uint8(rpc.TypeLegacy), []byte(`{`))
	f.Add(uint8(200), []byte(nil))
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 9}
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		reply, err := e.handleRPC(context.Background(), rpc.Type(typ), body, peer)
		if err != nil {
			return
		}
		if rpc.Type(typ) == rpc.TypeStore {
			// No store client serves here: an empty reply says so
			// (store/client diskwire.go); a served one is binary.
			if len(reply) != 0 {
				t.Fatalf("store request with no handler: reply %q", reply)
			}
			return
		}
		if !json.Valid(reply) {
			t.Fatalf("type %d: reply is not JSON: %q", typ, reply)
		}
		_ = e.Notifications() // drain, so the queue cap is not all that is tested
	})
}
