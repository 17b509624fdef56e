"""A GPU transfer-engine peer for test_gpu.py: registers cudaMalloc memory
(legacy IPC) and memory from kvferry's VMM allocator on the fake driver,
filled with a pattern, then answers JSON commands on stdin."""

import hashlib
import json
import sys

from _fakecuda import Driver, second
from _util import pattern
from kvferry import allocator
from kvferry.engine import TransferEngine


def main():
    size = int(sys.argv[1])
    d = Driver()
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    legacy = d.alloc(size, 0)
    dev1 = second()
    vmm = allocator.malloc(size, dev1)
    d.h2d(legacy, pattern(size, 1).tobytes())
    d.h2d(vmm, pattern(size, 2).tobytes(), dev1)
    assert e.register_memory(legacy, size, "cuda:0") == 0
    assert e.batch_register_memory([vmm], [size]) == 0  # "*": the driver says where
    out = sys.stdout
    out.write(json.dumps({"segment": e.get_segment_name(), "legacy": legacy, "vmm": vmm}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "sha":
            dev = 0 if cmd["addr"] == legacy else dev1
            data = d.d2h(cmd["addr"], cmd["n"], dev)
            out.write(json.dumps({"sha": hashlib.sha256(data).hexdigest()}) + "\n")
        elif c == "quit":
            out.write("{}\n")
            out.flush()
            break
        out.flush()
    e.close()


if __name__ == "__main__":
    main()
