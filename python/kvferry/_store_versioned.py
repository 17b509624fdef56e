"""Versioned publish and subscribe, beyond Mooncake (``_VersionedMixin``):
a publish over an expected version, and a read that waits for a version."""

import ctypes
from ctypes import byref, c_uint64, c_void_p

from ._lib import lib
from ._store_args import _INVALID, _buffer, _config, _key, _malloc_array


class _VersionedMixin:
    """put_versioned, get_versioned, pub_tensor_versioned and
    get_tensor_versioned."""

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
