"""GPU memory through the Python API, on the fake CUDA driver
(tests/fakecuda; run.sh builds it and names it in KVFERRY_TEST_FAKECUDA):
CUDA tensors registered by pointer, moved within a process, to another
process (CUDA IPC, and over TCP), stream-ordered transfers, the pluggable
allocator, and a host without a driver. With KVFERRY_HW=1 (make hw-check)
on the machine's CUDA driver, where TorchCUDA also moves real torch CUDA
tensors; "device 1" is then device 0 on a machine with one GPU."""

import hashlib
import os
import subprocess
import sys
import time
import unittest

import numpy as np

import _fakecuda
from _fakecuda import FakeCudaTensor, second
from _util import HERE, REPO, Peer, pattern

from kvferry import allocator
from kvferry.engine import TransferEngine

_saved = {}


def setUpModule():
    if not _fakecuda.available():
        raise unittest.SkipTest("no fake CUDA driver (KVFERRY_TEST_FAKECUDA)")
    for k in ("KVFERRY_CUDA_LIB", "KVFERRY_TRANSPORT"):
        _saved[k] = os.environ.get(k)
    os.environ["KVFERRY_CUDA_LIB"] = _fakecuda.PATH
    os.environ.pop("KVFERRY_TRANSPORT", None)


def tearDownModule():
    for k, v in _saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def engine():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return e


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


class InProcess(unittest.TestCase):
    def setUp(self):
        self.d = _fakecuda.Driver()

    def test_cuda_tensors_between_engines(self):
        n = 3 << 20
        a, b = engine(), engine()
        try:
            src = FakeCudaTensor(self.d.alloc(n, 0), n, 0)
            dev1 = second()
            dst = FakeCudaTensor(allocator.malloc(n, dev1), n, dev1)
            host = pattern(n, 7)
            self.d.h2d(src.data_ptr(), host.tobytes())
            self.assertEqual(a.register_memory(src.data_ptr(), src.nbytes), 0)
            self.assertEqual(b.batch_register_memory([dst.data_ptr()], [dst.nbytes], "cuda:%d" % dev1), 0)
            seg = b.get_segment_name()
            self.assertEqual(a.transfer_sync_write(seg, src.data_ptr(), dst.data_ptr(), n), 0)
            self.assertEqual(self.d.bytes_at(dst.data_ptr(), n), host.tobytes())
            # Back into host memory registered by numpy.
            back = np.zeros(n, np.uint8)
            self.assertEqual(a.register_memory(back.ctypes.data, n), 0)
            self.assertEqual(a.transfer_sync_read(seg, back.ctypes.data, dst.data_ptr(), n), 0)
            self.assertTrue(np.array_equal(back, host))
            # A device pointer registered as cpu memory is refused.
            other = self.d.alloc(4096, 0)
            self.assertLess(a.register_memory(other, 4096, "cpu:0"), 0)
            self.assertIn("device", a.last_error())
        finally:
            a.close()
            b.close()

    def test_transfer_on_cuda_is_stream_ordered(self):
        n = 1 << 20
        a, b = engine(), engine()
        try:
            d = self.d
            src = d.alloc(n, 0)
            dst = d.alloc(n, 0)
            staged = np.frombuffer(pattern(n, 11).tobytes(), np.uint8).copy()
            out = np.zeros(n, np.uint8)
            self.assertEqual(a.register_memory(src, n), 0)
            self.assertEqual(b.register_memory(dst, n), 0)
            seg = b.get_segment_name()
            s = d.stream(0)
            # Work before the transfer: a copy that fills src (slowed down
            # on the fake, so that a blocking call would show).
            if d.fake:
                d.copy_delay(200000)
            d.copy_async(src, staged.ctypes.data, n, s)
            t0 = time.monotonic()
            a.transfer_write_on_cuda(seg, src, dst, n, s)
            if d.fake:
                self.assertLess(time.monotonic() - t0, 0.15, "transfer_write_on_cuda must not block")
                d.copy_delay(0)
            # Work after it: copies dst out; it must see the transferred bytes.
            d.copy_async(out.ctypes.data, dst, n, s)
            d.sync(s)
            self.assertTrue(np.array_equal(out, staged), "stream order was not kept")
            # The read variant, with the legacy default stream (0).
            clear = np.zeros(n, np.uint8)
            d.h2d(src, clear.tobytes())
            a.transfer_read_on_cuda(seg, src, dst, n, 0)
            d.copy_async(out.ctypes.data, src, n, 0)
            d.sync(0)
            self.assertTrue(np.array_equal(out, staged))
        finally:
            a.close()
            b.close()


