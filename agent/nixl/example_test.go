package nixl_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvferry/kvferry/agent/nixl"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// newAgent creates agent name on its own engine, as the C API does.
func newAgent(name string) (*nixl.Agent, error) {
	p, err := nixl.ParseOptions(name, map[string]string{"local_server_name": "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	var cfg stack.Config
	cfg.Engine.MetadataConn = p.MetadataConn
	cfg.Engine.LocalServerName = p.LocalServerName
	cfg.AutoDiscover = true
	e, err := stack.New(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	a, err := nixl.New(nixl.Config{Name: name, Engine: e})
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	return a, nil
}

// Two agents in one process: bob publishes a buffer, alice loads it and
// writes into it with a notification.
func Example() {
	alice, err := newAgent("alice")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer alice.Close()
	bob, err := newAgent("bob")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer bob.Close()
	src, _ := cmem.MapAnon(4096)
	defer src.Close()
	dst, _ := cmem.MapAnon(4096)
	defer dst.Close()
	copy(src.Bytes(), "hello, bob")

	lmd, _ := alice.Register(nixl.DRAM, uint64(src.Addr()), 4096, 0)
	bmd, _ := bob.Register(nixl.DRAM, uint64(dst.Addr()), 4096, 0)
	blob, _ := bob.PublicData(bmd) // travels to alice with NIXL's metadata
	if err := alice.LoadConnInfo("bob", bob.ConnInfo()); err != nil {
		fmt.Println(err)
		return
	}
	rmd, err := alice.LoadRemoteMD("bob", nixl.DRAM, uint64(dst.Addr()), 4096, 0, blob)
	if err != nil {
		fmt.Println(err)
		return
	}
	local := []nixl.Desc{{Addr: uint64(src.Addr()), Len: 4096, MD: lmd}}
	remote := []nixl.Desc{{Addr: uint64(dst.Addr()), Len: 4096, MD: rmd}}
	x, err := alice.PrepXfer(nixl.Write, "bob", local, remote)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := alice.PostNotify(x, nixl.Write, local, remote, "done"); err != nil {
		fmt.Println(err)
		return
	}
	for err = alice.Check(x); errors.Is(err, nixl.ErrInProgress); err = alice.Check(x) {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("transfer:", err, string(dst.Bytes()[:10]))
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if ns := bob.Notifications(); len(ns) > 0 {
			fmt.Printf("bob got %q from %s\n", ns[0].Msg, ns[0].Name)
			break
		}
	}
	_ = alice.Release(x)
	// Output:
	// transfer: <nil> hello, bob
	// bob got "done" from alice
}
