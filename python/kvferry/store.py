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
"""

import array
import asyncio
import concurrent.futures
import copy
import ctypes
import enum
import functools
import itertools
import json
import logging
import os
import re
import threading
import time
import weakref
from ctypes import byref, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p

from . import _lib
from . import tensor as _tensor
from ._lib import ReplicateConfigC, lib
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
]

log = logging.getLogger("kvferry.store")

_INVALID = int(ErrorCode.INVALID_PARAMS)


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


def _config(config):
    """Return (pointer-or-None, keepalive) for a ReplicateConfig (None: defaults)."""
    if config is None:
        return None, None
    if not isinstance(config, ReplicateConfig):
        raise TypeError("config must be a ReplicateConfig, not %s" % type(config).__name__)
    segs = list(config.preferred_segments or [])
    if config.preferred_segment:
        segs.append(config.preferred_segment)
    c = ReplicateConfigC()
    c.replica_num = int(config.replica_num)
    c.with_soft_pin = 1 if config.soft_pin_action == SoftPinAction.ENABLE else 0
    c.with_hard_pin = 1 if config.with_hard_pin else 0
    arr = None
    if segs:
        arr = _lib.c_strings([_key(s, "preferred segment") for s in segs])
        c.preferred_segments = ctypes.cast(arr, ctypes.POINTER(c_char_p))
        c.preferred_segments_count = len(segs)
    return byref(c), (c, arr)


def _group_ids(config, n):
    """Return (ok, C array or None) for config.group_ids over a call of n
    keys: (True, None) when it names none, (False, None) for a list of the
    wrong length."""
    g = config.group_ids if config is not None else None
    if g is None:
        return True, None
    g = _keys(g, "group_ids")
    if len(g) != n:
        log.error("group_ids has %d ids for %d keys", len(g), n)
        return False, None
    return True, _lib.c_strings(g)


def _grouped(config):
    return config is not None and getattr(config, "group_ids", None) is not None


def _pick_groups(config, idx):
    """config for the keys at idx of a call (their group ids picked)."""
    if not _grouped(config):
        return config
    c = copy.copy(config)
    c.group_ids = [config.group_ids[i] for i in idx]
    return c


def _key(k, what="key"):
    if isinstance(k, str):
        return k
    if isinstance(k, bytes):
        return k.decode()
    raise TypeError("%s must be a str, not %s" % (what, type(k).__name__))


def _keys(keys, what="keys"):
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise TypeError("%s must be a list of str, not %s" % (what, type(keys).__name__))
    return [_key(k, what[:-1] if what.endswith("s") else what) for k in keys]


def _int(v, what):
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, (bool, float)) and hasattr(v, "__index__"):
        return v.__index__()
    raise TypeError("%s must be an int, not %s" % (what, type(v).__name__))


def _ints(v, what):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise TypeError("%s must be a list of ints, not %s" % (what, type(v).__name__))
    return [_int(x, what + " item") for x in v]


def _buffer(value):
    """Return (address, nbytes, keepalive) of a bytes-like value, without a
    copy when it is contiguous."""
    if isinstance(value, bytes):
        return ctypes.cast(c_char_p(value), c_void_p).value or 0, len(value), value
    try:
        mv = memoryview(value)
    except TypeError:
        raise TypeError("value must be bytes-like (buffer protocol), not %s"
                        % type(value).__name__) from None
    if not mv.c_contiguous:
        b = mv.tobytes()
        return ctypes.cast(c_char_p(b), c_void_p).value or 0, len(b), b
    n = mv.nbytes
    if n == 0:
        return 0, 0, None
    if not mv.readonly:
        arr = (ctypes.c_char * n).from_buffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1
                                             else mv)
        return ctypes.addressof(arr), n, (arr, mv)
    try:
        import numpy as np

        a = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv, np.uint8)
        return a.ctypes.data, n, (a, mv)
    except ImportError:
        b = mv.tobytes()
        return ctypes.cast(c_char_p(b), c_void_p).value or 0, len(b), b


def _flatten(ptr_lists, size_lists):
    """C arrays of all buffers, all sizes and the per-key buffer counts."""
    counts = [len(p) for p in ptr_lists]
    total = sum(counts)
    ptrs = (c_void_p * total)(*[p for ps in ptr_lists for p in ps])
    sizes = (c_size_t * total)(*[s for ss in size_lists for s in ss])
    return ptrs, sizes, (c_size_t * len(counts))(*counts)


def _concat(parts):
    """Join 1-D byte buffers into one bytes object."""
    out = []
    for p in parts:
        mv = memoryview(p)
        if mv.ndim != 1 or mv.itemsize != 1:
            raise TypeError("parts must be 1-D bytes-like")
        out.append(mv)
    return b"".join(out)


def _parse_size(v):
    if isinstance(v, int):
        return v
    s = str(v).strip().lower()
    m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)i?b?", s)
    if not m:
        raise ValueError("bad size %r" % v)
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)


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


def _malloc_array(ptr, n):
    """A numpy uint8 array owning malloc'ed memory from the library."""
    import numpy as np

    if n == 0:
        lib.kvferry_store_free(ptr)
        return np.empty(0, np.uint8)
    carr = (ctypes.c_uint8 * n).from_address(ptr)
    weakref.finalize(carr, lib.kvferry_store_free, ptr)
    return np.frombuffer(carr, np.uint8)


class MooncakeHostMemAllocator:
    """Shared host memory for standalone storage mode (Mooncake's
    ``MooncakeHostMemAllocator``): every buffer is a memfd mapping that a
    dummy client (``setup_dummy``) shares with its real client when it is
    registered with ``register_buffer``, so the real client moves its bytes
    with no copy. ``alloc`` returns the address (an int; 0 on failure),
    ``free`` 0 or -1."""

    def alloc(self, size):
        size = _int(size, "size")
        if size <= 0:
            return 0
        return lib.kvferry_host_mem_alloc(size) or 0

    def free(self, ptr):
        ptr = _int(ptr, "ptr")
        if ptr <= 0:
            return -1
        return lib.kvferry_host_mem_free(ptr)


