"""Standalone storage mode (issue 17, item 9): a real client process
(build/bin/kvferry-client, Mooncake's mooncake_client) owns the store and
dummy clients in other processes (setup_dummy, as SGLang's
standalone_storage=True) forward every call to it, their KV buffers from
MooncakeHostMemAllocator shared with it."""

import asyncio
import ctypes
import hashlib
import os
import random
import signal
import subprocess
import time
import unittest

import numpy as np

from _util import REPO, TIMEOUT, Peer, pattern

from kvferry.errors import ErrorCode
from mooncake.store import (
    MooncakeDistributedStore,
    MooncakeDistributedStoreAsync,
    MooncakeHostMemAllocator,
    ReplicateConfig,
)

MiB = 1 << 20
BLOCK = 64 << 10
BIN = os.environ.get("KVFERRY_BIN_DIR", os.path.join(REPO, "build", "bin"))


def start_real_client(port):
    """A kvferry-client with an embedded master; returns (process, segment)."""
    if not os.path.exists(os.path.join(BIN, "kvferry-client")):
        raise RuntimeError("%s/kvferry-client is missing (make bins, or set KVFERRY_BIN_DIR)" % BIN)
    p = subprocess.Popen([os.path.join(BIN, "kvferry-client"), "--master_server_address=embedded",
                          "--metadata_server=P2PHANDSHAKE", "--host=127.0.0.1",
                          "--global_segment_size=128MB", "--port=%d" % port],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    import select

    r, _, _ = select.select([p.stdout], [], [], TIMEOUT)
    line = p.stdout.readline() if r else ""
    if not line.startswith("ready "):
        p.kill()
        p.wait(TIMEOUT)
        raise RuntimeError("kvferry-client did not start: %r" % line)
    return p, line.split()[1]


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(TIMEOUT)
    p.stdout.close()


class Standalone(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.port = random.randint(20000, 60000)
        cls.addr = "127.0.0.1:%d" % cls.port
        cls.real, cls.segment = start_real_client(cls.port)

    @classmethod
    def tearDownClass(cls):
        stop(cls.real)

    def dummy(self, cls=MooncakeDistributedStore):
        s = cls()
        self.assertEqual(s.setup_dummy(64 * MiB, 4 * MiB, self.addr), 0)
        self.addCleanup(s.close)
        return s

    def shared(self, n):
        alloc = MooncakeHostMemAllocator()
        ptr = alloc.alloc(n)
        self.assertNotEqual(ptr, 0)
        self.addCleanup(alloc.free, ptr)
        return ptr, np.frombuffer((ctypes.c_uint8 * n).from_address(ptr), np.uint8)

    def test_sglang_flow(self):
        """What SGLang's MooncakeStore does with standalone_storage=True."""
        s = self.dummy()
        self.assertEqual(s.health_check(), 0)
        self.assertEqual(s.get_hostname(), self.segment)
        # Warm-up: a put of bytes, is_exist, get.
        self.assertEqual(s.put("warmup", bytes(4096)), 0)
        self.assertEqual(s.is_exist("warmup"), 1)
        self.assertEqual(s.get("warmup"), bytes(4096))
        # The host KV pool from MooncakeHostMemAllocator, registered.
        ptr, kv = self.shared(16 * BLOCK)
        self.assertEqual(s.register_buffer(ptr, kv.nbytes), 0)
        kv[:] = pattern(kv.nbytes, 3)
        keys = ["page%d_k" % i for i in range(8)]
        ptrs = [ptr + i * BLOCK for i in range(8)]
        self.assertEqual(s.batch_is_exist(keys), [0] * 8)
        self.assertEqual(s.batch_put_from(keys, ptrs, [BLOCK] * 8), [0] * 8)
        self.assertEqual(s.batch_is_exist(keys), [1] * 8)
        want = kv[:8 * BLOCK].copy()
        self.assertEqual(s.batch_get_into(keys, [p + 8 * BLOCK for p in ptrs], [BLOCK] * 8),
                         [BLOCK] * 8)
        np.testing.assert_array_equal(kv[8 * BLOCK:], want)
        # MLA / vLLM layout: multi-buffer, with group ids.
        cfg = ReplicateConfig()
        cfg.group_ids = ["req1"]
        self.assertEqual(s.batch_put_from_multi_buffers(["mla"], [[ptr, ptr + 3 * BLOCK]],
                                                        [[100, 200]], cfg), [0])
        self.assertEqual(s.batch_get_into_multi_buffers(["mla"], [[ptr + 10 * BLOCK]], [[300]]),
                         [300])
        np.testing.assert_array_equal(kv[10 * BLOCK:10 * BLOCK + 100], want[:100])
        np.testing.assert_array_equal(kv[10 * BLOCK + 100:10 * BLOCK + 300],
                                      want[3 * BLOCK:3 * BLOCK + 200])
        # Tensors and plain memory go through (as bytes).
        t = np.arange(24, dtype=np.float32).reshape(4, 6)
        s.tensor_format = "numpy"
        self.assertEqual(s.put_tensor("t", t), 0)
        np.testing.assert_array_equal(s.get_tensor("t"), t)
        self.assertEqual(len(s.get_replica_desc("page0_k")), 1)
        self.assertEqual(s.get_replica_desc("page0_k")[0].get_memory_descriptor()
                         .buffer_descriptor.transport_endpoint, self.segment)
        # Only shared memory can be registered (Mooncake answers -1).
        plain = np.zeros(4096, np.uint8)
        self.assertEqual(s.register_buffer(plain.ctypes.data, plain.nbytes), -1)
        self.assertEqual(s.remove_by_regex("^page", force=True), 8)

    def test_ranks_share_the_real_client(self):
        a = Peer("peer_dummy.py", self.addr)
        b = Peer("peer_dummy.py", self.addr)
        try:
            self.assertEqual(a.info, {"rc": 0, "register": 0})
            self.assertEqual(b.info, {"rc": 0, "register": 0})
            keys = ["rank_a_%d" % i for i in range(6)]
            self.assertEqual(a.ask("put", keys=keys, seed=7)["results"], [0] * 6)
            got = b.ask("get", keys=keys)
            self.assertEqual(got["results"], [BLOCK] * 6)
            data = np.random.default_rng(7).integers(0, 256, 6 * BLOCK, dtype=np.uint8)
            self.assertEqual(got["sha"], [hashlib.sha256(data[i * BLOCK:(i + 1) * BLOCK].tobytes())
                                          .hexdigest() for i in range(6)])
            # A rank that dies takes only its own session along.
            a.kill()
            self.assertEqual(b.ask("get", keys=keys[:1])["results"], [BLOCK])
            s = self.dummy()
            self.assertEqual(s.batch_is_exist(keys), [1] * 6)
        finally:
            a.close()
            b.close()

    def test_async_dummy(self):
        s = self.dummy(MooncakeDistributedStoreAsync)
        ptr, buf = self.shared(4 * BLOCK)
        self.assertEqual(s.register_buffer(ptr, buf.nbytes), 0)
        buf[:BLOCK] = pattern(BLOCK, 5)

        async def main():
            self.assertEqual(await s.async_put_from("ak", ptr, BLOCK), 0)
            self.assertEqual(await s.async_get_into("ak", ptr + BLOCK, BLOCK), BLOCK)
            self.assertEqual(await s.async_is_exist("ak"), 1)

        asyncio.run(asyncio.wait_for(main(), 30))
        np.testing.assert_array_equal(buf[BLOCK:2 * BLOCK], buf[:BLOCK])

    def test_errors(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.setup_dummy(0, 0, "127.0.0.1:%d" % (self.port ^ 1)), ErrorCode.RPC_FAIL)
        self.assertEqual(s.setup_dummy(0, 0, "nonsense"), ErrorCode.INVALID_PARAMS)
        self.assertEqual(s.health_check(), 1)
        d = self.dummy()
        self.assertEqual(d.setup_dummy(0, 0, self.addr), ErrorCode.INVALID_PARAMS)
        alloc = MooncakeHostMemAllocator()
        self.assertEqual(alloc.alloc(0), 0)
        self.assertEqual(alloc.free(12345), -1)


class RealClientRestart(unittest.TestCase):
    def test_dummy_survives_a_real_client_restart(self):
        port = random.randint(20000, 60000)
        addr = "127.0.0.1:%d" % port
        real, _ = start_real_client(port)
        s = MooncakeDistributedStore()
        try:
            self.assertEqual(s.setup_dummy(0, MiB, addr), 0)
            alloc = MooncakeHostMemAllocator()
            ptr = alloc.alloc(BLOCK)
            self.addCleanup(alloc.free, ptr)
            self.assertEqual(s.register_buffer(ptr, BLOCK), 0)
            self.assertEqual(s.put_from("before", ptr, BLOCK), 0)
            stop(real, signal.SIGKILL)
            t0 = time.monotonic()
            self.assertEqual(s.health_check(), 2)
            self.assertEqual(s.put_from("during", ptr, BLOCK), ErrorCode.RPC_FAIL)
            self.assertLess(time.monotonic() - t0, TIMEOUT)
            real, _ = start_real_client(port)
            # The next call opens a new session and shares the buffer again.
            self.assertEqual(s.put_from("after", ptr, BLOCK), 0)
            self.assertEqual(s.is_exist("after"), 1)
        finally:
            s.close()
            stop(real)


if __name__ == "__main__":
    unittest.main()