class Allocator(unittest.TestCase):
    """kvferry.allocator (kvferry_cuda_malloc / free / probe, behind
    PyTorch's pluggable allocator) on the process's GPU runtime. test_hip.py
    runs the same tests on the fake HIP runtime (runtime: its driver)."""

    runtime = staticmethod(_fakecuda.Driver)

    def setUp(self):
        self.d = self.runtime()

    def test_allocator(self):
        self.assertEqual(allocator.probe(0), allocator.MemoryBackend.USE_CUMEMCREATE)
        self.assertEqual(allocator.probe(7), allocator.MemoryBackend.UNSUPPORTED)
        dev1 = second()
        before = self.d.count(6) if self.d.fake else 0  # VMM mappings
        p = allocator.malloc(3 << 20, dev1)
        self.assertTrue(p)
        if self.d.fake:
            self.assertEqual(self.d.count(6), before + 1)
        self.d.h2d(p, b"abc", dev1)
        self.assertEqual(self.d.bytes_at(p, 3), b"abc")
        allocator.free(p, dev1)
        if self.d.fake:
            self.assertEqual(self.d.count(6), before)
        with self.assertRaises(MemoryError):
            allocator.malloc(1 << 20, 9)

        # get_allocator hands torch the library and its two functions; a
        # stand-in plays torch.cuda.memory.CUDAPluggableAllocator where the
        # installed torch has none.
        import types

        made = []

        class Pluggable:
            def __init__(self, path, alloc_fn, free_fn):
                made.append((path, alloc_fn, free_fn))

        torch = types.ModuleType("torch")
        torch.cuda = types.ModuleType("torch.cuda")
        torch.cuda.memory = types.ModuleType("torch.cuda.memory")
        torch.cuda.memory.CUDAPluggableAllocator = Pluggable
        saved = {k: sys.modules.get(k) for k in ("torch", "torch.cuda", "torch.cuda.memory")}
        sys.modules.update({"torch": torch, "torch.cuda": torch.cuda, "torch.cuda.memory": torch.cuda.memory})
        try:
            from mooncake.allocator import NVLinkAllocator

            # A fresh cache: an earlier run of this test (on another GPU
            # runtime, test_hip.py) made its allocator and probed.
            NVLinkAllocator._instances.pop("cuda:0", None)
            NVLinkAllocator._backend = None
            al = NVLinkAllocator.get_allocator("cuda:0")
            self.assertIs(al, NVLinkAllocator.get_allocator("cuda:0"))
            self.assertEqual(NVLinkAllocator.detect_mem_backend(), 1)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        path, fa, ff = made[0]
        import ctypes

        lib = ctypes.CDLL(path)
        for name in (fa, ff, "mc_nvlink_malloc", "mc_nvlink_free"):
            self.assertTrue(hasattr(lib, name), name)