class MooncakeDistributedStore:
    """A store client (Mooncake ``mooncake.store.MooncakeDistributedStore``).

    tensor_format selects what tensor getters return: "auto" (torch
    tensors when torch is importable, else numpy arrays), "torch" or
    "numpy" (kvferry addition).
    """

    def __init__(self):
        self._h = None
        self._engine = None  # a shared TransferEngine, kept alive
        self._mu = threading.Lock()
        self.tensor_format = "auto"
        self._scratch = None  # GPU scratch buffers of CUDA tensor calls

    # ---- lifecycle ----

    def setup(self, local_hostname, metadata_server=None, global_segment_size=16 << 20,
              local_buffer_size=16 << 20, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", engine=None, enable_ssd_offload=False,
              ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
              client_http_port=9300):
        """Set the client up; returns 0 or a negative ErrorCode.

        Either the 7 positional arguments of Mooncake's binding or one dict
        (keys local_hostname, metadata_server, global_segment_size ("4gb"
        accepted), local_buffer_size, protocol, rdma_devices,
        master_server_addr, tenant_id). master_server_addr "" or "embedded"
        starts a master inside this process; other processes reach it at
        ``master_address()``. engine shares a TransferEngine (or its
        get_engine()) instead of starting one. tenant_id names the namespace
        of every key of this client: clients of different tenants on one
        master never see each other's objects; an id starting with "_" or
        holding a control character is INVALID_PARAMS.
        """
        if isinstance(local_hostname, dict):
            cfg = dict(local_hostname)
            if "local_hostname" not in cfg or "metadata_server" not in cfg:
                raise ValueError("setup(config): local_hostname and metadata_server are required")
            return self.setup(
                cfg["local_hostname"], cfg["metadata_server"],
                _parse_size(cfg.get("global_segment_size", 16 << 20)),
                _parse_size(cfg.get("local_buffer_size", 16 << 20)),
                cfg.get("protocol", "tcp"), cfg.get("rdma_devices", ""),
                cfg.get("master_server_addr", "127.0.0.1:50051"), engine,
                bool(cfg.get("enable_ssd_offload", False)), cfg.get("ssd_offload_path", ""),
                cfg.get("tenant_id", "default"),
                bool(cfg.get("enable_client_http_server", False)),
                int(cfg.get("client_http_port", 9300)))
        if metadata_server is None:
            raise TypeError("setup() needs metadata_server")
        local_hostname = _key(local_hostname, "local_hostname")
        metadata_server = _key(metadata_server, "metadata_server")
        gss = _int(global_segment_size, "global_segment_size")
        lbs = _int(local_buffer_size, "local_buffer_size")
        protocol = _key(protocol or "tcp", "protocol")
        rdma_devices = _key(rdma_devices or "", "rdma_devices")
        master_server_addr = _key(master_server_addr if master_server_addr is not None else "",
                                  "master_server_addr")
        tenant_id = _key(tenant_id if tenant_id is not None else "", "tenant_id")
        if gss < 0 or lbs < 0:
            return _INVALID
        ssd_offload_path = _key(ssd_offload_path or "", "ssd_offload_path")
        if enable_ssd_offload and not ssd_offload_path:
            log.error("setup: enable_ssd_offload needs ssd_offload_path")
            return _INVALID
        if enable_client_http_server:
            log.warning("setup: the client HTTP server is not supported by kvferry; ignored")
        with self._mu:
            if self._h is not None:
                log.error("setup: already set up")
                return _INVALID
            h = lib.mooncake_store_create()
            if not h:
                return int(ErrorCode.INTERNAL_ERROR)
            rc = lib.kvferry_store_set_tenant(h, tenant_id.encode())
            if rc != 0:
                log.error("setup: tenant_id %r: %s", tenant_id, _last_error(h))
                lib.mooncake_store_destroy(h)
                return rc
            if enable_ssd_offload:
                rc = lib.kvferry_store_set_ssd_offload(h, ssd_offload_path.encode(), 0)
                if rc != 0:
                    log.error("setup: ssd_offload_path %r: %s", ssd_offload_path, _last_error(h))
                    lib.mooncake_store_destroy(h)
                    return rc
            if engine is not None:
                from .engine import InnerTransferEngine, TransferEngine

                owner = engine._owner if isinstance(engine, InnerTransferEngine) else engine
                if not isinstance(owner, TransferEngine) or not owner.get_engine_ptr():
                    lib.mooncake_store_destroy(h)
                    raise TypeError("engine must be an initialized TransferEngine or "
                                    "InnerTransferEngine")
                rc = lib.kvferry_store_setup_with_engine(
                    h, owner.get_engine_ptr(), gss, lbs, protocol.encode(),
                    master_server_addr.encode())
            else:
                rc = lib.mooncake_store_setup(
                    h, local_hostname.encode(), metadata_server.encode(), gss, lbs,
                    protocol.encode(), rdma_devices.encode(), master_server_addr.encode())
            if rc != 0:
                log.error("setup failed (%s): %s", _name(rc), _last_error(h))
                lib.mooncake_store_destroy(h)
                return rc
            self._h = h
            self._engine = owner if engine is not None else None
            return 0

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Set this store up as a dummy client of the real client process
        serving server_address ("host:port", on this host; see
        kvferry-client). Every call then runs on the real client: calls on
        buffers from MooncakeHostMemAllocator registered with register_buffer
        carry only addresses (the real client maps the same memory), others
        carry their bytes. Returns 0 or a negative ErrorCode (RPC_FAIL when
        no real client serves the port)."""
        mem_pool_size = _int(mem_pool_size, "mem_pool_size")
        local_buffer_size = _int(local_buffer_size, "local_buffer_size")
        server_address = _key(server_address, "server_address")
        if mem_pool_size < 0 or local_buffer_size < 0:
            return _INVALID
        with self._mu:
            if self._h is not None:
                log.error("setup_dummy: already set up")
                return _INVALID
            h = lib.mooncake_store_create()
            if not h:
                return int(ErrorCode.INTERNAL_ERROR)
            rc = lib.kvferry_store_setup_dummy(h, mem_pool_size, local_buffer_size,
                                               server_address.encode())
            if rc != 0:
                log.error("setup_dummy failed (%s): %s", _name(rc), _last_error(h))
                lib.mooncake_store_destroy(h)
                return rc
            self._h = h
            return 0

    def alloc_from_mem_pool(self, size):
        """Allocate size bytes of shared host memory (as
        MooncakeHostMemAllocator.alloc); returns the address or 0."""
        return MooncakeHostMemAllocator().alloc(size)

    def init_all(self, protocol, device_name, mount_segment_size):
        """Mooncake's test helper: setup with "localhost:12345", etcd metadata
        at 127.0.0.1:2379, a 1 GiB local buffer and the default master."""
        with self._mu:
            if self._h is not None:
                return _INVALID
            h = lib.mooncake_store_create()
            if not h:
                return int(ErrorCode.INTERNAL_ERROR)
            rc = lib.mooncake_store_init_all(h, _key(protocol, "protocol").encode(),
                                             _key(device_name, "device_name").encode(),
                                             _int(mount_segment_size, "mount_segment_size"))
            if rc != 0:
                lib.mooncake_store_destroy(h)
                return rc
            self._h = h
            return 0

    def close(self):
        """Tear the client down (unmount, unregister, free). Returns 0."""
        with self._mu:
            h, self._h = self._h, None
        if h:
            self._on_close()
            pool, self._scratch = self._scratch, None
            if pool is not None:
                pool.close()  # unregistered and freed before the client goes
            lib.mooncake_store_destroy(h)
        self._engine = None
        return 0

    def _on_close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def health_check(self):
        """0 healthy, 1 not set up or closed, 2 master unreachable."""
        if not self._h:
            return 1
        return lib.mooncake_store_health_check(self._h)

    def get_hostname(self):
        """Return this client's segment name ("host:port")."""
        if not self._h:
            return ""
        buf = ctypes.create_string_buffer(512)
        if lib.mooncake_store_get_hostname(self._h, buf, len(buf)) != 0:
            return ""
        return buf.value.decode()

    def master_address(self):
        """Return the address of the master in use; with an embedded master
        this is what other processes pass as master_server_addr (kvferry
        addition)."""
        if not self._h:
            return ""
        return _lib.read_string(lib.kvferry_store_master_addr, self._h, initial=128) or ""

    def last_error(self):
        """Return the text of the last error this client recorded (kvferry addition)."""
        if not self._h:
            return "store not set up"
        return _last_error(self._h)

    # ---- put ----

    def _put_ptr(self, key, addr, size, config, upsert):
        if _grouped(config):
            return self._batch_put_ptrs([key], [addr], [size], config, upsert)[0]
        ptr, keep = _config(config)
        fn = lib.kvferry_store_upsert_from if upsert else lib.mooncake_store_put_from
        return fn(self._h, key.encode(), addr, size, ptr)

    def _put_value(self, key, value, config, upsert):
        key = _key(key)
        addr, n, keep = _buffer(value)
        if not self._h:
            return _INVALID
        if n == 0:
            return _INVALID
        return self._put_ptr(key, addr, n, config, upsert)

    def put(self, key, value, config=None):
        """Store value (bytes-like) under key. An existing key is kept
        unchanged (objects are immutable) and 0 is returned."""
        return self._put_value(key, value, config, False)

    def upsert(self, key, value, config=None):
        """Store value under key, replacing an existing object."""
        return self._put_value(key, value, config, True)

    def put_parts(self, key, *parts, config=None):
        """Store the concatenation of 1-D byte buffers as one object."""
        return self._put_value(key, _concat(parts), config, False)

    def upsert_parts(self, key, *parts, config=None):
        """upsert of the concatenation of 1-D byte buffers."""
        return self._put_value(key, _concat(parts), config, True)

    def _put_batch_values(self, keys, values, config, upsert):
        keys = _keys(keys)
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError("values must be a list of bytes-like objects")
        bufs = [_buffer(v) for v in values]
        if len(keys) != len(bufs):
            log.error("put_batch: %d keys, %d values", len(keys), len(bufs))
            return _INVALID
        if not self._h:
            return _INVALID
        if not keys:
            return 0
        res = self._batch_put_ptrs(keys, [b[0] for b in bufs], [b[1] for b in bufs], config,
                                   upsert)
        for r in res:
            if r != 0:
                return r
        return 0

    def put_batch(self, keys, values, config=None):
        """Store several values; returns 0 or the first negative code."""
        return self._put_batch_values(keys, values, config, False)

    def upsert_batch(self, keys, values, config=None):
        """upsert several values; returns 0 or the first negative code."""
        return self._put_batch_values(keys, values, config, True)

    def put_from(self, key, buffer_ptr, size, config=None):
        """Store size bytes at buffer_ptr (zero-copy when registered)."""
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        if not self._h or buffer_ptr <= 0 or size <= 0:
            return _INVALID
        return self._put_ptr(key, buffer_ptr, size, config, False)

    def upsert_from(self, key, buffer_ptr, size, config=None):
        """upsert of size bytes at buffer_ptr."""
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        if not self._h or buffer_ptr <= 0 or size <= 0:
            return _INVALID
        return self._put_ptr(key, buffer_ptr, size, config, True)

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=None):
        """Store metadata ‖ data as one object (one copy to join them)."""
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        mptr, msize = _int(metadata_buffer_ptr, "metadata_buffer_ptr"), _int(metadata_size,
                                                                             "metadata_size")
        if not self._h or buffer_ptr <= 0 or size < 0 or msize < 0 or (msize and mptr <= 0):
            return _INVALID
        joined = ctypes.create_string_buffer(msize + size)
        if msize:
            ctypes.memmove(joined, mptr, msize)
        if size:
            ctypes.memmove(ctypes.addressof(joined) + msize, buffer_ptr, size)
        return self._put_ptr(key, ctypes.addressof(joined), msize + size, config, False)

    def _batch_put_ptrs(self, keys, ptrs, sizes, config, upsert):
        if _grouped(config):
            return self._batch_put_multi(keys, [[p] for p in ptrs], [[s] for s in sizes], config,
                                         upsert)
        n = len(keys)
        ks = _lib.c_strings(keys)
        bs = (c_void_p * n)(*ptrs)
        ss = (c_size_t * n)(*sizes)
        out = (c_int * n)()
        cfg, keep = _config(config)
        fn = lib.kvferry_store_batch_upsert_from if upsert else lib.mooncake_store_batch_put_from
        rc = fn(self._h, ks, bs, ss, n, cfg, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    def _batch_from(self, keys, buffer_ptrs, sizes, config, upsert):
        keys = _keys(keys)
        ptrs = _ints(buffer_ptrs, "buffer_ptrs")
        sizes = _ints(sizes, "sizes")
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        if not keys:
            return []
        if any(p <= 0 for p in ptrs) or any(s < 0 for s in sizes):
            return [_INVALID] * len(keys)
        return self._batch_put_ptrs(keys, ptrs, sizes, config, upsert)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        """Store several buffers; returns list[int] (0 or negative per key)."""
        return self._batch_from(keys, buffer_ptrs, sizes, config, False)

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        """upsert several buffers; returns list[int]."""
        return self._batch_from(keys, buffer_ptrs, sizes, config, True)

    def _batch_put_multi(self, keys, ptr_lists, size_lists, config, upsert, arrays=None):
        """One library call for keys[i] = concatenation of ptr_lists[i]
        (or of the C arrays made of them already, arrays)."""
        n = len(keys)
        ok, groups = _group_ids(config, n)
        if not ok:
            return [_INVALID] * n
        if n == 0:
            return []
        ptrs, sizes, counts = arrays or _flatten(ptr_lists, size_lists)
        cfg, keep = _config(config)
        out = (c_int * n)()
        rc = lib.kvferry_store_batch_put_from_multi(
            self._h, _lib.c_strings(keys), n, ptrs, sizes, counts, cfg, groups,
            1 if upsert else 0, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    def _multi_args(self, keys, all_buffer_ptrs, all_sizes):
        """Validate multi-buffer arguments: (keys, C arrays of the buffers,
        their sizes and the per-key counts), the arrays None when they are
        invalid (INVALID_PARAMS for every key)."""
        keys = _keys(keys)
        if isinstance(all_buffer_ptrs, (str, bytes)) or isinstance(all_sizes, (str, bytes)):
            raise TypeError("all_buffer_ptrs and all_sizes must be lists of lists of ints")
        all_buffer_ptrs, all_sizes = list(all_buffer_ptrs), list(all_sizes)
        if len(all_buffer_ptrs) != len(keys) or len(all_sizes) != len(keys) or not self._h:
            return keys, None
        try:
            counts = list(map(len, all_buffer_ptrs))
            if counts != list(map(len, all_sizes)):
                return keys, None
        except TypeError:
            raise TypeError("all_buffer_ptrs and all_sizes must be lists of lists of ints") from None
        chain = itertools.chain.from_iterable
        try:
            # vLLM passes thousands of pointers per call: the lists go to
            # C arrays with no Python work per element (array.fromlist
            # converts in C). A negative value does not fit (every key
            # INVALID_PARAMS); the library refuses a NULL buffer that has a
            # size (that key INVALID_PARAMS), so nothing here looks at the
            # elements again.
            flat_p, flat_s = array.array("Q"), array.array("Q")
            for flat, lists in ((flat_p, all_buffer_ptrs), (flat_s, all_sizes)):
                for v in lists:
                    if type(v) is list:
                        flat.fromlist(v)
                    else:
                        flat.extend(v)
        except OverflowError:
            return keys, None
        except TypeError:
            flat_p = array.array("Q", [max(v, 0) for v in _ints(list(chain(all_buffer_ptrs)), "buffer_ptrs")])
            flat_s = _ints(list(chain(all_sizes)), "sizes")
            if flat_s and min(flat_s) < 0:
                return keys, None
            flat_s = array.array("Q", flat_s)
        n, counts = len(flat_p), array.array("Q", counts)
        return keys, ((c_void_p * n).from_buffer(flat_p), (c_size_t * n).from_buffer(flat_s),
                      (c_size_t * len(counts)).from_buffer(counts))

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Store, per key, the concatenation of several buffers (in order) as
        one object; list[int]. Registered buffers are gathered by the
        library straight into the replicas, with no copy."""
        keys, arrays = self._multi_args(keys, all_buffer_ptrs, all_sizes)
        if arrays is None:
            return [_INVALID] * len(keys)
        return self._batch_put_multi(keys, None, None, config, False, arrays)

    # ---- get ----

    def _get_alloc(self, key):
        """Return (size or negative code, pointer or None)."""
        p = c_void_p()
        n = lib.kvferry_store_get_alloc(self._h, key.encode(), byref(p))
        return n, p.value

    def get(self, key):
        """Return the object under key as bytes, or b"" on a miss or failure
        (Mooncake's contract). A failure other than a miss is logged, once
        per error code and minute, with its cause; get_buffer and get_into
        answer the code itself."""
        key = _key(key)
        if not self._h:
            return b""
        n, p = self._get_alloc(key)
        if n < 0 or not p:
            self._log_get_failure(key, n)
            return b""
        try:
            return ctypes.string_at(p, n)
        finally:
            lib.kvferry_store_free(p)

    def _log_get_failure(self, key, code):
        """Log a failed get of an existing object (not a miss), at most once
        per code and _GET_LOG_INTERVAL seconds."""
        if code >= 0 or code == ErrorCode.OBJECT_NOT_FOUND:
            return
        now = time.monotonic()
        last = _get_logged.get(code)
        if last is not None and now - last < _GET_LOG_INTERVAL:
            return
        _get_logged[code] = now
        log.warning("get %r failed: %s: %s", key, _name(code), _last_error(self._h))

    def get_batch(self, keys):
        """Return list[bytes] (b"" for each miss)."""
        return [self.get(k) for k in _keys(keys)]

    def get_buffer(self, key):
        """Return a BufferHandle over the object, or None."""
        key = _key(key)
        if not self._h:
            return None
        n, p = self._get_alloc(key)
        if n < 0 or not p:
            return None
        return BufferHandle(p, n)

    def batch_get_buffer(self, keys):
        """Return list[BufferHandle or None]."""
        return [self.get_buffer(k) for k in _keys(keys)]

    def get_into(self, key, buffer_ptr, size):
        """Read the object into size bytes at buffer_ptr (zero-copy when
        registered). Returns the object size or a negative code; a buffer
        that is too small is INVALID_PARAMS (-600) and nothing is written."""
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        if not self._h or buffer_ptr <= 0 or size < 0:
            return _INVALID
        return lib.mooncake_store_get_into(self._h, key.encode(), buffer_ptr, size)

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        """Read several objects; returns list[int] (bytes read or negative)."""
        keys = _keys(keys)
        ptrs = _ints(buffer_ptrs, "buffer_ptrs")
        sizes = _ints(sizes, "sizes")
        n = len(keys)
        if not self._h or len(ptrs) != n or len(sizes) != n:
            return [_INVALID] * n
        if n == 0:
            return []
        if any(p <= 0 for p in ptrs) or any(s < 0 for s in sizes):
            return [_INVALID] * n
        out = (c_int64 * n)()
        rc = lib.mooncake_store_batch_get_into(self._h, _lib.c_strings(keys), (c_void_p * n)(*ptrs),
                                               (c_size_t * n)(*sizes), n, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        """Read each object and scatter it over several buffers, in order
        (straight into registered buffers, with no copy); returns list[int]
        (bytes read or negative; INVALID_PARAMS when the buffers hold less
        than the object, and nothing is read)."""
        keys, arrays = self._multi_args(keys, all_buffer_ptrs, all_sizes)
        n = len(keys)
        if arrays is None:
            return [_INVALID] * n
        if n == 0:
            return []
        ptrs, sizes, counts = arrays
        out = (c_int64 * n)()
        rc = lib.kvferry_store_batch_get_into_multi(self._h, _lib.c_strings(keys), n, ptrs, sizes,
                                                    counts, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    # ---- existence, size, removal ----

    def is_exist(self, key):
        """1 if key exists, 0 if not, or a negative code."""
        key = _key(key)
        if not self._h:
            return _INVALID
        return lib.mooncake_store_is_exist(self._h, key.encode())

    def batch_is_exist(self, keys):
        """list[int] of 1 / 0 / negative."""
        keys = _keys(keys)
        n = len(keys)
        if not self._h:
            return [_INVALID] * n
        if n == 0:
            return []
        out = (c_int * n)()
        rc = lib.mooncake_store_batch_is_exist(self._h, _lib.c_strings(keys), n, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    def get_size(self, key):
        """The object's size, or a negative code."""
        key = _key(key)
        if not self._h:
            return _INVALID
        return lib.mooncake_store_get_size(self._h, key.encode())

    def remove(self, key, force=False):
        """Remove key; a leased object fails with OBJECT_HAS_LEASE unless force."""
        key = _key(key)
        if not self._h:
            return _INVALID
        return lib.mooncake_store_remove(self._h, key.encode(), 1 if force else 0)

    def batch_remove(self, keys, force=False):
        """Remove several keys in one master call; list[int]."""
        keys = _keys(keys)
        n = len(keys)
        if not self._h:
            return [_INVALID] * n
        if n == 0:
            return []
        out = (c_int * n)()
        rc = lib.kvferry_store_batch_remove(self._h, _lib.c_strings(keys), n, 1 if force else 0,
                                            out)
        if rc != 0:
            return [rc] * n
        return list(out)

    def remove_by_regex(self, regex_pattern, force=False):
        """Remove keys matching an RE2 pattern; returns the count or negative."""
        regex_pattern = _key(regex_pattern, "regex_pattern")
        if not self._h:
            return _INVALID
        return lib.mooncake_store_remove_by_regex(self._h, regex_pattern.encode(),
                                                  1 if force else 0)

    def remove_all(self, force=False):
        """Remove every object; returns the count or negative."""
        if not self._h:
            return _INVALID
        return lib.mooncake_store_remove_all(self._h, 1 if force else 0)

    # ---- registration, replicas ----

    def register_buffer(self, buffer_ptr, size):
        """Register memory for zero-copy put_from / get_into. 0 or negative."""
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        if not self._h:
            return _INVALID
        if buffer_ptr <= 0 or size <= 0:
            return int(ErrorCode.INTERNAL_ERROR)
        return lib.mooncake_store_register_buffer(self._h, buffer_ptr, size)

    def unregister_buffer(self, buffer_ptr):
        """Unregister memory registered with register_buffer."""
        buffer_ptr = _int(buffer_ptr, "buffer_ptr")
        if not self._h:
            return _INVALID
        if buffer_ptr <= 0:
            return int(ErrorCode.INTERNAL_ERROR)
        return lib.mooncake_store_unregister_buffer(self._h, buffer_ptr)

    def _replicas(self, keys):
        n = len(keys)
        p = c_void_p()
        rc = lib.kvferry_store_replica_desc(self._h, _lib.c_strings(keys), n, byref(p))
        if rc < 0 or not p.value:
            log.error("replica desc failed (%s): %s", _name(rc), self.last_error())
            return None
        try:
            data = json.loads(ctypes.string_at(p.value, rc).decode())
        finally:
            lib.kvferry_store_free(p.value)
        out = []
        for ent in data:
            reps = []
            for r in ent.get("replicas") or []:
                try:
                    st = ReplicaStatus[r.get("status", "UNDEFINED")]
                except KeyError:
                    st = ReplicaStatus.UNDEFINED
                if r.get("disk"):
                    disk = DiskDescriptor(r.get("file_path", ""), r["size"], r["segment_name"])
                    reps.append(ReplicaDescriptor(st, None, r.get("protocol", ""), disk))
                    continue
                d = Descriptor(r["size"], r["address"], r["segment_name"])
                reps.append(ReplicaDescriptor(st, MemoryDescriptor(d), r.get("protocol", "")))
            out.append((ent.get("code", 0), ent.get("size", 0), reps))
        return out

    # ---- versioned publish (beyond Mooncake) ----

    VERSION_ANY = (1 << 64) - 1

    def put_versioned(self, key, value, expected_version=0, config=None):
        """Publish value under key over version expected_version (0: the
        key must not exist yet; VERSION_ANY: whatever it holds). Returns
        (version, 0), or (0, INVALID_VERSION) when another publisher got
        there first (read the key and retry over its version)."""
        key = _key(key)
        addr, n, keep = _buffer(value)
        if not self._h or n == 0:
            return 0, _INVALID
        return self._publish_ptr(key, addr, n, expected_version, config)

    def _publish_ptr(self, key, addr, n, expected_version, config):
        ptr, keep = _config(config)
        v = c_uint64()
        rc = lib.kvferry_store_publish(self._h, key.encode(), addr, n, int(expected_version), ptr,
                                       byref(v))
        return (v.value, 0) if rc == 0 else (0, rc)

    def get_versioned(self, key, min_version=0, timeout_ms=0):
        """Return (bytes, version) once key is at version min_version or
        later, waiting up to timeout_ms for a publish; (b"", 0) when not
        (last_error() says why)."""
        key = _key(key)
        if not self._h:
            return b"", 0
        p, v = c_void_p(), c_uint64()
        n = lib.kvferry_store_get_versioned(self._h, key.encode(), int(min_version), int(timeout_ms),
                                            byref(p), byref(v))
        if n < 0 or not p.value:
            return b"", 0
        try:
            return ctypes.string_at(p.value, n), v.value
        finally:
            lib.kvferry_store_free(p.value)

    def pub_tensor_versioned(self, key, tensor, expected_version=0, config=None):
        """pub_tensor as a versioned publish: (version, 0) or (0, code)."""
        key = _key(key)
        if not self._h:
            return 0, _INVALID
        o = self._encode_all([(tensor, None)])[0]
        return self._publish_ptr(key, o.ctypes.data, o.nbytes, expected_version, config)

    def get_tensor_versioned(self, key, min_version=0, timeout_ms=0):
        """Return (tensor, version) at version min_version or later, or
        (None, 0)."""
        key = _key(key)
        if not self._h:
            return None, 0
        p, v = c_void_p(), c_uint64()
        n = lib.kvferry_store_get_versioned(self._h, key.encode(), int(min_version), int(timeout_ms),
                                            byref(p), byref(v))
        if n < 0 or not p.value:
            return None, 0
        return self._decode(_malloc_array(p.value, n)), v.value

    # ---- copy and move tasks ----

    def create_copy_task(self, key, targets):
        """Copy key's object to each segment in targets (segment names, as
        get_hostname returns them). Returns (task_id, 0) or ("", code)."""
        key = _key(key)
        targets = _keys(targets)
        if not self._h:
            return "", _INVALID
        buf = ctypes.create_string_buffer(64)
        rc = lib.kvferry_store_create_copy_task(self._h, key.encode(), _lib.c_strings(targets),
                                                len(targets), buf, len(buf))
        if rc != 0:
            log.error("create_copy_task %r failed (%s): %s", key, _name(rc), self.last_error())
            return "", rc
        return buf.value.decode(), 0

    def create_move_task(self, key, source, target):
        """Move key's replica on segment source to segment target. Returns
        (task_id, 0) or ("", code)."""
        key = _key(key)
        if not self._h:
            return "", _INVALID
        buf = ctypes.create_string_buffer(64)
        rc = lib.kvferry_store_create_move_task(self._h, key.encode(), _key(source, "source").encode(),
                                                _key(target, "target").encode(), buf, len(buf))
        if rc != 0:
            log.error("create_move_task %r failed (%s): %s", key, _name(rc), self.last_error())
            return "", rc
        return buf.value.decode(), 0

    def query_task(self, task_id):
        """Return (QueryTaskResponse, 0), or (None, code) for an unknown
        task."""
        if not self._h:
            return None, _INVALID
        typ, st = c_int(), c_int()
        created, updated = c_int64(), c_int64()
        assigned = ctypes.create_string_buffer(128)
        msg = ctypes.create_string_buffer(1024)
        rc = lib.kvferry_store_query_task(self._h, _key(task_id, "task_id").encode(), byref(typ),
                                          byref(st), byref(created), byref(updated), assigned,
                                          len(assigned), msg, len(msg))
        if rc != 0:
            return None, rc
        return QueryTaskResponse(task_id, TaskType(typ.value), TaskStatus(st.value), created.value,
                                 updated.value, assigned.value.decode(errors="replace"),
                                 msg.value.decode(errors="replace")), 0

    def get_replica_desc(self, key):
        """Return the object's replicas (list[ReplicaDescriptor]); [] on a miss."""
        key = _key(key)
        if not self._h:
            return []
        r = self._replicas([key])
        if not r or r[0][0] != 0:
            return []
        return r[0][2]

    def batch_get_replica_desc(self, keys):
        """Return {key: list[ReplicaDescriptor]} for the keys found."""
        keys = _keys(keys)
        if not self._h or not keys:
            return {}
        r = self._replicas(keys)
        if r is None:
            return {}
        return {k: reps for k, (code, _size, reps) in zip(keys, r) if code == 0}

    # ---- tensors ----

    def _decode(self, arr):
        fmt = self.tensor_format
        if fmt not in ("auto", "torch", "numpy"):
            raise ValueError("tensor_format must be 'auto', 'torch' or 'numpy'")
        t = _tensor.decode(arr, fmt)
        if t is None:
            log.error("object is not a valid tensor (or its dtype is unavailable here)")
        return t

    def _encode(self, tensor, meta=None, out=None):
        if not _tensor.is_tensor(tensor):
            raise TypeError("tensor must be a torch.Tensor or numpy.ndarray, not %s"
                            % type(tensor).__name__)
        return _tensor.encode(tensor, meta, out=out)

    def _encode_all(self, pairs):
        """Encode [(tensor, meta)] for one synchronous put into this
        thread's reusable scratch memory (objects are copied out by the
        put, so the scratch is free again when it returns)."""
        for t, _ in pairs:
            if not _tensor.is_tensor(t):
                raise TypeError("tensor must be a torch.Tensor or numpy.ndarray, not %s"
                                % type(t).__name__)
        sizes = [_tensor.encoded_size(t) for t, _ in pairs]
        scratch = _scratch(sum(sizes))
        if scratch is None:
            return [self._encode(t, m) for t, m in pairs]
        objs, off = [], 0
        for (t, m), n in zip(pairs, sizes):
            objs.append(self._encode(t, m, scratch[off:off + n]))
            off += n
        return objs

    def _put_objects(self, keys, objs, config, upsert):
        """Put encoded objects (numpy uint8 arrays); list[int]."""
        if not keys:
            return []
        if len(keys) == 1:
            o = objs[0]
            return [self._put_ptr(keys[0], o.ctypes.data, o.nbytes, config, upsert)]
        return self._batch_put_ptrs(keys, [o.ctypes.data for o in objs],
                                    [o.nbytes for o in objs], config, upsert)

    def _put_tensors(self, keys, tensors, config, upsert):
        keys = _keys(keys)
        tensors = list(tensors)
        if not self._h or len(keys) != len(tensors) or not keys:
            return [_INVALID] * len(keys)
        if any(_is_cuda(t) for t in tensors):
            host = [i for i, t in enumerate(tensors) if not _is_cuda(t)]
            out = [None] * len(keys)
            for i, t in enumerate(tensors):
                if _is_cuda(t):
                    out[i] = self._put_cuda(keys[i], t, config, upsert)
            if host:
                res = self._put_tensors([keys[i] for i in host], [tensors[i] for i in host], config, upsert)
                for i, r in zip(host, res):
                    out[i] = r
            return out
        objs = self._encode_all([(t, None) for t in tensors])
        return self._put_objects(keys, objs, config, upsert)

    def _put_cuda(self, key, t, config, upsert, meta=None):
        """Put a CUDA tensor without taking its data through host memory:
        the 304-byte header and the data are joined in GPU scratch memory
        (one small host-to-device and one device-to-device copy) that the
        library sends from GPU memory (CUDA IPC, staged TCP, ...). Scratch
        buffers come from the client's pool (_gpuscratch: registered once,
        reused, bounded, freed at close)."""
        if hasattr(t, "is_contiguous") and not t.is_contiguous():
            t = t.contiguous()  # on the device
        code = _tensor.dtype_code(t)
        if code < 0:
            raise TypeError("unsupported dtype %s" % t.dtype)
        nbytes = t.numel() * t.element_size()
        meta = meta or _tensor.TensorMetadata(code, tuple(t.shape))
        header = _tensor.pack_metadata(meta)
        total = len(header) + nbytes
        dev = _device_index(t)
        pool = self._gpu_scratch()
        if pool is None:
            return _INVALID
        buf = pool.acquire(total, dev)
        try:
            hb = ctypes.create_string_buffer(header, len(header))
            if lib.kvferry_cuda_memcpy(buf, hb, len(header)) != 0 or (
                    nbytes and lib.kvferry_cuda_memcpy(buf + len(header), t.data_ptr(), nbytes) != 0):
                return int(ErrorCode.INTERNAL_ERROR)
            return self._put_ptr(key, buf, total, config, upsert)
        finally:
            pool.release(buf)

    def _gpu_scratch(self):
        """The client's pool of registered GPU scratch buffers (made on
        first use; None when the client is not set up)."""
        with self._mu:
            h = self._h
            if not h:
                return None
            if self._scratch is None:
                from ._gpuscratch import GpuScratchPool

                self._scratch = GpuScratchPool(lambda p, n: lib.mooncake_store_register_buffer(h, p, n),
                                               lambda p: lib.mooncake_store_unregister_buffer(h, p))
            return self._scratch

    def _get_cuda(self, key, device, dst=None):
        """Read key's tensor object into GPU scratch memory of device (the
        library writes GPU memory directly), check its header (copied to the
        host: 304 bytes), then copy the data device-to-device into dst, or
        into a new tensor of torch's made on device when dst is None.
        Returns (payload size or negative code, tensor)."""
        size = self.get_size(key)
        if size < 0:
            return size, None
        if size < _tensor.TENSOR_METADATA_SIZE:
            return _INVALID, None
        pool = self._gpu_scratch()
        if pool is None:
            return _INVALID, None
        buf = pool.acquire(size, device)
        try:
            n = self.get_into(key, buf, size)
            if n < 0:
                return n, None
            head = ctypes.create_string_buffer(_tensor.TENSOR_METADATA_SIZE)
            if lib.kvferry_cuda_memcpy(head, buf, len(head)) != 0:
                return int(ErrorCode.INTERNAL_ERROR), None
            meta = _tensor.parse_metadata(head.raw, n)
            if meta is None:
                return _INVALID, None
            if dst is None:
                torch = _tensor._torch()
                if torch is None:
                    raise ImportError("get_tensor(device=...) needs torch")
                dst = torch.empty(meta.local_shape, dtype=getattr(torch, meta.dtype_name), device="cuda:%d" % device)
            nbytes = dst.numel() * dst.element_size()
            if meta.dtype != _tensor.dtype_code(dst) or meta.ndim != len(dst.shape) or meta.data_bytes != nbytes:
                return _INVALID, None
            if nbytes and lib.kvferry_cuda_memcpy(dst.data_ptr(), buf + meta.data_offset, nbytes) != 0:
                return int(ErrorCode.INTERNAL_ERROR), None
            return meta.data_bytes, dst
        finally:
            pool.release(buf)

    def put_tensor(self, key, tensor):
        """Store a tensor (numpy array or torch tensor) as a tensor object."""
        return self._put_tensors([_key(key)], [tensor], None, False)[0]

    def upsert_tensor(self, key, tensor):
        """put_tensor that replaces an existing object."""
        return self._put_tensors([_key(key)], [tensor], None, True)[0]

    def pub_tensor(self, key, tensor, config=None):
        """put_tensor with a ReplicateConfig."""
        return self._put_tensors([_key(key)], [tensor], config, False)[0]

    def upsert_pub_tensor(self, key, tensor, config=None):
        """upsert_tensor with a ReplicateConfig."""
        return self._put_tensors([_key(key)], [tensor], config, True)[0]

    def batch_put_tensor(self, keys, tensors_list):
        """Store several tensors; list[int]."""
        return self._put_tensors(keys, tensors_list, None, False)

    def batch_upsert_tensor(self, keys, tensors_list):
        """upsert several tensors; list[int]."""
        return self._put_tensors(keys, tensors_list, None, True)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        """Store several tensors with a ReplicateConfig; list[int]."""
        return self._put_tensors(keys, tensors_list, config, False)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        """upsert several tensors with a ReplicateConfig; list[int]."""
        return self._put_tensors(keys, tensors_list, config, True)

    def get_tensor(self, key, device=None):
        """Return the tensor stored under key, or None: a CPU tensor (as
        Mooncake's), or one on device when a CUDA device is given
        ("cuda:1", torch.device), read without a host copy of its data."""
        key = _key(key)
        if not self._h:
            return None
        if device is not None and _is_cuda_device(device):
            n, t = self._get_cuda(key, _device_index(device))
            return t if n >= 0 else None
        n, p = self._get_alloc(key)
        if n < 0 or not p:
            return None
        return self._decode(_malloc_array(p, n))

    def batch_get_tensor(self, keys):
        """Return list[tensor or None]."""
        return [self.get_tensor(k) for k in _keys(keys)]

    def get_tensor_into(self, key, buffer_ptr, size):
        """Read a tensor object into size bytes at buffer_ptr and return a
        tensor viewing its data there (valid while the buffer lives), or None."""
        n = self.get_into(key, buffer_ptr, size)
        if n < 0:
            return None
        return self._decode_at(buffer_ptr, n)

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """get_tensor_into for several keys; list[tensor or None]."""
        res = self.batch_get_into(keys, buffer_ptrs, sizes)
        out = []
        for n, p in zip(res, _ints(buffer_ptrs, "buffer_ptrs")):
            out.append(self._decode_at(p, n) if n >= 0 else None)
        return out

    def _decode_at(self, ptr, n):
        """The tensor of the object of n bytes at ptr, viewing its data: a
        numpy view for host memory; for GPU memory a CUDA tensor through
        torch.as_tensor and __cuda_array_interface__ (only the 304-byte
        header is copied to the host)."""
        dev = c_int(0)
        if not lib.has("kvferry_memory_kind") or lib.kvferry_memory_kind(ptr, byref(dev)) != 2:
            return self._decode(_view(ptr, n))
        head = ctypes.create_string_buffer(_tensor.TENSOR_METADATA_SIZE)
        if n < len(head) or lib.kvferry_cuda_memcpy(head, ptr, len(head)) != 0:
            return None
        meta = _tensor.parse_metadata(head.raw, n)
        torch = _tensor._torch()
        if meta is None or torch is None:
            log.error("object at %#x is not a valid tensor, or torch is missing", ptr)
            return None
        return _cuda_view(torch, ptr + meta.data_offset, meta, dev.value)

    def get_tensor_into_cuda(self, key, tensor):
        """Read a tensor object's payload into a pre-allocated tensor (any
        device) whose dtype, ndim and byte size match. Returns the payload
        size or a negative code."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        """get_tensor_into_cuda for several keys; list[int]."""
        keys = _keys(keys)
        tensors = list(tensors_list)
        if not self._h or len(keys) != len(tensors):
            return [_INVALID] * len(keys)
        out = []
        for key, dst in zip(keys, tensors):
            if _is_cuda(dst):
                out.append(self._get_cuda(key, _device_index(dst), dst)[0])
                continue
            if not _tensor.is_tensor(dst):
                raise TypeError("tensors must be torch tensors or numpy arrays")
            n, p = self._get_alloc(key)
            if n < 0 or not p:
                out.append(n if n < 0 else int(ErrorCode.INTERNAL_ERROR))
                continue
            r = _tensor.decode_raw(_malloc_array(p, n))
            code = _tensor.dtype_code(dst)
            if r is None:
                out.append(_INVALID)
                continue
            meta, data = r
            nbytes = dst.numel() * dst.element_size() if hasattr(dst, "numel") else dst.nbytes
            if meta.dtype != code or meta.ndim != len(dst.shape) or meta.data_bytes != nbytes:
                out.append(_INVALID)
                continue
            _copy_into(dst, data)
            out.append(meta.data_bytes)
        return out

    def _check_tensor_object(self, buffer_ptr, size):
        if buffer_ptr <= 0 or size < _tensor.TENSOR_METADATA_SIZE:
            return False
        return _tensor.parse_metadata(_view(buffer_ptr, size)) is not None

    def _tensor_from(self, keys, buffer_ptrs, sizes, upsert):
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        ok = [self._check_tensor_object(p, s) for p, s in zip(ptrs, sizes)]
        out = [_INVALID] * len(keys)
        idx = [i for i, good in enumerate(ok) if good]
        if idx:
            res = self._batch_put_ptrs([keys[i] for i in idx], [ptrs[i] for i in idx],
                                       [sizes[i] for i in idx], None, upsert)
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def put_tensor_from(self, key, buffer_ptr, size):
        """Store a buffer already laid out as [TensorMetadata][data]."""
        return self._tensor_from([key], [buffer_ptr], [size], False)[0]

    def upsert_tensor_from(self, key, buffer_ptr, size):
        """upsert of a [TensorMetadata][data] buffer."""
        return self._tensor_from([key], [buffer_ptr], [size], True)[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        """put_tensor_from for several buffers; list[int]."""
        return self._tensor_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        """upsert_tensor_from for several buffers; list[int]."""
        return self._tensor_from(keys, buffer_ptrs, sizes, True)

    # ---- tensor parallelism: shards stored as f"{key}_tp_{rank}" ----

    def _put_tp(self, keys, tensors, config, tp_size, split_dim, upsert=False):
        keys = _keys(keys)
        tensors = list(tensors)
        if not self._h or len(keys) != len(tensors):
            return [_INVALID] * len(keys)
        tp_size, split_dim = _int(tp_size, "tp_size"), _int(split_dim, "split_dim")
        if tp_size <= 1:
            return self._put_tensors(keys, tensors, config, upsert)
        if not _group_ids(config, len(keys))[0]:
            return [_INVALID] * len(keys)
        out = []
        for i, (key, t) in enumerate(zip(keys, tensors)):
            if not _tensor.is_tensor(t):
                raise TypeError("tensor must be a torch.Tensor or numpy.ndarray")
            shards = _tensor.tp_split(t, tp_size, split_dim)
            if shards is None:
                log.error("cannot split %s along dim %d into %d shards", tuple(t.shape),
                          split_dim, tp_size)
                out.append(_INVALID)
                continue
            objs = self._encode_all(shards)
            # Every shard of a key is in the key's group.
            res = self._put_objects([_tensor.tp_key(key, r) for r in range(tp_size)], objs,
                                    _pick_groups(config, [i] * tp_size), upsert)
            out.append(next((r for r in res if r != 0), 0))
        return out

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Split tensor evenly along split_dim and store every shard r as
        f"{key}_tp_{r}" (tp_rank is ignored, as in Mooncake). tp_size <= 1
        is put_tensor(key). Returns 0 or the first negative code."""
        return self._put_tp([_key(key)], [tensor], None, tp_size, split_dim)[0]

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp with a ReplicateConfig."""
        return self._put_tp([_key(key)], [tensor], config, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        """put_tensor_with_tp for several tensors; list[int]."""
        return self._put_tp(base_keys, tensors_list, None, tp_size, split_dim)

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        """pub_tensor_with_tp for several tensors; list[int]."""
        return self._put_tp(base_keys, tensors_list, config, tp_size, split_dim)

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """Return shard tp_rank of key (get_tensor(key) when tp_size <= 1), or None."""
        key = _key(key)
        tp_rank, tp_size = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        if tp_size <= 1:
            return self.get_tensor(key)
        if not 0 <= tp_rank < tp_size:
            return None
        return self.get_tensor(_tensor.tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        """get_tensor_with_tp for several keys; list[tensor or None]."""
        return [self.get_tensor_with_tp(k, tp_rank, tp_size) for k in _keys(base_keys, "base_keys")]

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp of a full tensor object at buffer_ptr."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank, tp_size,
                                                  split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        """put_tensor_with_tp_from for several buffers; list[int]."""
        keys = _keys(base_keys, "base_keys")
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        if _int(tp_size, "tp_size") <= 1:
            return self._tensor_from(keys, ptrs, sizes, False)
        out = []
        for k, p, s in zip(keys, ptrs, sizes):
            t = _tensor.decode(_view(p, s), "numpy") if self._check_tensor_object(p, s) else None
            if t is None and self._check_tensor_object(p, s):
                t = _tensor.decode(_view(p, s), "torch")
            if t is None:
                out.append(_INVALID)
                continue
            out.append(self._put_tp([k], [t], None, tp_size, split_dim)[0])
        return out

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """get_tensor_into of shard tp_rank of key."""
        key = _key(key)
        if _int(tp_size, "tp_size") > 1:
            key = _tensor.tp_key(key, _int(tp_rank, "tp_rank"))
        return self.get_tensor_into(key, buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1):
        """get_tensor_with_tp_into for several keys; list[tensor or None]."""
        keys = _keys(base_keys, "base_keys")
        if _int(tp_size, "tp_size") > 1:
            keys = [_tensor.tp_key(k, _int(tp_rank, "tp_rank")) for k in keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)


# Synchronous tensor puts encode into a per-thread scratch buffer that is
# reused, up to this size; larger objects get their own allocation.
_SCRATCH_MAX = 1 << 30
_scratch_tls = threading.local()


def _scratch(n):
    """A uint8 numpy array of n bytes of this thread's scratch, or None."""
    import numpy as np

    if n > _SCRATCH_MAX:
        return None
    buf = getattr(_scratch_tls, "buf", None)
    if buf is None or buf.nbytes < n:
        buf = np.empty(min(_SCRATCH_MAX, max(n, 2 * (buf.nbytes if buf is not None else 0))),
                       np.uint8)
        _scratch_tls.buf = buf
    return buf[:n]


def _view(ptr, n):
    """A numpy uint8 view of n bytes at ptr (the caller keeps them alive)."""
    import numpy as np

    if n <= 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


class _CudaArray:
    """__cuda_array_interface__ (v2) over device memory, for torch.as_tensor."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 2}


def _cuda_view(torch, ptr, meta, dev):
    """A torch CUDA tensor of meta's dtype and local shape viewing ptr."""
    name = meta.dtype_name
    raw = {"bfloat16": ("<i2", "int16"), "float8_e4m3fn": ("|u1", "uint8"), "float8_e5m2": ("|u1", "uint8"),
           "bool": ("|u1", "uint8")}.get(name)
    import numpy as np

    typestr = raw[0] if raw else np.dtype(name).str
    t = torch.as_tensor(_CudaArray(ptr, meta.local_shape, typestr), device="cuda:%d" % dev)
    if raw:
        t = t.view(getattr(torch, name))
    return t


def _is_cuda(t):
    """Report whether t is a CUDA tensor (torch's, or one that looks so)."""
    return getattr(getattr(t, "device", None), "type", None) == "cuda"


def _is_cuda_device(d):
    return getattr(d, "type", None) == "cuda" or (isinstance(d, str) and d.split(":")[0] == "cuda")


def _device_index(x):
    """The CUDA device index of a tensor, torch.device or "cuda:N"."""
    d = getattr(x, "device", x)
    if isinstance(d, str):
        _, _, idx = d.partition(":")
        return int(idx) if idx else 0
    idx = getattr(d, "index", None)
    return idx if idx is not None else 0


def _copy_into(dst, data):
    """Copy raw bytes (numpy uint8) into a numpy array or torch tensor."""
    import numpy as np

    if hasattr(dst, "numel"):  # torch
        import torch

        src = torch.from_numpy(data.copy() if not data.flags.writeable else data)
        flat = dst.view(-1).view(torch.uint8) if dst.is_contiguous() else None
        if flat is None:
            raise ValueError("destination tensor must be contiguous")
        flat.copy_(src)
    else:
        if not dst.flags.c_contiguous:
            raise ValueError("destination array must be contiguous")
        dst.reshape(-1).view(np.uint8)[:] = data


# When each failed-get code was last logged (MooncakeDistributedStore.get).
_get_logged = {}
_GET_LOG_INTERVAL = 60.0


def _last_error(h):
    return _lib.read_string(lib.kvferry_store_last_error, h) or ""


def _name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# ---- asyncio ----


class _Queue:
    """A library completion queue bound to one event loop: calls are
    submitted to the library's worker pool, and the loop learns of
    completions through the queue's eventfd."""

    _POLL = 256

    def __init__(self, h, loop, workers, depth):
        q = lib.kvferry_store_queue_create(h, workers, depth)
        if not q:
            raise RuntimeError("kvferry: cannot create the store completion queue")
        self.q = q
        self.fd = lib.kvferry_store_queue_fd(q)
        self.loop = loop
        self.depth = depth
        self.sem = asyncio.Semaphore(depth)
        self.pending = {}  # tag -> (future, keepalive)
        self.tag = 0
        self.tags = (c_uint64 * self._POLL)()
        self.results = (c_int64 * self._POLL)()
        self.data = (c_void_p * self._POLL)()
        loop.add_reader(self.fd, self._ready)

    async def call(self, op, key, addr=0, size=0, config=None, flags=0, keep=None):
        await self.sem.acquire()
        self.tag += 1
        tag = self.tag
        fut = self.loop.create_future()
        cfg, ckeep = _config(config)
        rc = lib.kvferry_store_queue_submit(self.q, op, tag, key.encode(), addr, size, cfg, flags)
        if rc != 0:
            self.sem.release()
            return (rc if rc != _lib.KVFERRY_ERR_CLOSED else _INVALID), None
        # The entry (and with it the buffers) stays until the library has
        # finished with the call, even if the awaiting task is cancelled.
        self.pending[tag] = (fut, (keep, ckeep))
        return await fut

    def _ready(self):
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            n = lib.kvferry_store_queue_poll(self.q, self.tags, self.results, self.data,
                                             self._POLL)
            if n <= 0:
                return
            for i in range(n):
                ent = self.pending.pop(self.tags[i], None)
                self.sem.release()
                res, data = self.results[i], self.data[i]
                if ent is None or ent[0].done():
                    if data:
                        lib.kvferry_store_free(data)
                    continue
                ent[0].set_result((res, data))
            if n < self._POLL:
                return

    def close(self):
        try:
            if not self.loop.is_closed():
                self.loop.remove_reader(self.fd)
        except Exception:
            pass
        lib.kvferry_store_queue_destroy(self.q)
        for fut, _keep in self.pending.values():
            if not fut.done() and not self.loop.is_closed():
                fut.set_result((_INVALID, None))
        self.pending.clear()


def _grouped_runs_sync(fn):
    """A native async put whose config names group_ids runs its synchronous
    method on the thread pool instead (the completion queue carries no
    group ids); the answer is the same."""
    name = fn.__name__[len("_a_"):]

    @functools.wraps(fn)
    async def wrapper(self, *args, **kwargs):
        cfg = kwargs.get("config")
        if cfg is None:
            cfg = next((a for a in args if isinstance(a, ReplicateConfig)), None)
        if _grouped(cfg):
            return await self._threaded(getattr(self, name))(*args, **kwargs)
        return await fn(self, *args, **kwargs)

    return wrapper


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """MooncakeDistributedStore with ``async_<method>`` awaitables (spec §6.4).

    Data calls (put*, upsert*, get*, is_exist, get_size, remove and their
    batch and tensor forms) run on the library's worker pool and complete
    through an eventfd the event loop watches: no Python thread per call,
    and thousands of requests may be in flight. Other methods run on a
    small bounded thread pool.

    queue_workers (default 16) and queue_depth (default 4096) size the
    library's pool and the number of calls in flight.
    """

    def __init__(self, queue_workers=16, queue_depth=4096):
        super().__init__()
        self._queue = None
        self._queue_workers = queue_workers
        self._queue_depth = queue_depth
        self._pool = None

    def __getattr__(self, name):
        if not name.startswith("async_"):
            raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))
        sync_name = name[6:]
        sync = getattr(self, sync_name, None)
        if sync is None or not callable(sync):
            raise AttributeError("'%s' object has no attribute '%s' (nor '%s')"
                                 % (type(self).__name__, name, sync_name))
        native = getattr(self, "_a_" + sync_name, None)
        wrapper = native if native is not None else self._threaded(sync)
        setattr(self, name, wrapper)
        return wrapper

    def _threaded(self, sync):
        @functools.wraps(sync)
        async def wrapper(*args, **kwargs):
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=4, thread_name_prefix="kvferry-store")
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, functools.partial(sync, *args, **kwargs))

        return wrapper

    def _q(self):
        loop = asyncio.get_running_loop()
        q = self._queue
        if q is not None and q.loop is not loop:
            if q.pending:
                raise RuntimeError("store used from two event loops at once")
            q.close()
            self._queue = q = None
        if q is None:
            if not self._h:
                return None
            q = self._queue = _Queue(self._h, loop, self._queue_workers, self._queue_depth)
        return q

    def _on_close(self):
        q, self._queue = self._queue, None
        if q is not None:
            q.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    # Native async calls. Each mirrors its synchronous method's checks and
    # results.

    @_grouped_runs_sync
    async def _a_put(self, key, value, config=None):
        return await self._aput(key, value, config, False)

    @_grouped_runs_sync
    async def _a_upsert(self, key, value, config=None):
        return await self._aput(key, value, config, True)

    async def _aput(self, key, value, config, upsert):
        key = _key(key)
        addr, n, keep = _buffer(value)
        q = self._q()
        if q is None or n == 0:
            return _INVALID
        rc, _ = await q.call(_lib.QOP_PUT, key, addr, n, config,
                             _lib.QFLAG_UPSERT if upsert else 0, keep)
        return rc

    @_grouped_runs_sync
    async def _a_put_from(self, key, buffer_ptr, size, config=None):
        return await self._aput_from(key, buffer_ptr, size, config, False)

    @_grouped_runs_sync
    async def _a_upsert_from(self, key, buffer_ptr, size, config=None):
        return await self._aput_from(key, buffer_ptr, size, config, True)

    async def _aput_from(self, key, buffer_ptr, size, config, upsert):
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        q = self._q()
        if q is None or buffer_ptr <= 0 or size <= 0:
            return _INVALID
        rc, _ = await q.call(_lib.QOP_PUT, key, buffer_ptr, size, config,
                             _lib.QFLAG_UPSERT if upsert else 0)
        return rc

    @_grouped_runs_sync
    async def _a_batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        return await self._abatch_from(keys, buffer_ptrs, sizes, config, False)

    @_grouped_runs_sync
    async def _a_batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return await self._abatch_from(keys, buffer_ptrs, sizes, config, True)

    async def _abatch_from(self, keys, buffer_ptrs, sizes, config, upsert):
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        return list(await asyncio.gather(*[self._aput_from(k, p, s, config, upsert)
                                           for k, p, s in zip(keys, ptrs, sizes)]))

    @_grouped_runs_sync
    async def _a_put_batch(self, keys, values, config=None):
        keys = _keys(keys)
        values = list(values)
        if len(keys) != len(values):
            return _INVALID
        res = await asyncio.gather(*[self._aput(k, v, config, False)
                                     for k, v in zip(keys, values)])
        return next((r for r in res if r != 0), 0)

    async def _a_get(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return b""
        n, p = await q.call(_lib.QOP_GET_ALLOC, key)
        if n < 0 or not p:
            return b""
        try:
            return ctypes.string_at(p, n)
        finally:
            lib.kvferry_store_free(p)

    async def _a_get_batch(self, keys):
        return list(await asyncio.gather(*[self._a_get(k) for k in _keys(keys)]))

    async def _a_get_buffer(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return None
        n, p = await q.call(_lib.QOP_GET_ALLOC, key)
        if n < 0 or not p:
            return None
        return BufferHandle(p, n)

    async def _a_get_into(self, key, buffer_ptr, size):
        key = _key(key)
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        q = self._q()
        if q is None or buffer_ptr <= 0 or size < 0:
            return _INVALID
        n, _ = await q.call(_lib.QOP_GET_INTO, key, buffer_ptr, size)
        return n

    async def _a_batch_get_into(self, keys, buffer_ptrs, sizes):
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        return list(await asyncio.gather(*[self._a_get_into(k, p, s)
                                           for k, p, s in zip(keys, ptrs, sizes)]))

    async def _a_is_exist(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return _INVALID
        return (await q.call(_lib.QOP_IS_EXIST, key))[0]

    async def _a_batch_is_exist(self, keys):
        return list(await asyncio.gather(*[self._a_is_exist(k) for k in _keys(keys)]))

    async def _a_get_size(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return _INVALID
        return (await q.call(_lib.QOP_GET_SIZE, key))[0]

    async def _a_remove(self, key, force=False):
        key = _key(key)
        q = self._q()
        if q is None:
            return _INVALID
        return (await q.call(_lib.QOP_REMOVE, key, flags=_lib.QFLAG_FORCE if force else 0))[0]

    async def _a_batch_remove(self, keys, force=False):
        return list(await asyncio.gather(*[self._a_remove(k, force) for k in _keys(keys)]))

    async def _aput_tensor(self, key, tensor, config, upsert):
        key = _key(key)
        obj = self._encode(tensor)
        q = self._q()
        if q is None:
            return _INVALID
        rc, _ = await q.call(_lib.QOP_PUT, key, obj.ctypes.data, obj.nbytes, config,
                             _lib.QFLAG_UPSERT if upsert else 0, obj)
        return rc

    async def _a_put_tensor(self, key, tensor):
        return await self._aput_tensor(key, tensor, None, False)

    async def _a_upsert_tensor(self, key, tensor):
        return await self._aput_tensor(key, tensor, None, True)

    @_grouped_runs_sync
    async def _a_pub_tensor(self, key, tensor, config=None):
        return await self._aput_tensor(key, tensor, config, False)

    @_grouped_runs_sync
    async def _a_upsert_pub_tensor(self, key, tensor, config=None):
        return await self._aput_tensor(key, tensor, config, True)

    async def _abatch_tensor(self, keys, tensors_list, config, upsert):
        keys = _keys(keys)
        tensors = list(tensors_list)
        if len(keys) != len(tensors) or not keys:
            return [_INVALID] * len(keys)
        return list(await asyncio.gather(*[self._aput_tensor(k, t, config, upsert)
                                           for k, t in zip(keys, tensors)]))

    async def _a_batch_put_tensor(self, keys, tensors_list):
        return await self._abatch_tensor(keys, tensors_list, None, False)

    @_grouped_runs_sync
    async def _a_batch_pub_tensor(self, keys, tensors_list, config=None):
        return await self._abatch_tensor(keys, tensors_list, config, False)

    async def _a_batch_upsert_tensor(self, keys, tensors_list):
        return await self._abatch_tensor(keys, tensors_list, None, True)

    async def _a_get_tensor(self, key):
        key = _key(key)
        q = self._q()
        if q is None:
            return None
        n, p = await q.call(_lib.QOP_GET_ALLOC, key)
        if n < 0 or not p:
            return None
        return self._decode(_malloc_array(p, n))

    async def _a_batch_get_tensor(self, keys):
        return list(await asyncio.gather(*[self._a_get_tensor(k) for k in _keys(keys)]))

    async def _a_get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        key = _key(key)
        tp_rank, tp_size = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        if tp_size <= 1:
            return await self._a_get_tensor(key)
        if not 0 <= tp_rank < tp_size:
            return None
        return await self._a_get_tensor(_tensor.tp_key(key, tp_rank))

    async def _a_batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        return list(await asyncio.gather(*[self._a_get_tensor_with_tp(k, tp_rank, tp_size)
                                           for k in _keys(base_keys, "base_keys")]))


# Mooncake's module-level helpers.


def _tensor_metadata_size():
    """Return the size of the tensor object header (304)."""
    return _tensor.TENSOR_METADATA_SIZE


def _serialize_tensor(t):
    """Return (metadata bytes, data pointer, data bytes, owner) for a tensor."""
    data, code, shape, keep = _tensor._as_bytes_view(t)
    meta = _tensor.pack_metadata(_tensor.TensorMetadata(code, shape))
    return meta, (data.ctypes.data if data.nbytes else 0), data.nbytes, (keep, data)


def _deserialize_tensor(data):
    """Return the tensor of an object's bytes, or None."""
    return _tensor.decode(data)
