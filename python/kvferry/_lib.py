"""Loading libkvferry.so and declaring its C functions for ctypes.

The library is found, in order, through:

1. ``KVFERRY_LIB`` (the path of the file) or ``KVFERRY_LIB_DIR`` (its folder);
2. a copy of the library this process has already loaded (a second file
   would start a second Go runtime, which the library refuses);
3. ``libkvferry.so*`` next to this package (a wheel built with a library);
4. ``build/lib`` of the source tree this package sits in (running from a
   checkout);
5. the dynamic loader's search path (``LD_LIBRARY_PATH``, ``ldconfig``).

Every foreign call is made through ctypes, which releases the GIL for its
duration, so blocking calls (transfers, store I/O, ``kvferry_batch_wait``)
never stall other Python threads.
"""

import ctypes
import os
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)

__all__ = ["lib", "library_path", "LibraryNotFound"]

_NAMES = ("libkvferry.so", "libkvferry.so.1")
# Other names of the same file (symlinks): the library may already be in the
# process under any of them.
_ALIASES = _NAMES + ("libtransfer_engine.so", "libplugin_KVFERRY.so",
                     "libtensorrt_llm_mooncake_wrapper.so")


class LibraryNotFound(OSError):
    """Raised when libkvferry.so cannot be found or loaded."""


# ---- C structures (include/transfer_engine_c.h, include/store_c.h) ----


class TransferRequest(Structure):
    """struct transfer_request."""

    _fields_ = [
        ("opcode", c_int),
        ("source", c_void_p),
        ("target_id", c_int32),
        ("target_offset", c_uint64),
        ("length", c_uint64),
    ]


class NotifyMsg(Structure):
    """struct notify_msg."""

    _fields_ = [("name", c_void_p), ("msg", c_void_p)]


class TransferStatus(Structure):
    """struct transfer_status."""

    _fields_ = [("status", c_int), ("transferred_bytes", c_uint64)]


class BufferEntry(Structure):
    """struct buffer_entry."""

    _fields_ = [("addr", c_void_p), ("length", c_size_t)]


class NicLoadStat(Structure):
    """struct nic_load_stat."""

    _fields_ = [
        ("device_name", c_char * 64),
        ("inflight_bytes", c_uint64),
        ("ewma_bandwidth_bps", c_double),
    ]


class ReplicateConfigC(Structure):
    """struct mooncake_replicate_config."""

    _fields_ = [
        ("replica_num", c_size_t),
        ("with_soft_pin", c_int),
        ("with_hard_pin", c_int),
        ("preferred_segments", POINTER(c_char_p)),
        ("preferred_segments_count", c_size_t),
    ]


# Constants of the headers.
OPCODE_READ = 0
OPCODE_WRITE = 1
STATUS_WAITING = 0
STATUS_PENDING = 1
STATUS_INVALID = 2
STATUS_CANCELED = 3
STATUS_COMPLETED = 4
STATUS_TIMEOUT = 5
STATUS_FAILED = 6
INVALID_BATCH = (1 << 64) - 1
KVFERRY_ERR_TIMEOUT = -400
KVFERRY_ERR_TOO_MANY_REQUESTS = -2
KVFERRY_ERR_CLOSED = -403
QOP_PUT = 1
QOP_GET_INTO = 2
QOP_GET_ALLOC = 3
QOP_IS_EXIST = 4
QOP_GET_SIZE = 5
QOP_REMOVE = 6
QFLAG_UPSERT = 1
QFLAG_FORCE = 2

_V = c_void_p
_S = c_char_p

