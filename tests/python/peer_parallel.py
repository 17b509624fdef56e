"""A writer peer of test_parallel.py: joins the master given, lends a
segment, and puts shard `index` of a layout (_layouts.py) on each "put"
command; answers JSON lines on stdin (put, quit)."""

import json
import sys

import _layouts

from kvferry.store import MooncakeDistributedStore


def main():
    s = MooncakeDistributedStore()
    s.tensor_format = "numpy"
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 4 << 20, "tcp", "", sys.argv[1])
    print(json.dumps({"rc": rc}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "put":
            t, p, w = _layouts.writes(cmd["layout"])[cmd["index"]]
            fn = s.upsert_tensor_with_parallelism if cmd.get("upsert") else s.put_tensor_with_parallelism
            if w is not None:
                rc = fn(cmd["key"], t, writer_partition=w)
            else:
                rc = fn(cmd["key"], t, p)
            print(json.dumps({"rc": rc}), flush=True)
        elif cmd["cmd"] == "quit":
            print("{}", flush=True)
            break
    s.close()


if __name__ == "__main__":
    main()
