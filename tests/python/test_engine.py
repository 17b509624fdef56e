"""kvferry.engine.TransferEngine: every method of Mooncake's binding
(specs/mooncake.md §5), in one process and against a peer process."""

import hashlib
import time
import unittest

import numpy as np

from _util import TIMEOUT, Peer, pattern

from kvferry.engine import (
    InnerTransferEngine,
    TransferEngine,
    TransferNotify,
    TransferOpcode,
)
from kvferry.errors import TransferError

MiB = 1 << 20


def new_engine():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return e


class LocalPair(unittest.TestCase):
    """Two engines in this process."""

    @classmethod
    def setUpClass(cls):
        cls.a = new_engine()
        cls.b = new_engine()
        cls.n = 4 * MiB
        cls.src = pattern(cls.n, 1)
        cls.dst = np.zeros(cls.n, np.uint8)
        assert cls.a.register_memory(cls.src.ctypes.data, cls.n) == 0
        assert cls.b.register_memory(cls.dst.ctypes.data, cls.n, "cpu:0") == 0
        cls.peer = cls.b.get_segment_name()

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()

    def setUp(self):
        self.dst[:] = 0

    def test_info(self):
        port = self.a.get_rpc_port()
        self.assertGreater(port, 0)
        self.assertEqual(self.a.get_segment_name(), "127.0.0.1:%d" % port)
        self.assertEqual(self.a.get_local_ip_and_port(), "127.0.0.1:%d" % port)
        self.assertIsInstance(self.a.get_engine(), InnerTransferEngine)
        self.assertEqual(self.a.get_engine().handle, self.a.get_engine_ptr())
        self.assertNotEqual(self.a.get_engine_ptr(), 0)
        self.assertEqual(self.a.get_local_topology(), "{}")
        self.assertEqual(self.a.warmup_efa_segment(self.peer), 0)
        self.assertIn("segment", self.a.show_links())

    def test_sync_write_read(self):
        self.assertEqual(self.a.transfer_sync_write(self.peer, self.src.ctypes.data,
                                                    self.dst.ctypes.data, self.n), 0)
        self.assertTrue(np.array_equal(self.src, self.dst))
        back = np.zeros(self.n, np.uint8)
        self.assertEqual(self.a.register_memory(back.ctypes.data, self.n), 0)
        try:
            self.assertEqual(self.a.transfer_sync_read(self.peer, back.ctypes.data,
                                                       self.dst.ctypes.data, self.n), 0)
            self.assertTrue(np.array_equal(back, self.src))
        finally:
            self.assertEqual(self.a.unregister_memory(back.ctypes.data), 0)

    def test_transfer_sync_opcode_and_numpy_ints(self):
        off = np.int64(1000)
        self.assertEqual(self.a.transfer_sync(self.peer, self.src.ctypes.data + off,
                                              self.dst.ctypes.data, np.uint64(4096),
                                              TransferOpcode.Write), 0)
        self.assertTrue(np.array_equal(self.dst[:4096], self.src[1000:5096]))

    def test_batch_sync(self):
        k = 16
        step = self.n // k
        bufs = [self.src.ctypes.data + i * step for i in range(k)]
        peers = [self.dst.ctypes.data + (k - 1 - i) * step for i in range(k)]
        self.assertEqual(self.a.batch_transfer_sync_write(self.peer, bufs, peers, [step] * k), 0)
        for i in range(k):
            self.assertTrue(np.array_equal(self.dst[(k - 1 - i) * step:(k - i) * step],
                                           self.src[i * step:(i + 1) * step]))
        self.assertEqual(self.a.batch_transfer_sync(self.peer, bufs[:2], peers[:2], [step] * 2,
                                                    TransferOpcode.Write), 0)
        # An empty batch completes at once.
        self.assertEqual(self.a.batch_transfer_sync_write(self.peer, [], [], []), 0)

    def test_async_and_status(self):
        half = self.n // 2
        b1 = self.a.batch_transfer_async_write(self.peer, [self.src.ctypes.data],
                                               [self.dst.ctypes.data], [half])
        b2 = self.a.batch_transfer_async(self.peer, [self.src.ctypes.data + half],
                                         [self.dst.ctypes.data + half], [half],
                                         TransferOpcode.Write)
        self.assertNotEqual(b1, 0)
        self.assertNotEqual(b2, 0)
        self.assertEqual(self.a.get_batch_transfer_status([b1, b2]), 0)
        self.assertTrue(np.array_equal(self.src, self.dst))
        b3 = self.a.batch_transfer_async_read(self.peer, [self.src.ctypes.data],
                                              [self.dst.ctypes.data], [16])
        self.assertNotEqual(b3, 0)
        self.assertEqual(self.a.get_batch_transfer_status([b3]), 0)
        # The freed ids are gone: asking again fails cleanly.
        self.assertEqual(self.a.get_batch_transfer_status([b3]), -1)

    def test_submit_and_check(self):
        b = self.a.transfer_submit_write(self.peer, self.src.ctypes.data, self.dst.ctypes.data,
                                         self.n)
        self.assertNotEqual(b, 0)
        deadline = time.monotonic() + TIMEOUT
        st = 0
        while st == 0 and time.monotonic() < deadline:
            st = self.a.transfer_check_status(b)
            if st == 0:
                time.sleep(0.001)
        self.assertEqual(st, 1)
        self.assertTrue(np.array_equal(self.src, self.dst))
        self.assertEqual(self.a.transfer_check_status(b), -1)  # freed
        self.assertEqual(self.a.transfer_check_status(0), -1)

    def test_batch_status_cancel(self):
        b = self.a.batch_transfer_async_write(self.peer, [self.src.ctypes.data],
                                              [self.dst.ctypes.data], [self.n])
        self.assertNotEqual(b, 0)
        st = self.a.batch_status(b)
        self.assertIsNotNone(st)
        self.assertEqual(st[2], 1)
        self.assertEqual(self.a.cancel_batch(b), 0)
        self.assertIsNone(self.a.batch_status(b))

    def test_notify(self):
        self.b.get_notifies()
        self.assertEqual(self.a.transfer_sync(self.peer, self.src.ctypes.data,
                                              self.dst.ctypes.data, 64, TransferOpcode.Write,
                                              TransferNotify("agent-a", "layer 3 done")), 0)
        self.assertEqual(self.a.batch_transfer_sync(self.peer, [self.src.ctypes.data],
                                                    [self.dst.ctypes.data], [64],
                                                    TransferOpcode.Write,
                                                    TransferNotify("agent-a", "batch")), 0)
        self.assertEqual(self.a.send_notify(self.peer, TransferNotify("agent-a", "direct")), 0)
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 3 and time.monotonic() < deadline:
            got += self.b.get_notifies()
            time.sleep(0.01)
        self.assertEqual(sorted((n.name, n.msg) for n in got),
                         [("agent-a", "batch"), ("agent-a", "direct"), ("agent-a", "layer 3 done")])
        self.assertEqual(TransferNotify("x", "y"), TransferNotify(name="x", msg="y"))
        self.assertEqual(TransferNotify().name, "")

    def test_probe(self):
        self.assertEqual(self.a.send_probe(self.peer), 0)
        self.assertNotEqual(self.a.send_probe("127.0.0.1:1"), 0)

    def test_first_buffer_and_segment_buffers(self):
        self.assertEqual(self.a.get_first_buffer_address(self.peer), self.dst.ctypes.data)
        self.assertIn((self.dst.ctypes.data, self.n), self.a.segment_buffers(self.peer))
        self.assertEqual(self.a.get_first_buffer_address("127.0.0.1:1"), 0)

    def test_batch_register(self):
        bufs = [np.zeros(MiB, np.uint8) for _ in range(3)]
        addrs = [b.ctypes.data for b in bufs]
        self.assertEqual(self.a.batch_register_memory(addrs, [MiB] * 3), 0)
        self.assertEqual(self.a.batch_register_memory(addrs[:1], [MiB]),
                         TransferError.ADDRESS_OVERLAPPED)
        self.assertEqual(self.a.transfer_sync_read(self.peer, addrs[1], self.dst.ctypes.data, MiB),
                         0)
        self.assertEqual(self.a.batch_unregister_memory(addrs), 0)
        self.assertEqual(self.a.unregister_memory(addrs[0]), TransferError.ADDRESS_NOT_REGISTERED)
        self.assertEqual(self.a.batch_register_memory([], []), 0)

    def test_managed_buffers(self):
        small = [self.a.allocate_managed_buffer(n) for n in (1, 8192, 8193, 100000, 1 << 22)]
        self.assertTrue(all(small))
        self.assertEqual(len(set(small)), len(small))
        big = self.a.allocate_managed_buffer(300 * MiB)
        self.assertNotEqual(big, 0)
        self.assertEqual(self.a.write_bytes_to_buffer(small[1], b"kvferry!", 8), 0)
        self.assertEqual(self.a.read_bytes_from_buffer(small[1], 8), b"kvferry!")
        # Managed memory is registered: it can be a transfer source.
        self.assertEqual(self.a.transfer_sync_write(self.peer, small[1], self.dst.ctypes.data, 8),
                         0)
        self.assertEqual(self.dst[:8].tobytes(), b"kvferry!")
        for addr, n in zip(small, (1, 8192, 8193, 100000, 1 << 22)):
            self.assertEqual(self.a.free_managed_buffer(addr, n), 0)
        self.assertEqual(self.a.free_managed_buffer(big, 300 * MiB), 0)
        self.assertEqual(self.a.allocate_managed_buffer(0), 0)

    def test_cuda_variants_without_stream(self):
        self.assertIsNone(self.a.transfer_write_on_cuda(self.peer, self.src.ctypes.data,
                                                        self.dst.ctypes.data, 128))
        self.assertTrue(np.array_equal(self.dst[:128], self.src[:128]))
        self.assertIsNone(self.a.batch_transfer_read_on_cuda(self.peer, [self.src.ctypes.data],
                                                             [self.dst.ctypes.data], [128]))

    def test_bad_input(self):
        a, peer, src, dst = self.a, self.peer, self.src.ctypes.data, self.dst.ctypes.data
        for call in (lambda: a.transfer_sync_write(peer, "x", dst, 1),
                     lambda: a.transfer_sync_write(peer, src, dst, 1.5),
                     lambda: a.transfer_sync_write(42, src, dst, 1),
                     lambda: a.batch_transfer_sync_write(peer, src, [dst], [1]),
                     lambda: a.register_memory(None, 10),
                     lambda: a.transfer_sync(peer, src, dst, 1, "write"),
                     lambda: a.transfer_sync(peer, src, dst, 1, TransferOpcode.Write, notify="n"),
                     lambda: a.get_batch_transfer_status(5)):
            with self.assertRaises(TypeError):
                call()
        # Runtime failures are return codes, as in Mooncake.
        self.assertEqual(a.batch_transfer_sync_write(peer, [src], [dst, dst], [1]), -1)
        self.assertEqual(a.batch_transfer_async_write(peer, [src], [dst, dst], [1]), 0)
        self.assertEqual(a.transfer_sync_write(peer, src, dst + self.n - 8, 16), -1)  # past end
        self.assertEqual(a.transfer_sync_write(peer, 4096, dst, 16), -1)  # unregistered source
        self.assertEqual(a.transfer_sync_write("127.0.0.1:1", src, dst, 16), -1)  # no peer
        self.assertEqual(a.transfer_sync_write("", src, dst, 16), -1)
        self.assertEqual(a.register_memory(src, self.n), TransferError.ADDRESS_OVERLAPPED)
        self.assertEqual(a.register_memory(0, 16), TransferError.INVALID_ARGUMENT)
        self.assertEqual(a.unregister_memory(12345), TransferError.ADDRESS_NOT_REGISTERED)
        self.assertEqual(a.get_batch_transfer_status([0]), -1)
        self.assertEqual(a.get_batch_transfer_status([987654321]), -1)
        with self.assertRaises(ValueError):
            a.batch_register_memory([src], [1, 2])
        # The engine still works afterwards.
        self.assertEqual(a.transfer_sync_write(peer, src, dst, 16), 0)


