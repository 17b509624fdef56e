"""Argument conversion shared by the store's modules: Python values to the
C arguments of libkvferry.so (keys, ints, buffers, ReplicateConfig), and
the library's error text and buffers back."""

import copy
import ctypes
import logging
import re
import weakref
from ctypes import byref, c_char_p, c_void_p

from . import _lib
from ._lib import ReplicateConfigC, lib
from ._store_types import ReplicateConfig, SoftPinAction
from .errors import ErrorCode

# Every module of the store logs under this one name.
log = logging.getLogger("kvferry.store")

_INVALID = int(ErrorCode.INVALID_PARAMS)


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


def _malloc_array(ptr, n):
    """A numpy uint8 array owning malloc'ed memory from the library."""
    import numpy as np

    if n == 0:
        lib.kvferry_store_free(ptr)
        return np.empty(0, np.uint8)
    carr = (ctypes.c_uint8 * n).from_address(ptr)
    weakref.finalize(carr, lib.kvferry_store_free, ptr)
    return np.frombuffer(carr, np.uint8)


def _last_error(h):
    return _lib.read_string(lib.kvferry_store_last_error, h) or ""


def _name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
