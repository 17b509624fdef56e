"""Decode side of the PD-disaggregation demo.

Joins the prefill's embedded master as a pure client (it lends no memory),
sharing its own transfer engine with the store. It learns the request's keys
from the manifest, and as each layer appears it asks the master where the
replica lives and reads it straight from the prefill process's memory with
the transfer engine into a registered buffer (no copy through the master or
the store client). Then it checks every layer bit for bit, reads them all
once more through the store's batch_get_into for comparison, and prints
GB/s, per-layer latency and the total time-to-KV.
"""

import argparse
import json
import time

import numpy as np

import common
from common import MiB, gbps, log, ms, pct

from kvferry.engine import TransferEngine
from kvferry.store import MooncakeDistributedStore
from kvferry.tensor import TENSOR_METADATA_SIZE, decode_raw


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.0005)
    raise TimeoutError("timed out after %.0f s waiting for %s" % (timeout, what))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_layout_args(p)
    p.add_argument("--master", required=True, help="the prefill's master address")
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args()

    engine = TransferEngine()
    if engine.initialize(args.host, "P2PHANDSHAKE", "tcp", "") != 0:
        log("decode", "transfer engine failed to start")
        return 1
    store = MooncakeDistributedStore()
    rc = store.setup(args.host, "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", args.master,
                     engine=engine.get_engine())
    if rc != 0:
        log("decode", "store setup failed: %d %s" % (rc, store.last_error()))
        return 1
    log("decode", "joined master %s as %s" % (args.master, store.get_hostname()))

    # One registered buffer receives every layer's object. Like a decode
    # engine's KV pool it is allocated, touched and registered before any
    # request arrives, so page faults do not count as transfer time.
    expect_shape = common.layer_shape(args)
    obj_bytes = TENSOR_METADATA_SIZE + 2 * int(np.prod(expect_shape))
    dst = np.empty(obj_bytes * args.layers, np.uint8)
    dst.fill(0)
    assert engine.register_memory(dst.ctypes.data, dst.nbytes) == 0
    store.put(common.ready_key(args.request), b"1")

    # Learn the keys.
    mkey = common.manifest_key(args.request)
    wait_for(lambda: store.is_exist(mkey) == 1, args.timeout, "the manifest")
    manifest = json.loads(store.get(mkey))
    keys = manifest["keys"]
    shape = tuple(manifest["shape"])
    layer_bytes = 2 * int(np.prod(shape))
    obj_bytes = TENSOR_METADATA_SIZE + layer_bytes
    n = len(keys)
    total = layer_bytes * n

    if (shape, n) != (expect_shape, args.layers):
        log("decode", "manifest has %d x %s, expected %d x %s"
            % (n, list(shape), args.layers, list(expect_shape)))
        return 1

    read_s = [0.0] * n
    landed = [0.0] * n
    lookup_s = 0.0
    peer = None
    pending = list(range(n))
    while pending:
        avail = wait_for(
            lambda: [i for i, e in zip(pending, store.batch_is_exist([keys[i] for i in pending]))
                     if e == 1], args.timeout, "layer %d" % pending[0])
        t0 = time.monotonic()
        descs = store.batch_get_replica_desc([keys[i] for i in avail])
        lookup_s += time.monotonic() - t0
        for i in avail:
            d = descs[keys[i]][0].get_memory_descriptor().buffer_descriptor
            if d.size != obj_bytes:
                log("decode", "layer %d: object of %d bytes, expected %d" % (i, d.size, obj_bytes))
                return 1
            peer = d.transport_endpoint
            t0 = time.monotonic()
            rc = engine.batch_transfer_sync_read(peer, [dst.ctypes.data + i * obj_bytes],
                                                 [d.buffer_address], [d.size])
            t1 = time.monotonic()
            if rc != 0:
                log("decode", "layer %d: read from %s failed: %s" % (i, peer, engine.last_error()))
                return 1
            read_s[i] = t1 - t0
            landed[i] = t1
        done = set(avail)
        pending = [i for i in pending if i not in done]
    t_all = max(landed)
    time_to_kv = t_all - manifest["publish_start"]
    links = json.loads(engine.show_links(as_json=True) or "{}").get("links") or []
    transport = next((lk["transport"] for lk in links if lk["segment"] == peer), "?")

    # Check every layer bit for bit.
    for i in range(n):
        r = decode_raw(dst[i * obj_bytes:(i + 1) * obj_bytes])
        if r is None:
            log("decode", "layer %d: not a valid tensor object" % i)
            return 1
        meta, data = r
        want = common.layer_kv(manifest["seed"], i, shape)
        if meta.local_shape != shape or meta.dtype_name != "float16" or \
                not np.array_equal(data, want.reshape(-1).view(np.uint8)):
            log("decode", "layer %d: MISMATCH" % i)
            return 1
    verified = True

    # Steady state, once everything is published: all layers again in one
    # transfer-engine batch.
    addrs = [descs_all.get_memory_descriptor().buffer_descriptor.buffer_address
             for descs_all in (store.get_replica_desc(k)[0] for k in keys)]
    t0 = time.monotonic()
    rc = engine.batch_transfer_sync_read(peer, [dst.ctypes.data + i * obj_bytes for i in range(n)],
                                         addrs, [obj_bytes] * n)
    batch_s = time.monotonic() - t0
    if rc != 0:
        log("decode", "batch re-read failed: %s" % engine.last_error())
        return 1

    # The same bytes through the store API (batch_get_into, zero-copy into
    # registered memory), for comparison.
    store_s = None
    if not args.no_store_pass:
        engine.unregister_memory(dst.ctypes.data)
        assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
        dst[:] = 0
        t0 = time.monotonic()
        res = store.batch_get_into(keys, [dst.ctypes.data + i * obj_bytes for i in range(n)],
                                   [obj_bytes] * n)
        store_s = time.monotonic() - t0
        if res != [obj_bytes] * n:
            log("decode", "batch_get_into: %s" % res[:4])
            return 1
        for i in range(n):
            want = common.layer_kv(manifest["seed"], i, shape).reshape(-1).view(np.uint8)
            if not np.array_equal(dst[i * obj_bytes + TENSOR_METADATA_SIZE:(i + 1) * obj_bytes],
                                  want):
                log("decode", "store pass: layer %d MISMATCH" % i)
                return 1
        store.unregister_buffer(dst.ctypes.data)

    timeline = json.loads(store.get(common.timeline_key(args.request)) or b"[]")
    lags = [landed[i] - timeline[i] for i in range(min(n, len(timeline)))]
    store.put(common.done_key(args.request), b"1")

    result = {
        "layers": n, "layer_shape": list(shape), "kv_mib": total / MiB,
        "transport": transport,
        "read_gbps": gbps(total, sum(read_s)),
        "layer_read_ms_p50": pct(read_s, 50) * 1e3, "layer_read_ms_p99": pct(read_s, 99) * 1e3,
        "layer_read_ms_max": max(read_s) * 1e3,
        "lookup_ms_total": lookup_s * 1e3,
        "publish_to_landed_ms_p50": pct(lags, 50) * 1e3 if lags else None,
        "time_to_kv_ms": time_to_kv * 1e3, "pipeline_gbps": gbps(total, time_to_kv),
        "te_batch_gbps": gbps(total, batch_s),
        "store_batch_get_gbps": gbps(total, store_s) if store_s else None,
        "verified": verified,
    }
    common.emit(result)
    log("decode", "KV cache: %d layers x %s fp16 = %.1f MiB, from %s via %s"
        % (n, list(shape), total / MiB, peer, transport))
    log("decode", "streaming reads (transfer engine, overlapped with prefill publishing): "
        "%.2f GB/s; per layer (%.1f MiB) p50 %s, p99 %s, max %s"
        % (result["read_gbps"], obj_bytes / MiB, ms(pct(read_s, 50)), ms(pct(read_s, 99)),
           ms(max(read_s))))
    log("decode", "replica lookups at the master: %s in total" % ms(lookup_s))
    if lags:
        log("decode", "publish -> landed in decode memory, per layer: p50 %s, max %s"
            % (ms(pct(lags, 50)), ms(max(lags))))
    log("decode", "time-to-KV (first publish -> all %d layers in decode memory): %s (%.2f GB/s)"
        % (n, ms(time_to_kv), result["pipeline_gbps"]))
    log("decode", "steady state, all layers in one transfer-engine batch: %s (%.2f GB/s)"
        % (ms(batch_s), result["te_batch_gbps"]))
    if store_s:
        log("decode", "steady state, same bytes via store batch_get_into: %s (%.2f GB/s)"
            % (ms(store_s), result["store_batch_get_gbps"]))
    log("decode", "all %d layers verified bit for bit" % n)
    store.close()
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
