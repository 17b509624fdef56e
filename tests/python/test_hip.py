"""HIP memory through the Python API, on the fake HIP runtime
(tests/fakecuda/fake_hip.c; run.sh builds it and names it in
KVFERRY_TEST_FAKEHIP), with the engine on it by KVFERRY_HIP_LIB and
KVFERRY_GPU_RUNTIME=hip. A ROCm PyTorch exposes HIP memory as torch.cuda
tensors, so the pointers are registered at "cuda:N" locations, as a CUDA
tensor's are: nothing on the Python side may assume the CUDA runtime.

The allocator and store tensor suites of test_gpu.py run here too, by
table: their classes are subclassed with HIP as their runtime (HIP offers
what they use of _fakecuda.Driver), so one text runs on both fakes."""

import ctypes
import os
import unittest
from ctypes import byref, c_int, c_size_t, c_void_p

import numpy as np

import test_gpu
from _util import pattern

from kvferry.engine import TransferEngine

PATH = os.environ.get("KVFERRY_TEST_FAKEHIP", "")
_VARS = ("KVFERRY_HIP_LIB", "KVFERRY_GPU_RUNTIME", "KVFERRY_TRANSPORT")
_saved = {}


def setUpModule():
    if not PATH or not os.path.exists(PATH):
        raise unittest.SkipTest("no fake HIP runtime (KVFERRY_TEST_FAKEHIP)")
    for k in _VARS:
        _saved[k] = os.environ.get(k)
    os.environ["KVFERRY_HIP_LIB"] = PATH
    os.environ["KVFERRY_GPU_RUNTIME"] = "hip"
    os.environ.pop("KVFERRY_TRANSPORT", None)


def tearDownModule():
    for k, v in _saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class HIP:
    """The fake libamdhip64 as a HIP application uses it, with the calls of
    _fakecuda.Driver that test_gpu.py's suites use (alloc, free, h2d,
    bytes_at, count, fake)."""

    def __init__(self):
        self.h = ctypes.CDLL(PATH)
        self.fake = hasattr(self.h, "fakecuda_backing")
        if self.fake:
            self.h.fakecuda_count.argtypes = [c_int]
        self.h.hipMalloc.argtypes = [ctypes.POINTER(c_void_p), c_size_t]
        self.h.hipFree.argtypes = [c_void_p]
        self.h.hipMemcpy.argtypes = [c_void_p, c_void_p, c_size_t, c_int]
        self.h.hipSetDevice.argtypes = [c_int]
        self._check(self.h.hipInit(0), "hipInit")
        n = c_int(0)
        self._check(self.h.hipGetDeviceCount(byref(n)), "hipGetDeviceCount")
        self.devices = n.value

    @staticmethod
    def _check(rc, call):
        if rc != 0:
            raise RuntimeError("%s: hipError %d" % (call, rc))

    def alloc(self, n, dev=0):
        """hipMalloc memory of dev (legacy IPC)."""
        self._check(self.h.hipSetDevice(dev), "hipSetDevice")
        p = c_void_p()
        self._check(self.h.hipMalloc(byref(p), n), "hipMalloc")
        return p.value

    def free(self, p, dev=0):
        self._check(self.h.hipSetDevice(dev), "hipSetDevice")
        self._check(self.h.hipFree(p), "hipFree")

    def h2d(self, dst, data, dev=0):
        self._check(self.h.hipSetDevice(dev), "hipSetDevice")
        self._check(self.h.hipMemcpy(dst, bytes(data), len(data), 4), "hipMemcpy")

    def count(self, kind):
        """Live allocations of a kind (the fake's only; 6: VMM mappings)."""
        assert self.fake, "count needs the fake runtime"
        return self.h.fakecuda_count(kind)

    def bytes_at(self, src, n):
        out = ctypes.create_string_buffer(n)
        self._check(self.h.hipMemcpy(out, src, n, 4), "hipMemcpy")
        return out.raw


def engine():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return e


class InProcess(unittest.TestCase):
    def setUp(self):
        self.hip = HIP()

    def test_hip_pointers_between_engines(self):
        n = 3 << 20
        dev1 = 1 if self.hip.devices > 1 else 0
        a, b = engine(), engine()
        src, dst = self.hip.alloc(n, 0), self.hip.alloc(n, dev1)
        try:
            host = pattern(n, 5)
            self.hip.h2d(src, host.tobytes())
            # A ROCm torch.cuda tensor's location, and the wildcard.
            self.assertEqual(a.register_memory(src, n, "cuda:0"), 0, a.last_error())
            self.assertEqual(b.register_memory(dst, n), 0, b.last_error())
            seg = b.get_segment_name()
            self.assertEqual(a.transfer_sync_write(seg, src, dst, n), 0, a.last_error())
            self.assertEqual(self.hip.bytes_at(dst, n), host.tobytes())
            # Back into host memory registered by numpy.
            back = np.zeros(n, np.uint8)
            self.assertEqual(a.register_memory(back.ctypes.data, n), 0)
            self.assertEqual(a.transfer_sync_read(seg, back.ctypes.data, dst, n), 0, a.last_error())
            self.assertTrue(np.array_equal(back, host))
            # HIP device memory registered as cpu memory is refused.
            self.assertLess(a.register_memory(src, 4096, "cpu:0"), 0)
            self.assertIn("device", a.last_error())
        finally:
            a.close()
            b.close()
            self.hip.free(src)
            self.hip.free(dst)

    def test_library_copy_reaches_hip_memory(self):
        # kvferry_cuda_memcpy, the copy the store's GPU tensor calls use,
        # runs on the process's GPU runtime (here HIP), not on libcuda.
        from kvferry._lib import lib

        n = 1 << 16
        e = engine()  # loads the engine's GPU runtime from the environment
        p = self.hip.alloc(n, 0)
        try:
            data = pattern(n, 9).tobytes()
            src = ctypes.create_string_buffer(data, n)
            self.assertEqual(lib.kvferry_cuda_memcpy(p, ctypes.addressof(src), n), 0)
            self.assertEqual(self.hip.bytes_at(p, n), data)
            out = ctypes.create_string_buffer(n)
            self.assertEqual(lib.kvferry_cuda_memcpy(ctypes.addressof(out), p, n), 0)
            self.assertEqual(out.raw, data)
        finally:
            e.close()
            self.hip.free(p)


class Allocator(test_gpu.Allocator):
    """kvferry.allocator on HIP: hipMemCreate memory (VMM, POSIX fds) a
    ROCm PyTorch's pluggable allocator gets."""

    runtime = HIP


class StoreTensors(test_gpu.StoreTensors):
    """The store's tensor calls with HIP memory (a ROCm torch's tensors):
    put_tensor from it, get_tensor into it, kvferry_cuda_memcpy and the GPU
    scratch pool on the HIP runtime."""

    runtime = HIP


if __name__ == "__main__":
    unittest.main()
