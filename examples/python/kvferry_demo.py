"""kvferry from Python: the transfer engine and the store, two processes.

The owner starts a TransferEngine (P2P handshake: no metadata server) and a
store client that shares it, with an embedded master (no server to start)
and 64 MiB of its memory lent to the store. It puts two objects, registers a
4 MiB buffer with the engine, and starts a second copy of this script, the
peer, naming its master, its engine's segment and the buffer's address.

The peer joins the master as a pure client (it lends nothing), reads the
objects back through the store and checks them, writes a pattern straight
into the owner's buffer with one transfer-engine batch (a one-sided write,
no code runs in the owner for it), and answers with an object of its own.
The owner checks the pattern and the answer, and exits 0 when all went well.

    PYTHONPATH=python KVFERRY_LIB_DIR=build/lib python3 examples/python/kvferry_demo.py

The names are Mooncake's (``from mooncake.engine import TransferEngine``
works the same); only the standard library is used, no numpy.
"""

import ctypes
import os
import subprocess
import sys
import time

# Run from a checkout without installing: python/ holds the kvferry package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from kvferry.engine import TransferEngine  # noqa: E402
from kvferry.store import MooncakeDistributedStore  # noqa: E402

MiB = 1 << 20
BUF = 4 * MiB
BLOCKS = 16  # the peer's write: 16 requests of 256 KiB


def pattern(n, seed):
    """n deterministic bytes."""
    return bytes((i * 31 + seed) & 0xFF for i in range(256)) * (n // 256)


def start(master):
    """A TransferEngine and a store client sharing it, or exit."""
    engine = TransferEngine()
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        sys.exit("transfer engine failed to start")
    store = MooncakeDistributedStore()
    lent = 64 * MiB if master == "embedded" else 0
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", lent, 16 * MiB, "tcp", "", master,
                     engine=engine.get_engine())
    if rc != 0:
        sys.exit("store setup failed: %d %s" % (rc, store.last_error()))
    return engine, store


def owner():
    engine, store = start("embedded")
    print("[owner] embedded master at %s, engine segment %s"
          % (store.master_address(), engine.get_segment_name()))

    # Two objects: bytes through put, and C memory through put_from.
    assert store.put("demo/greeting", b"hello from the owner") == 0
    blob = ctypes.create_string_buffer(pattern(MiB, 7), MiB)
    assert store.put_from("demo/blob", ctypes.addressof(blob), MiB) == 0
    print("[owner] put demo/greeting and demo/blob (1 MiB)")

    # A buffer the peer writes into with the transfer engine.
    buf = ctypes.create_string_buffer(BUF)
    assert engine.register_memory(ctypes.addressof(buf), BUF) == 0

    peer = subprocess.run([sys.executable, os.path.abspath(__file__), "peer", store.master_address(),
                           engine.get_segment_name(), str(ctypes.addressof(buf))], timeout=120)
    ok = peer.returncode == 0
    written = buf.raw == pattern(BUF, 42)
    print("[owner] the peer's transfer-engine write into my buffer: %s"
          % ("all 4 MiB match" if written else "MISMATCH"))
    answer = store.get("demo/answer")
    print("[owner] the peer answered: %r" % answer)
    ok = ok and written and answer == b"both objects match"
    engine.unregister_memory(ctypes.addressof(buf))
    store.close()
    engine.close()
    print("kvferry_demo: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


def peer(master, owner_segment, owner_buf):
    engine, store = start(master)
    print("[peer] joined master %s as %s" % (master, store.get_hostname()))

    # Read through the store: the bytes come from the owner's segment.
    good = store.get("demo/greeting") == b"hello from the owner"
    dst = ctypes.create_string_buffer(MiB)
    assert store.register_buffer(ctypes.addressof(dst), MiB) == 0  # get_into without a copy
    n = store.get_into("demo/blob", ctypes.addressof(dst), MiB)
    good = good and n == MiB and dst.raw == pattern(MiB, 7)
    print("[peer] store get of demo/greeting and get_into of demo/blob: %s"
          % ("match" if good else "MISMATCH"))

    # Write straight into the owner's registered memory: one batch.
    src = ctypes.create_string_buffer(pattern(BUF, 42), BUF)
    assert engine.register_memory(ctypes.addressof(src), BUF) == 0
    step = BUF // BLOCKS
    t0 = time.monotonic()
    rc = engine.batch_transfer_sync_write(
        owner_segment, [ctypes.addressof(src) + i * step for i in range(BLOCKS)],
        [owner_buf + i * step for i in range(BLOCKS)], [step] * BLOCKS)
    dt = time.monotonic() - t0
    if rc != 0:
        print("[peer] write failed: %s" % engine.last_error(), file=sys.stderr)
        return 1
    print("[peer] batch_transfer_sync_write of %d x %d KiB into %s: %.2f ms"
          % (BLOCKS, step // 1024, owner_segment, dt * 1e3))

    assert store.put("demo/answer", b"both objects match" if good else b"MISMATCH") == 0
    store.unregister_buffer(ctypes.addressof(dst))
    engine.unregister_memory(ctypes.addressof(src))
    store.close()
    engine.close()
    return 0 if good else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "peer":
        sys.exit(peer(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(owner())