class TwoProcesses(unittest.TestCase):
    def run_peer(self, transport):
        n = 2 << 20
        saved = os.environ.get("KVFERRY_TRANSPORT")
        if transport:
            os.environ["KVFERRY_TRANSPORT"] = transport
        d = _fakecuda.Driver()
        peer = Peer("peer_gpu.py", str(n))
        e = engine()
        try:
            info = peer.info
            src = d.alloc(n, 0)
            want = pattern(n, 21)
            d.h2d(src, want.tobytes())
            self.assertEqual(e.register_memory(src, n), 0)
            host = np.frombuffer(pattern(n, 22).tobytes(), np.uint8).copy()
            self.assertEqual(e.register_memory(host.ctypes.data, n), 0)
            seg = info["segment"]
            for remote in (info["legacy"], info["vmm"]):
                self.assertEqual(e.transfer_sync_write(seg, src, remote, n), 0)
                self.assertEqual(peer.ask("sha", addr=remote, n=n)["sha"], sha(want))
                self.assertEqual(e.batch_transfer_sync_write(seg, [host.ctypes.data], [remote], [n]), 0)
                self.assertEqual(peer.ask("sha", addr=remote, n=n)["sha"], sha(host))
                back = d.alloc(n, 0)
                self.assertEqual(e.register_memory(back, n), 0)
                self.assertEqual(e.transfer_sync_read(seg, back, remote, n), 0)
                self.assertEqual(d.bytes_at(back, n), host.tobytes())
        finally:
            e.close()
            peer.close()
            if saved is None:
                os.environ.pop("KVFERRY_TRANSPORT", None)
            else:
                os.environ["KVFERRY_TRANSPORT"] = saved

    def test_cuda_ipc(self):
        self.run_peer(None)

    def test_tcp(self):
        self.run_peer("tcp")


