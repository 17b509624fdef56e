"""A dummy-client peer for test_standalone.py: a rank of standalone storage
mode. peer_dummy.py <real-client host:port> sets up with setup_dummy,
allocates its KV buffer with MooncakeHostMemAllocator and registers it, then
answers JSON commands on stdin: put (keys from the buffer filled with a
seed's bytes), get (keys into the buffer; replies the bytes' sha256 per
key), quit."""

import ctypes
import hashlib
import json
import sys

import numpy as np

from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

BLOCK = 64 << 10


def main():
    s = MooncakeDistributedStore()
    rc = s.setup_dummy(16 << 20, 1 << 20, sys.argv[1])
    alloc = MooncakeHostMemAllocator()
    ptr = alloc.alloc(64 * BLOCK) if rc == 0 else 0
    buf = np.frombuffer((ctypes.c_uint8 * (64 * BLOCK)).from_address(ptr), np.uint8) if ptr else None
    reg = s.register_buffer(ptr, 64 * BLOCK) if ptr else -1
    out = sys.stdout
    out.write(json.dumps({"rc": rc, "register": reg}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "put":
            keys = cmd["keys"]
            buf[:len(keys) * BLOCK] = np.random.default_rng(cmd["seed"]).integers(
                0, 256, len(keys) * BLOCK, dtype=np.uint8)
            res = s.batch_put_from(keys, [ptr + i * BLOCK for i in range(len(keys))],
                                   [BLOCK] * len(keys))
            out.write(json.dumps({"results": res}) + "\n")
        elif c == "get":
            keys = cmd["keys"]
            buf[:] = 0
            res = s.batch_get_into(keys, [ptr + i * BLOCK for i in range(len(keys))],
                                   [BLOCK] * len(keys))
            shas = [hashlib.sha256(buf[i * BLOCK:(i + 1) * BLOCK].tobytes()).hexdigest()
                    for i in range(len(keys))]
            out.write(json.dumps({"results": res, "sha": shas}) + "\n")
        elif c == "quit":
            out.write("{}\n")
            out.flush()
            break
        out.flush()
    s.close()


if __name__ == "__main__":
    main()