# name: (restype, argtypes). Functions of API version 2 are optional so the
# package still loads an older library (they raise when called).
_PROTOTYPES = {
    # transfer_engine_c.h
    "createTransferEngine": (_V, [_S, _S, _S, c_uint64, c_int]),
    "discoverTopology": (c_int, [_V]),
    "getLocalIpAndPort": (c_int, [_V, c_char_p, c_size_t]),
    "installTransport": (_V, [_V, _S, POINTER(c_void_p)]),
    "uninstallTransport": (c_int, [_V, _S]),
    "openSegment": (c_int32, [_V, _S]),
    "openSegmentNoCache": (c_int32, [_V, _S]),
    "closeSegment": (c_int, [_V, c_int32]),
    "warmupEfaSegment": (c_int, [_V, _S]),
    "removeLocalSegment": (c_int, [_V, _S]),
    "destroyTransferEngine": (None, [_V]),
    "registerLocalMemory": (c_int, [_V, _V, c_size_t, _S, c_int]),
    "unregisterLocalMemory": (c_int, [_V, _V]),
    "registerLocalMemoryBatch": (c_int, [_V, POINTER(BufferEntry), c_size_t, _S]),
    "unregisterLocalMemoryBatch": (c_int, [_V, POINTER(c_void_p), c_size_t]),
    "allocateBatchID": (c_uint64, [_V, c_size_t]),
    "submitTransfer": (c_int, [_V, c_uint64, POINTER(TransferRequest), c_size_t]),
    "submitTransferWithNotify": (
        c_int, [_V, c_uint64, POINTER(TransferRequest), c_size_t, NotifyMsg]),
    "getNotifsFromEngine": (POINTER(NotifyMsg), [_V, POINTER(c_int)]),
    "freeNotifsMsgBuf": (c_int, [POINTER(NotifyMsg), c_int]),
    "genNotifyInEngine": (c_int, [_V, c_uint64, NotifyMsg]),
    "getTransferStatus": (c_int, [_V, c_uint64, c_size_t, POINTER(TransferStatus)]),
    "freeBatchID": (c_int, [_V, c_uint64]),
    "syncSegmentCache": (c_int, [_V]),
    "getNicLoadStats": (c_int, [_V, POINTER(NicLoadStat), POINTER(c_size_t)]),
    "showLinks": (c_int, [_V, c_char_p, c_size_t, c_int]),
    # kvferry.h, engine
    "kvferry_api_version": (c_int, []),
    "kvferry_version": (c_char_p, []),
    "kvferry_engine_create": (_V, [POINTER(c_char_p), POINTER(c_char_p), c_size_t]),
    "kvferry_engine_rpc_port": (c_int, [_V]),
    "kvferry_engine_segment_name": (c_int, [_V, c_char_p, c_size_t]),
    "kvferry_engine_last_error": (c_int, [_V, c_char_p, c_size_t]),
    "kvferry_batch_status": (
        c_int, [_V, c_uint64, POINTER(c_int), POINTER(c_uint64), POINTER(c_size_t)]),
    "kvferry_batch_wait": (c_int, [_V, c_uint64, c_int64, POINTER(c_int)]),
    "kvferry_batch_await": (c_int, [_V, c_uint64]),  # API version 8
    "kvferry_batch_cancel": (c_int, [_V, c_uint64]),
    # kvferry.h, GPU memory (API version 6)
    "kvferry_cuda_malloc": (_V, [ctypes.c_ssize_t, c_int, _V]),
    "kvferry_cuda_free": (None, [_V, ctypes.c_ssize_t, c_int, _V]),
    "kvferry_cuda_memcpy": (c_int, [_V, _V, c_size_t]),
    "kvferry_cuda_probe": (c_int, [c_int]),
    "kvferry_memory_kind": (c_int, [_V, POINTER(c_int)]),
    "kvferry_transfer_on_stream": (c_int, [_V, _V, _S, POINTER(c_void_p), POINTER(c_uint64),
                                           POINTER(c_size_t), c_size_t, c_int]),
    "kvferry_segment_check": (c_int, [_V, c_int32, c_uint64, c_uint64]),
    "kvferry_metrics_text": (c_int64, [c_char_p, c_size_t]),
    # store_c.h
    "mooncake_store_create": (_V, []),
    "mooncake_store_destroy": (None, [_V]),
    "mooncake_store_setup": (c_int, [_V, _S, _S, c_uint64, c_uint64, _S, _S, _S]),
    "mooncake_store_init_all": (c_int, [_V, _S, _S, c_uint64]),
    "mooncake_store_health_check": (c_int, [_V]),
    "mooncake_store_put": (c_int, [_V, _S, _V, c_size_t, POINTER(ReplicateConfigC)]),
    "mooncake_store_put_from": (c_int, [_V, _S, _V, c_size_t, POINTER(ReplicateConfigC)]),
    "mooncake_store_batch_put_from": (
        c_int, [_V, POINTER(c_char_p), POINTER(c_void_p), POINTER(c_size_t), c_size_t,
                POINTER(ReplicateConfigC), POINTER(c_int)]),
    "mooncake_store_get_into": (c_int64, [_V, _S, _V, c_size_t]),
    "mooncake_store_batch_get_into": (
        c_int, [_V, POINTER(c_char_p), POINTER(c_void_p), POINTER(c_size_t), c_size_t,
                POINTER(c_int64)]),
    "mooncake_store_is_exist": (c_int, [_V, _S]),
    "mooncake_store_batch_is_exist": (c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_int)]),
    "mooncake_store_get_size": (c_int64, [_V, _S]),
    "mooncake_store_get_hostname": (c_int, [_V, c_char_p, c_size_t]),
    "mooncake_store_remove": (c_int, [_V, _S, c_int]),
    "mooncake_store_remove_by_regex": (c_int64, [_V, _S, c_int]),
    "mooncake_store_remove_all": (c_int64, [_V, c_int]),
    "mooncake_store_register_buffer": (c_int, [_V, _V, c_size_t]),
    "mooncake_store_unregister_buffer": (c_int, [_V, _V]),
    # kvferry.h, store
    "kvferry_store_upsert": (c_int, [_V, _S, _V, c_size_t, POINTER(ReplicateConfigC)]),
    "kvferry_store_upsert_from": (c_int, [_V, _S, _V, c_size_t, POINTER(ReplicateConfigC)]),
    "kvferry_store_batch_upsert_from": (
        c_int, [_V, POINTER(c_char_p), POINTER(c_void_p), POINTER(c_size_t), c_size_t,
                POINTER(ReplicateConfigC), POINTER(c_int)]),
    "kvferry_store_batch_remove": (c_int, [_V, POINTER(c_char_p), c_size_t, c_int, POINTER(c_int)]),
    "kvferry_store_get_alloc": (c_int64, [_V, _S, POINTER(c_void_p)]),
    "kvferry_store_free": (None, [_V]),
    "kvferry_store_last_error": (c_int, [_V, c_char_p, c_size_t]),
    "kvferry_store_set_tenant": (c_int, [_V, _S]),
    # kvferry.h, store tiers and tasks (API version 5)
    "kvferry_store_set_ssd_offload": (c_int, [_V, _S, c_uint64]),
    "kvferry_store_set_drain": (c_int, [_V, c_uint64]),
    "kvferry_store_publish": (
        c_int, [_V, _S, _V, c_size_t, c_uint64, POINTER(ReplicateConfigC), POINTER(c_uint64)]),
    "kvferry_store_get_versioned": (
        c_int64, [_V, _S, c_uint64, c_uint64, POINTER(c_void_p), POINTER(c_uint64)]),
    "kvferry_store_create_copy_task": (c_int, [_V, _S, POINTER(c_char_p), c_size_t, c_char_p, c_size_t]),
    "kvferry_store_create_move_task": (c_int, [_V, _S, _S, _S, c_char_p, c_size_t]),
    "kvferry_store_query_task": (
        c_int, [_V, _S, POINTER(c_int), POINTER(c_int), POINTER(c_int64), POINTER(c_int64),
                c_char_p, c_size_t, c_char_p, c_size_t]),
    # kvferry.h, multi-buffer puts and gets (API version 6)
    "kvferry_store_batch_put_from_multi": (
        c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_void_p), POINTER(c_size_t),
                POINTER(c_size_t), POINTER(ReplicateConfigC), POINTER(c_char_p), c_int,
                POINTER(c_int)]),
    "kvferry_store_batch_get_into_multi": (
        c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_void_p), POINTER(c_size_t),
                POINTER(c_size_t), POINTER(c_int64)]),
    # kvferry.h, Python support (API version 2)
    "kvferry_engine_probe": (c_int, [_V, _S]),
    "kvferry_segment_buffers": (c_int, [_V, c_int32, POINTER(BufferEntry), c_size_t]),
    "kvferry_store_setup_with_engine": (c_int, [_V, _V, c_uint64, c_uint64, _S, _S]),
    "kvferry_store_master_addr": (c_int, [_V, c_char_p, c_size_t]),
    # kvferry.h, standalone storage mode (API version 7)
    "kvferry_store_setup_dummy": (c_int, [_V, c_uint64, c_uint64, _S]),
    "kvferry_host_mem_alloc": (_V, [c_size_t]),
    "kvferry_host_mem_free": (c_int, [_V]),
    "kvferry_store_replica_desc": (c_int64, [_V, POINTER(c_char_p), c_size_t, POINTER(c_void_p)]),
    "kvferry_store_queue_create": (_V, [_V, c_int, c_size_t]),
    "kvferry_store_queue_fd": (c_int, [_V]),
    "kvferry_store_queue_submit": (
        c_int, [_V, c_int, c_uint64, _S, _V, c_size_t, POINTER(ReplicateConfigC), c_int]),
    "kvferry_store_queue_poll": (
        c_int, [_V, POINTER(c_uint64), POINTER(c_int64), POINTER(c_void_p), c_size_t]),
    "kvferry_store_queue_destroy": (None, [_V]),
    # kvferry.h, store segments (API version 9)
    "kvferry_store_mount_segment": (c_int, [_V, _S, c_uint64, c_uint64, _S, _S, c_char_p, c_size_t]),
    "kvferry_store_allocate_and_mount_segment": (
        c_int, [_V, c_uint64, _S, _S, POINTER(c_uint64), c_char_p, c_size_t]),
    "kvferry_store_unmount_segment": (c_int, [_V, POINTER(c_char_p), c_size_t, c_uint64, c_int]),
    "kvferry_store_unmount_local_disk_segment": (c_int, [_V, c_uint64]),
    "kvferry_store_offload_read_count": (c_int64, [_V]),
    "kvferry_hugepage_alloc": (_V, [c_size_t]),
    "kvferry_hugepage_free": (None, [_V]),
    # kvferry.h, store ranges and sessions (API version 10)
    "kvferry_store_get_into_ranges": (
        c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_void_p), POINTER(c_uint64),
                POINTER(c_uint64), POINTER(c_size_t), POINTER(c_int64)]),
    "kvferry_store_get_session_start": (c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_int)]),
    "kvferry_store_get_session_ranges": (
        c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_void_p), POINTER(c_uint64),
                POINTER(c_uint64), POINTER(c_size_t), POINTER(c_int64)]),
    "kvferry_store_get_session_end": (c_int, [_V, POINTER(c_char_p), c_size_t]),
    "kvferry_store_put_session_start": (
        c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_uint64), POINTER(ReplicateConfigC),
                POINTER(c_char_p), POINTER(c_int)]),
    "kvferry_store_put_session_ranges": (
        c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_void_p), POINTER(c_uint64),
                POINTER(c_uint64), POINTER(c_size_t), POINTER(c_int64)]),
    "kvferry_store_put_session_end": (c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_int)]),
    "kvferry_store_put_session_revoke": (c_int, [_V, POINTER(c_char_p), c_size_t, POINTER(c_int)]),
    "kvferry_store_batch_replica_clear": (
        c_int, [_V, POINTER(c_char_p), c_size_t, _S, POINTER(c_int)]),
}


