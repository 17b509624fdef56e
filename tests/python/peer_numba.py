"""The second process of test_numba.py: numba's CUDA driver binding on the
fake driver (NUMBA_CUDA_DRIVER; kvferry loads the same file through
KVFERRY_CUDA_LIB), numba device arrays, numba IPC handles and a kvferry
engine, driven by one JSON command per line on stdin."""

import base64
import hashlib
import json
import pickle
import sys

from numba import cuda

from _util import pattern
from kvferry.engine import TransferEngine


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def main():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    arrays = {}  # device pointer -> (device, numba device array)
    out = sys.stdout

    def reply(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    reply(segment=e.get_segment_name(), devices=len(cuda.gpus))
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "alloc":
            # A numba device array with a pattern, registered with kvferry
            # by the pointer its __cuda_array_interface__ gives.
            dev = cmd.get("dev", 0)
            with cuda.gpus[dev]:
                a = cuda.to_device(pattern(cmd["n"], cmd["seed"]))
            ptr = a.__cuda_array_interface__["data"][0]
            assert ptr == a.device_ctypes_pointer.value
            arrays[ptr] = (dev, a)
            rc = e.register_memory(ptr, a.nbytes, "cuda:%d" % dev)
            reply(ptr=ptr, rc=rc)
        elif c == "sha":
            dev, a = arrays[cmd["ptr"]]
            with cuda.gpus[dev]:
                reply(sha=sha(a.copy_to_host()))
        elif c == "fill":
            dev, a = arrays[cmd["ptr"]]
            want = pattern(a.size, cmd["seed"])
            with cuda.gpus[dev]:
                a.copy_to_device(want)
            reply(sha=sha(want))
        elif c == "export":
            dev, a = arrays[cmd["ptr"]]
            with cuda.gpus[dev]:
                h = a.get_ipc_handle()
            reply(handle=base64.b64encode(pickle.dumps(h)).decode())
        elif c == "open":
            # Open the other process's array through its pickled IPC handle,
            # read it, then write a new pattern into it.
            h = pickle.loads(base64.b64decode(cmd["handle"]))
            with h as a:
                got = sha(a.copy_to_host())
                a.copy_to_device(pattern(a.size, cmd["seed"]))
                cuda.synchronize()
            reply(sha=got, wrote=sha(pattern(a.size, cmd["seed"])))
        elif c == "unregister":
            reply(rc=e.unregister_memory(cmd["ptr"]))
        elif c == "quit":
            reply()
            break
        else:
            reply(error="unknown command %r" % c)
    e.close()


if __name__ == "__main__":
    main()
