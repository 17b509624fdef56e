package samehost_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/testutil"
)

// fakePeer answers the P2P metadata request with a fixed descriptor.
func fakePeer(t *testing.T, mutate func(d *descriptor.Segment)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	name := ln.Addr().String()
	d := &descriptor.Segment{Name: name, Protocol: "tcp", TCPDataPort: 9, TCPProtoVersion: 2,
		Buffers: []descriptor.Buffer{{Name: name, Addr: 1 << 30, Length: 1 << 20}}}
	mutate(d)
	body, err := descriptor.Marshal(d)
	assert.NilError(t, err)
	srv := rpc.NewServer(ln, func(_ context.Context, ty rpc.Type, _ []byte, _ net.Addr) ([]byte, error) {
		return body, nil
	}, rpc.ServerConfig{})
	t.Cleanup(func() { srv.Close() })
	return name
}

func TestSelection(t *testing.T) {
	self, err := stack.New(context.Background(), stack.Config{AutoDiscover: true, Engine: engine.Config{LocalServerName: "127.0.0.1"}})
	assert.NilError(t, err)
	defer self.Close()
	host := *self.HostIdentity()
	extra := map[string]json.RawMessage{
		"cma": json.RawMessage(`{"sock":"@kvferry-1-gone","v":1}`),
		"shm": json.RawMessage(`{"sock":"@kvferry-1-gone","v":1}`),
	}
	kvferry := func(h descriptor.Host) func(d *descriptor.Segment) {
		return func(d *descriptor.Segment) {
			d.Host, d.Transports, d.Extra = &h, []string{"cma", "shm", "tcp"}, extra
		}
	}
	otherBoot, otherNS, gone := host, host, host
	otherBoot.BootID = "00000000-0000-0000-0000-000000000000"
	otherNS.PIDNS++
	gone.PID = 1
	peers := map[string]string{
		"engine":      self.SegmentName(),
		"mooncake":    fakePeer(t, func(*descriptor.Segment) {}),
		"other-host":  fakePeer(t, kvferry(otherBoot)),
		"other-pidns": fakePeer(t, kvferry(otherNS)),
		"gone":        fakePeer(t, kvferry(gone)),
	}
	testutil.RunDataDriven(t, "testdata/selection", func(t *testing.T, d *testutil.TestData) string {
		kind, _ := d.Arg("peer")
		transports := []string{"local", "cma", "shm", "tcp"}
		if a, ok := d.Arg("transports"); ok {
			transports = strings.Split(a.Vals[0], ",")
		}
		var force string
		if a, ok := d.Arg("force"); ok {
			force = a.Vals[0]
		}
		e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
			Transports: transports, ForceTransport: force, ConnectTimeout: 2 * time.Second}})
		assert.NilError(t, err)
		defer e.Close()
		target := peers[kind.Vals[0]]
		if target == "" {
			d.Fatalf(t, "unknown peer kind %q", kind.Vals[0])
		}
		seg, err := e.OpenSegment(context.Background(), target)
		assert.NilError(t, err)
		if got := e.ChooseTransport(seg); got != "" {
			return got
		}
		return "none"
	})
}
