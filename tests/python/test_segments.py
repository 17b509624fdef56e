"""Segments lent after setup (issue 42): mount_segment, allocate_and_mount_segment,
unmount_segment, unmount_and_free_segment and unmount_local_disk_segment in
cycles with puts between, objects of an unmounted segment gone (Mooncake's
master drops them) or moved first with a grace period; the huge-page
allocator's addresses; get_offload_rpc_read_count; NVMe-oF refused."""

import ctypes
import os
import tempfile
import unittest

import _util  # noqa: F401  (puts python/ on sys.path)
from _util import pattern

from kvferry.store import (MooncakeDistributedNoFRegister, MooncakeDistributedStore, get_alloc_func_addr,
                           get_free_func_addr)


def store(gss=0, **kw):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", gss, 4 << 20, "tcp", "", kw.pop("master", "embedded"), **kw) == 0
    return s


class Segments(unittest.TestCase):
    def test_mount_cycles(self):
        s = store()
        tmp = tempfile.TemporaryDirectory()
        try:
            path = os.path.join(tmp.name, "seg")
            with open(path, "wb") as f:
                f.truncate(8 << 20)
            v0 = pattern(1000, 1).tobytes()
            self.assertLess(s.put("none", v0), 0)  # nothing lent yet
            for cycle in range(3):
                a = s.allocate_and_mount_segment(1 << 20)
                self.assertEqual(sorted(a), ["allocated_size", "ret", "segment_ids"])
                self.assertEqual((a["ret"], a["allocated_size"], len(a["segment_ids"])), (0, 16 << 20, 1))
                va = pattern(300000, cycle).tobytes()
                self.assertEqual(s.put("a", va), 0)
                self.assertEqual(s.get("a"), va)

                m = s.mount_segment(path, 4 << 20, offset=4096, protocol="tcp", location="")
                self.assertEqual(sorted(m), ["ret", "segment_ids"])
                self.assertEqual((m["ret"], len(m["segment_ids"])), (0, 1))

                # Each family unmounts only its own segments.
                self.assertEqual(s.unmount_segment(a["segment_ids"]), -1)
                self.assertEqual(s.unmount_and_free_segment(m["segment_ids"]), -1)
                self.assertEqual(s.unmount_and_free_segment(a["segment_ids"]), 0)
                self.assertEqual(s.unmount_and_free_segment(a["segment_ids"]), -1)  # gone already
                # Its objects went with it (Mooncake: replicas dropped).
                self.assertEqual(s.get("a"), b"")
                self.assertEqual(s.is_exist("a"), 0)

                vb = pattern(200000, cycle + 10).tobytes()
                self.assertEqual(s.upsert("b", vb), 0)
                with open(path, "rb") as f:
                    self.assertIn(vb, f.read()[4096:4096 + (4 << 20)], "the object is in the file's mapped range")
                self.assertEqual(s.unmount_segment(m["segment_ids"], grace_period_seconds=0), 0)
                self.assertEqual(s.get("b"), b"")
                self.assertLess(s.put("c", v0), 0)
            # Bad calls: Mooncake's -1 (the cause is in last_error()).
            self.assertEqual(s.mount_segment(path, 4096, offset=100)["ret"], -1)
            self.assertEqual(s.mount_segment(path, 16 << 20)["ret"], -1)
            self.assertEqual(s.mount_segment(path + ".missing", 4096)["ret"], -1)
            self.assertIn("missing", s.last_error())
            self.assertEqual(s.allocate_and_mount_segment(0)["ret"], -1)
            self.assertEqual(s.unmount_segment(["not-a-uuid"]), -1)
            self.assertEqual(s.unmount_segment([]), 0)
            with self.assertRaises(TypeError):
                s.unmount_segment("id")
        finally:
            s.close()
            tmp.cleanup()

    def test_grace_moves_objects(self):
        s = store()
        other = store(32 << 20, master=s.master_address())
        try:
            a = s.allocate_and_mount_segment(1 << 20)
            self.assertEqual(a["ret"], 0)
            v = pattern(100000, 3).tobytes()
            self.assertEqual(s.put("k", v), 0)
            self.assertEqual(s.unmount_and_free_segment(a["segment_ids"], grace_period_seconds=10), 0)
            self.assertEqual(s.get("k"), v)
            rep = s.get_replica_desc("k")[0].get_memory_descriptor().buffer_descriptor
            self.assertEqual(rep.transport_endpoint, other.get_hostname())
        finally:
            other.close()
            s.close()

    def test_close_unmounts(self):
        watcher = store()  # holds the master, lends nothing
        s = store(16 << 20, master=watcher.master_address())
        try:
            self.assertEqual(s.allocate_and_mount_segment(1 << 20)["ret"], 0)
            self.assertEqual(watcher.put("x", b"x" * 100), 0)
        finally:
            s.close()
        try:
            self.assertEqual(watcher.put("y", b"y"), -200)  # NO_AVAILABLE_HANDLE: both segments unmounted
        finally:
            watcher.close()

    def test_local_disk_segment(self):
        with tempfile.TemporaryDirectory() as d:
            s = store(16 << 20, enable_ssd_offload=True, ssd_offload_path=d)
            try:
                self.assertEqual(s.unmount_local_disk_segment(0), 0)
                self.assertEqual(s.unmount_local_disk_segment(grace_period_seconds=0), 0)  # gone: a no-op
                self.assertGreaterEqual(s.get_offload_rpc_read_count(), 0)
            finally:
                s.close()
        s = store(16 << 20)
        try:
            self.assertEqual(s.unmount_local_disk_segment(), 0)  # no tier: nothing to do
            self.assertEqual(s.get_offload_rpc_read_count(), 0)
        finally:
            s.close()

    def test_not_set_up(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.mount_segment("/dev/null", 4096), {"ret": -1, "segment_ids": []})
        self.assertEqual(s.allocate_and_mount_segment(1 << 20), {"ret": -1, "segment_ids": [], "allocated_size": 0})
        self.assertEqual(s.unmount_segment(["x"]), -1)
        self.assertEqual(s.unmount_and_free_segment(["x"]), -1)
        self.assertEqual(s.unmount_local_disk_segment(), -1)
        self.assertEqual(s.get_offload_rpc_read_count(), 0)


class Memory(unittest.TestCase):
    def test_hugepage_allocator(self):
        alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(get_alloc_func_addr())
        free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(get_free_func_addr())
        for n in (1, 4096, 3 << 20):
            p = alloc(n)
            self.assertTrue(p)
            self.assertEqual(p % 4096, 0)
            data = pattern(n, 9).tobytes()
            ctypes.memmove(p, data, n)
            self.assertEqual(ctypes.string_at(p, n), data)
            free(p)
        self.assertIsNone(alloc(0))
        free(None)
        from mooncake.store import get_alloc_func_addr as mc

        self.assertEqual(mc(), get_alloc_func_addr())

    def test_nof_not_supported(self):
        r = MooncakeDistributedNoFRegister()
        self.assertEqual(r.real_register("nqn.x", 1, "10.0.0.1", 4420, 0, 1024, "127.0.0.1:50051"), -1012)
        self.assertEqual(r.real_unregister_by_endpoint("nqn.x", 1, "10.0.0.1", 4420, "127.0.0.1:50051"), -1012)


if __name__ == "__main__":
    unittest.main()
