"""Mooncake's ``mooncake.store`` Python surface over libkvferry.so.

``MooncakeDistributedStore`` has the methods, argument names, defaults and
return conventions of Mooncake's pybind class (specs/mooncake.md §6.2):
ints are 0 / a count / a negative ``ErrorCode``; ``get`` returns ``b""`` on
a miss; tensor getters return ``None``; batch calls return lists. Only
arguments of the wrong type raise (TypeError), as pybind11 would. Tensors
use Mooncake's 304-byte object header (``kvferry.tensor``), so objects are
byte-compatible with Mooncake's.

``MooncakeDistributedStoreAsync`` (spec §6.4) turns any ``async_<name>``
into an awaitable; the data calls run on the library's own worker pool and
complete through an eventfd watched by the event loop, with no Python
thread per call.

This module is the public name; the code lives in one private module per
concern, and ``MooncakeDistributedStore`` is put together from their
classes:

- ``_store_types``: enums, ``ReplicateConfig``, descriptors, ``BufferHandle``;
- ``_store_args``: Python arguments to C arguments, shared by the others;
- ``_store_core``: lifecycle, byte puts and gets, existence, removal,
  registration, and ``MooncakeHostMemAllocator``;
- ``_store_multi``: multi-buffer puts and gets;
- ``_store_tensors``: tensor objects, host and CUDA;
- ``_store_parallel``: unified parallel tensor IO (``ParallelAxis``,
  ``TensorParallelism``, ``ReadTarget``, ``*_with_parallelism*``);
- ``_store_tp``: tensor-parallel shards, lowered onto ``_store_parallel``;
- ``_store_segments``: segments mounted after setup, the huge-page
  allocator's addresses, ``MooncakeDistributedNoFRegister``;
- ``_safetensors``: the safetensors codec and the store's safetensors calls;
- ``_store_versioned``: versioned publish and subscribe;
- ``_store_replicas``: replica descriptors, copy and move tasks;
- ``_store_ranges``: ranged reads, put and get sessions, the client capsule;
- ``_buffer_pool``: ``BufferPool``, ``BufferLease``, ``BufferLeaseView``;
- ``_numa``: ``bind_to_numa_node``;
- ``_store_client``: ``MooncakeDistributedStore`` itself;
- ``_store_async``: ``MooncakeDistributedStoreAsync``.
"""

from ctypes import byref, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p  # noqa: F401

from ._buffer_pool import BufferLease, BufferLeaseView, BufferPool
from ._lib import ReplicateConfigC, lib  # noqa: F401
from ._numa import bind_to_numa_node
from ._store_args import log  # noqa: F401
from ._store_async import MooncakeDistributedStoreAsync
from ._store_client import MooncakeDistributedStore
from ._store_core import MooncakeHostMemAllocator
from ._store_parallel import ParallelAxis, ReadTarget, TensorParallelism
from ._store_segments import MooncakeDistributedNoFRegister, get_alloc_func_addr, get_free_func_addr
from ._store_tensors import (  # noqa: F401  (Mooncake's module-level helpers)
    _deserialize_tensor,
    _serialize_tensor,
    _tensor_metadata_size,
)
from ._store_types import (
    BufferHandle,
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    ObjectDataType,
    QueryTaskResponse,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    TaskStatus,
    TaskType,
)
from .errors import ErrorCode

__all__ = [
    "MooncakeDistributedStore",
    "MooncakeDistributedStoreAsync",
    "ReplicateConfig",
    "SoftPinAction",
    "ObjectDataType",
    "ReplicaStatus",
    "ReplicaDescriptor",
    "MemoryDescriptor",
    "DiskDescriptor",
    "TaskType",
    "TaskStatus",
    "QueryTaskResponse",
    "Descriptor",
    "BufferHandle",
    "ErrorCode",
    "MooncakeHostMemAllocator",
    "ParallelAxis",
    "TensorParallelism",
    "ReadTarget",
    "MooncakeDistributedNoFRegister",
    "get_alloc_func_addr",
    "get_free_func_addr",
    "bind_to_numa_node",
    "BufferPool",
    "BufferLease",
    "BufferLeaseView",
]
