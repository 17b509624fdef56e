package trtllm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kvferry/kvferry/agent/trtllm"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// newAgent creates agent name on its own engine, as the C API does.
func newAgent(name string) (*trtllm.Agent, error) {
	p, err := trtllm.ParseOptions(name, map[string]string{"local_server_name": "127.0.0.1"}, nil, nil)
	if err != nil {
		return nil, err
	}
	var cfg stack.Config
	cfg.Engine.MetadataConn = p.MetadataConn
	cfg.Engine.LocalServerName = p.LocalServerName
	cfg.AutoDiscover = p.AutoDiscover
	e, err := stack.New(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	a, err := trtllm.New(trtllm.Config{Name: name, Engine: e, NotifyWait: p.NotifyWait})
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	return a, nil
}

// A context agent writes into a generation agent's memory and tells it so;
// the message sent before the load waits for it.
func Example() {
	ctxAgent, err := newAgent("ctx")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctxAgent.Close()
	gen, err := newAgent("gen")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gen.Close()
	src, _ := cmem.MapAnon(4096)
	defer src.Close()
	dst, _ := cmem.MapAnon(4096)
	defer dst.Close()
	copy(src.Bytes(), "kv cache")

	queued, _ := ctxAgent.Notify("gen", []byte("early"))
	fmt.Println("queued before load:", queued)
	_ = ctxAgent.Register(trtllm.DRAM, []trtllm.Desc{{Addr: uint64(src.Addr()), Len: 4096}})
	_ = gen.Register(trtllm.DRAM, []trtllm.Desc{{Addr: uint64(dst.Addr()), Len: 4096}})
	if err := ctxAgent.Load("gen", gen.ConnInfo()); err != nil {
		fmt.Println(err)
		return
	}
	id, err := ctxAgent.SubmitNotify(engine.OpWrite, "gen",
		[]trtllm.Desc{{Addr: uint64(src.Addr()), Len: 8}}, []trtllm.Desc{{Addr: uint64(dst.Addr()), Len: 8}}, []byte("sent"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("state:", ctxAgent.Wait(id, -1) == trtllm.Success, string(dst.Bytes()[:8]))
	ctxAgent.Free(id)
	var msgs []string
	for deadline := time.Now().Add(5 * time.Second); len(msgs) < 2 && time.Now().Before(deadline); {
		for _, n := range gen.Notifications() {
			msgs = append(msgs, n.Name+": "+n.Msg)
		}
	}
	fmt.Println(msgs)
	// Output:
	// queued before load: true
	// state: true kv cache
	// [ctx: early ctx: sent]
}
