"""The safetensors file format, and the store's save_tensor_to_safetensor /
load_tensor_from_safetensor (``_SafetensorsMixin``).

A safetensors file is an 8-byte little-endian header length N, N bytes of
a UTF-8 JSON object (padded with spaces), then the tensors' raw bytes. The
object maps each tensor's name to {"dtype", "shape", "data_offsets":
[begin, end]} (offsets into the bytes after the header; row-major,
little-endian data) and may hold "__metadata__", a map of strings. This is
our own codec of that format: writing needs no torch, and reading checks
what the reference reader checks (known dtypes, sizes that match shapes,
offsets that cover the data exactly, without holes or overlaps).
"""

import json
import os
import struct

from . import tensor as _tensor
from ._store_args import _key, log
from .errors import ErrorCode

# safetensors' dtype names by kvferry.tensor's.
DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "bfloat16": "BF16", "int32": "I32", "uint32": "U32", "float32": "F32",
    "float64": "F64", "int64": "I64", "uint64": "U64", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
_NAMES = {v: k for k, v in DTYPES.items()}

# The reference reader refuses larger headers.
MAX_HEADER = 100 << 20


class SafetensorsError(ValueError):
    """A file that is not valid safetensors."""


def header(entries, metadata=None):
    """Return the header (length and JSON, padded to 8 bytes) of tensors
    laid out one after the other in the order given: entries are (name,
    dtype name of DTYPES, shape, nbytes). Returns (bytes, [offsets])."""
    obj, off, offsets = {}, 0, []
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("safetensors metadata must map str to str")
        obj["__metadata__"] = dict(metadata)
    for name, dtype, shape, nbytes in entries:
        if name == "__metadata__" or name in obj:
            raise ValueError("bad or repeated tensor name %r" % name)
        if dtype not in DTYPES:
            raise ValueError("dtype %s has no safetensors name" % dtype)
        obj[name] = {"dtype": DTYPES[dtype], "shape": [int(d) for d in shape], "data_offsets": [off, off + nbytes]}
        offsets.append(off)
        off += nbytes
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offsets


def parse_header(head, data_len):
    """Parse and check a header's JSON (head: its bytes) for a data section
    of data_len bytes. Returns ({name: (dtype name, shape, begin, end)} in
    file order, metadata or None)."""
    try:
        obj = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("header is not UTF-8 JSON: %s" % e) from None
    if not isinstance(obj, dict):
        raise SafetensorsError("header is not a JSON object")
    meta = obj.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and
                                 all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
        raise SafetensorsError("__metadata__ must map strings to strings")
    out = {}
    for name, e in obj.items():
        if not isinstance(e, dict) or set(e) - {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError("tensor %r: bad entry" % name)
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in _NAMES:
            raise SafetensorsError("tensor %r: unknown dtype %r" % (name, dtype))
        if (not isinstance(shape, list) or len(shape) > _tensor.MAX_DIMS or
                not all(type(d) is int and d >= 0 for d in shape)):
            raise SafetensorsError("tensor %r: bad shape %r" % (name, shape))
        if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs) or
                not 0 <= offs[0] <= offs[1] <= data_len):
            raise SafetensorsError("tensor %r: bad data_offsets %r" % (name, offs))
        n = _tensor.DTYPE_CODES[_NAMES[dtype]][1]
        for d in shape:
            n *= d
        if offs[1] - offs[0] != n:
            raise SafetensorsError("tensor %r: %d bytes for shape %s of %s" % (name, offs[1] - offs[0], shape, dtype))
        out[name] = (_NAMES[dtype], tuple(shape), offs[0], offs[1])
    end = 0
    for _, _, b, e in sorted(out.values(), key=lambda v: (v[2], v[3])):
        if b != end:
            raise SafetensorsError("data offsets leave a hole or overlap at byte %d" % end)
        end = e
    if end != data_len:
        raise SafetensorsError("the tensors cover %d of the %d data bytes" % (end, data_len))
    return out, meta


