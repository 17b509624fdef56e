"""A store client's GPU scratch buffers: the device memory that CUDA tensor
puts join header and data in and CUDA tensor gets read objects into.

Buffers are shareable GPU memory from the library's allocator, registered
with the client once when made and kept for reuse: a put or get takes the
smallest idle buffer of its device that fits (sizes are powers of two from
2 MiB), and gives it back when done. At most ``max_bytes`` of idle buffers
are kept (``KVFERRY_GPU_SCRATCH_BYTES``, default 256 MiB; 0 keeps none, as
before the pool: one buffer per call); a buffer given back past that is
unregistered and freed, and so is everything at close.
"""

import os
import threading

from . import allocator

DEFAULT_MAX_BYTES = 256 << 20
MIN_BYTES = 2 << 20


def _capacity(size):
    c = MIN_BYTES
    while c < size:
        c <<= 1
    return c


def max_bytes_from_env():
    v = os.environ.get("KVFERRY_GPU_SCRATCH_BYTES", "")
    try:
        return max(0, int(v)) if v else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


class GpuScratchPool:
    """Idle GPU scratch buffers of one client, by device (thread safe).

    register(ptr, size) and unregister(ptr) register memory with the
    client (register returns 0 on success)."""

    def __init__(self, register, unregister, max_bytes=None):
        self._register = register
        self._unregister = unregister
        self.max_bytes = max_bytes_from_env() if max_bytes is None else max_bytes
        self._mu = threading.Lock()
        self._idle = {}  # device -> [(capacity, ptr)], sorted
        self._idle_bytes = 0
        self._busy = {}  # ptr -> (device, capacity, registered)
        self._regs = {}  # ptr -> registered (idle buffers)
        self._closed = False
        self.made = 0  # buffers allocated (tests)
        self.freed = 0

    def acquire(self, size, device):
        """Return a buffer of at least size bytes on device (its address)."""
        cap = _capacity(size)
        with self._mu:
            idle = self._idle.get(device, [])
            for i, (c, p) in enumerate(idle):
                if c >= cap:
                    del idle[i]
                    self._idle_bytes -= c
                    self._busy[p] = (device, c, self._regs.pop(p))
                    return p
        p = allocator.malloc(cap, device)
        registered = self._register(p, cap) == 0
        with self._mu:
            self.made += 1
            self._busy[p] = (device, cap, registered)
        return p

    def release(self, ptr):
        """Give a buffer from acquire back."""
        with self._mu:
            device, cap, registered = self._busy.pop(ptr)
            if not self._closed and self._idle_bytes + cap <= self.max_bytes:
                idle = self._idle.setdefault(device, [])
                idle.append((cap, ptr))
                idle.sort()
                self._idle_bytes += cap
                self._regs[ptr] = registered
                return
        self._free(ptr, device, registered)

    def _free(self, ptr, device, registered):
        if registered:
            self._unregister(ptr)
        allocator.free(ptr, device)
        with self._mu:
            self.freed += 1

    def idle(self):
        """(buffers, bytes) kept idle now."""
        with self._mu:
            return sum(len(v) for v in self._idle.values()), self._idle_bytes

    def close(self):
        """Free every idle buffer; buffers in use are freed when given back."""
        with self._mu:
            self._closed = True
            idle, self._idle, self._idle_bytes = self._idle, {}, 0
            regs, self._regs = self._regs, {}
        for device, bufs in idle.items():
            for _, p in bufs:
                self._free(p, device, regs.get(p, False))
