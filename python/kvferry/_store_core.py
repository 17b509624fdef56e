"""The store client's core: lifecycle, byte puts and gets, existence,
removal and buffer registration (``_StoreCore``, a base of
``MooncakeDistributedStore``), and ``MooncakeHostMemAllocator``."""

import ctypes
import threading
import time
from ctypes import byref, c_int, c_int64, c_size_t, c_void_p

from . import _lib
from ._lib import lib
from ._store_args import (
    _INVALID,
    _buffer,
    _concat,
    _config,
    _grouped,
    _int,
    _ints,
    _key,
    _keys,
    _last_error,
    _name,
    _parse_size,
    log,
)
from ._store_types import BufferHandle
from .errors import ErrorCode

# When each failed-get code was last logged (MooncakeDistributedStore.get).
_get_logged = {}
_GET_LOG_INTERVAL = 60.0


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


class _StoreCore:
    """The client handle and the calls on bytes. Grouped puts go through
    ``_batch_put_multi`` (``_MultiBufferMixin``), one library call for all
    keys of a call."""

    def __init__(self):
        self._h = None
        self._engine = None  # a shared TransferEngine, kept alive
        self._mu = threading.Lock()
        self.tensor_format = "auto"
        self._scratch = None  # GPU scratch buffers of CUDA tensor calls
        self._local_buffer_size = 0  # setup's local_buffer_size (BufferPool's capacity)

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
            self._local_buffer_size = lbs
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
            self._local_buffer_size = local_buffer_size
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
            self._local_buffer_size = 1 << 30
            return 0

    def close(self):
        """Tear the client down (unmount, unregister, free). Returns 0."""
        with self._mu:
            h, self._h = self._h, None
            self._local_buffer_size = 0
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

    # ---- registration ----

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
