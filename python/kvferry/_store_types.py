"""The store's data types: the enums, ``ReplicateConfig``, the replica and
task descriptors and ``BufferHandle`` (re-exported by ``kvferry.store``)."""

import ctypes
import enum
import weakref

from ._lib import lib


class SoftPinAction(enum.IntEnum):
    """What a write does to the object's soft pin."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """A tag describing what an object holds."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(enum.IntEnum):
    """State of one replica."""

    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class ReplicateConfig:
    """How a put is replicated (Mooncake ``ReplicateConfig``, spec §6.5).

    kvferry's master honours replica_num, the pins, preferred_segments
    (preferred_segment included) and group_ids; the other fields are kept
    for compatibility and ignored.

    group_ids is None or one lifecycle group per key of the call (exactly
    one for a single-key put; "" leaves a key ungrouped): objects of one
    group share read leases (reading one keeps the others from removal and
    eviction) and are evicted together, and an object's group never
    changes (an upsert naming another fails with INVALID_PARAMS, one
    naming none keeps it). A list of the wrong length fails the whole call
    with INVALID_PARAMS.
    """

    def __init__(self):
        self.replica_num = 1
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.soft_pin_action = SoftPinAction.PRESERVE
        self.soft_pin_ttl_ms = None
        self.with_hard_pin = False
        self.preferred_segments = []
        self.preferred_nof_segments = []
        self.preferred_segment = ""
        self.prefer_alloc_in_same_node = False
        self.data_type = ObjectDataType.UNKNOWN
        self.group_ids = None

    @property
    def with_soft_pin(self):
        """The older boolean form of soft_pin_action (True = ENABLE)."""
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v):
        self.soft_pin_action = SoftPinAction.ENABLE if v else SoftPinAction.PRESERVE

    def __str__(self):
        return ("ReplicateConfig: { replica_num: %d, soft_pin_action: %s, with_hard_pin: %s, "
                "preferred_segments: %s }" % (self.replica_num, self.soft_pin_action.name,
                                              self.with_hard_pin, self.preferred_segments))

    __repr__ = __str__


class Descriptor:
    """Where a memory replica lives: its holder's segment, address and size."""

    def __init__(self, size=0, buffer_address=0, transport_endpoint=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return "<Descriptor size=%d buffer_address=%d transport_endpoint=%s>" % (
            self.size, self.buffer_address, self.transport_endpoint)


class MemoryDescriptor:
    """The memory location of a replica."""

    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """Where a LOCAL_DISK replica lives: the holder's disk-tier directory
    (``file_path``), the holder (``transport_endpoint``) and the object's
    size."""

    def __init__(self, file_path, object_size, transport_endpoint=""):
        self.file_path = file_path
        self.object_size = object_size
        self.transport_endpoint = transport_endpoint


class ReplicaDescriptor:
    """One replica of an object (Mooncake ``ReplicaDescriptor``): in
    memory (``get_memory_descriptor``) or on a client's disk tier
    (``get_disk_descriptor``)."""

    def __init__(self, status, memory, protocol="", disk=None):
        self.status = status
        self._memory = memory
        self._disk = disk
        self.protocol = protocol

    def is_memory_replica(self):
        return self._disk is None

    def is_disk_replica(self):
        return self._disk is not None

    def is_local_disk_replica(self):
        return self._disk is not None

    def get_memory_descriptor(self):
        if self._disk is not None:
            raise RuntimeError("not a memory replica")
        return self._memory

    def get_disk_descriptor(self):
        if self._disk is None:
            raise RuntimeError("not a disk replica")
        return self._disk

    def __repr__(self):
        if self._disk is not None:
            return "<ReplicaDescriptor %s LOCAL_DISK %s %s +%d>" % (
                self.status.name, self._disk.transport_endpoint, self._disk.file_path,
                self._disk.object_size)
        d = self._memory.buffer_descriptor
        return "<ReplicaDescriptor %s %s @%#x +%d>" % (self.status.name, d.transport_endpoint,
                                                      d.buffer_address, d.size)


class TaskType(enum.IntEnum):
    """The kind of a copy or move task (Mooncake ``TaskType``)."""

    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    """The state of a copy or move task (Mooncake ``TaskStatus``)."""

    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class QueryTaskResponse:
    """What ``query_task`` reports (Mooncake ``QueryTaskResponse``)."""

    def __init__(self, id, type, status, created_at_ms_epoch, last_updated_at_ms_epoch,
                 assigned_client, message):
        self.id = id
        self.type = type
        self.status = status
        self.created_at_ms_epoch = created_at_ms_epoch
        self.last_updated_at_ms_epoch = last_updated_at_ms_epoch
        self.assigned_client = assigned_client
        self.message = message

    def __repr__(self):
        return "<QueryTaskResponse %s %s %s %r>" % (self.id, self.type.name, self.status.name,
                                                     self.message)


class BufferHandle:
    """An object read into memory the library allocated (``get_buffer``).

    ``ptr()`` and ``size()`` as Mooncake's; ``numpy.asarray(handle)`` and
    ``memoryview(handle.view())`` give the bytes without a copy. The memory
    is freed when the handle is garbage-collected or ``release()``d.
    """

    def __init__(self, ptr, size):
        self._ptr = ptr
        self._size = size
        self._arr = (ctypes.c_char * size).from_address(ptr) if size else None
        self._fin = weakref.finalize(self, lib.kvferry_store_free, ptr)

    def ptr(self):
        return self._ptr

    def size(self):
        return self._size

    def __len__(self):
        return self._size

    def view(self):
        """Return a writable memoryview of the bytes (valid while self lives)."""
        return memoryview(self._arr if self._arr is not None else b"").cast("B")

    def __bytes__(self):
        return ctypes.string_at(self._ptr, self._size) if self._size else b""

    @property
    def __array_interface__(self):
        return {"shape": (self._size,), "typestr": "|u1", "data": (self._ptr, False),
                "version": 3}

    def release(self):
        """Free the memory now; the handle must not be used afterwards."""
        self._arr = None
        self._fin()

