"""ReplicateConfig.group_ids (issue 17, item 8), with Mooncake's semantics:
one id per key of a call (else INVALID_PARAMS for every key), members of a
group share read leases and are evicted together, and an object's group
is fixed while it exists."""

import asyncio
import unittest

import numpy as np

from _util import pattern

from kvferry.errors import ErrorCode
from kvferry.store import MooncakeDistributedStoreAsync, ReplicateConfig

MiB = 1 << 20
INVALID = int(ErrorCode.INVALID_PARAMS)
LEASED = int(ErrorCode.OBJECT_HAS_LEASE)


def groups(*ids):
    c = ReplicateConfig()
    c.group_ids = list(ids)
    return c


class GroupIDs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStoreAsync()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 4 * MiB, "tcp", "",
                           "embedded") == 0
        cls.s.tensor_format = "numpy"
        cls.buf = pattern(1 * MiB, 5)
        assert cls.s.register_buffer(cls.buf.ctypes.data, cls.buf.nbytes) == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def setUp(self):
        self.s.remove_all(force=True)

    def test_reading_one_member_leases_the_group(self):
        s, p = self.s, self.buf.ctypes.data
        self.assertEqual(s.put("a", b"a", groups("req")), 0)
        self.assertEqual(s.batch_put_from(["b", "solo"], [p, p + 100], [100, 100],
                                          groups("req", "")), [0, 0])
        self.assertEqual(s.batch_put_from_multi_buffers(["c"], [[p, p + 4096]], [[10, 10]],
                                                        groups("req")), [0])
        self.assertEqual(s.get("b"), self.buf[:100].tobytes())
        # a and c were never read: b's lease covers them; solo is not grouped.
        self.assertEqual([s.remove(k) for k in ("a", "c", "solo")], [LEASED, LEASED, 0])
        self.assertEqual(s.remove("a", force=True), 0)

    def test_membership_is_fixed(self):
        s = self.s
        self.assertEqual(s.put("m", b"1", groups("g")), 0)
        self.assertEqual(s.upsert("m", b"2", groups("h")), INVALID)
        self.assertEqual(s.upsert("m", b"2", groups("")), INVALID)
        self.assertEqual(s.upsert("m", b"3"), 0)  # keeps g
        self.assertEqual(s.upsert("m", b"4", groups("g")), 0)
        self.assertEqual(s.get("m"), b"4")

    def test_one_id_per_key(self):
        s, p = self.s, self.buf.ctypes.data
        self.assertEqual(s.put("x", b"x", groups("g1", "g2")), INVALID)
        self.assertEqual(s.put("x", b"x", groups()), INVALID)
        self.assertEqual(s.put_from("x", p, 10, groups()), INVALID)
        self.assertEqual(s.batch_put_from(["y", "z"], [p, p], [8, 8], groups("g")),
                         [INVALID, INVALID])
        self.assertEqual(s.put_batch(["y", "z"], [b"1", b"2"], groups("g", "g", "g")), INVALID)
        self.assertEqual(s.batch_put_from_multi_buffers(["y"], [[p]], [[8]], groups()),
                         [INVALID])
        self.assertEqual(s.batch_is_exist(["x", "y", "z"]), [0, 0, 0])
        with self.assertRaises(TypeError):
            s.put("x", b"x", groups(3))

    def test_tensor_shards_join_their_keys_group(self):
        s = self.s
        t = np.arange(32, dtype=np.float32).reshape(4, 8)
        self.assertEqual(s.batch_pub_tensor_with_tp(["w", "v"], [t, t], groups("gw", "gv"),
                                                    tp_size=2, split_dim=1), [0, 0])
        self.assertEqual(s.batch_pub_tensor_with_tp(["q"], [t], groups("a", "b"), tp_size=2),
                         [INVALID])
        self.assertIsNotNone(s.get_tensor_with_tp("w", tp_rank=1, tp_size=2))
        self.assertEqual(s.remove("w_tp_0"), LEASED)  # shard 1 was read
        self.assertEqual(s.remove("v_tp_0"), 0)  # another group

    def test_async_puts_with_groups(self):
        s, p = self.s, self.buf.ctypes.data

        async def main():
            self.assertEqual(await s.async_put("aa", b"x", groups("ag")), 0)
            self.assertEqual(await s.async_batch_put_from(["ab", "ac"], [p, p], [4, 4],
                                                          groups("ag", "ag")), [0, 0])
            self.assertEqual(await s.async_put("ad", b"x", groups("1", "2")), INVALID)
            self.assertEqual(await s.async_get("ab"), self.buf[:4].tobytes())

        asyncio.run(asyncio.wait_for(main(), 30))
        self.assertEqual(s.remove("aa"), LEASED)
        self.assertEqual(s.is_exist("ad"), 0)


if __name__ == "__main__":
    unittest.main()
