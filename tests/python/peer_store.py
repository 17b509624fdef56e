"""A store peer for test_pubsub.py. Modes:

publisher: starts an embedded master, lends a segment, publishes tensors
           (deterministic from their index), prints the master address.
subscriber <master>: joins that master as a pure client.

Then it answers JSON commands on stdin: get (read a key, reply its sha256),
put_tensor, wait_key (poll is_exist with a deadline), quit.
"""

import hashlib
import json
import sys
import time

import numpy as np

from kvferry.store import MooncakeDistributedStore, ReplicateConfig


def tensor_for(i):
    shape = (4, 16, 8)
    return np.random.default_rng(1000 + i).standard_normal(shape).astype(np.float16)


def main():
    mode = sys.argv[1]
    s = MooncakeDistributedStore()
    s.tensor_format = "numpy"
    if mode == "publisher":
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 128 << 20, 16 << 20, "tcp", "", "embedded")
    else:
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", sys.argv[2])
    out = sys.stdout
    out.write(json.dumps({"rc": rc, "master": s.master_address(),
                          "hostname": s.get_hostname()}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "publish":
            cfg = ReplicateConfig()
            keys = ["layer_%d" % i for i in range(cmd["n"])]
            res = s.batch_pub_tensor(keys, [tensor_for(i) for i in range(cmd["n"])], cfg)
            res.append(s.pub_tensor_with_tp("tp_weight", tensor_for(99), cfg, tp_size=4,
                                            split_dim=1))
            out.write(json.dumps({"results": res}) + "\n")
        elif c == "get":
            t = s.get_tensor(cmd["key"])
            out.write(json.dumps({"sha": None if t is None else
                                  hashlib.sha256(t.tobytes()).hexdigest()}) + "\n")
        elif c == "wait_key":
            deadline = time.monotonic() + cmd.get("timeout", 20)
            ok = False
            while time.monotonic() < deadline:
                if s.is_exist(cmd["key"]) == 1:
                    ok = True
                    break
                time.sleep(0.01)
            out.write(json.dumps({"ok": ok}) + "\n")
        elif c == "quit":
            out.write("{}\n")
            out.flush()
            break
        out.flush()
    s.close()


if __name__ == "__main__":
    main()
