"""Multi-buffer store calls against the single-buffer path, same bytes, one run.

vLLM's Mooncake store connector and SGLang's MLA path store each key as the
concatenation of many per-layer KV blocks (batch_put_from_multi_buffers) and
read it back scattered (batch_get_into_multi_buffers). This compares, for
the same objects (KEYS keys of PIECES x PIECE bytes per batch call):

  single: batch_put_from / batch_get_into, one contiguous registered buffer
          per key (the baseline: the fastest way to store the same bytes);
  multi:  batch_put_from_multi_buffers / batch_get_into_multi_buffers, each
          key gathered from / scattered to PIECES registered blocks strided
          over the region (the library gathers them, no copy);
  staged: the same multi-buffer call emulated the way kvferry served it
          before (join the blocks with ctypes.memmove into one Python
          buffer, then the single-buffer call; reads: get into a Python
          buffer, then memmove out), for reference.

Topology: a kvferry-master process (MASTER, started by bench/store_multi.sh
with 1 s leases, so the space of each trial's removed objects is free again
soon), a holder process that lends the store's memory, and this process, a
pure client with a registered region: the bytes cross processes (the
transfer engine's same-host path).

On a shared, loaded machine whole phases see different loads, so the modes
are interleaved call by call: batch call b of every mode runs back to back
(the order rotating with b), and each ratio is the median over the calls of
the paired ratio (single's time / the mode's time for the same b), which a
burst of someone else's load during a few calls does not move. The table
gives each mode's median GB/s per call over TRIALS trials of BATCHES calls
and the ratios multi / single (the target is >= 0.9) and staged / single.

  bench/store_multi.sh
  TRIALS=5 BATCHES=40 bench/store_multi.sh
  ALIGN=16 bench/store_multi.sh      (blocks 16 bytes past a page boundary)
"""

import ctypes
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import numpy as np  # noqa: E402

from kvferry.store import MooncakeDistributedStore  # noqa: E402

TRIALS = int(os.environ.get("TRIALS", "3"))
BATCHES = int(os.environ.get("BATCHES", "20"))  # batch calls per mode and trial
KEYS = int(os.environ.get("KEYS", "16"))  # keys per batch call
# (pieces, piece bytes); SHAPES=16x4096,64x32768 picks some
SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("SHAPES", "").split(",") if s] or \
    [(64, 32 << 10), (8, 256 << 10), (16, 4 << 10)]
MODES = ("single", "multi", "staged")
PAGE = 4096
# Where the registered buffers (and so every block) start relative to a
# page: 0, as KV caches are laid out (device allocations, pinned host
# memory, block sizes of whole pages). ALIGN=16 gives numpy's default
# placement, where every 4 KiB block straddles two pages: the kernel's copy
# then touches one more page and cache line per block than the contiguous
# copy does (bench/cma_iovecs.c OFFSET shows it without the library).
ALIGN = int(os.environ.get("ALIGN", "0")) % PAGE

