"""Ranged reads and writes and the put and get sessions they run in
(``_RangesMixin``): Mooncake's ``get_into_ranges``,
``batch_get_session_start`` / ``batch_get_into_multi_buffer_ranges`` /
``batch_get_session_end``, ``batch_put_session_start`` /
``batch_put_from_multi_buffer_ranges`` / ``batch_put_session_end`` /
``batch_put_session_revoke``, ``batch_replica_clear`` and
``_get_pyclient_capsule``.

Each call is one library call (kvferry.h, "Store ranges and sessions",
API version 10); the ranges go to C arrays with no copy of the data."""

import array
import ctypes
from ctypes import c_int, c_int64, c_size_t, c_uint64, c_void_p

from . import _lib
from ._lib import lib
from ._store_args import _INVALID, _config, _group_ids, _key, _keys, log

# The name of the capsule _get_pyclient_capsule returns (kept alive here:
# the capsule keeps a pointer to it).
PYCLIENT_CAPSULE_NAME = b"kvferry.mooncake_store_t"

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]


def _u64s(values):
    """An array('Q') of values, or None when one is negative or not an int."""
    try:
        return array.array("Q", values)
    except (OverflowError, TypeError):
        return None


class _Flat:
    """Ranges of several key entries as the C arrays of the ranged calls:
    entry i owns counts[i] consecutive addresses, offsets and sizes."""

    def __init__(self):
        self.keys = []
        self.counts = array.array("Q")
        self.addrs = array.array("Q")
        self.offsets = array.array("Q")
        self.sizes = array.array("Q")

    def add(self, key, addrs, offsets, sizes):
        self.keys.append(key)
        self.counts.append(len(addrs))
        self.addrs.extend(addrs)
        self.offsets.extend(offsets)
        self.sizes.extend(sizes)

    def c_args(self):
        """(keys, count, addrs, offsets, sizes, counts) as C arguments."""
        n = len(self.addrs)

        def c(arr, t, k):
            if k == 0:
                return None
            return (t * k).from_buffer(arr)

        return (_lib.c_strings(self.keys), len(self.keys), c(self.addrs, c_void_p, n),
                c(self.offsets, c_uint64, n), c(self.sizes, c_uint64, n),
                c(self.counts, c_size_t, len(self.counts)))


def _lists(name, value):
    """list(value), refusing a str or bytes (TypeError, as pybind11)."""
    if isinstance(value, (str, bytes)):
        raise TypeError("%s must be a list, not %s" % (name, type(value).__name__))
    return list(value)