class Lifecycle(unittest.TestCase):
    def test_uninitialized_and_closed(self):
        e = TransferEngine()
        self.assertEqual(e.get_rpc_port(), -1)
        self.assertEqual(e.transfer_sync_write("127.0.0.1:1", 1, 2, 3), -1)
        self.assertEqual(e.batch_transfer_async_write("127.0.0.1:1", [1], [2], [3]), 0)
        self.assertEqual(e.register_memory(4096, 10), TransferError.INVALID_ARGUMENT)
        self.assertEqual(e.get_notifies(), [])
        self.assertEqual(e.send_probe("127.0.0.1:1"), -1)
        self.assertEqual(e.get_engine_ptr(), 0)
        self.assertEqual(e.allocate_managed_buffer(10), 0)
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0)
        self.assertGreater(e.get_rpc_port(), 0)
        m = e.allocate_managed_buffer(1 << 16)
        self.assertNotEqual(m, 0)
        e.close()
        e.close()
        self.assertEqual(e.get_rpc_port(), -1)
        self.assertEqual(e.transfer_check_status(1), -1)
        self.assertEqual(e.get_batch_transfer_status([1]), -1)

    def test_initialize_variants(self):
        e = TransferEngine()
        self.assertEqual(e.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "p2p"), 0)
        first = e.get_segment_name()
        # A second initialize replaces the engine.
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0"), 0)
        self.assertNotEqual(e.get_segment_name(), first)
        e.close()
        f = TransferEngine()
        # An unreachable etcd fails cleanly with -1.
        self.assertEqual(f.initialize("127.0.0.1", "127.0.0.1:1", "tcp", ""), -1)
        self.assertEqual(f.initialize("127.0.0.1", "P2PHANDSHAKE", "xgmi", ""), -1)
        with self.assertRaises(TypeError):
            f.initialize(None, "P2PHANDSHAKE", "tcp", "")


