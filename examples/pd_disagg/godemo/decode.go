package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/store/client"
)

// decode joins the prefill's master as a pure client (it lends no memory)
// that shares its transfer engine with the store. It learns the request's
// keys from the manifest, and as each layer appears it asks the master where
// the replica lives and reads it straight from the prefill's memory with the
// transfer engine into a registered buffer (no copy through the master or
// the store client). Then it checks every layer bit for bit, reads them all
// again in one batch and once more through the store's BatchGetInto, and
// prints GB/s, per-layer latency and the total time-to-KV.
func decode(o options) error {
	if o.master == "" {
		return fmt.Errorf("-role decode needs -master")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*o.timeout)
	defer cancel()
	e, err := newEngine(ctx, o.host)
	if err != nil {
		return fmt.Errorf("start transfer engine: %w", err)
	}
	defer e.Close()
	c, err := client.New(ctx, client.Config{
		MasterServerAddr: o.master,
		LocalBufferSize:  16 * mib, // GlobalSegmentSize 0: lends nothing
		Engine:           e,
	})
	if err != nil {
		return fmt.Errorf("store setup: %w", err)
	}
	defer c.Close()
	logf("decode", "joined master %s as %s", o.master, c.Hostname())

	// One registered buffer receives every layer's object. Like a decode
	// engine's KV pool it is allocated, touched and registered before any
	// request arrives, so page faults do not count as transfer time.
	obj := o.objBytes()
	dst, err := mapMemory(obj * uint64(o.layers))
	if err != nil {
		return err
	}
	clear(dst)
	if err := e.RegisterMemory(addrOf(dst), uint64(len(dst)), "cpu:0", true); err != nil {
		return err
	}
	defer func() { // whichever registration it still has, then the memory
		_ = e.UnregisterMemory(addrOf(dst))
		_ = c.UnregisterBuffer(addrOf(dst))
		_ = unix.Munmap(dst)
	}()
	if err := c.Put(ctx, readyKey(o.request), []byte("1"), client.ReplicateConfig{}); err != nil {
		return err
	}

	// Learn the keys.
	var m manifest
	if err := waitFor(o.timeout, time.Millisecond, "the manifest", func() (bool, error) {
		return c.IsExist(ctx, manifestKey(o.request))
	}); err != nil {
		return err
	}
	b, err := c.Get(ctx, manifestKey(o.request))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	n := len(m.Keys)
	if n != o.layers || !slices.Equal(m.Shape, o.shape()) {
		return fmt.Errorf("manifest has %d x %s, expected %d x %s", n, dims(m.Shape), o.layers, dims(o.shape()))
	}
	total := o.layerBytes() * uint64(n)

	// Stream: read each layer as soon as the master has it.
	read := make([]time.Duration, n)
	landed := make([]int64, n)
	addrs := make([]uint64, n) // where each object lives in the prefill
	var lookup time.Duration
	var peer string
	var seg engine.SegmentID
	pending := make([]int, n)
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		var avail []int
		if err := waitFor(o.timeout, 500*time.Microsecond, fmt.Sprintf("layer %d", pending[0]), func() (bool, error) {
			names := make([]string, len(pending))
			for k, i := range pending {
				names[k] = m.Keys[i]
			}
			ok, err := c.BatchIsExist(ctx, names)
			avail = avail[:0]
			for k, i := range pending {
				if err == nil && ok[k] {
					avail = append(avail, i)
				}
			}
			return len(avail) > 0, err
		}); err != nil {
			return err
		}
		names := make([]string, len(avail))
		for k, i := range avail {
			names[k] = m.Keys[i]
		}
		t0 := time.Now()
		descs, err := c.ReplicaDescs(ctx, names)
		lookup += time.Since(t0)
		if err != nil {
			return fmt.Errorf("replica lookup: %w", err)
		}
		for k, i := range avail {
			if descs[k].Err != nil || len(descs[k].Replicas) == 0 {
				return fmt.Errorf("layer %d: no replica: %v", i, descs[k].Err)
			}
			r := descs[k].Replicas[0]
			if r.Size != obj {
				return fmt.Errorf("layer %d: object of %d bytes, expected %d", i, r.Size, obj)
			}
			if peer != r.SegmentName {
				peer = r.SegmentName
				if seg, err = e.OpenSegment(ctx, peer); err != nil {
					return fmt.Errorf("open segment %s: %w", peer, err)
				}
			}
			addrs[i] = r.Address
			t0 := time.Now()
			err := e.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: addrOf(dst[uint64(i)*obj:]),
				Target: seg, TargetOffset: r.Address, Length: r.Size}})
			read[i] = time.Since(t0)
			landed[i] = monoNs()
			if err != nil {
				return fmt.Errorf("layer %d: read from %s: %w", i, peer, err)
			}
		}
		pending = slices.DeleteFunc(pending, func(i int) bool { return slices.Contains(avail, i) })
	}
	timeToKV := time.Duration(slices.Max(landed) - m.PublishStartNs)
	transport := e.ChooseTransport(seg)

	// Check every layer bit for bit.
	want, err := mapMemory(o.layerBytes())
	if err != nil {
		return err
	}
	defer unix.Munmap(want)
	verify := func(pass string) error {
		for i := range n {
			got := dst[uint64(i)*obj : uint64(i+1)*obj]
			fillKV(want, m.Seed, i)
			if !checkTensorHeader(got, m.Shape, o.layerBytes()) || !bytes.Equal(got[tensorHeaderSize:], want) {
				return fmt.Errorf("%slayer %d: MISMATCH", pass, i)
			}
		}
		return nil
	}
	if err := verify(""); err != nil {
		return err
	}

	// Steady state, once everything is published: all layers again in one
	// transfer-engine batch.
	reqs := make([]engine.Request, n)
	for i := range reqs {
		reqs[i] = engine.Request{Op: engine.OpRead, Source: addrOf(dst[uint64(i)*obj:]), Target: seg,
			TargetOffset: addrs[i], Length: obj}
	}
	t0 := time.Now()
	if err := e.Transfer(ctx, reqs); err != nil {
		return fmt.Errorf("batch re-read: %w", err)
	}
	batch := time.Since(t0)

	// The same bytes through the store API (BatchGetInto, zero-copy into
	// registered memory), for comparison.
	var store time.Duration
	if !o.noStorePass {
		if err := e.UnregisterMemory(addrOf(dst)); err != nil {
			return err
		}
		if err := c.RegisterBuffer(addrOf(dst), uint64(len(dst))); err != nil {
			return err
		}
		clear(dst)
		bufs, sizes := make([]uintptr, n), make([]uint64, n)
		for i := range n {
			bufs[i], sizes[i] = addrOf(dst[uint64(i)*obj:]), obj
		}
		t0 := time.Now()
		got, errs := c.BatchGetInto(ctx, m.Keys, bufs, sizes)
		store = time.Since(t0)
		for i := range n {
			if errs[i] != nil || got[i] != obj {
				return fmt.Errorf("BatchGetInto %s: %d bytes: %v", m.Keys[i], got[i], errs[i])
			}
		}
		if err := verify("store pass: "); err != nil {
			return err
		}
	}

	// Publish -> landed, per layer, from the prefill's timeline.
	var lags []time.Duration
	var timeline []int64
	if b, err := c.Get(ctx, timelineKey(o.request)); err == nil && json.Unmarshal(b, &timeline) == nil {
		for i := range min(n, len(timeline)) {
			lags = append(lags, time.Duration(landed[i]-timeline[i]))
		}
	}
	if err := c.Put(ctx, doneKey(o.request), []byte("1"), client.ReplicateConfig{}); err != nil {
		return err
	}

	var readSum time.Duration
	for _, d := range read {
		readSum += d
	}
	res := map[string]any{
		"layers": n, "layer_shape": m.Shape, "kv_mib": float64(total) / mib, "transport": transport,
		"read_gbps": gbps(total, readSum), "layer_read_ms_p50": pct(read, 50).Seconds() * 1e3,
		"layer_read_ms_p99": pct(read, 99).Seconds() * 1e3, "layer_read_ms_max": slices.Max(read).Seconds() * 1e3,
		"lookup_ms_total": lookup.Seconds() * 1e3, "time_to_kv_ms": timeToKV.Seconds() * 1e3,
		"pipeline_gbps": gbps(total, timeToKV), "te_batch_gbps": gbps(total, batch), "verified": true,
	}
	if len(lags) > 0 {
		res["publish_to_landed_ms_p50"] = pct(lags, 50).Seconds() * 1e3
	}
	if store > 0 {
		res["store_batch_get_gbps"] = gbps(total, store)
	}
	emit(res)
	logf("decode", "KV cache: %d layers x %s fp16 = %.1f MiB, from %s via %s",
		n, dims(m.Shape), float64(total)/mib, peer, transport)
	logf("decode", "streaming reads (transfer engine, overlapped with prefill publishing): "+
		"%.2f GB/s; per layer (%.1f MiB) p50 %s, p99 %s, max %s", gbps(total, readSum),
		float64(obj)/mib, ms(pct(read, 50)), ms(pct(read, 99)), ms(slices.Max(read)))
	logf("decode", "replica lookups at the master: %s in total", ms(lookup))
	if len(lags) > 0 {
		logf("decode", "publish -> landed in decode memory, per layer: p50 %s, max %s",
			ms(pct(lags, 50)), ms(slices.Max(lags)))
	}
	logf("decode", "time-to-KV (first publish -> all %d layers in decode memory): %s (%.2f GB/s)",
		n, ms(timeToKV), gbps(total, timeToKV))
	logf("decode", "steady state, all layers in one transfer-engine batch: %s (%.2f GB/s)",
		ms(batch), gbps(total, batch))
	if store > 0 {
		logf("decode", "steady state, same bytes via store BatchGetInto: %s (%.2f GB/s)",
			ms(store), gbps(total, store))
	}
	logf("decode", "all %d layers verified bit for bit", n)
	return nil
}
