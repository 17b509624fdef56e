"""BufferPool, BufferLease and BufferLeaseView (issue 42): leases on host
memory registered with the store, used for zero-copy puts and gets with
their bytes checked, the pool's capacity, blocking, timeouts, reuse, the
export count that guards release, and close; and bind_to_numa_node on
node 0."""

import gc
import os
import threading
import unittest

import numpy as np

from _util import pattern

from kvferry import _numa
from mooncake.store import (
    BufferLease,
    BufferLeaseView,
    BufferPool,
    MooncakeDistributedStore,
    bind_to_numa_node,
)

MiB = 1 << 20


class Pool(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.holder = MooncakeDistributedStore()
        assert cls.holder.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 4 * MiB, "tcp", "",
                                "embedded") == 0
        cls.s = MooncakeDistributedStore()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 * MiB, "tcp", "",
                           cls.holder.master_address()) == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.holder.close()

    def test_round_trip_through_leases(self):
        pool = BufferPool(self.s, alignment=4096)
        data = pattern(200000, 9)
        with pool.acquire(len(data)) as src, pool.acquire(len(data)) as dst:
            self.assertIsInstance(src, BufferLease)
            self.assertEqual(src.size, len(data))
            self.assertEqual(src.ptr % 4096, 0)
            np.frombuffer(src.buffer, np.uint8)[:] = data
            self.assertEqual(self.s.put_from("bp", src.ptr, src.size), 0)
            self.assertEqual(self.holder.get("bp"), data.tobytes())
            self.assertEqual(self.s.get_into("bp", dst.ptr, dst.size), len(data))
            view = dst.buffer
            self.assertEqual(len(view), len(data))
            self.assertTrue(np.array_equal(np.frombuffer(view, np.uint8), data))
            del view
            gc.collect()
        self.assertEqual(pool.stats["leased"], 0)
        pool.close()

    def test_view_guards_release(self):
        pool = BufferPool(self.s)
        lease = pool.acquire(1000)
        view = lease.buffer
        arr = np.frombuffer(view, np.uint8)
        del view
        gc.collect()
        with self.assertRaisesRegex(RuntimeError, "exported views exist"):
            lease.release()
        del arr
        gc.collect()
        lease.release()
        lease.release()  # harmless
        with self.assertRaisesRegex(RuntimeError, "closed"):
            lease.ptr
        pool.close()

    def test_view_is_a_buffer(self):
        pool = BufferPool(self.s)
        lease = pool.acquire(64)
        mv = lease.buffer
        self.assertIsInstance(mv.obj, BufferLeaseView)
        mv[:4] = b"abcd"
        self.assertEqual(bytes(mv.obj.buffer[:4]), b"abcd")
        del mv
        gc.collect()
        lease.release()
        pool.close()

    def test_reuse_and_capacity(self):
        pool = BufferPool(self.s, max_bytes=1 * MiB, min_size_class=64 << 10)
        self.assertEqual(pool.stats["max_bytes"], 1 * MiB)  # never less than local_buffer_size
        a = pool.acquire(100 << 10)  # class 128 KiB
        ptr = a.ptr
        a.release()
        b = pool.acquire(120 << 10)  # the same class: the idle region again
        self.assertEqual(b.ptr, ptr)
        leases = [pool.acquire(128 << 10) for _ in range(7)]  # 8 x 128 KiB = 1 MiB
        with self.assertRaisesRegex(RuntimeError, "exhausted"):
            pool.acquire(1, block=False)
        with self.assertRaisesRegex(RuntimeError, "timed out"):
            pool.acquire(1, timeout=0.05)
        with self.assertRaisesRegex(RuntimeError, "exceeds pool capacity"):
            pool.acquire(2 * MiB)
        # A waiter gets the region a release hands back.
        got = []
        t = threading.Thread(target=lambda: got.append(pool.acquire(128 << 10, timeout=30)))
        t.start()
        b.release()
        t.join(30)
        self.assertEqual(len(got), 1)
        with self.assertRaisesRegex(RuntimeError, "active leases"):
            pool.close()
        for x in leases + got:
            x.release()
        # Idle regions of another class make room for a larger one.
        big = pool.acquire(512 << 10)
        big.release()
        pool.close()
        with self.assertRaisesRegex(RuntimeError, "closed"):
            pool.acquire(1)

    def test_max_regions_and_prewarm(self):
        pool = BufferPool(self.s, max_regions=1, prewarm_size=4096, prewarm_count=2)
        self.assertEqual(pool.stats["idle"], 2)
        a = pool.acquire(4096)
        with self.assertRaisesRegex(RuntimeError, "exhausted"):
            pool.buffer(4096, block=False)
        a.release()
        pool.close()

    def test_bad_arguments(self):
        with self.assertRaisesRegex(RuntimeError, "not initialized"):
            BufferPool(MooncakeDistributedStore())
        with self.assertRaises(RuntimeError):
            BufferPool(None)
        with self.assertRaisesRegex(RuntimeError, "power of two"):
            BufferPool(self.s, alignment=3000)
        with self.assertRaisesRegex(RuntimeError, "positive"):
            BufferPool(self.s, min_size_class=0)
        no_local = MooncakeDistributedStore()
        self.assertEqual(no_local.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "",
                                        self.holder.master_address()), 0)
        try:
            with self.assertRaisesRegex(RuntimeError, "local buffer"):
                BufferPool(no_local)
        finally:
            no_local.close()


class Numa(unittest.TestCase):
    def test_parse_cpulist(self):
        self.assertEqual(_numa.parse_cpulist("0-3,8,10-11\n"), {0, 1, 2, 3, 8, 10, 11})

    def test_bind_to_node0(self):
        want = _numa.node_cpus(0)
        if want is None:
            self.skipTest("no NUMA information in /sys/devices/system/node")
        out = {}

        def run():  # in a thread of its own: the binding is per thread
            bind_to_numa_node(0)
            out["cpus"] = os.sched_getaffinity(0)
            out["policy"] = _numa.get_mempolicy()

        t = threading.Thread(target=run)
        t.start()
        t.join(30)
        self.assertEqual(out["cpus"], want)
        if out["policy"] is not None:
            self.assertEqual(out["policy"], (_numa.MPOL_PREFERRED, {0}))

    def test_invalid_node_is_skipped(self):
        before = os.sched_getaffinity(0)
        with self.assertLogs("kvferry.store", "WARNING"):
            bind_to_numa_node(_numa.max_node() + 1)
        self.assertEqual(os.sched_getaffinity(0), before)
        with self.assertRaises(TypeError):
            bind_to_numa_node("0")


if __name__ == "__main__":
    unittest.main()