def _loaded_copy():
    """Return the path of a kvferry library already mapped into this process."""
    try:
        with open("/proc/self/maps", "r") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith(("libkvferry.so",)):
                    return path
    except OSError:
        pass
    return None


def _candidates():
    env = os.environ.get("KVFERRY_LIB")
    if env:
        yield env
        return
    env_dir = os.environ.get("KVFERRY_LIB_DIR")
    if env_dir:
        for n in _NAMES:
            yield os.path.join(env_dir, n)
        return
    loaded = _loaded_copy()
    if loaded:
        yield loaded
    here = os.path.dirname(os.path.abspath(__file__))
    for n in _NAMES:
        yield os.path.join(here, n)
    # python/kvferry/ -> <repo>/build/lib
    repo = os.path.dirname(os.path.dirname(here))
    for n in _NAMES:
        yield os.path.join(repo, "build", "lib", n)
    for n in _ALIASES[:2]:
        yield n  # the loader's search path


class _Lib:
    """The loaded library: lazily loaded on first attribute access."""

    def __init__(self):
        self._mu = threading.Lock()
        self._cdll = None
        self._path = None

    def _load(self):
        with self._mu:
            if self._cdll is not None:
                return self._cdll
            tried = []
            for cand in _candidates():
                if os.sep in cand and not os.path.exists(cand):
                    tried.append(cand + " (absent)")
                    continue
                try:
                    cdll = ctypes.CDLL(cand)
                except OSError as e:
                    tried.append("%s (%s)" % (cand, e))
                    continue
                self._declare(cdll)
                self._path = cand
                self._cdll = cdll
                return cdll
            raise LibraryNotFound(
                "kvferry: cannot load libkvferry.so; set KVFERRY_LIB to its path "
                "(build it with `make lib`). Tried: " + "; ".join(tried))

    @staticmethod
    def _declare(cdll):
        for name, (res, args) in _PROTOTYPES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                continue
            fn.restype = res
            fn.argtypes = args

    def has(self, name):
        """Report whether the loaded library exports name."""
        try:
            getattr(self._load(), name)
            return True
        except AttributeError:
            return False

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        cdll = self._load()
        try:
            return getattr(cdll, name)
        except AttributeError:
            raise NotImplementedError(
                "kvferry: the loaded library %s has no %s (API version %d); "
                "rebuild it" % (self._path, name, cdll.kvferry_api_version())) from None


lib = _Lib()


def library_path():
    """Return the path of the loaded library (loading it if needed)."""
    lib._load()
    return lib._path


def c_strings(strings):
    """Return a ctypes array of C strings (bytes) for a list of str."""
    arr = (c_char_p * len(strings))()
    for i, s in enumerate(strings):
        arr[i] = s.encode() if isinstance(s, str) else bytes(s)
    return arr


def read_string(fn, *args, initial=256):
    """Call fn(*args, buf, len) that returns the full length; grow and retry."""
    n = initial
    while True:
        buf = ctypes.create_string_buffer(n)
        r = fn(*args, buf, n)
        if r < 0:
            return None
        if r < n:
            return buf.value.decode(errors="replace")
        n = r + 1
