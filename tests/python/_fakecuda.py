"""The GPU side of the Python suite's CUDA tests: an application's view of
the fake CUDA driver (tests/fakecuda, built by run.sh; its path in
KVFERRY_TEST_FAKECUDA), driven through ctypes the way a CUDA program drives
libcuda, and a stand-in for CUDA torch tensors (this machine's torch has no
CUDA). kvferry loads the same file through KVFERRY_CUDA_LIB, so both see one
driver.

With KVFERRY_HW=1 (make hw-check) the same code drives the machine's real
driver (KVFERRY_CUDA_LIB, else libcuda.so.1): Driver.fake is then False,
the fake's own calls (count, copy_delay) are not there, and bytes_at reads
through the driver."""

import ctypes
import os
import threading
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p

HW = os.environ.get("KVFERRY_HW") == "1"
PATH = (os.environ.get("KVFERRY_CUDA_LIB") or "libcuda.so.1") if HW else os.environ.get("KVFERRY_TEST_FAKECUDA", "")
_devices = None


def device_count():
    """The driver's device count (0 when it does not load or initialize)."""
    global _devices
    if _devices is None:
        try:
            cu = ctypes.CDLL(PATH)
            n = c_int(0)
            _devices = n.value if cu.cuInit(0) == 0 and cu.cuDeviceGetCount(byref(n)) == 0 else 0
        except OSError:
            _devices = 0
    return _devices


def available():
    if HW:
        return device_count() > 0
    return bool(PATH) and os.path.exists(PATH)


def second():
    """The device the tests use as "another GPU": 1, or 0 with one."""
    return 1 if device_count() > 1 else 0


class Driver:
    """The fake libcuda as a CUDA application uses it."""

    def __init__(self, path=PATH):
        self.cu = ctypes.CDLL(path)
        self._tls = threading.local()
        self._check(self.cu.cuInit(0), "cuInit")
        self.fake = hasattr(self.cu, "fakecuda_backing") and not HW
        if self.fake:
            self.cu.fakecuda_backing.restype = c_void_p
            self.cu.fakecuda_backing.argtypes = [c_uint64]
            self.cu.fakecuda_count.argtypes = [c_int]
            self.cu.fakecuda_set_copy_delay_us.argtypes = [c_int]
        self.cu.cuPointerGetAttribute.argtypes = [c_void_p, c_int, c_uint64]
        for fn in ("cuMemcpyAsync",):
            getattr(self.cu, fn).argtypes = [c_uint64, c_uint64, c_size_t, c_void_p]
        self.cu.cuMemcpyHtoD_v2.argtypes = [c_uint64, c_void_p, c_size_t]
        self.cu.cuMemcpyDtoH_v2.argtypes = [c_void_p, c_uint64, c_size_t]
        self.cu.cuMemFree_v2.argtypes = [c_uint64]
        self.cu.cuStreamSynchronize.argtypes = [c_void_p]
        self.cu.cuStreamDestroy_v2.argtypes = [c_void_p]

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError("%s: CUresult %d" % (what, rc))

    def current(self, dev=0):
        """Make dev's primary context current on this thread (as
        torch.cuda.set_device does through the runtime)."""
        if getattr(self._tls, "dev", None) == dev:
            return
        ctx = c_void_p()
        self._check(self.cu.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self._check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self._tls.dev = dev

    def alloc(self, n, dev=0):
        """cudaMalloc-style device memory (legacy IPC)."""
        self.current(dev)
        p = c_uint64()
        self._check(self.cu.cuMemAlloc_v2(byref(p), c_size_t(n)), "cuMemAlloc")
        return p.value

    def free(self, p, dev=0):
        self.current(dev)
        self._check(self.cu.cuMemFree_v2(p), "cuMemFree")

    def h2d(self, dst, data, dev=0):
        self.current(dev)
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self._check(self.cu.cuMemcpyHtoD_v2(dst, buf, len(data)), "cuMemcpyHtoD")

    def d2h(self, src, n, dev=0):
        self.current(dev)
        buf = ctypes.create_string_buffer(n)
        self._check(self.cu.cuMemcpyDtoH_v2(buf, src, n), "cuMemcpyDtoH")
        return buf.raw

    def stream(self, dev=0):
        self.current(dev)
        s = c_void_p()
        self._check(self.cu.cuStreamCreate(byref(s), 1), "cuStreamCreate")
        return s.value

    def copy_async(self, dst, src, n, stream):
        self._check(self.cu.cuMemcpyAsync(dst, src, n, stream), "cuMemcpyAsync")

    def sync(self, stream):
        self._check(self.cu.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def copy_delay(self, us):
        """Slow the fake's copies down (the fake's only)."""
        assert self.fake, "copy_delay needs the fake driver"
        self.cu.fakecuda_set_copy_delay_us(us)

    def device_of(self, p):
        """The device of device address p (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)."""
        dev = c_int(-1)
        self._check(self.cu.cuPointerGetAttribute(byref(dev), 9, p), "cuPointerGetAttribute")
        return dev.value

    def bytes_at(self, p, n):
        """The n bytes at device address p: through the fake's own view, or
        copied out by a real driver."""
        if not self.fake:
            return self.d2h(p, n, self.device_of(p))
        b = self.cu.fakecuda_backing(p)
        if not b:
            raise ValueError("%#x is not device memory" % p)
        return ctypes.string_at(b, n)

    def count(self, kind):
        """Live allocations of a kind (the fake's only)."""
        assert self.fake, "count needs the fake driver"
        return self.cu.fakecuda_count(kind)


class FakeCudaTensor:
    """What kvferry and Mooncake code reads of a contiguous CUDA torch
    tensor: data_ptr, nbytes, device, dtype, shape, element_size, numel."""

    class _Device:
        def __init__(self, index):
            self.type, self.index = "cuda", index

        def __str__(self):
            return "cuda:%d" % self.index

    def __init__(self, ptr, nbytes, dev=0, shape=None):
        self.ptr, self.nbytes, self.device = ptr, nbytes, self._Device(dev)
        self.is_cuda = True
        self.dtype = "torch.uint8"
        self.shape = tuple(shape or (nbytes,))

    def data_ptr(self):
        return self.ptr

    def element_size(self):
        return 1

    def numel(self):
        return self.nbytes

    def is_contiguous(self):
        return True
