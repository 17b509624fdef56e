"""The store's Python API (sync and async) with KVFERRY_MASTER_PROTOCOL=mooncake:
every call goes to the master in Mooncake's protocol (coro_rpc, the way a
kvferry client talks to mooncake_master; issue 36), here kvferry-master's
coro_rpc service on the holder's embedded master port."""

import asyncio
import os
import unittest

import numpy as np

from _util import pattern

from kvferry.errors import ErrorCode
from kvferry.store import MooncakeDistributedStore, MooncakeDistributedStoreAsync

MiB = 1 << 20


class MooncakeMasterProtocol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The holder lends memory and runs the master (called in process).
        cls.h = MooncakeDistributedStore()
        assert cls.h.setup("127.0.0.1", "P2PHANDSHAKE", 128 * MiB, 4 * MiB, "tcp", "", "embedded") == 0
        master = cls.h.master_address()
        os.environ["KVFERRY_MASTER_PROTOCOL"] = "mooncake"
        try:
            cls.s = MooncakeDistributedStore()
            assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, "tcp", "", master) == 0
            cls.a = MooncakeDistributedStoreAsync()
            assert cls.a.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, "tcp", "", master) == 0
        finally:
            del os.environ["KVFERRY_MASTER_PROTOCOL"]
        cls.s.tensor_format = "numpy"

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.s.close()
        cls.h.close()

    def setUp(self):
        self.s.remove_all(force=True)

    def test_put_get_sizes(self):
        s, h = self.s, self.h
        for i, n in enumerate((1024, 64 * 1024 + 3, MiB, 6 * MiB + 5)):
            v = pattern(n, i).tobytes()
            self.assertEqual(s.put("k%d" % i, v), 0)
            self.assertEqual(s.get("k%d" % i), v)
            self.assertEqual(h.get("k%d" % i), v)
            self.assertEqual(s.get_size("k%d" % i), n)
        self.assertEqual(s.upsert("k0", b"again"), 0)
        self.assertEqual(h.get("k0"), b"again")
        self.assertEqual(s.get("zz"), b"")
        self.assertEqual(s.get_size("zz"), ErrorCode.OBJECT_NOT_FOUND)

    def test_batches_exist_removes(self):
        s = self.s
        self.assertEqual(s.put_batch(["b1", "b2", "r1"], [b"one", b"two", b"r"]), 0)
        self.assertEqual(s.get_batch(["b1", "b2", "zz"]), [b"one", b"two", b""])
        self.assertEqual(s.batch_is_exist(["b1", "zz"]), [1, 0])
        self.assertEqual(s.is_exist("b2"), 1)
        self.assertEqual(s.remove("r1"), 0)
        self.assertEqual(s.remove("r1"), ErrorCode.OBJECT_NOT_FOUND)
        self.assertEqual(s.remove("b2"), ErrorCode.OBJECT_HAS_LEASE)
        self.assertEqual(s.batch_remove(["b2", "zz"], force=True), [0, ErrorCode.OBJECT_NOT_FOUND])
        self.assertEqual(s.put("q1", b"v"), 0)
        self.assertEqual(s.remove_by_regex("^q", force=True), 1)
        self.assertEqual(s.remove_all(force=True), 1)

    def test_registered_memory_and_ranges(self):
        s = self.s
        n = 2 * MiB
        src, dst = pattern(n, 7), np.zeros(n, np.uint8)
        self.assertEqual(s.register_buffer(src.ctypes.data, n), 0)
        self.assertEqual(s.register_buffer(dst.ctypes.data, n), 0)
        try:
            self.assertEqual(s.put_from("zc", src.ctypes.data, n), 0)
            self.assertEqual(s.get_into("zc", dst.ctypes.data, n), n)
            self.assertTrue(np.array_equal(src, dst))
            keys = ["zc%d" % i for i in range(4)]
            step = n // 4
            self.assertEqual(s.batch_put_from(keys, [src.ctypes.data + i * step for i in range(4)],
                                              [step] * 4), [0] * 4)
            dst[:] = 0
            self.assertEqual(s.batch_get_into(keys, [dst.ctypes.data + i * step for i in range(4)],
                                              [step] * 4), [step] * 4)
            self.assertTrue(np.array_equal(src, dst))
            dst[:] = 0
            got = s.get_into_ranges([dst.ctypes.data], [["zc"]], [[[0, 100]]], [[[5, 1000]]], [[[10, 20]]])
            self.assertEqual(got, [[[10, 20]]])
            self.assertTrue(np.array_equal(dst[0:10], src[5:15]))
            self.assertTrue(np.array_equal(dst[100:120], src[1000:1020]))
        finally:
            self.assertEqual(s.unregister_buffer(src.ctypes.data), 0)
            self.assertEqual(s.unregister_buffer(dst.ctypes.data), 0)

    def test_tensors(self):
        s = self.s
        t = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
        self.assertEqual(s.put_tensor("t", t), 0)
        got = s.get_tensor("t")
        self.assertTrue(np.array_equal(got, t))
        self.assertEqual(got.dtype, t.dtype)
        self.assertIsNone(s.get_tensor("missing"))

    def test_async(self):
        a = self.a
        vals = [pattern(100 + 17 * i, i).tobytes() for i in range(64)]

        async def main():
            rs = await asyncio.gather(*[a.async_put("a%d" % i, v) for i, v in enumerate(vals)])
            self.assertEqual(rs, [0] * len(vals))
            gs = await asyncio.gather(*[a.async_get("a%d" % i) for i in range(len(vals))])
            self.assertEqual(gs, vals)
            self.assertEqual(await a.async_is_exist("a1"), 1)
            self.assertEqual(await a.async_remove("zz"), ErrorCode.OBJECT_NOT_FOUND)

        asyncio.run(asyncio.wait_for(main(), 60))

    def test_not_supported(self):
        s = self.s
        version, rc = s.put_versioned("v", b"x", 0)
        self.assertEqual((version, rc), (0, ErrorCode.NOT_SUPPORTED))
        self.assertIn("not supported by a mooncake master", s.last_error())


if __name__ == "__main__":
    unittest.main()