class StoreTensors(unittest.TestCase):
    """Store tensor calls with CUDA tensors: the data never goes through
    host memory in Python (the fake faults on any CPU access to device
    memory). test_hip.py runs the same tests on the fake HIP runtime (a
    ROCm torch's tensors are torch.cuda ones; runtime: its driver)."""

    runtime = staticmethod(_fakecuda.Driver)

    @classmethod
    def setUpClass(cls):
        from kvferry.store import MooncakeDistributedStore

        cls.s = MooncakeDistributedStore()
        rc = cls.s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "embedded")
        assert rc == 0, rc
        cls.d = cls.runtime()

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def test_put_and_get_cuda_tensors(self):
        n = 3 << 20
        want = pattern(n, 31)
        src = FakeCudaTensor(self.d.alloc(n, 0), n, 0)
        self.d.h2d(src.data_ptr(), want.tobytes())
        self.assertEqual(self.s.put_tensor("cuda/a", src), 0)
        self.assertEqual(self.s.batch_pub_tensor(["cuda/b", "host/c"], [src, want]), [0, 0])
        # get_tensor: a CPU tensor (or numpy array), as Mooncake's.
        got = self.s.get_tensor("cuda/a")
        self.assertEqual(bytes(np.asarray(got).reshape(-1).view(np.uint8)), want.tobytes())
        # Into a pre-allocated CUDA tensor (on another device).
        dev1 = second()
        dst = FakeCudaTensor(allocator.malloc(n, dev1), n, dev1)
        self.assertEqual(self.s.get_tensor_into_cuda("cuda/b", dst), n)
        self.assertEqual(self.d.bytes_at(dst.data_ptr(), n), want.tobytes())
        self.assertEqual(self.s.batch_get_tensor_into_cuda(["host/c", "cuda/a"], [dst, dst]), [n, n])
        # A mismatched destination is refused.
        small = FakeCudaTensor(self.d.alloc(4096, 0), 4096, 0)
        self.assertLess(self.s.get_tensor_into_cuda("cuda/a", small), 0)

    def test_ranges_and_sessions_in_device_memory(self):
        # get_into_ranges and the session calls with GPU buffers: the
        # ranges are copied through the CUDA driver (issue 42).
        n = 1 << 20
        want = pattern(n, 33)
        self.assertEqual(self.s.put("gpu/r", want.tobytes()), 0)
        buf = self.d.alloc(n, 0)
        self.assertEqual(self.s.register_buffer(buf, n), 0)
        got = self.s.get_into_ranges([buf], [["gpu/r"]], [[[0, 4096]]], [[[1000, 500000]]],
                                     [[[4096, 70000]]])
        self.assertEqual(got, [[[4096, 70000]]])
        self.assertEqual(self.d.bytes_at(buf, 4096), want[1000:5096].tobytes())
        self.assertEqual(self.d.bytes_at(buf + 4096, 70000), want[500000:570000].tobytes())
        self.assertEqual(self.s.batch_get_session_start(["gpu/r"]), [0])
        self.assertEqual(self.s.batch_get_into_multi_buffer_ranges(
            ["gpu/r"], [[buf + 100000]], [[3000]], [[n - 3000]]), [3000])
        self.assertEqual(self.d.bytes_at(buf + 100000, 3000), want[n - 3000:].tobytes())
        self.assertEqual(self.s.batch_get_session_end(["gpu/r"]), 0)
        # A put session written from device memory, in two ranges.
        self.assertEqual(self.s.batch_put_session_start(["gpu/w"], [8192]), [0])
        self.assertEqual(self.s.batch_put_from_multi_buffer_ranges(
            ["gpu/w"], [[buf + 4096, buf]], [[4096, 4096]], [[0, 4096]]), [8192])
        self.assertEqual(self.s.batch_put_session_end(["gpu/w"]), [0])
        dev = self.d.bytes_at(buf, 8192)
        self.assertEqual(self.s.get("gpu/w"), dev[4096:] + dev[:4096])
        self.assertEqual(self.s.unregister_buffer(buf), 0)
        self.d.free(buf)

    def test_scratch_pool(self):
        # CUDA tensor puts and gets reuse registered GPU scratch buffers:
        # one made for many calls of a size class, kept up to the bound,
        # all freed at close.
        from kvferry.store import MooncakeDistributedStore

        s = MooncakeDistributedStore()
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "embedded"), 0)
        n = 1 << 20
        want = pattern(n, 7)
        src = FakeCudaTensor(self.d.alloc(n, 0), n, 0)
        self.d.h2d(src.data_ptr(), want.tobytes())
        dst = FakeCudaTensor(allocator.malloc(n, 0), n, 0)
        for i in range(5):
            self.assertEqual(s.put_tensor("pool/%d" % i, src), 0)
            self.assertEqual(s.get_tensor_into_cuda("pool/%d" % i, dst), n)
            self.assertEqual(self.d.bytes_at(dst.data_ptr(), n), want.tobytes())
        pool = s._scratch
        self.assertEqual((pool.made, pool.freed), (1, 0))  # puts and gets share it
        self.assertEqual(pool.idle(), (1, 2 << 20))
        # Past the bound a buffer is freed when given back.
        pool.max_bytes = 2 << 20
        big = FakeCudaTensor(self.d.alloc(3 << 20, 0), 3 << 20, 0)
        self.assertEqual(s.put_tensor("pool/big", big), 0)
        self.assertEqual((pool.made, pool.freed), (2, 1))
        self.assertEqual(pool.idle(), (1, 2 << 20))
        s.close()
        self.assertEqual((pool.made, pool.freed), (2, 2))
        self.assertEqual(pool.idle(), (0, 0))
        allocator.free(dst.data_ptr(), 0)

    def test_get_tensor_on_device(self):
        # get_tensor(device=...) makes the tensor with torch.empty on the
        # device; a stand-in torch makes fake CUDA tensors.
        import types

        from kvferry import tensor as T

        d = self.d
        fake = types.SimpleNamespace(uint8="torch.uint8", Tensor=FakeCudaTensor)

        def empty(shape, dtype=None, device=None):
            nbytes = int(np.prod(shape))
            idx = int(str(device).partition(":")[2] or 0)
            return FakeCudaTensor(allocator.malloc(nbytes, idx), nbytes, idx, shape)

        fake.empty = empty
        saved = T._torch
        T._torch = lambda: fake
        try:
            n = 1 << 20
            want = pattern(n, 41)
            src = FakeCudaTensor(d.alloc(n, 0), n, 0)
            d.h2d(src.data_ptr(), want.tobytes())
            self.assertEqual(self.s.upsert_tensor("cuda/dev", src), 0)
            dev1 = second()
            t = self.s.get_tensor("cuda/dev", device="cuda:%d" % dev1)
            self.assertIsNotNone(t)
            self.assertEqual(t.device.index, dev1)
            self.assertEqual(t.shape, (n,))
            self.assertEqual(d.bytes_at(t.data_ptr(), n), want.tobytes())
        finally:
            T._torch = saved


    def test_get_tensor_into_device_buffer(self):
        # get_tensor_into with a GPU buffer returns a CUDA tensor viewing
        # it (torch.as_tensor over __cuda_array_interface__; a stand-in
        # torch here), copying only the header to the host.
        import types

        from kvferry import tensor as T

        seen = []

        def as_tensor(obj, device=None):
            cai = obj.__cuda_array_interface__
            seen.append((cai, device))
            shape = cai["shape"]
            return FakeCudaTensor(cai["data"][0], int(np.prod(shape)), int(str(device).partition(":")[2]), shape)

        saved = T._torch
        T._torch = lambda: types.SimpleNamespace(as_tensor=as_tensor)
        try:
            n = 1 << 20
            want = pattern(n, 51)
            src = FakeCudaTensor(self.d.alloc(n, 0), n, 0, (256, 4096))
            self.d.h2d(src.data_ptr(), want.tobytes())
            self.assertEqual(self.s.upsert_tensor("cuda/into", src), 0)
            size = n + 304
            dev1 = second()
            buf = allocator.malloc(size, dev1)
            self.assertEqual(self.s.register_buffer(buf, size), 0)
            t = self.s.get_tensor_into("cuda/into", buf, size)
            self.assertIsNotNone(t)
            self.assertEqual(seen[0][0]["typestr"], "|u1")
            self.assertEqual(seen[0][1], "cuda:%d" % dev1)
            self.assertEqual(t.shape, (256, 4096))
            self.assertEqual(t.data_ptr(), buf + 304)
            self.assertEqual(self.d.bytes_at(t.data_ptr(), n), want.tobytes())
            self.assertEqual(self.s.unregister_buffer(buf), 0)
        finally:
            T._torch = saved


