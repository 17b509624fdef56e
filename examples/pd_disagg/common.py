"""Shared pieces of the prefill/decode demo: the KV layout, deterministic
KV contents, key names and number formatting."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# Run from a checkout without installing: python/ holds the kvferry package.
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

MiB = 1 << 20


def layer_shape(args):
    """[K|V, blocks, block_size, kv_heads, head_dim] of one layer."""
    return (2, args.blocks, args.block_size, args.kv_heads, args.head_dim)


def layer_kv(seed, layer, shape):
    """The deterministic fp16 KV of one layer: random bit patterns, so a
    bit-for-bit comparison checks every bit (NaNs included)."""
    rng = np.random.default_rng([seed, layer])
    bits = rng.integers(0, 1 << 16, int(np.prod(shape)), dtype=np.uint16)
    return bits.view(np.float16).reshape(shape)


def layer_key(req, layer):
    return "%s/kv/layer%03d" % (req, layer)


def manifest_key(req):
    return "%s/manifest" % req


def timeline_key(req):
    return "%s/timeline" % req


def ready_key(req):
    return "%s/decode_ready" % req


def done_key(req):
    return "%s/done" % req


def add_layout_args(p):
    p.add_argument("--request", default="req-0001", help="request id (key prefix)")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--blocks", type=int, default=64, help="KV blocks per layer")
    p.add_argument("--block-size", type=int, default=16, help="tokens per block")
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--timeout", type=float, default=120, help="seconds for any wait")
    p.add_argument("--no-warmup", action="store_true",
                   help="prefill: do not touch the lent memory before publishing")
    p.add_argument("--no-store-pass", action="store_true",
                   help="decode: skip the comparison read through batch_get_into")


def emit(obj):
    """One JSON line on stdout for the launcher."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def log(role, msg):
    sys.stderr.write("[%s] %s\n" % (role, msg))
    sys.stderr.flush()


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def ms(seconds):
    return "%.2f ms" % (seconds * 1e3)


def pct(values, q):
    v = sorted(values)
    if not v:
        return 0.0
    i = min(len(v) - 1, max(0, int(round(q / 100.0 * (len(v) - 1)))))
    return v[i]
