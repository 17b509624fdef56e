"""Multi-buffer calls: one object per key gathered from, or scattered over,
several buffers in one library call (``_MultiBufferMixin``)."""

import array
import itertools
from ctypes import c_int, c_int64, c_size_t, c_void_p

from . import _lib
from ._lib import lib
from ._store_args import _INVALID, _config, _group_ids, _ints, _keys


def _flatten(ptr_lists, size_lists):
    """C arrays of all buffers, all sizes and the per-key buffer counts."""
    counts = [len(p) for p in ptr_lists]
    total = sum(counts)
    ptrs = (c_void_p * total)(*[p for ps in ptr_lists for p in ps])
    sizes = (c_size_t * total)(*[s for ss in size_lists for s in ss])
    return ptrs, sizes, (c_size_t * len(counts))(*counts)


class _MultiBufferMixin:
    """batch_put_from_multi_buffers, batch_get_into_multi_buffers and the
    one multi-buffer library put that grouped puts share."""

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
