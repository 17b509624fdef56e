"""The store's disk tier (setup(..., enable_ssd_offload=True,
ssd_offload_path=DIR)), LOCAL_DISK replica descriptors, and Mooncake's copy
and move tasks (create_copy_task, create_move_task, query_task), through
the Python binding with an embedded master."""

import os
import shutil
import tempfile
import time
import unittest

from _util import TIMEOUT, pattern

from kvferry.errors import ErrorCode
from kvferry.store import MooncakeDistributedStore, ReplicateConfig, TaskStatus, TaskType

KiB = 1 << 10
MiB = 1 << 20


def wait(cond, what):
    deadline = time.monotonic() + TIMEOUT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


class Tiers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvferry-pytier-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.s = MooncakeDistributedStore()
        rc = self.s.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, 4 * MiB, "tcp", "", "embedded",
                          enable_ssd_offload=True, ssd_offload_path=self.dir)
        self.assertEqual(rc, 0)
        self.addCleanup(self.s.close)

    def test_offload_and_read_back(self):
        # 6 MiB of objects through a 4 MiB segment: above the watermark
        # everything goes to disk before eviction needs the room.
        keys = ["t%d" % i for i in range(24)]
        for i, k in enumerate(keys):
            self.assertEqual(self.s.put(k, pattern(256 * KiB - i, i).tobytes()), 0)
            if (i + 1) * 256 * KiB >= 0.75 * 4 * MiB:
                # Wait for the files (not through the master: every query
                # grants a 10 s lease, and leased objects are not evicted),
                # then for the master to hear of them.
                wait(lambda: len([f for f in os.listdir(self.dir) if f.endswith(".kvd")]) >= i + 1,
                     "offloads")
                time.sleep(0.2)
        reps = self.s.get_replica_desc("t0")
        disk = [r for r in reps if r.is_local_disk_replica()]
        self.assertEqual(len(disk), 1, reps)
        d = disk[0].get_disk_descriptor()
        self.assertEqual(d.file_path, self.dir)
        self.assertEqual(d.object_size, 256 * KiB)
        self.assertEqual(d.transport_endpoint, self.s.get_hostname())
        with self.assertRaises(RuntimeError):
            disk[0].get_memory_descriptor()
        # Every other object: each read leases what it read (10 s), and
        # all of them would not fit in memory at once.
        for i, k in list(enumerate(keys))[::2]:
            self.assertEqual(self.s.get(k), pattern(256 * KiB - i, i).tobytes(), k)

    def test_setup_needs_a_path(self):
        t = MooncakeDistributedStore()
        rc = t.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", "embedded",
                     enable_ssd_offload=True)
        self.assertEqual(rc, ErrorCode.INVALID_PARAMS)

    def test_copy_and_move_tasks(self):
        other = MooncakeDistributedStore()
        self.assertEqual(other.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, MiB, "tcp", "",
                                     self.s.master_address()), 0)
        self.addCleanup(other.close)
        me, them = self.s.get_hostname(), other.get_hostname()
        cfg = ReplicateConfig()
        cfg.preferred_segments = [me]
        data = pattern(100 * KiB, 9).tobytes()
        self.assertEqual(self.s.put("c", data, cfg), 0)

        def done(tid):
            resp = [None]

            def ok():
                resp[0], err = self.s.query_task(tid)
                self.assertEqual(err, 0)
                return resp[0].status in (TaskStatus.SUCCESS, TaskStatus.FAILED)
            wait(ok, "task " + tid)
            return resp[0]

        tid, err = self.s.create_copy_task("c", [them])
        self.assertEqual(err, 0)
        r = done(tid)
        self.assertEqual(r.status, TaskStatus.SUCCESS, r.message)
        self.assertEqual(r.type, TaskType.REPLICA_COPY)
        self.assertEqual(r.id, tid)
        self.assertGreater(r.last_updated_at_ms_epoch, 0)
        where = {x.get_memory_descriptor().buffer_descriptor.transport_endpoint
                 for x in self.s.get_replica_desc("c")}
        self.assertEqual(where, {me, them})
        self.assertEqual(other.get("c"), data)

        cfg.preferred_segments = [them]
        self.assertEqual(self.s.put("m", data, cfg), 0)
        tid, err = self.s.create_move_task("m", them, me)
        self.assertEqual(err, 0)
        r = done(tid)
        self.assertEqual(r.status, TaskStatus.SUCCESS, r.message)
        self.assertEqual(r.type, TaskType.REPLICA_MOVE)
        where = {x.get_memory_descriptor().buffer_descriptor.transport_endpoint
                 for x in self.s.get_replica_desc("m")}
        self.assertEqual(where, {me})
        self.assertEqual(self.s.get("m"), data)
        self.assertEqual(self.s.query_task("no-such-task"), (None, ErrorCode.TASK_NOT_FOUND))


if __name__ == "__main__":
    unittest.main()


class Versioned(unittest.TestCase):
    """Versioned publish (beyond Mooncake): put_versioned, get_versioned,
    pub_tensor_versioned, get_tensor_versioned."""

    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStore()
        assert cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "", "embedded") == 0

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def test_versions_and_conflicts(self):
        s = self.s
        v1, rc = s.put_versioned("v", b"one")
        self.assertEqual(rc, 0)
        self.assertGreater(v1, 0)
        self.assertEqual(s.put_versioned("v", b"two"), (0, ErrorCode.INVALID_VERSION))
        v2, rc = s.put_versioned("v", b"two", v1)
        self.assertEqual(rc, 0)
        self.assertGreater(v2, v1)
        self.assertEqual(s.get_versioned("v"), (b"two", v2))
        self.assertEqual(s.put_versioned("v", b"x", v1), (0, ErrorCode.INVALID_VERSION))
        v3, rc = s.put_versioned("v", b"three", s.VERSION_ANY)
        self.assertEqual(rc, 0)
        # A reader waits for a version a publisher brings.
        import threading
        got = []
        t = threading.Thread(target=lambda: got.append(s.get_versioned("v", v3 + 1, 10000)))
        t.start()
        time.sleep(0.05)
        v4, rc = s.put_versioned("v", b"four", v3)
        t.join(TIMEOUT)
        self.assertEqual(got, [(b"four", v4)])
        self.assertEqual(s.get_versioned("v", v4 + 1, 50), (b"", 0))
        # Mooncake's own calls are unchanged.
        self.assertEqual(s.put("v", b"plain"), 0)
        self.assertEqual(s.get("v"), b"four")

    def test_tensors(self):
        import numpy as np
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        v, rc = self.s.pub_tensor_versioned("tv", a)
        self.assertEqual(rc, 0)
        t, got_v = self.s.get_tensor_versioned("tv", v)
        self.assertEqual(got_v, v)
        self.assertTrue((np.asarray(t) == a).all())
