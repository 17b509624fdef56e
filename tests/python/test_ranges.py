"""Ranged reads and the put and get sessions (issue 42): get_into_ranges,
batch_get_session_start / batch_get_into_multi_buffer_ranges /
batch_get_session_end, batch_put_session_start /
batch_put_from_multi_buffer_ranges / batch_put_session_end /
batch_put_session_revoke, batch_replica_clear and _get_pyclient_capsule.
Every read is checked against numpy's own slicing of the stored bytes,
over a remote holder (the engine's TCP path) and over the client's own
segment (the local copy)."""

import ctypes
import unittest

import numpy as np

from _util import pattern

from kvferry.errors import ErrorCode
from kvferry.store import MooncakeDistributedStore, MooncakeDistributedStoreAsync

MiB = 1 << 20
INVALID = int(ErrorCode.INVALID_PARAMS)
NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)
EXISTS = int(ErrorCode.OBJECT_ALREADY_EXISTS)


class Ranges(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = MooncakeDistributedStore()
        assert cls.holder.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 4 * MiB, "tcp", "",
                                "embedded") == 0
        cls.s = MooncakeDistributedStoreAsync()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 * MiB, "tcp", "",
                           cls.holder.master_address()) == 0
        cls.out = np.zeros(4 * MiB, np.uint8)
        cls.src = pattern(4 * MiB, 7)
        for st in (cls.s, cls.holder):
            for a in (cls.out, cls.src):
                assert st.register_buffer(a.ctypes.data, a.nbytes) == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.holder.close()

    def setUp(self):
        self.holder.remove_all(force=True)
        self.out[:] = 0

    def stores(self):
        """(name, reader): a client without a segment (remote reads) and the
        holder itself (its own segment)."""
        return (("remote", self.s), ("local", self.holder))

    def put(self, key, n, seed):
        data = pattern(n, seed)
        self.assertEqual(self.holder.put(key, data.tobytes()), 0)
        return data

    def test_get_into_ranges(self):
        a, b = self.put("a", 300000, 1), self.put("b", 5000, 2)
        base = self.out.ctypes.data
        for name, st in self.stores():
            with self.subTest(store=name):
                self.out[:] = 0
                # Two buffers inside the registered region; key a appears twice.
                bufs = [base, base + 2 * MiB]
                keys = [["a", "b"], ["a"]]
                dst = [[[0, 70000, 80000], [200000]], [[5]]]
                src = [[[0, 123457, 299000], [4000]], [[1]]]
                sz = [[[65536, 4096, 100], [1000]], [[299999]]]
                got = st.get_into_ranges(bufs, keys, dst, src, sz)
                self.assertEqual(got, [[[65536, 4096, 100], [1000]], [[299999]]])
                self.assertTrue(np.array_equal(self.out[0:65536], a[0:65536]))
                self.assertTrue(np.array_equal(self.out[70000:74096], a[123457:127553]))
                self.assertTrue(np.array_equal(self.out[80000:80100], a[299000:299100]))
                self.assertTrue(np.array_equal(self.out[200000:201000], b[4000:5000]))
                o = 2 * MiB
                self.assertTrue(np.array_equal(self.out[o + 5:o + 300004], a[1:300000]))
                self.assertEqual(self.out[o + 4], 0)

    def test_get_into_ranges_errors(self):
        self.put("a", 1000, 3)
        base = self.out.ctypes.data
        s = self.s
        # Past the object's end; a missing key; a zero-length range.
        got = s.get_into_ranges([base], [["a", "zz"]], [[[0, 10, 20], [0]]],
                                [[[990, 0, 1000], [0]]], [[[11, 10, 0], [4]]])
        self.assertEqual(got, [[[INVALID, 10, 0], [NOT_FOUND]]])
        self.assertEqual(self.out[0], 0)
        # Memory that is not registered is refused, not written.
        unreg = ctypes.create_string_buffer(64)
        got = s.get_into_ranges([ctypes.addressof(unreg)], [["a"]], [[[0]]], [[[0]]], [[[16]]])
        self.assertEqual(got, [[[INVALID]]])
        self.assertEqual(unreg.raw, b"\0" * 64)
        # Mismatched lists: INVALID_PARAMS in the shape of all_dst_offsets.
        self.assertEqual(s.get_into_ranges([base, base], [["a"]], [[[0, 1]]], [[[0]]], [[[1]]]),
                         [[[INVALID, INVALID]], []])
        self.assertEqual(s.get_into_ranges([base], [["a"]], [[[0, 1]]], [[[0]]], [[[1, 1]]]),
                         [[[INVALID, INVALID]]])
        # A negative offset is INVALID_PARAMS for that key's ranges.
        self.assertEqual(s.get_into_ranges([base], [["a"]], [[[0]]], [[[-1]]], [[[1]]]),
                         [[[INVALID]]])
        with self.assertRaises(TypeError):
            s.get_into_ranges([base], "a", [[[0]]], [[[0]]], [[[1]]])
        self.assertEqual(MooncakeDistributedStore().get_into_ranges([base], [["a"]], [[[0]]],
                                                                    [[[0]]], [[[1]]]),
                         [[[INVALID]]])

    def test_get_session(self):
        a = self.put("a", 200000, 4)
        b = self.put("b", 3000, 5)
        base = self.out.ctypes.data
        for name, st in self.stores():
            with self.subTest(store=name):
                self.out[:] = 0
                self.assertEqual(st.batch_get_session_start(["a", "b", "missing"]),
                                 [0, 0, NOT_FOUND])
                got = st.batch_get_into_multi_buffer_ranges(
                    ["a", "b", "missing"],
                    [[base + 1000, base], [base + 500000], [base + 600000]],
                    [[4096, 512], [2000], [1]],
                    [[150000, 7], [1000], [0]])
                self.assertEqual(got, [4096 + 512, 2000, INVALID])
                self.assertTrue(np.array_equal(self.out[1000:5096], a[150000:154096]))
                self.assertTrue(np.array_equal(self.out[0:512], a[7:519]))
                self.assertTrue(np.array_equal(self.out[500000:502000], b[1000:3000]))
                self.assertEqual(self.out[600000], 0)
                # A range past the end: INVALID_PARAMS, nothing of that key read.
                self.out[:] = 0
                self.assertEqual(st.batch_get_into_multi_buffer_ranges(
                    ["a"], [[base, base + 100]], [[10, 10]], [[0, 199991]]), [INVALID])
                self.assertFalse(self.out[:200].any())
                # Mismatched inner lists.
                self.assertEqual(st.batch_get_into_multi_buffer_ranges(
                    ["a"], [[base]], [[10, 10]], [[0]]), [INVALID])
                self.assertEqual(st.batch_get_into_multi_buffer_ranges(
                    ["a", "b"], [[base]], [[10]], [[0]]), [INVALID, INVALID])
                self.assertEqual(st.batch_get_session_end(["a", "b", "never"]), 0)
                self.assertEqual(st.batch_get_into_multi_buffer_ranges(
                    ["a"], [[base]], [[10]], [[0]]), [INVALID])

    def test_get_session_sees_the_object_it_started_with(self):
        a = self.put("a", 8192, 6)
        base = self.out.ctypes.data
        s = self.s
        self.assertEqual(s.batch_get_session_start(["a"]), [0])
        self.assertEqual(s.batch_get_into_multi_buffer_ranges(["a"], [[base]], [[8192]], [[0]]),
                         [8192])
        self.assertTrue(np.array_equal(self.out[:8192], a))
        s.batch_get_session_end(["a"])

    def test_put_session(self):
        base = self.src.ctypes.data
        for name, st in self.stores():
            with self.subTest(store=name):
                self.holder.remove_all(force=True)
                n = 300000
                self.assertEqual(st.batch_put_session_start(["p", "q"], [n, 100]), [0, 0])
                # Reserved but not written: not readable yet.
                self.assertEqual(st.is_exist("p"), 0)
                # Written in three ranges, out of order, from two places.
                got = st.batch_put_from_multi_buffer_ranges(
                    ["p"], [[base + 200000, base + 10, base + 100000]],
                    [[100000, 100000, 100000]], [[200000, 0, 100000]])
                self.assertEqual(got, [300000])
                self.assertEqual(st.batch_put_from_multi_buffer_ranges(
                    ["q"], [[base]], [[101]], [[0]]), [INVALID])
                self.assertEqual(st.batch_put_from_multi_buffer_ranges(
                    ["q"], [[base]], [[100]], [[0]]), [100])
                self.assertEqual(st.batch_put_session_end(["p", "q", "never"]), [0, 0, INVALID])
                want = np.concatenate([self.src[10:100010], self.src[100000:200000],
                                       self.src[200000:300000]])
                for reader in (self.s, self.holder):
                    self.assertTrue(np.array_equal(np.frombuffer(reader.get("p"), np.uint8), want))
                self.assertEqual(self.s.get("q"), self.src[:100].tobytes())
                # The session is over: no more writes, no second end.
                self.assertEqual(st.batch_put_from_multi_buffer_ranges(
                    ["p"], [[base]], [[1]], [[0]]), [INVALID])
                self.assertEqual(st.batch_put_session_end(["p"]), [INVALID])
                # A stored key cannot start a session; a key in one cannot twice.
                self.assertEqual(st.batch_put_session_start(["p"], [10]), [EXISTS])
                self.assertEqual(st.batch_put_session_start(["r", "r"], [10, 10]), [0, INVALID])
                self.assertEqual(st.batch_put_session_revoke(["r"]), [0])

    def test_put_session_revoke(self):
        s = self.s
        base = self.src.ctypes.data
        self.assertEqual(s.batch_put_session_start(["v"], [4096]), [0])
        self.assertEqual(s.batch_put_from_multi_buffer_ranges(["v"], [[base]], [[4096]], [[0]]),
                         [4096])
        self.assertEqual(s.batch_put_session_revoke(["v", "none"]), [0, INVALID])
        self.assertEqual(s.is_exist("v"), 0)
        self.assertEqual(s.batch_put_from_multi_buffer_ranges(["v"], [[base]], [[1]], [[0]]),
                         [INVALID])
        # The key is free again.
        self.assertEqual(s.put_from("v", base + 1, 4096), 0)
        self.assertEqual(s.get("v"), self.src[1:4097].tobytes())

    def test_put_session_arguments(self):
        s = self.s
        self.assertEqual(s.batch_put_session_start(["a", "b"], [10]), [INVALID, INVALID])
        self.assertEqual(s.batch_put_session_start(["a"], [-1]), [INVALID])
        self.assertEqual(s.batch_put_session_start(["a"], [0]), [INVALID])
        self.assertEqual(s.batch_put_session_start([], []), [])
        with self.assertRaises(TypeError):
            s.batch_put_session_start("a", [1])
        closed = MooncakeDistributedStore()
        self.assertEqual(closed.batch_put_session_start(["a"], [1]), [])
        self.assertEqual(closed.batch_put_session_end(["a"]), [])
        self.assertEqual(closed.batch_put_session_revoke(["a"]), [])
        self.assertEqual(closed.batch_get_session_start(["a"]), [])
        self.assertEqual(closed.batch_get_session_end(["a"]), -1)
        self.assertEqual(closed.batch_put_from_multi_buffer_ranges(["a"], [[1]], [[1]], [[0]]), [])
        self.assertEqual(closed.batch_get_into_multi_buffer_ranges(["a"], [[1]], [[1]], [[0]]), [])

    def test_async_names(self):
        import asyncio

        base = self.src.ctypes.data

        async def run():
            self.assertEqual(await self.s.async_batch_put_session_start(["w"], [64]), [0])
            self.assertEqual(await self.s.async_batch_put_from_multi_buffer_ranges(
                ["w"], [[base]], [[64]], [[0]]), [64])
            self.assertEqual(await self.s.async_batch_put_session_end(["w"]), [0])

        asyncio.run(run())
        self.assertEqual(self.s.get("w"), self.src[:64].tobytes())

    def test_batch_replica_clear(self):
        s, h = self.s, self.holder
        for k in ("x", "y", "z"):
            self.assertEqual(s.put(k, b"v" * 100), 0)
        self.assertEqual(h.batch_replica_clear(["x", "y"]), [])  # not the writer
        self.assertEqual(s.get("z"), b"v" * 100)  # z is leased now
        self.assertEqual(s.batch_replica_clear(["x", "z", "nope"], "no-such-segment"), [])
        self.assertEqual(s.batch_replica_clear(["x", "z", "nope"], h.get_hostname()), ["x"])
        self.assertEqual(s.batch_replica_clear(["y", "z"]), ["y"])
        self.assertEqual(s.get("x"), b"")
        self.assertEqual(s.get("y"), b"")
        self.assertEqual(s.batch_replica_clear([]), [])
        self.assertEqual(MooncakeDistributedStore().batch_replica_clear(["x"]), [])
        with self.assertRaises(TypeError):
            s.batch_replica_clear("x")

    def test_pyclient_capsule(self):
        self.put("c", 77, 8)
        cap = self.s._get_pyclient_capsule()
        api = ctypes.pythonapi
        api.PyCapsule_GetName.restype = ctypes.c_char_p
        api.PyCapsule_GetName.argtypes = [ctypes.py_object]
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        self.assertEqual(api.PyCapsule_GetName(cap), b"kvferry.mooncake_store_t")
        handle = api.PyCapsule_GetPointer(cap, b"kvferry.mooncake_store_t")
        # What a C extension does with it: call store_c.h directly.
        from kvferry._lib import lib
        self.assertEqual(lib.mooncake_store_get_size(handle, b"c"), 77)
        self.assertIsNone(MooncakeDistributedStore()._get_pyclient_capsule())


if __name__ == "__main__":
    unittest.main()
