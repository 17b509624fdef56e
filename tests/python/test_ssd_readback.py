"""The disk tier under a real read pattern (issue 32), through the Python
binding with an embedded master at its defaults: a client with a 4 MiB
segment and setup(..., enable_ssd_offload=True, ssd_offload_path=DIR) puts
several times its memory in objects, as fast as it can, and reads each
back: every put that answered 0 reads back intact, in order, at random,
with get, get_into and batch_get_into, after the client restarts on the
same directory, and by a second client while the holder's memory is full of
objects it has just read (leased): that client reads the files through the
holder's serve buffer, as Mooncake's offload RPC does."""

import ctypes
import random
import shutil
import tempfile
import threading
import unittest

from _util import pattern

from kvferry.store import MooncakeDistributedStore

KiB = 1 << 10
MiB = 1 << 20
SEG = 4 * MiB
OBJ = 128 * KiB  # 32 objects fill the segment


def value(i):
    return pattern(OBJ - (i % 7) * 512, i % 251).tobytes()


class SSDReadBack(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvferry-pyssd-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.s = self.open()

    def open(self):
        s = MooncakeDistributedStore()
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", SEG, 4 * MiB, "tcp", "", "embedded",
                     enable_ssd_offload=True, ssd_offload_path=self.dir)
        self.assertEqual(rc, 0)
        self.addCleanup(s.close)
        return s

    def put_all(self, first, n):
        for i in range(first, first + n):
            self.assertEqual(self.s.put("o%d" % i, value(i)), 0, "put o%d" % i)

    def check(self, order):
        buf = ctypes.create_string_buffer(OBJ)
        for j, i in enumerate(order):
            key, want = "o%d" % i, value(i)
            if j % 2 == 0:
                got = self.s.get(key)
                self.assertEqual(len(got), len(want), key)
                self.assertTrue(got == want, key)
            else:
                n = self.s.get_into(key, ctypes.addressof(buf), OBJ)
                self.assertEqual(n, len(want), key)
                self.assertTrue(buf.raw[:n] == want, key)

    def test_4x_sequential_and_random(self):
        n = 4 * SEG // OBJ
        self.put_all(0, n)
        self.assertEqual(self.s.is_exist("o0"), 1)
        self.check(range(n))
        order = list(range(n))
        random.Random(7).shuffle(order)
        self.check(order)

    def test_16x_batch_get_into(self):
        n = 16 * SEG // OBJ
        self.put_all(0, n)
        bufs = [ctypes.create_string_buffer(OBJ) for _ in range(16)]
        for first in range(0, n, 16):
            keys = ["o%d" % i for i in range(first, first + 16)]
            got = self.s.batch_get_into(keys, [ctypes.addressof(b) for b in bufs], [OBJ] * 16)
            for j, i in enumerate(range(first, first + 16)):
                want = value(i)
                self.assertEqual(got[j], len(want), keys[j])
                self.assertTrue(bufs[j].raw[:got[j]] == want, keys[j])

    def test_restart_in_the_middle(self):
        n = 4 * SEG // OBJ
        self.put_all(0, n // 2)
        self.s.close()  # writes what is not on disk yet, then goes
        self.s = self.open()  # a new embedded master: the files announce the objects
        self.put_all(n // 2, n // 2)
        order = list(range(n))
        random.Random(8).shuffle(order)
        self.check(order)

    def test_second_client_reads_holder_disk(self):
        n = 4 * SEG // OBJ
        self.put_all(0, n)
        other = MooncakeDistributedStore()
        self.assertEqual(other.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, "tcp", "",
                                     self.s.master_address()), 0)
        self.addCleanup(other.close)
        # Meanwhile the holder reads everything back, again and again: what
        # is in its memory stays leased, so nothing there can make room
        # for a promotion.
        done, holder_bad = threading.Event(), []

        def lease():
            while not done.is_set():
                for i in range(n):
                    if self.s.get("o%d" % i) != value(i):
                        holder_bad.append(i)

        t = threading.Thread(target=lease)
        t.start()
        before = other.get_offload_rpc_read_count()
        buf = ctypes.create_string_buffer(OBJ)
        try:
            for i in range(n):
                key, want = "o%d" % i, value(i)
                if i % 2 == 0:
                    self.assertTrue(other.get(key) == want, key)
                else:
                    got = other.get_into(key, ctypes.addressof(buf), OBJ)
                    self.assertEqual(got, len(want), key)
                    self.assertTrue(buf.raw[:got] == want, key)
        finally:
            done.set()
            t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(holder_bad, [])
        served = other.get_offload_rpc_read_count() - before
        self.assertGreaterEqual(served, n // 2, "reads served from the holder's disk")

if __name__ == "__main__":
    unittest.main()