HOLDER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from kvferry.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
print(s.setup("127.0.0.1", "P2PHANDSHAKE", int(sys.argv[3]), 16 << 20, "tcp", "", sys.argv[2]), flush=True)
sys.stdin.read()
s.close()
"""


def main():
    master = os.environ["MASTER"]
    obj = max(p * n for p, n in SHAPES)
    segment = len(MODES) * BATCHES * KEYS * obj + (256 << 20)  # one trial's objects
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, os.path.join(os.path.dirname(HERE), "python"),
                               master, str(segment)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "0", "holder setup failed"
        run(master)
    finally:
        holder.stdin.close()
        holder.wait(30)


def run(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 << 20, "tcp", "", master) == 0
    size = 2 * KEYS * max(p * n for p, n in SHAPES)
    region = aligned(size)
    region[:] = np.random.default_rng(1).integers(0, 256, size, np.uint8)
    out = aligned(size)
    out[:] = 0
    for a in (region, out):
        assert s.register_buffer(a.ctypes.data, a.nbytes) == 0
    print("store multi-buffer calls: %d trials x %d batch calls of %d keys per mode, interleaved "
          "call by call; buffers at page offset %d; loadavg %s" % (
              TRIALS, BATCHES, KEYS, ALIGN, " ".join(open("/proc/loadavg").read().split()[:3])))
    print("%-14s %-4s %8s %8s %8s %13s %14s %8s" % ("object", "op", "single", "multi", "staged",
                                                    "multi/single", "staged/single", "memcpy"))
    ratios = []
    for pieces, piece in SHAPES:
        secs = {}  # (op, mode) -> seconds of each call, paired by index
        for trial in range(TRIALS):
            for op, t in trial_times(s, region, out, pieces, piece, trial).items():
                for mode, v in t.items():
                    secs.setdefault((op, mode), []).extend(v)
            s.remove_all(force=True)
            time.sleep(1.1)  # the leases end: the space is free for the next trial
        call = KEYS * pieces * piece
        floor = memcpy_floor(region, out, pieces, piece)
        for op in ("put", "get"):
            gbps = {m: call / statistics.median(secs[(op, m)]) / 1e9 for m in MODES}
            paired = {m: statistics.median([a / b for a, b in zip(secs[(op, "single")], secs[(op, m)])])
                      for m in ("multi", "staged")}
            ratios.append(paired["multi"])
            print("%-14s %-4s %8.2f %8.2f %8.2f %12.2fx %13.2fx %7.2fx" % (
                "%d x %d KiB" % (pieces, piece >> 10), op, gbps["single"], gbps["multi"],
                gbps["staged"], paired["multi"], paired["staged"], floor[op]))
    print("GB/s; min multi/single: %.2fx (target >= 0.90); memcpy: a memcpy of the same bytes from "
          "(put) or into (get) the strided blocks against the contiguous buffers, paired the same way "
          "(what the layout alone costs)" % min(ratios))
    s.close()


def aligned(n):
    """A numpy byte array of n bytes that starts ALIGN bytes after a page
    boundary (numpy's own large arrays start 16 bytes after one: malloc's
    header)."""
    raw = np.empty(n + 2 * PAGE, np.uint8)
    at = (-raw.ctypes.data) % PAGE + ALIGN
    return raw[at:at + n]


def memcpy_floor(region, out, pieces, piece):
    """Per op, the median paired ratio of a memcpy of every key's object
    between the contiguous layout and a scratch buffer to the same memcpy
    between the strided blocks and it (numpy copies, one per key; puts read
    region, gets write out): the multi/single ratio the memory layout
    itself sets."""
    obj = pieces * piece
    scratch = aligned(KEYS * obj).reshape(KEYS, obj)  # as the buffers (glibc's memcpy is slow between
    # sources and destinations at different offsets in a page)
    ratios = {"put": [], "get": []}
    for _ in range(TRIALS * BATCHES):
        for op, arr in (("put", region), ("get", out)):
            blocks = arr[:KEYS * obj].reshape(pieces, KEYS, piece)  # [layer, key]: layout()'s blocks
            t = []
            for strided in (False, True):
                t0 = time.perf_counter()
                for k in range(KEYS):
                    mem = blocks[:, k, :] if strided else arr[k * obj:(k + 1) * obj].reshape(pieces, piece)
                    if op == "put":
                        scratch[k].reshape(pieces, piece)[:] = mem
                    else:
                        mem[:] = scratch[k].reshape(pieces, piece)
                t.append(time.perf_counter() - t0)
            ratios[op].append(t[0] / t[1])
    return {op: statistics.median(v) for op, v in ratios.items()}


def layout(region, pieces, piece, key):
    """Key key's buffers: one contiguous buffer, and pieces blocks strided
    over the region (as the per-layer KV blocks of one request are)."""
    base = region.ctypes.data
    blocks = [base + ((layer * KEYS + key) * piece) % (region.nbytes - piece) for layer in range(pieces)]
    return base + key * pieces * piece, blocks


def trial_times(s, region, out, pieces, piece, trial):
    """Seconds per op and mode over BATCHES interleaved batch calls."""
    obj = pieces * piece
    lay = [layout(region, pieces, piece, k) for k in range(KEYS)]
    olay = [layout(out, pieces, piece, k) for k in range(KEYS)]
    scratch = [ctypes.create_string_buffer(obj) for _ in range(KEYS)]
    keys = {m: [["%s_%d_%d_%d_%d" % (m, pieces, trial, b, k) for k in range(KEYS)] for b in range(BATCHES)]
            for m in MODES}

    def put(mode, ks):
        if mode == "single":
            return s.batch_put_from(ks, [c for c, _ in lay], [obj] * KEYS)
        if mode == "multi":
            return s.batch_put_from_multi_buffers(ks, [b for _, b in lay], [[piece] * pieces] * KEYS)
        for (_, blocks), buf in zip(lay, scratch):
            dst = ctypes.addressof(buf)
            for j, p in enumerate(blocks):
                ctypes.memmove(dst + j * piece, p, piece)
        return s.batch_put_from(ks, [ctypes.addressof(b) for b in scratch], [obj] * KEYS)

    def get(mode, ks):
        if mode == "single":
            return s.batch_get_into(ks, [c for c, _ in olay], [obj] * KEYS)
        if mode == "multi":
            return s.batch_get_into_multi_buffers(ks, [b for _, b in olay], [[piece] * pieces] * KEYS)
        rs = s.batch_get_into(ks, [ctypes.addressof(b) for b in scratch], [obj] * KEYS)
        for (_, blocks), buf in zip(olay, scratch):
            src = ctypes.addressof(buf)
            for j, p in enumerate(blocks):
                ctypes.memmove(p, src + j * piece, piece)
        return rs

    times = {op: {m: [] for m in MODES} for op in ("put", "get")}
    for op, fn, want in (("put", put, [0] * KEYS), ("get", get, [obj] * KEYS)):
        for b in range(BATCHES):
            r = (b + trial) % len(MODES)
            for mode in MODES[r:] + MODES[:r]:
                t0 = time.perf_counter()
                rs = fn(mode, keys[mode][b])
                times[op][mode].append(time.perf_counter() - t0)
                assert rs == want, (op, mode, rs)
    if trial == 0:
        check(s, region, out, keys["multi"][-1], lay, olay, piece)
    return times


def check(s, region, out, keys, lay, olay, piece):
    """The multi-buffer objects hold the blocks, in order, and were read back
    into the output blocks."""
    rb, ob = region.ctypes.data, out.ctypes.data
    assert s.batch_get_into_multi_buffers(keys, [b for _, b in olay], [[piece] * len(olay[0][1])] * KEYS) == \
        [piece * len(olay[0][1])] * KEYS
    for k, (_, blocks) in zip(keys, lay):
        want = b"".join(region[p - rb:p - rb + piece].tobytes() for p in blocks)
        assert s.get(k) == want, "object %s differs" % k
    for (_, blocks), (_, oblocks) in zip(lay, olay):
        for p, q in zip(blocks, oblocks):
            assert np.array_equal(region[p - rb:p - rb + piece], out[q - ob:q - ob + piece])


if __name__ == "__main__":
    main()
