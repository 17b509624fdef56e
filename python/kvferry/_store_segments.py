"""Segments lent after setup, and the calls about memory and NVMe-oF
(``_SegmentMixin``): Mooncake's mount_segment, allocate_and_mount_segment,
unmount_segment, unmount_and_free_segment, unmount_local_disk_segment and
get_offload_rpc_read_count, its module functions get_alloc_func_addr and
get_free_func_addr, and MooncakeDistributedNoFRegister."""

import ctypes
from ctypes import byref, c_uint64, c_void_p

from . import _lib
from ._lib import lib
from ._store_args import _int, _key, _keys, _last_error, log
from .errors import ErrorCode

# Mooncake's RealClient answers -1 for any failure of a mount.
_FAILED = -1


class _SegmentMixin:
    """The segment calls; each needs a client set up in this process
    (Mooncake's RealClient): a dummy client answers -1."""

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """Map size bytes of the file at path from offset (a multiple of
        the page size) shared, and lend them to the store as a segment of
        their own. Returns {"ret": 0 or -1, "segment_ids": [id]}; the cause
        of a failure is in last_error()."""
        path, protocol, location = _key(path, "path"), _key(protocol, "protocol"), _key(location, "location")
        size, offset = _int(size, "size"), _int(offset, "offset")
        out = {"ret": _FAILED, "segment_ids": []}
        if not self._h or size <= 0 or offset < 0:
            log.error("mount_segment %r: %s", path, "client not set up" if not self._h else "bad size or offset")
            return out
        ids = ctypes.create_string_buffer(256)
        rc = lib.kvferry_store_mount_segment(self._h, path.encode(), offset, size, protocol.encode(),
                                             location.encode(), ids, len(ids))
        if rc != 0:
            log.error("mount_segment %r: %s", path, _last_error(self._h))
            return out
        out["ret"], out["segment_ids"] = 0, ids.value.decode().split(",")
        return out

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Allocate size bytes (rounded up to 16 MiB) and lend them as a
        segment of their own. Returns {"ret": 0 or -1, "segment_ids":
        [id], "allocated_size": bytes}."""
        protocol, location = _key(protocol, "protocol"), _key(location, "location")
        size = _int(size, "size")
        out = {"ret": _FAILED, "segment_ids": [], "allocated_size": 0}
        if not self._h or size <= 0:
            log.error("allocate_and_mount_segment: %s", "client not set up" if not self._h else "size is 0")
            return out
        ids = ctypes.create_string_buffer(256)
        got = c_uint64()
        rc = lib.kvferry_store_allocate_and_mount_segment(self._h, size, protocol.encode(), location.encode(),
                                                          byref(got), ids, len(ids))
        if rc != 0:
            log.error("allocate_and_mount_segment of %d bytes: %s", size, _last_error(self._h))
            return out
        out["ret"], out["segment_ids"], out["allocated_size"] = 0, ids.value.decode().split(","), got.value
        return out

    def _unmount(self, segment_ids, grace_period_seconds, free):
        ids = _keys(segment_ids, "segment_ids")
        grace = _int(grace_period_seconds, "grace_period_seconds")
        if not self._h or grace < 0:
            return _FAILED
        if not ids:
            return 0
        rc = lib.kvferry_store_unmount_segment(self._h, _lib.c_strings(ids), len(ids), grace, 1 if free else 0)
        if rc != 0:
            log.error("unmount of %s: %s", ids, _last_error(self._h))
        return rc

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Unmount segments of mount_segment and unmap them. The master
        drops their replicas and removes objects left with none; with a
        grace period it first moves the objects only they hold to other
        segments (and the call returns when that is done or the grace is
        over). Returns 0, -1 for an id mount_segment did not return, or
        the master's code (the first failure; every id is tried)."""
        return self._unmount(segment_ids, grace_period_seconds, False)

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """unmount_segment for segments of allocate_and_mount_segment, whose
        memory is freed."""
        return self._unmount(segment_ids, grace_period_seconds, True)

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        """Take this client's disk tier (enable_ssd_offload) off the master,
        so that it names this client as the holder of no file, then wait
        the grace period. 0 (nothing to do) without a disk tier; -1 on a
        failure."""
        grace = _int(grace_period_seconds, "grace_period_seconds")
        if not self._h or grace < 0:
            return _FAILED
        rc = lib.kvferry_store_unmount_local_disk_segment(self._h, grace)
        if rc != 0:
            log.error("unmount_local_disk_segment: %s", _last_error(self._h))
            return _FAILED
        return 0

    def get_offload_rpc_read_count(self):
        """How many reads were served from a disk tier (this client's own
        files, files on another client's disk read through its serve
        buffer, and objects promoted from another client's disk); 0
        without a client."""
        if not self._h:
            return 0
        return max(lib.kvferry_store_offload_read_count(self._h), 0)


def get_alloc_func_addr():
    """The address of the library's huge-page allocator, ``void *(size_t
    size)`` (Mooncake's hugepage_memory_alloc): page-aligned host memory on
    2 MiB pages where the kernel has them, NULL on failure."""
    return ctypes.cast(lib.kvferry_hugepage_alloc, c_void_p).value


def get_free_func_addr():
    """The address of ``void (void *ptr)`` that frees get_alloc_func_addr's
    memory (Mooncake's hugepage_memory_free)."""
    return ctypes.cast(lib.kvferry_hugepage_free, c_void_p).value


class MooncakeDistributedNoFRegister:
    """Mooncake's registration of NVMe-oF namespaces as store segments.
    kvferry has no NVMe-oF tier: both calls log why and return
    ErrorCode.NOT_SUPPORTED (-1012)."""

    def _unsupported(self, what, nqn):
        log.error("%s of NVMe-oF namespace %r: NVMe-oF segments are not supported by kvferry "
                  "(use enable_ssd_offload for a local disk tier)", what, nqn)
        return int(ErrorCode.NOT_SUPPORTED)

    def real_register(self, nqn="", nsid=1, traddr="", trsvcid=4420, base=0, size=1024,
                      master_server_addr="127.0.0.1:50051"):
        """Register an NVMe-oF namespace: NOT_SUPPORTED."""
        return self._unsupported("real_register", nqn)

    def real_unregister_by_endpoint(self, nqn="", nsid=1, traddr="", trsvcid=4420,
                                    master_server_addr="127.0.0.1:50051"):
        """Unregister an NVMe-oF namespace: NOT_SUPPORTED."""
        return self._unsupported("real_unregister_by_endpoint", nqn)
