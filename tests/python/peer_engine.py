"""A transfer-engine peer for test_engine.py: registers a buffer filled
with a pattern, then answers JSON commands on stdin."""

import hashlib
import json
import sys

import numpy as np

from kvferry.engine import TransferEngine


def main():
    size = int(sys.argv[1])
    seed = int(sys.argv[2])
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    assert e.register_memory(buf.ctypes.data, size) == 0
    out = sys.stdout
    out.write(json.dumps({"segment": e.get_segment_name(), "addr": buf.ctypes.data,
                          "size": size, "port": e.get_rpc_port()}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "sha":
            out.write(json.dumps({"sha": hashlib.sha256(buf.tobytes()).hexdigest()}) + "\n")
        elif c == "notifies":
            out.write(json.dumps({"notifies": [[n.name, n.msg] for n in e.get_notifies()]}) + "\n")
        elif c == "quit":
            out.write("{}\n")
            out.flush()
            break
        out.flush()
    e.close()


if __name__ == "__main__":
    main()
