"""Prefill side of the PD-disaggregation demo.

Starts a store client with an embedded master (no server to run) and P2P
metadata, lends a segment big enough for the request's KV cache, announces
the request's keys in a manifest, then publishes the KV of each layer as a
Mooncake tensor object (pub_tensor) as soon as it is "computed". The
objects live in this process's memory; the decode process reads them from
here through the transfer engine. It stays until the decode side says it is
done (or the timeout passes).

Its first stdout line is JSON with the master address, for the launcher.
"""

import argparse
import ctypes
import json
import time

import common
from common import MiB, log

from kvferry.engine import TransferEngine
from kvferry.store import MooncakeDistributedStore, ReplicateConfig


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_layout_args(p)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args()

    shape = common.layer_shape(args)
    layer_bytes = 2 * int(__import__("numpy").prod(shape))
    total = layer_bytes * args.layers
    segment = total + args.layers * 4096 + 64 * MiB  # objects + headers + slack

    # The store shares this process's transfer engine (Mooncake's
    # setup(engine=...)), so the memory it lends is visible here too.
    engine = TransferEngine()
    if engine.initialize(args.host, "P2PHANDSHAKE", "tcp", "") != 0:
        log("prefill", "transfer engine failed to start")
        common.emit({"error": -1})
        return 1
    store = MooncakeDistributedStore()
    rc = store.setup(args.host, "P2PHANDSHAKE", segment, 16 * MiB, "tcp", "", "embedded",
                     engine=engine.get_engine())
    if rc != 0:
        log("prefill", "store setup failed: %d %s" % (rc, store.last_error()))
        common.emit({"error": rc})
        return 1
    if not args.no_warmup:
        # Warm-up, as a serving engine does before taking traffic: touch the
        # memory lent to the store once, so first-touch page faults do not
        # land on the publish path (the store maps its segment lazily).
        t0 = time.monotonic()
        for addr, length in engine.segment_buffers(engine.get_segment_name()):
            ctypes.memset(addr, 0, length)
        log("prefill", "warm-up: touched the lent memory in %s" % common.ms(time.monotonic() - t0))
    common.emit({"master": store.master_address(), "segment": store.get_hostname()})
    log("prefill", "embedded master at %s, segment %s (%d MiB lent to the store)"
        % (store.master_address(), store.get_hostname(), segment // MiB))

    # "Compute" the KV cache (deterministic contents the decode side can check).
    t0 = time.monotonic()
    kv = [common.layer_kv(args.seed, layer, shape) for layer in range(args.layers)]
    log("prefill", "generated %d layers x %s fp16 = %.1f MiB in %.2f s"
        % (args.layers, list(shape), total / MiB, time.monotonic() - t0))

    # A decode instance exists before its requests do: wait for it.
    deadline = time.monotonic() + args.timeout
    while store.is_exist(common.ready_key(args.request)) != 1:
        if time.monotonic() > deadline:
            log("prefill", "no decode instance within %.0f s" % args.timeout)
            return 1
        time.sleep(0.001)

    keys = [common.layer_key(args.request, layer) for layer in range(args.layers)]
    manifest = {"request": args.request, "layers": args.layers, "shape": list(shape),
                "dtype": "float16", "keys": keys, "seed": args.seed,
                "publish_start": time.monotonic()}
    assert store.put(common.manifest_key(args.request), json.dumps(manifest).encode()) == 0

    cfg = ReplicateConfig()
    cfg.replica_num = 1
    published = []
    t_start = time.monotonic()
    for layer, key in enumerate(keys):
        rc = store.pub_tensor(key, kv[layer], cfg)
        if rc != 0:
            log("prefill", "pub_tensor %s failed: %d %s" % (key, rc, store.last_error()))
            return 1
        published.append(time.monotonic())
    t_pub = time.monotonic() - t_start
    store.put(common.timeline_key(args.request), json.dumps(published).encode())
    log("prefill", "published %d layers (%.1f MiB) in %s: %.2f GB/s into its own segment"
        % (args.layers, total / MiB, common.ms(t_pub), common.gbps(total, t_pub)))

    # Keep the KV alive until the decode side has it.
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if store.is_exist(common.done_key(args.request)) == 1:
            break
        time.sleep(0.01)
    else:
        log("prefill", "decode did not finish within %.0f s" % args.timeout)
        store.close()
        engine.close()
        return 1
    store.close()
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
