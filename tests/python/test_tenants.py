"""setup(..., tenant_id=...) isolates (issue 17, item 6): clients of two
tenants and of the default tenant on one master each see only their own
objects, through the sync, batch, tensor and async surfaces."""

import asyncio
import ctypes
import unittest

import numpy as np

from _util import pattern

from kvferry.errors import ErrorCode
from kvferry.store import MooncakeDistributedStore, MooncakeDistributedStoreAsync

MiB = 1 << 20


class Tenants(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The holder lends memory and runs the master, in the default tenant.
        cls.d = MooncakeDistributedStore()
        assert cls.d.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 4 * MiB, "tcp", "", "embedded") == 0
        master = cls.d.master_address()
        cls.a = MooncakeDistributedStore()
        assert cls.a.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, "tcp", "", master,
                           tenant_id="tenant-a") == 0
        # The dict form of setup carries tenant_id too.
        cls.b = MooncakeDistributedStoreAsync()
        assert cls.b.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                            "global_segment_size": 0, "local_buffer_size": 4 * MiB,
                            "master_server_addr": master, "tenant_id": "tenant-b"}) == 0
        for s in (cls.d, cls.a, cls.b):
            s.tensor_format = "numpy"

    @classmethod
    def tearDownClass(cls):
        for s in (cls.b, cls.a, cls.d):
            s.close()

    def setUp(self):
        for s in (self.d, self.a, self.b):
            s.remove_all(force=True)

    def test_same_key_three_objects(self):
        stores = (self.d, self.a, self.b)
        for i, s in enumerate(stores):
            self.assertEqual(s.put("k", bytes([i]) * (100 + i)), 0)
        for i, s in enumerate(stores):
            self.assertEqual(s.get("k"), bytes([i]) * (100 + i))
            self.assertEqual(s.get_size("k"), 100 + i)
            self.assertEqual(len(s.get_replica_desc("k")), 1)

    def test_keys_invisible_to_other_tenants(self):
        a, b, d = self.a, self.b, self.d
        self.assertEqual(a.put_batch(["x0", "x1", "y"], [b"0", b"1", b"2"]), 0)
        t = np.arange(12, dtype=np.float32).reshape(3, 4)
        self.assertEqual(a.put_tensor("t", t), 0)
        for other in (b, d):
            self.assertEqual(other.is_exist("x0"), 0)
            self.assertEqual(other.batch_is_exist(["x0", "x1", "y", "t"]), [0, 0, 0, 0])
            self.assertEqual(other.get("x0"), b"")
            self.assertEqual(other.get_size("x0"), ErrorCode.OBJECT_NOT_FOUND)
            self.assertIsNone(other.get_tensor("t"))
            self.assertEqual(other.batch_get_replica_desc(["x0", "t"]), {})
            buf = ctypes.create_string_buffer(64)
            self.assertEqual(other.batch_get_into(["x0"], [ctypes.addressof(buf)], [64]),
                             [ErrorCode.OBJECT_NOT_FOUND])
            # Removals of other tenants touch nothing of a's.
            self.assertEqual(other.remove("x0", force=True), ErrorCode.OBJECT_NOT_FOUND)
            self.assertEqual(other.batch_remove(["x1", "y"], force=True),
                             [ErrorCode.OBJECT_NOT_FOUND] * 2)
            self.assertEqual(other.remove_by_regex("^x", force=True), 0)
            self.assertEqual(other.remove_all(force=True), 0)
        self.assertEqual(a.batch_is_exist(["x0", "x1", "y", "t"]), [1, 1, 1, 1])
        np.testing.assert_array_equal(a.get_tensor("t"), t)
        self.assertEqual(a.remove_by_regex("^x", force=True), 2)
        self.assertEqual(a.remove_all(force=True), 2)

    def test_zero_copy_batches(self):
        a, b = self.a, self.b
        n, sz = 4, 64 << 10
        src = pattern(n * sz, 7)
        dst = np.zeros(n * sz, np.uint8)
        for s in (a, b):
            self.assertEqual(s.register_buffer(src.ctypes.data, src.nbytes), 0)
            self.assertEqual(s.register_buffer(dst.ctypes.data, dst.nbytes), 0)
        keys = ["z%d" % i for i in range(n)]
        ptrs = [src.ctypes.data + i * sz for i in range(n)]
        self.assertEqual(a.batch_put_from(keys, ptrs, [sz] * n), [0] * n)
        dptrs = [dst.ctypes.data + i * sz for i in range(n)]
        self.assertEqual(b.batch_get_into(keys, dptrs, [sz] * n), [ErrorCode.OBJECT_NOT_FOUND] * n)
        self.assertEqual(a.batch_get_into(keys, dptrs, [sz] * n), [sz] * n)
        np.testing.assert_array_equal(src, dst)
        for s in (a, b):
            s.unregister_buffer(src.ctypes.data)
            s.unregister_buffer(dst.ctypes.data)

    def test_async_store_is_scoped(self):
        a, b = self.a, self.b

        async def main():
            self.assertEqual(await b.async_put("ak", b"from-b"), 0)
            self.assertEqual(await b.async_get("ak"), b"from-b")
            self.assertEqual(await b.async_is_exist("only-a"), 0)
            self.assertEqual(await b.async_remove("only-a", True), ErrorCode.OBJECT_NOT_FOUND)

        self.assertEqual(a.put("only-a", b"a"), 0)
        asyncio.run(asyncio.wait_for(main(), 30))
        self.assertEqual(a.is_exist("ak"), 0)
        self.assertEqual(a.get("only-a"), b"a")

    def test_invalid_tenant(self):
        master = self.d.master_address()
        for bad in ("_reserved", "a\x01b", "x" * 257):
            s = MooncakeDistributedStore()
            self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 0, MiB, "tcp", "", master,
                                     tenant_id=bad), ErrorCode.INVALID_PARAMS, bad)
            self.assertEqual(s.health_check(), 1)
        with self.assertRaises(TypeError):
            MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 0, MiB, "tcp", "",
                                             master, tenant_id=5)


if __name__ == "__main__":
    unittest.main()
