"""Kill-matrix driver for the Python entry point (tests/kill): kvferry's
TransferEngine and MooncakeDistributedStore over ctypes, answering the
commands of tests/kill's protocol with one JSON line each.

  driver.py te <metadata> <name> <MiB>
      connect <segment> | batch <addr> <bytes> <seed> | stats | unreg | quit
  driver.py store <metadata> <name> <master> <MiB>
      put <key> <bytes> <seed> <replicas> | get <key> <bytes> <seed> | stats | quit
"""

import json
import os
import sys
import time

import numpy as np

import kvferry
from kvferry.engine import TransferEngine
from kvferry.store import MooncakeDistributedStore, ReplicateConfig


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def stats():
    text = kvferry.metrics_text()
    g = -1
    for line in text.splitlines():
        if line.startswith("go_goroutines "):
            g = int(float(line.split()[1]))
    return {"ok": True, "fds": len(os.listdir("/proc/self/fd")) - 1, "goroutines": g}


def say(d):
    sys.stdout.write(json.dumps(d) + "\n")
    sys.stdout.flush()


def commands():
    """Yields each command on stdin, as its fields and the time it came,
    until stdin ends or the command is "quit"."""
    for line in sys.stdin:
        f = line.split()
        if not f:
            continue
        if f[0] == "quit":
            return
        yield f, time.monotonic()


def te(meta, name, mib):
    e = TransferEngine()
    host = "127.0.0.1" if meta == "P2PHANDSHAKE" else name
    if e.initialize(host, meta, "tcp", "") != 0:
        say({"ok": False, "err": "initialize"})
        return 1
    size = mib << 20
    buf = np.zeros(2 * size, dtype=np.uint8)
    base = buf.ctypes.data
    if e.register_memory(base, 2 * size) != 0:
        say({"ok": False, "err": "register"})
        return 1
    say({"ok": True, "info": e.get_segment_name() if meta == "P2PHANDSHAKE" else name, "addr": base, "pid": os.getpid()})
    target = None
    for f, t0 in commands():
        if f[0] == "connect":
            target = f[1]
            ok = e.open_segment(target) >= 0
            say({"ok": ok, "ms": (time.monotonic() - t0) * 1e3})
        elif f[0] == "batch":
            addr, n, seed = int(f[1]), min(int(f[2]), size), int(f[3])
            buf[:n] = pattern(n, seed)
            buf[size:size + n] = 0
            rc = e.transfer_sync_write(target, base, addr, n)
            state, match = "failed", False
            if rc == 0:
                rc = e.transfer_sync_read(target, base + size, addr, n)
                match = rc == 0 and bool(np.array_equal(buf[:n], buf[size:size + n]))
                state = "completed" if rc == 0 else "failed"
            say({"ok": match, "state": state, "match": match, "ms": (time.monotonic() - t0) * 1e3})
        elif f[0] == "stats":
            say(stats())
        elif f[0] == "unreg":
            ok = e.unregister_memory(base) == 0
            say({"ok": ok, "ms": (time.monotonic() - t0) * 1e3})
        else:
            say({"ok": False, "err": "unknown command"})
    e.close()
    return 0


def store(meta, name, master, mib):
    s = MooncakeDistributedStore()
    rc = s.setup(name, meta, mib << 20, 16 << 20, "tcp", "", master)
    if rc != 0:
        say({"ok": False, "err": "setup %d" % rc})
        return 1
    say({"ok": True, "info": s.get_hostname(), "pid": os.getpid()})
    for f, t0 in commands():
        if f[0] == "put":
            key, n, seed, reps = f[1], int(f[2]), int(f[3]), int(f[4])
            cfg = ReplicateConfig()
            cfg.replica_num = reps
            rc = s.put(key, pattern(n, seed).tobytes(), cfg)
            say({"ok": rc == 0, "rc": rc, "ms": (time.monotonic() - t0) * 1e3})
        elif f[0] == "get":
            key, n, seed = f[1], int(f[2]), int(f[3])
            got = s.get(key)
            match = got is not None and bytes(got) == pattern(n, seed).tobytes()
            say({"ok": got is not None and len(got) > 0, "match": match, "ms": (time.monotonic() - t0) * 1e3})
        elif f[0] == "stats":
            say(stats())
        else:
            say({"ok": False, "err": "unknown command"})
    s.close()
    return 0


def main():
    mode = sys.argv[1]
    if mode == "te":
        return te(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    return store(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))


if __name__ == "__main__":
    sys.exit(main())
