"""GPU memory that other processes of this host can map.

kvferry's library exports an allocator of shareable GPU memory,
``kvferry_cuda_malloc`` / ``kvferry_cuda_free`` (also under Mooncake's names
``mc_nvlink_malloc`` / ``mc_nvlink_free``), with the signatures
``torch.cuda.memory.CUDAPluggableAllocator`` takes. Its memory is made with
``cuMemCreate`` (VMM, exportable as POSIX file descriptors, and as fabric
handles where the GPUs support them) and mapped for every device, so the
engine's ``nvlink`` transport lets same-host peers read and write it
directly; on GPUs without VMM it falls back to ``cuMemAlloc`` (legacy CUDA
IPC). On ROCm (the process's GPU runtime is HIP: a ROCm PyTorch, or
``KVFERRY_GPU_RUNTIME=hip``) the same functions hand out ``hipMemCreate``
memory (POSIX fds) or, without VMM, ``hipMalloc`` memory (HIP IPC); a ROCm
PyTorch takes them through the same ``torch.cuda`` pluggable allocator.
``NVLinkAllocator`` mirrors Mooncake's ``mooncake.allocator``::

    import torch
    from kvferry.allocator import NVLinkAllocator

    alloc = NVLinkAllocator.get_allocator(torch.device("cuda:0"))
    pool = torch.cuda.MemPool(alloc.allocator())
    with torch.cuda.use_mem_pool(pool):
        kv = torch.empty(n, dtype=torch.uint8, device="cuda:0")

or, for every allocation of the process (before CUDA is first used),
``torch.cuda.memory.change_current_allocator(alloc)``.
"""

import threading
from enum import IntEnum

from ._lib import lib, library_path

__all__ = ["MemoryBackend", "NVLinkAllocator", "malloc", "free", "probe"]

ALLOC_FN = "kvferry_cuda_malloc"
FREE_FN = "kvferry_cuda_free"


class MemoryBackend(IntEnum):
    """What the allocator hands out (Mooncake's values)."""

    USE_CUDAMALLOC = 0
    USE_CUMEMCREATE = 1
    UNKNOWN = -1
    UNSUPPORTED = -2


def probe(device=0):
    """Return the MemoryBackend of device: USE_CUMEMCREATE (shareable VMM
    memory: cuMemCreate, hipMemCreate), USE_CUDAMALLOC (cuMemAlloc /
    hipMalloc fallback) or UNSUPPORTED (no GPU runtime or no such device)."""
    rc = lib.kvferry_cuda_probe(int(device))
    return MemoryBackend(rc) if rc in (0, 1) else MemoryBackend.UNSUPPORTED


def malloc(size, device=0):
    """Allocate size bytes of shareable GPU memory on device; returns the
    device address (int). Raises MemoryError when nothing was allocated."""
    p = lib.kvferry_cuda_malloc(int(size), int(device), None)
    if not p:
        raise MemoryError("kvferry_cuda_malloc(%d, device %d) failed (no GPU runtime, no "
                          "device, or out of memory)" % (size, device))
    return p


def free(ptr, device=0):
    """Free memory from malloc."""
    lib.kvferry_cuda_free(int(ptr), 0, int(device), None)


class NVLinkAllocator:
    """PyTorch pluggable allocators over the library's shareable GPU memory,
    one per device, as Mooncake's ``NVLinkAllocator``."""

    _instances = {}
    _lock = threading.Lock()
    _backend = None

    @classmethod
    def _get_so_path(cls):
        return library_path()

    @classmethod
    def detect_mem_backend(cls):
        """MemoryBackend of device 0 (probed once)."""
        with cls._lock:
            if cls._backend is None:
                cls._backend = probe(0)
            return cls._backend

    @classmethod
    def get_allocator(cls, device):
        """Return the torch.cuda.memory.CUDAPluggableAllocator for device."""
        try:
            from torch.cuda.memory import CUDAPluggableAllocator
        except ImportError as e:  # torch without CUDA pluggable allocators (< 2.0)
            raise ImportError("NVLinkAllocator needs torch.cuda.memory.CUDAPluggableAllocator "
                              "(PyTorch >= 2.0 built with CUDA)") from e
        with cls._lock:
            if device not in cls._instances:
                cls._instances[device] = CUDAPluggableAllocator(cls._get_so_path(), ALLOC_FN, FREE_FN)
            return cls._instances[device]
