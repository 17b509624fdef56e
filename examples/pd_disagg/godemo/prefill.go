package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
)

// newEngine starts a transfer engine as Mooncake's
// TransferEngine.initialize(host, "P2PHANDSHAKE", "tcp", "") does: P2P
// metadata, every transport that can run here (auto-discovery: a
// cross-process copy for peers on this host, TCP otherwise).
func newEngine(ctx context.Context, host string) (*engine.Engine, error) {
	return stack.New(ctx, stack.Config{
		Engine:       engine.Config{MetadataConn: "P2PHANDSHAKE", LocalServerName: host},
		AutoDiscover: true,
		Protocol:     "tcp",
	})
}

// prefill starts a store client with an embedded master, lends a segment
// big enough for the request's KV cache, and, once a decode instance is
// there, announces the keys in a manifest and publishes the KV of each layer
// as a tensor object as soon as it is "computed". The objects live in this
// process's memory; the decode process reads them from here. It stays until
// the decode side says it is done.
func prefill(o options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*o.timeout)
	defer cancel()
	obj := o.objBytes()
	total := o.layerBytes() * uint64(o.layers)
	segment := obj*uint64(o.layers) + uint64(o.layers)*4096 + 64*mib // objects + slack

	// The store shares this process's transfer engine (Mooncake's
	// setup(engine=...)), so the memory it lends is visible here too.
	e, err := newEngine(ctx, o.host)
	if err != nil {
		return fmt.Errorf("start transfer engine: %w", err)
	}
	defer e.Close()
	t0 := time.Now()
	c, err := embedded.NewClient(ctx, client.Config{
		MasterServerAddr:  "embedded", // a master inside this process
		GlobalSegmentSize: segment,
		LocalBufferSize:   16 * mib,
		Engine:            e,
	})
	if err != nil {
		return fmt.Errorf("store setup: %w", err)
	}
	defer c.Close()
	setup := time.Since(t0)
	if !o.noWarmup {
		// Warm-up, as a serving engine does before taking traffic: touch
		// the memory registered for the store (its lent segment and staging
		// buffer) once, so first-touch page faults do not land on the
		// publish path.
		t0 = time.Now()
		for _, r := range e.Regions() {
			clear(cMemory(r.Addr, r.Length))
		}
		logf("prefill", "warm-up: touched the lent memory in %s", ms(time.Since(t0)))
	}
	emit(map[string]string{"master": c.MasterAddr(), "segment": c.Hostname()})
	logf("prefill", "embedded master at %s, segment %s (%d MiB lent to the store, set up in %s)",
		c.MasterAddr(), c.Hostname(), segment/mib, ms(setup))

	// "Compute" the KV cache into this process's KV pool: one object per
	// layer (tensor header, then the fp16 data), in memory outside the Go
	// heap.
	t0 = time.Now()
	pool, err := mapMemory(obj * uint64(o.layers))
	if err != nil {
		return err
	}
	defer unix.Munmap(pool)
	for l := range o.layers {
		p := pool[uint64(l)*obj : uint64(l+1)*obj]
		putTensorHeader(p, o.shape(), o.layerBytes())
		fillKV(p[tensorHeaderSize:], o.seed, l)
	}
	logf("prefill", "generated %d layers x %s fp16 = %.1f MiB in %.2f s",
		o.layers, dims(o.shape()), float64(total)/mib, time.Since(t0).Seconds())

	// A decode instance exists before its requests do: wait for it.
	if err := waitFor(o.timeout, time.Millisecond, "a decode instance", func() (bool, error) {
		return c.IsExist(ctx, readyKey(o.request))
	}); err != nil {
		return err
	}

	keys := make([]string, o.layers)
	for l := range keys {
		keys[l] = layerKey(o.request, l)
	}
	m, _ := json.Marshal(manifest{Request: o.request, Layers: o.layers, Shape: o.shape(), Dtype: "float16",
		Keys: keys, Seed: o.seed, PublishStartNs: monoNs()})
	if err := c.Put(ctx, manifestKey(o.request), m, client.ReplicateConfig{}); err != nil {
		return err
	}

	// Publish layer by layer. The replica lands in this client's own
	// segment (the only one), so PutFrom is a memcpy into the lent memory
	// plus the master's bookkeeping.
	published := make([]int64, o.layers)
	start := time.Now()
	for l, key := range keys {
		if err := c.PutFrom(ctx, key, addrOf(pool[uint64(l)*obj:]), obj, client.ReplicateConfig{ReplicaNum: 1}); err != nil {
			return fmt.Errorf("publish %s: %w", key, err)
		}
		published[l] = monoNs()
	}
	took := time.Since(start)
	tl, _ := json.Marshal(published)
	if err := c.Put(ctx, timelineKey(o.request), tl, client.ReplicateConfig{}); err != nil {
		return err
	}
	logf("prefill", "published %d layers (%.1f MiB) in %s: %.2f GB/s into its own segment",
		o.layers, float64(total)/mib, ms(took), gbps(total, took))

	// Keep the KV alive until the decode side has it.
	return waitFor(o.timeout, 10*time.Millisecond, "the decode side to finish", func() (bool, error) {
		return c.IsExist(ctx, doneKey(o.request))
	})
}