def _torch_cuda():
    """torch with CUDA on the machine's driver (a hardware run), or None."""
    if not _fakecuda.HW:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@unittest.skipUnless(_torch_cuda(), "needs KVFERRY_HW=1 and torch with CUDA (make hw-check on a GPU machine)")
class TorchCUDA(unittest.TestCase):
    """Real torch CUDA tensors (a hardware run): registered by data_ptr,
    moved between engines and through the store, and torch's allocator
    replaced by kvferry's (CUDAPluggableAllocator) in a process of its own."""

    @classmethod
    def setUpClass(cls):
        cls.torch = _torch_cuda()

    def test_tensors_between_engines(self):
        torch = self.torch
        n = 16 << 20
        dev1 = second()
        src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda:0")
        dst = torch.zeros(n, dtype=torch.uint8, device="cuda:%d" % dev1)
        back = torch.zeros(n, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        a, b = engine(), engine()
        try:
            self.assertEqual(a.register_memory(src.data_ptr(), n), 0)
            self.assertEqual(a.register_memory(back.data_ptr(), n), 0)
            self.assertEqual(b.register_memory(dst.data_ptr(), n, "cuda:%d" % dev1), 0)
            seg = b.get_segment_name()
            self.assertEqual(a.transfer_sync_write(seg, src.data_ptr(), dst.data_ptr(), n), 0)
            self.assertTrue(torch.equal(dst.to("cuda:0"), src))
            self.assertEqual(a.transfer_sync_read(seg, back.data_ptr(), dst.data_ptr(), n), 0)
            self.assertTrue(torch.equal(back, src))
            # Stream-ordered: a kernel that writes src, then the transfer
            # on the same stream, then a copy out: each sees the last.
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                src.fill_(7)
                a.transfer_write_on_cuda(seg, src.data_ptr(), dst.data_ptr(), n, s.cuda_stream)
                out = dst.to("cuda:0", non_blocking=True)
            s.synchronize()
            self.assertTrue(bool((out == 7).all()))
        finally:
            a.close()
            b.close()

    def test_store_tensors(self):
        from kvferry.store import MooncakeDistributedStore

        torch = self.torch
        s = MooncakeDistributedStore()
        self.assertEqual(s.setup("127.0.0.1", "P2PHANDSHAKE", 256 << 20, 64 << 20, "tcp", "", "embedded"), 0)
        try:
            t = torch.randn(256, 1024, device="cuda:0")
            self.assertEqual(s.put_tensor("torch/a", t), 0)
            got = s.get_tensor("torch/a")
            self.assertTrue(torch.equal(torch.as_tensor(got).reshape(t.shape).to("cuda:0"), t))
            dst = torch.zeros_like(t, device="cuda:%d" % second())
            self.assertEqual(s.get_tensor_into_cuda("torch/a", dst), t.numel() * t.element_size())
            self.assertTrue(torch.equal(dst.to("cuda:0"), t))
        finally:
            s.close()

    def test_pluggable_allocator(self):
        # torch's allocator can be replaced only before its first CUDA
        # allocation: in a process of its own.
        code = r'''
import torch
from mooncake.allocator import NVLinkAllocator
from kvferry.engine import TransferEngine
torch.cuda.memory.change_current_allocator(NVLinkAllocator.get_allocator("cuda:0"))
x = torch.arange(1 << 20, dtype=torch.int32, device="cuda:0")
y = torch.zeros_like(x)
a = TransferEngine(); b = TransferEngine()
assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
n = x.numel() * 4
assert a.register_memory(x.data_ptr(), n) == 0
assert b.register_memory(y.data_ptr(), n) == 0
assert a.transfer_sync_write(b.get_segment_name(), x.data_ptr(), y.data_ptr(), n) == 0
assert torch.equal(x, y)
a.close(); b.close()
print("ok")
'''
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + HERE
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok")


class NoDriver(unittest.TestCase):
    def test_host_without_driver(self):
        # In a process whose driver cannot load: GPU calls return the
        # documented errors, host transfers work.
        code = r'''
import numpy as np
from kvferry import allocator
from kvferry.engine import TransferEngine
a = TransferEngine(); b = TransferEngine()
assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
src = np.arange(1 << 16, dtype=np.uint8); dst = np.zeros(1 << 16, np.uint8)
assert a.register_memory(src.ctypes.data, src.nbytes, "cuda:0") == -303, "cuda: without a driver"
assert a.register_memory(src.ctypes.data, src.nbytes) == 0
assert b.register_memory(dst.ctypes.data, dst.nbytes) == 0
assert a.transfer_sync_write(b.get_segment_name(), src.ctypes.data, dst.ctypes.data, src.nbytes) == 0
assert (src == dst).all()
assert allocator.probe(0) == allocator.MemoryBackend.UNSUPPORTED
try:
    allocator.malloc(4096)
    raise SystemExit("malloc without a driver")
except MemoryError:
    pass
dst[:] = 0
a.transfer_write_on_cuda(b.get_segment_name(), src.ctypes.data, dst.ctypes.data, 16, 0)
assert (src[:16] == dst[:16]).all(), "stream 0 without a driver: the transfer runs at once"
print("ok")
'''
        env = dict(os.environ)
        env["KVFERRY_CUDA_LIB"] = "/nonexistent/libcuda.so.1"
        env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + HERE
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok")


if __name__ == "__main__":
    unittest.main()