class _RangesMixin:
    """The ranged calls and sessions of MooncakeDistributedStore."""

    def _get_pyclient_capsule(self):
        """A PyCapsule named ``kvferry.mooncake_store_t`` whose pointer is
        this store's ``mooncake_store_t`` handle (store_c.h), for C and C++
        extensions: ``PyCapsule_GetPointer(cap, "kvferry.mooncake_store_t")``
        gives a handle every ``mooncake_store_*`` and ``kvferry_store_*``
        function of libkvferry.so takes. It is valid while this store is set
        up (the capsule does not keep the store alive: hold the store, and
        do not use the handle after ``close()``). None before ``setup``.
        Mooncake's capsule (``mooncake.PyClient.shared_ptr``) holds a C++
        ``std::shared_ptr<PyClient>`` instead; kvferry has no C++ client
        object, so the name differs and a consumer that checks it refuses
        ours rather than misreading it."""
        if not self._h:
            return None
        return _capsule_new(self._h, PYCLIENT_CAPSULE_NAME, None)

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes):
        """Read byte ranges of objects into registered buffers: for buffer
        i, key j of all_keys[i] and range k, all_sizes[i][j][k] bytes at
        all_src_offsets[i][j][k] of the object go to buffer_ptrs[i] +
        all_dst_offsets[i][j][k]. Returns list[list[list[int]]] of the same
        shape: the bytes read or a negative code per range
        (INVALID_PARAMS for a range outside its object or outside
        registered memory, and for every range of mismatched lists; the
        master's code for a missing key). The master is asked once."""
        buffer_ptrs = _lists("buffer_ptrs", buffer_ptrs)
        all_keys = [_keys(k) for k in _lists("all_keys", all_keys)]
        all_dst = _lists("all_dst_offsets", all_dst_offsets)
        all_src = _lists("all_src_offsets", all_src_offsets)
        all_sz = _lists("all_sizes", all_sizes)

        def shape(i, j):
            try:
                return len(all_dst[i][j])
            except (IndexError, TypeError):
                return 0

        results = [[[_INVALID] * shape(i, j) for j in range(len(all_keys[i]) if i < len(all_keys) else 0)]
                   for i in range(len(buffer_ptrs))]
        n = len(buffer_ptrs)
        if not self._h or not (len(all_keys) == len(all_dst) == len(all_src) == len(all_sz) == n):
            if self._h:
                log.error("get_into_ranges: top-level size mismatch")
            return results
        flat, where = _Flat(), []
        for i in range(n):
            base = buffer_ptrs[i]
            keys, dst, src, sz = all_keys[i], list(all_dst[i]), list(all_src[i]), list(all_sz[i])
            if not isinstance(base, int) or base <= 0 or not (len(keys) == len(dst) == len(src) == len(sz)):
                continue
            for j, key in enumerate(keys):
                d, s, z = _u64s(dst[j]), _u64s(src[j]), _u64s(sz[j])
                if d is None or s is None or z is None or not (len(d) == len(s) == len(z)):
                    continue
                addrs = _u64s([base + o for o in d])
                if addrs is None:
                    continue
                flat.add(key, addrs, s, z)
                where.append((i, j))
        if not where:
            return results
        total = len(flat.addrs)
        out = (c_int64 * max(total, 1))()
        rc = lib.kvferry_store_get_into_ranges(self._h, *flat.c_args(), out)
        k = 0
        for e, (i, j) in enumerate(where):
            cnt = flat.counts[e]
            results[i][j] = [rc] * cnt if rc != 0 else list(out[k:k + cnt])
            k += cnt
        return results

    def _session_ranges(self, fn, keys, all_buffer_ptrs, all_sizes, all_offsets, what):
        """One ranged session call: per key the bytes moved or a code."""
        keys = _keys(keys)
        all_buffer_ptrs = _lists("all_buffer_ptrs", all_buffer_ptrs)
        all_sizes = _lists("all_sizes", all_sizes)
        all_offsets = _lists(what, all_offsets)
        if not self._h:
            log.error("Client is not initialized")
            return []
        n = len(keys)
        if not (len(all_buffer_ptrs) == len(all_sizes) == len(all_offsets) == n):
            return [_INVALID] * n
        results = [_INVALID] * n
        flat, where = _Flat(), []
        for i, key in enumerate(keys):
            p, z, o = _u64s(all_buffer_ptrs[i]), _u64s(all_sizes[i]), _u64s(all_offsets[i])
            if p is None or z is None or o is None or not (len(p) == len(z) == len(o)):
                continue
            flat.add(key, p, o, z)
            where.append(i)
        if not where:
            return results
        out = (c_int64 * len(where))()
        rc = fn(self._h, *flat.c_args(), out)
        for e, i in enumerate(where):
            results[i] = rc if rc != 0 else out[e]
        return results

    def batch_get_session_start(self, keys):
        """Start a get session per key: look its replicas up once and keep
        them, under the master's lease, for
        batch_get_into_multi_buffer_ranges. list[int]: 0, the master's code,
        or INVALID_REPLICA without a memory replica ([] before setup)."""
        keys = _keys(keys)
        if not self._h:
            log.error("Client is not initialized")
            return []
        if not keys:
            return []
        out = (c_int * len(keys))()
        rc = lib.kvferry_store_get_session_start(self._h, _lib.c_strings(keys), len(keys), out)
        return [rc] * len(keys) if rc != 0 else list(out)

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes, all_src_offsets):
        """Read, per key, all_sizes[i][j] bytes at all_src_offsets[i][j] of
        its object into all_buffer_ptrs[i][j], through the key's get session
        (no master call). list[int]: the bytes read per key; INVALID_PARAMS
        without a session or for a range outside the object (nothing of
        that key is read); LEASE_EXPIRED once the session's lease is over
        (the session is dropped)."""
        return self._session_ranges(lib.kvferry_store_get_session_ranges, keys, all_buffer_ptrs,
                                    all_sizes, all_src_offsets, "all_src_offsets")

    def batch_get_session_end(self, keys):
        """End the get sessions of keys; 0 (-1 before setup)."""
        keys = _keys(keys)
        if not self._h:
            log.error("Client is not initialized")
            return -1
        return lib.kvferry_store_get_session_end(self._h, _lib.c_strings(keys), len(keys))

    def batch_put_session_start(self, keys, sizes, config=None):
        """Reserve sizes[i] bytes for keys[i] without writing them (their
        bytes come with batch_put_from_multi_buffer_ranges; the objects are
        readable after batch_put_session_end). list[int]: 0,
        INVALID_PARAMS for a key with an open session, or the master's code
        (OBJECT_ALREADY_EXISTS for a stored key); [] before setup."""
        keys = _keys(keys)
        if not self._h:
            log.error("Client is not initialized")
            return []
        sizes = _lists("sizes", sizes)
        n = len(keys)
        if len(sizes) != n:
            log.error("Invalid batch_put_session_start args")
            return [_INVALID] * n
        ok, groups = _group_ids(config, n)
        sz = _u64s(sizes)
        if not ok or sz is None:
            return [_INVALID] * n
        if n == 0:
            return []
        cfg, keep = _config(config)
        out = (c_int * n)()
        rc = lib.kvferry_store_put_session_start(self._h, _lib.c_strings(keys), n,
                                                 (c_uint64 * n).from_buffer(sz), cfg, groups, out)
        del keep
        return [rc] * n if rc != 0 else list(out)

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
        """Write, per key, all_sizes[i][j] bytes of all_buffer_ptrs[i][j] at
        all_dst_offsets[i][j] of the object its put session reserved, into
        every replica. list[int]: the bytes written per key; INVALID_PARAMS
        without an open session or for a range outside the object (nothing
        of that key is written)."""
        return self._session_ranges(lib.kvferry_store_put_session_ranges, keys, all_buffer_ptrs,
                                    all_sizes, all_dst_offsets, "all_dst_offsets")

    def _finish_sessions(self, fn, keys):
        keys = _keys(keys)
        if not self._h:
            log.error("Client is not initialized")
            return []
        if not keys:
            return []
        out = (c_int * len(keys))()
        rc = fn(self._h, _lib.c_strings(keys), len(keys), out)
        return [rc] * len(keys) if rc != 0 else list(out)

    def batch_put_session_end(self, keys):
        """Complete the put sessions of keys (after their range writes in
        flight): the objects become readable. list[int]: 0,
        INVALID_PARAMS without a session, or the master's code (the session
        then stays, for another end or a revoke)."""
        return self._finish_sessions(lib.kvferry_store_put_session_end, keys)

    def batch_put_session_revoke(self, keys):
        """Abandon the put sessions of keys (after their range writes in
        flight): the master frees the space. list[int] as
        batch_put_session_end's."""
        return self._finish_sessions(lib.kvferry_store_put_session_revoke, keys)

    def batch_replica_clear(self, keys, segment_name=""):
        """Clear the replicas of keys that this client wrote and that no
        reader holds a lease on: whole objects with segment_name "", else
        only the replicas on that segment (an object left with none is
        removed). Returns list[str], the keys cleared ([] before setup or
        on failure)."""
        keys = _keys(keys)
        segment_name = _key(segment_name, "segment_name")
        if not self._h:
            log.error("batch_replica_clear: client not initialized")
            return []
        if not keys:
            return []
        out = (c_int * len(keys))()
        rc = lib.kvferry_store_batch_replica_clear(self._h, _lib.c_strings(keys), len(keys),
                                                   segment_name.encode(), out)
        if rc < 0:
            log.error("batch_replica_clear failed: %d", rc)
            return []
        return [k for k, done in zip(keys, out) if done]