def read_header(f, size):
    """Read and check the header of the open file f of size bytes. Returns
    (entries as parse_header's, metadata, offset of the data section)."""
    if size < 8:
        raise SafetensorsError("file of %d bytes has no header" % size)
    (n,) = struct.unpack("<Q", f.read(8))
    if n > MAX_HEADER or 8 + n > size:
        raise SafetensorsError("header of %d bytes in a file of %d" % (n, size))
    head = f.read(n)
    if len(head) != n:
        raise SafetensorsError("short header")
    entries, meta = parse_header(head, size - 8 - n)
    return entries, meta, 8 + n


class _SafetensorsMixin:
    """save_tensor_to_safetensor and load_tensor_from_safetensor."""

    def save_tensor_to_safetensor(self, key, file_name=None):
        """Write the tensor stored under key to a safetensors file (its
        tensor named key; file_name defaults to key). Returns 0,
        FILE_NOT_FOUND (-1100) when key holds no tensor, INVALID_PARAMS when
        the file cannot be written."""
        key = _key(key)
        path = key if file_name is None else _key(file_name, "file_name")
        if not self._h:
            return int(ErrorCode.INVALID_PARAMS)
        n, p = self._get_alloc(key)
        if n < 0 or not p:
            log.error("save_tensor_to_safetensor: no tensor under %r", key)
            return int(ErrorCode.FILE_NOT_FOUND)
        from ._store_args import _malloc_array

        r = _tensor.decode_raw(_malloc_array(p, n))
        if r is None:
            log.error("save_tensor_to_safetensor: %r is not a tensor object", key)
            return int(ErrorCode.FILE_NOT_FOUND)
        meta, data = r
        head, _ = header([(key, meta.dtype_name, meta.local_shape, data.nbytes)])
        try:
            with open(path, "wb") as f:
                f.write(head)
                f.write(memoryview(data))
        except OSError as e:
            log.error("save_tensor_to_safetensor %r: %s", path, e)
            return int(ErrorCode.INVALID_PARAMS)
        return 0

    def load_tensor_from_safetensor(self, key=None, file_name=None):
        """Read a tensor from a safetensors file, store it under key (default
        file_name) and return it (None on failure). The tensor named key is
        taken, else (with a warning, or when key is None) the first by name,
        as Mooncake's. Without torch, bfloat16 and float8 tensors come back
        as same-size integer numpy arrays (stored with their dtype)."""
        if file_name is None:
            raise TypeError("load_tensor_from_safetensor() needs file_name")
        path = _key(file_name, "file_name")
        store_key = path if key is None else _key(key)
        if not self._h:
            return None
        import numpy as np

        try:
            with open(path, "rb") as f:
                entries, _, base = read_header(f, os.fstat(f.fileno()).st_size)
                if not entries:
                    log.error("load_tensor_from_safetensor: no tensors in %r", path)
                    return None
                name = store_key if key is not None and store_key in entries else sorted(entries)[0]
                if key is not None and name != store_key:
                    log.warning("load_tensor_from_safetensor: %r not in %r; using %r", store_key, path, name)
                dtype, shape, b, e = entries[name]
                code = _tensor.DTYPE_CODES[dtype][0]
                obj = np.empty(_tensor.TENSOR_METADATA_SIZE + e - b, np.uint8)
                obj[:_tensor.TENSOR_METADATA_SIZE] = np.frombuffer(
                    _tensor.pack_metadata(_tensor.TensorMetadata(code, shape)), np.uint8)
                f.seek(base + b)
                if f.readinto(memoryview(obj)[_tensor.TENSOR_METADATA_SIZE:]) != e - b:
                    raise SafetensorsError("short data")
        except (OSError, SafetensorsError) as err:
            log.error("load_tensor_from_safetensor %r: %s", path, err)
            return None
        rc = self._put_ptr(store_key, obj.ctypes.data, obj.nbytes, None, False)
        if rc != 0:
            log.error("load_tensor_from_safetensor: put %r failed (%d)", store_key, rc)
            return None
        t = _tensor.decode(obj, self.tensor_format)
        if t is None:
            meta, data = _tensor.decode_raw(obj)
            t = data.view(_tensor._RAW_NP.get(dtype, "uint8")).reshape(shape)
        return t