class ProtocolFallback(unittest.TestCase):
    """initialize(protocol="rdma") on a host without RDMA works over TCP and
    says so once per process, at the default log level."""

    def test_rdma_falls_back_once(self):
        import os
        import subprocess
        import sys

        from _util import REPO

        code = ("from kvferry.engine import TransferEngine\n"
                "for _ in range(2):\n"
                "    e = TransferEngine()\n"
                "    assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'rdma', '') == 0\n"
                "    e.close()\n")
        env = {k: v for k, v in os.environ.items()
               if k not in ("KVFERRY_LOG_LEVEL", "MC_LOG_LEVEL", "KVFERRY_LOG_FILE")}
        env["KVFERRY_IBVERBS_LIB"] = "/nonexistent/libibverbs.so.1"
        env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l for l in r.stderr.splitlines() if "requested" in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn('protocol \\"rdma\\" requested; transfers to other hosts use tcp', lines[0])
        self.assertIn("why=", lines[0])


class CrossProcess(unittest.TestCase):
    """Transfers, notifications and probes against an engine in another process."""

    def test_peer_process(self):
        n = 8 * MiB
        peer = Peer("peer_engine.py", str(n), "7")
        try:
            seg, raddr = peer.info["segment"], peer.info["addr"]
            e = new_engine()
            try:
                local = np.zeros(n, np.uint8)
                self.assertEqual(e.register_memory(local.ctypes.data, n), 0)
                self.assertEqual(e.send_probe(seg), 0)
                # Read the peer's pattern, bit for bit.
                self.assertEqual(e.transfer_sync_read(seg, local.ctypes.data, raddr, n), 0)
                self.assertTrue(np.array_equal(local, pattern(n, 7)))
                # Write a new pattern in 8 pieces with a notification.
                new = pattern(n, 8)
                local[:] = new
                k = 8
                step = n // k
                self.assertEqual(e.batch_transfer_sync(
                    seg, [local.ctypes.data + i * step for i in range(k)],
                    [raddr + i * step for i in range(k)], [step] * k, TransferOpcode.Write,
                    TransferNotify("py", "written")), 0)
                self.assertEqual(peer.ask("sha")["sha"], hashlib.sha256(new.tobytes()).hexdigest())
                deadline = time.monotonic() + TIMEOUT
                got = []
                while not got and time.monotonic() < deadline:
                    got = peer.ask("notifies")["notifies"]
                    time.sleep(0.01)
                self.assertEqual(got, [["py", "written"]])
                self.assertEqual(e.get_first_buffer_address(seg), raddr)
                # After the peer exits, transfers fail with -1, not a hang.
                peer.close()
                t0 = time.monotonic()
                self.assertEqual(e.transfer_sync_read(seg, local.ctypes.data, raddr, 4096), -1)
                self.assertLess(time.monotonic() - t0, TIMEOUT)
                self.assertNotEqual(e.send_probe(seg), 0)
            finally:
                e.close()
        finally:
            peer.close()


if __name__ == "__main__":
    unittest.main()
