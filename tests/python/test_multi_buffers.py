"""batch_put_from_multi_buffers / batch_get_into_multi_buffers (issue 17,
item 7): each object is the concatenation of its buffers, gathered and
scattered by the library itself (registered buffers with no copy), with
Mooncake's argument checks and results."""

import array
import asyncio
import ctypes
import hashlib
import unittest

import numpy as np

from _util import Peer, pattern

from kvferry.errors import ErrorCode
from kvferry.store import MooncakeDistributedStore, MooncakeDistributedStoreAsync

MiB = 1 << 20
INVALID = int(ErrorCode.INVALID_PARAMS)


class MultiBuffers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = MooncakeDistributedStore()
        assert cls.holder.setup("127.0.0.1", "P2PHANDSHAKE", 128 * MiB, 4 * MiB, "tcp", "",
                                "embedded") == 0
        cls.s = MooncakeDistributedStoreAsync()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 * MiB, "tcp", "",
                           cls.holder.master_address()) == 0
        # vLLM's layout: one registered region, each key a list of
        # per-layer blocks inside it.
        cls.region = pattern(8 * MiB, 11)
        cls.out = np.zeros(8 * MiB, np.uint8)
        for a in (cls.region, cls.out):
            assert cls.s.register_buffer(a.ctypes.data, a.nbytes) == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.holder.close()

    def setUp(self):
        self.s.remove_all(force=True)

    def blocks(self, arr, key_index, layers, block):
        base = arr.ctypes.data
        ptrs = [base + ((layer * 16 + key_index) * block) % (arr.nbytes - block)
                for layer in range(layers)]
        return ptrs, [block] * layers

    def expected(self, ptrs, sizes):
        base = self.region.ctypes.data
        return b"".join(self.region[p - base:p - base + n].tobytes() for p, n in zip(ptrs, sizes))

    def test_gather_scatter_round_trip(self):
        s = self.s
        for layers, block in ((2, 4096), (32, 16 << 10), (8, 256 << 10)):
            keys = ["k%d_%d_%d" % (i, layers, block) for i in range(4)]
            ptrs, sizes = zip(*[self.blocks(self.region, i, layers, block) for i in range(4)])
            self.assertEqual(s.batch_put_from_multi_buffers(keys, list(ptrs), list(sizes)),
                             [0] * 4)
            for i, k in enumerate(keys):
                self.assertEqual(s.get(k), self.expected(ptrs[i], sizes[i]))
                self.assertEqual(self.holder.get(k), self.expected(ptrs[i], sizes[i]))
            # Scatter into different blocks of the output region.
            self.out[:] = 0
            outs, osz = zip(*[self.blocks(self.out, i + 5, layers, block) for i in range(4)])
            self.assertEqual(s.batch_get_into_multi_buffers(keys, list(outs), list(osz)),
                             [layers * block] * 4)
            base = self.out.ctypes.data
            for i in range(4):
                got = b"".join(self.out[p - base:p - base + n].tobytes()
                               for p, n in zip(outs[i], osz[i]))
                self.assertEqual(got, self.expected(ptrs[i], sizes[i]))

    def test_unregistered_and_mixed_buffers(self):
        s = self.s
        a = ctypes.create_string_buffer(b"A" * 1000, 1000)
        b = pattern(3000, 2)
        ptrs = [[ctypes.addressof(a), b.ctypes.data, self.region.ctypes.data]]
        sizes = [[1000, 3000, 500]]
        self.assertEqual(s.batch_put_from_multi_buffers(["mixed"], ptrs, sizes), [0])
        want = b"A" * 1000 + b.tobytes() + self.region[:500].tobytes()
        self.assertEqual(s.get("mixed"), want)
        # Empty pieces are skipped; the last piece may be larger than what
        # is left; a Python buffer (unregistered) takes the rest.
        tail = ctypes.create_string_buffer(10000)
        out_ptrs = [[self.out.ctypes.data, self.out.ctypes.data + 4096, ctypes.addressof(tail)]]
        self.assertEqual(s.batch_get_into_multi_buffers(["mixed"], out_ptrs, [[100, 0, 10000]]),
                         [4500])
        self.assertEqual(self.out[:100].tobytes() + tail.raw[:4400], want)

    def test_errors(self):
        s = self.s
        r = self.region.ctypes.data
        self.assertEqual(s.batch_put_from_multi_buffers(["x"], [[r]], [[100]]), [0])
        # Buffers that hold less than the object: INVALID_PARAMS, nothing read.
        self.out[:10] = 7
        self.assertEqual(s.batch_get_into_multi_buffers(["x", "nope"], [[self.out.ctypes.data]] * 2,
                                                        [[10]] * 2),
                         [INVALID, ErrorCode.OBJECT_NOT_FOUND])
        self.assertTrue((self.out[:10] == 7).all())
        # Mismatched lists, bad pointers, negative sizes, no data.
        self.assertEqual(s.batch_put_from_multi_buffers(["a", "b"], [[r]], [[1], [1]]),
                         [INVALID, INVALID])
        self.assertEqual(s.batch_put_from_multi_buffers(["a"], [[r, r]], [[1]]), [INVALID])
        self.assertEqual(s.batch_put_from_multi_buffers(["a"], [[0]], [[1]]), [INVALID])
        # A NULL buffer with a size fails its key only; one without a size
        # holds nothing and is skipped.
        o = self.out.ctypes.data
        self.assertEqual(s.batch_put_from_multi_buffers(["n1", "n2", "n3"], [[r, 0], [r], [0, r]],
                                                        [[10, 10], [10], [0, 10]]), [INVALID, 0, 0])
        self.assertEqual(s.batch_get_into_multi_buffers(["n2", "x", "n3"], [[0], [o], [0, o]],
                                                        [[10], [100], [0, 10]]), [INVALID, 100, 10])
        self.assertFalse(s.is_exist("n1"))
        self.assertEqual(s.batch_put_from_multi_buffers(["a"], [[r]], [[-1]]), [INVALID])
        self.assertEqual(s.batch_put_from_multi_buffers(["a"], [[]], [[]]), [INVALID])
        self.assertEqual(s.batch_get_into_multi_buffers(["x"], [[r]], [[1], [2]]), [INVALID])
        self.assertEqual(s.batch_put_from_multi_buffers([], [], []), [])
        self.assertEqual(s.batch_get_into_multi_buffers([], [], []), [])
        with self.assertRaises(TypeError):
            s.batch_put_from_multi_buffers(["a"], [["nope"]], [[1]])
        # Objects are immutable: a second put keeps the first value.
        self.assertEqual(s.batch_put_from_multi_buffers(["x"], [[r + 1]], [[50]]), [0])
        self.assertEqual(s.get_size("x"), 100)

    def test_async(self):
        s = self.s
        r = self.region.ctypes.data

        async def main():
            rc = await s.async_batch_put_from_multi_buffers(["as"], [[r, r + 8192]], [[4096, 4096]])
            self.assertEqual(rc, [0])
            n = await s.async_batch_get_into_multi_buffers(["as"], [[self.out.ctypes.data]],
                                                           [[8192]])
            self.assertEqual(n, [8192])

        asyncio.run(asyncio.wait_for(main(), 30))
        self.assertEqual(self.out[:4096].tobytes(), self.region[:4096].tobytes())
        self.assertEqual(self.out[4096:8192].tobytes(), self.region[8192:12288].tobytes())


