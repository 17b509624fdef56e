"""MooncakeDistributedStoreAsync (specs/mooncake.md §6.4): async_<method>
awaitables on the library's completion queue, with many requests in flight."""

import asyncio
import threading
import time
import unittest

import numpy as np

from _util import HAVE_TORCH, pattern

from kvferry.errors import ErrorCode
from kvferry.store import BufferHandle, MooncakeDistributedStoreAsync

MiB = 1 << 20


class Async(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStoreAsync()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 256 * MiB, 16 * MiB, "tcp", "",
                           "embedded") == 0
        cls.s.tensor_format = "numpy"

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    def test_many_concurrent(self):
        s = self.s
        n = 2000
        vals = [pattern(1 + (i * 37) % 5000, i).tobytes() for i in range(n)]
        threads_before = threading.active_count()

        async def main():
            t0 = time.monotonic()
            rs = await asyncio.gather(*[s.async_put("c%d" % i, v) for i, v in enumerate(vals)])
            self.assertEqual(set(rs), {0})
            gs = await asyncio.gather(*[s.async_get("c%d" % i) for i in range(n)])
            self.assertEqual(gs, vals)
            ex = await asyncio.gather(*[s.async_is_exist("c%d" % i) for i in range(0, n, 7)],
                                      s.async_is_exist("nope"))
            self.assertEqual(ex, [1] * len(range(0, n, 7)) + [0])
            sz = await asyncio.gather(*[s.async_get_size("c%d" % i) for i in range(10)])
            self.assertEqual(sz, [len(v) for v in vals[:10]])
            return time.monotonic() - t0

        dt = self.run_async(main())
        # Completions come through the event loop: no Python thread per call.
        self.assertLessEqual(threading.active_count(), threads_before)
        self.assertLess(dt, 60)

    def test_mixed_ops_and_errors(self):
        s = self.s

        async def main():
            self.assertEqual(await s.async_put("m", b"v1"), 0)
            self.assertEqual(await s.async_put("m", b"v2"), 0)  # immutable
            self.assertEqual(await s.async_get("m"), b"v1")
            self.assertEqual(await s.async_upsert("m", b"v3"), 0)
            self.assertEqual(await s.async_get("m"), b"v3")
            self.assertEqual(await s.async_get("missing"), b"")
            self.assertEqual(await s.async_get_size("missing"), ErrorCode.OBJECT_NOT_FOUND)
            self.assertEqual(await s.async_remove("missing"), ErrorCode.OBJECT_NOT_FOUND)
            self.assertEqual(await s.async_put("", b"x"), ErrorCode.INVALID_PARAMS)
            buf = np.zeros(1, np.uint8)
            self.assertEqual(await s.async_get_into("m", buf.ctypes.data, 1),
                             ErrorCode.INVALID_PARAMS)  # too small
            big = np.zeros(16, np.uint8)
            self.assertEqual(await s.async_get_into("m", big.ctypes.data, 16), 2)
            self.assertEqual(big[:2].tobytes(), b"v3")
            h = await s.async_get_buffer("m")
            self.assertIsInstance(h, BufferHandle)
            self.assertEqual(bytes(h), b"v3")
            self.assertEqual(await s.async_remove("m"), ErrorCode.OBJECT_HAS_LEASE)  # read lease
            self.assertEqual(await s.async_remove("m", force=True), 0)
            # Zero-copy batch forms.
            src = pattern(MiB, 4)
            dst = np.zeros(MiB, np.uint8)
            k = ["zb%d" % i for i in range(8)]
            step = MiB // 8
            self.assertEqual(await s.async_batch_put_from(
                k, [src.ctypes.data + i * step for i in range(8)], [step] * 8), [0] * 8)
            self.assertEqual(await s.async_batch_get_into(
                k, [dst.ctypes.data + i * step for i in range(8)], [step] * 8), [step] * 8)
            self.assertTrue(np.array_equal(src, dst))
            self.assertEqual(await s.async_batch_is_exist(k + ["no"]), [1] * 8 + [0])
            self.assertEqual(await s.async_batch_remove(k, True), [0] * 8)
            self.assertEqual(await s.async_put_batch(["pb1", "pb2"], [b"1", b"2"]), 0)
            self.assertEqual(await s.async_get_batch(["pb1", "pb2", "no"]), [b"1", b"2", b""])
            # A method without a native form runs on the small thread pool.
            self.assertEqual(await s.async_get_hostname(), s.get_hostname())
            self.assertEqual(await s.async_remove_all(True) >= 0, True)
            with self.assertRaises(TypeError):
                await s.async_put(5, b"x")
            with self.assertRaises(AttributeError):
                s.async_no_such_method

        self.run_async(main())

    def test_tensors(self):
        s = self.s
        arrays = [np.random.default_rng(i).standard_normal((8, 16)).astype(np.float16)
                  for i in range(64)]

        async def main():
            keys = ["at%d" % i for i in range(64)]
            self.assertEqual(await s.async_batch_put_tensor(keys, arrays), [0] * 64)
            got = await s.async_batch_get_tensor(keys + ["none"])
            for a, b in zip(arrays, got):
                self.assertTrue(np.array_equal(a, b))
            self.assertIsNone(got[-1])
            self.assertEqual(await s.async_pub_tensor("ap", arrays[0]), 0)
            self.assertEqual(await s.async_upsert_tensor("ap", arrays[1]), 0)
            self.assertTrue(np.array_equal(await s.async_get_tensor("ap"), arrays[1]))
            # put_tensor_with_tp has no native form: thread pool; the getter is native.
            self.assertEqual(await s.async_put_tensor_with_tp("atp", arrays[2], 0, 4, 1), 0)
            parts = await s.async_batch_get_tensor_with_tp(["atp"], 3, 4)
            self.assertTrue(np.array_equal(parts[0], arrays[2][:, 12:]))

        self.run_async(main())

    def test_cancel_keeps_buffers_alive(self):
        s = self.s

        async def main():
            big = pattern(32 * MiB, 11).tobytes()
            task = asyncio.ensure_future(s.async_put("cancelled", big))
            await asyncio.sleep(0)
            task.cancel()
            del big
            try:
                await task
            except asyncio.CancelledError:
                pass
            # The store keeps working, and the put either happened whole or not at all.
            for _ in range(200):
                if await s.async_is_exist("cancelled") == 1:
                    break
                await asyncio.sleep(0.01)
            data = await s.async_get("cancelled")
            self.assertIn(len(data), (0, 32 * MiB))
            if data:
                self.assertEqual(data, pattern(32 * MiB, 11).tobytes())

        self.run_async(main())

    def test_two_loops_one_after_another(self):
        s = self.s
        self.assertEqual(self.run_async(s.async_put("loop1", b"a")), 0)
        self.assertEqual(self.run_async(s.async_get("loop1")), b"a")

    @unittest.skipUnless(HAVE_TORCH, "torch not installed")
    def test_torch(self):
        import torch

        s = self.s
        s.tensor_format = "torch"
        try:
            t = torch.arange(64, dtype=torch.float32).reshape(8, 8).to(torch.bfloat16)
            self.assertEqual(self.run_async(s.async_put_tensor("tt", t)), 0)
            self.assertTrue(torch.equal(self.run_async(s.async_get_tensor("tt")), t))
        finally:
            s.tensor_format = "numpy"

    def test_closed(self):
        t = MooncakeDistributedStoreAsync()
        self.assertEqual(t.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "",
                                 "embedded"), 0)
        self.assertEqual(self.run_async(t.async_put("k", b"v")), 0)
        t.close()
        self.assertEqual(self.run_async(t.async_put("k", b"v")), ErrorCode.INVALID_PARAMS)
        self.assertEqual(self.run_async(t.async_get("k")), b"")
        self.assertIsNone(self.run_async(t.async_get_tensor("k")))


if __name__ == "__main__":
    unittest.main()
