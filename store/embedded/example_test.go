package embedded_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
)

// A single process: an embedded master and 64 MiB of this process's memory
// lent to the store.
func ExampleNewClient() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embedded.NewClient(ctx, client.Config{
		LocalHostname:     "127.0.0.1",
		MasterServerAddr:  "embedded",
		GlobalSegmentSize: 64 << 20,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	if err := c.Put(ctx, "greeting", []byte("hello, store"), client.ReplicateConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	v, err := c.Get(ctx, "greeting")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(v))
	_, err = c.Get(ctx, "missing")
	fmt.Println(err)
	// Output:
	// hello, store
	// get "missing": master: get replica list "missing": OBJECT_NOT_FOUND (-704)
}