class CrossProcess(unittest.TestCase):
    """A holder in another process (the transfer engine's same-host path,
    which gathers an object's pieces in one request per replica): mixed
    piece sizes, pieces from two registrations, lists, tuples and arrays
    as arguments, and results per key."""

    @classmethod
    def setUpClass(cls):
        cls.holder = Peer("peer_store.py", "publisher")
        assert cls.holder.info["rc"] == 0, cls.holder.info
        cls.s = MooncakeDistributedStore()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 * MiB, "tcp", "",
                           cls.holder.info["master"]) == 0
        cls.a, cls.b = pattern(4 * MiB, 31), pattern(4 * MiB, 32)
        cls.out, cls.out2 = np.zeros(16 * MiB, np.uint8), np.zeros(16 * MiB, np.uint8)
        for arr in (cls.a, cls.b, cls.out, cls.out2):
            assert cls.s.register_buffer(arr.ctypes.data, arr.nbytes) == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.holder.close()

    def layout(self, x, y, key, seed):
        """Key key's pieces over arrays x and y: sizes 0..70000 bytes,
        alternating arrays, in no particular order."""
        rng = np.random.default_rng(seed * 100 + key)
        ptrs, sizes, views = [], [], []
        for j in range(int(rng.integers(1, 40))):
            n = int(rng.choice([0, 1, 7, 4096, 4097, 32 << 10, 70000, int(rng.integers(1, 9000))]))
            arr = (x, y)[j % 2]
            off = (key * 40 + j) * 70000 % (arr.nbytes - 70000)
            ptrs.append(arr.ctypes.data + off)
            sizes.append(n)
            views.append(arr[off:off + n])
        return ptrs, sizes, views

    def test_round_trip_mixed_pieces(self):
        s = self.s
        keys = ["x%d" % k for k in range(12)]
        lay = [self.layout(self.a, self.b, k, 1) for k in range(12)]
        # Lists, tuples and array('Q') / numpy sequences are accepted alike.
        kinds = (list, tuple, lambda v: array.array("Q", v), lambda v: np.array(v, np.uint64))
        ptrs = [kinds[k % 4](p) for k, (p, _, _) in enumerate(lay)]
        sizes = [kinds[(k + 1) % 4](n) for k, (_, n, _) in enumerate(lay)]
        want = [b"".join(v.tobytes() for v in views) for _, _, views in lay]
        res = s.batch_put_from_multi_buffers(keys, ptrs, sizes)
        self.assertEqual(res, [0 if w else INVALID for w in want])
        for k, w in zip(keys, want):
            if w:  # read back whole (through the staging buffer)
                self.assertEqual(hashlib.sha256(s.get(k)).hexdigest(), hashlib.sha256(w).hexdigest(), k)
        # Scatter each object over pieces of other sizes (disjoint, over
        # both output arrays), as many bytes or more.
        outs, at = [], [0, 0]
        for k, w in enumerate(want):
            _, n, _ = self.layout(self.out, self.out2, k, 2)
            n.append(max(len(w) - sum(n), 0) + 5)
            p, v = [], []
            for j, size in enumerate(n):
                arr = (self.out, self.out2)[j % 2]
                off = at[j % 2]
                at[j % 2] += size + 3
                self.assertLessEqual(at[j % 2], arr.nbytes)
                p.append(arr.ctypes.data + off)
                v.append(arr[off:off + size])
            outs.append((p, n, v))
        self.out[:] = 0
        self.out2[:] = 0
        got = s.batch_get_into_multi_buffers(keys, [p for p, _, _ in outs], [n for _, n, _ in outs])
        for k, w in enumerate(want):
            if not w:
                self.assertEqual(got[k], ErrorCode.OBJECT_NOT_FOUND)
                continue
            self.assertEqual(got[k], len(w), keys[k])
            back = b"".join(v.tobytes() for v in outs[k][2])[:len(w)]
            self.assertEqual(back, w, keys[k])

    def test_results_per_key(self):
        s = self.s
        a = self.a.ctypes.data
        # One call: a good key, one with no bytes, one whose piece is not
        # in memory the library may read (unregistered, staged) and good.
        plain = ctypes.create_string_buffer(b"p" * 5000, 5000)
        self.assertEqual(s.batch_put_from_multi_buffers(
            ["pk1", "pk2", "pk3"], [[a, a + 8192], [], [ctypes.addressof(plain), a]],
            [[4096, 4096], [], [5000, 100]]), [0, INVALID, 0])
        self.assertEqual(s.get("pk3"), b"p" * 5000 + self.a[:100].tobytes())
        o = self.out.ctypes.data
        self.out[:] = 9
        self.assertEqual(s.batch_get_into_multi_buffers(
            ["pk1", "pk3", "missing", "pk1"], [[o, o + 10000], [o + 20000], [o + 40000], [o + 50000]],
            [[4096, 4096], [5099], [10], [8192]]), [8192, INVALID, ErrorCode.OBJECT_NOT_FOUND, 8192])
        self.assertEqual(self.out[:4096].tobytes(), self.a[:4096].tobytes())
        self.assertEqual(self.out[10000:14096].tobytes(), self.a[8192:12288].tobytes())
        self.assertTrue((self.out[20000:25099] == 9).all())  # too small: nothing read
        self.assertEqual(self.out[50000:58192].tobytes(),
                         self.a[:4096].tobytes() + self.a[8192:12288].tobytes())


if __name__ == "__main__":
    unittest.main()
