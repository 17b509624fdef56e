"""An efa peer for test_efa.py, run with KVFERRY_LIBFABRIC_PROVIDER and
KVFERRY_TRANSPORT=efa in its environment: "owner SIZE SEED" registers a
patterned buffer; "initiator" writes into and reads from an owner over
libfabric. Answers JSON on stdin."""

import hashlib
import json
import sys

import numpy as np

from kvferry.engine import TransferEngine


def main():
    role = sys.argv[1]
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "efa", "") == 0
    size = int(sys.argv[2])
    buf = np.random.default_rng(int(sys.argv[3])).integers(0, 256, size, dtype=np.uint8)
    assert e.batch_register_memory([buf.ctypes.data], [size]) == 0
    out = sys.stdout
    out.write(json.dumps({"segment": e.get_segment_name(), "addr": buf.ctypes.data, "role": role}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "sha":
            reply = {"sha": hashlib.sha256(buf.tobytes()).hexdigest()}
        elif c == "write":
            rc = e.batch_transfer_sync_write(cmd["segment"], [buf.ctypes.data], [cmd["addr"]], [size])
            reply = {"rc": rc}
        elif c == "read":
            buf[:] = 0
            rc = e.batch_transfer_sync_read(cmd["segment"], [buf.ctypes.data], [cmd["addr"]], [size])
            reply = {"rc": rc, "sha": hashlib.sha256(buf.tobytes()).hexdigest()}
        elif c == "bad":
            # Past the end of the owner's buffer: refused.
            rc = e.batch_transfer_sync_write(cmd["segment"], [buf.ctypes.data], [cmd["addr"] + size - 16], [4096])
            reply = {"rc": rc}
        elif c == "links":
            reply = json.loads(e.show_links(as_json=True))
        elif c == "quit":
            out.write("{}\n")
            out.flush()
            break
        else:
            reply = {"error": c}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    e.close()


if __name__ == "__main__":
    main()
