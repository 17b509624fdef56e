"""Mooncake's tensor object format (specs/mooncake.md §6.3).

An object is a 304-byte ``TensorMetadata`` header (native little-endian)
followed by the tensor's row-major contiguous bytes, so tensors stored by
kvferry and by Mooncake read back in either. This module packs and
validates headers, converts numpy arrays and torch tensors to and from
objects, and splits tensors into tensor-parallel shards.

numpy is needed for everything that touches data; torch is optional.
bfloat16 and float8 have no numpy dtype: they need torch (or ml_dtypes),
except through the raw ``encode(..., dtype=...)`` / ``decode_raw`` pair.
"""

import struct

__all__ = [
    "TENSOR_METADATA_SIZE",
    "MAGIC",
    "VERSION",
    "MAX_DIMS",
    "MAX_AXES",
    "DTYPE_CODES",
    "LAYOUT_FULL",
    "LAYOUT_SHARD",
    "AXIS_DP",
    "AXIS_TP",
    "AXIS_EP",
    "AXIS_PP",
    "LayoutAxis",
    "TensorMetadata",
    "pack_metadata",
    "parse_metadata",
    "dtype_code",
    "encode",
    "encoded_size",
    "decode",
    "decode_raw",
    "tp_key",
    "tp_split",
    "is_tensor",
]

TENSOR_METADATA_SIZE = 304
MAGIC = 0x4D4F4F4E
VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4

LAYOUT_FULL = 0
LAYOUT_SHARD = 1

AXIS_DP = 0
AXIS_TP = 1
AXIS_EP = 2
AXIS_PP = 3
AXIS_RESERVED = 4

# Mooncake's TensorDtype codes: name -> (code, element size).
DTYPE_CODES = {
    "float32": (0, 4),
    "float64": (1, 8),
    "int8": (2, 1),
    "uint8": (3, 1),
    "int16": (4, 2),
    "uint16": (5, 2),
    "int32": (6, 4),
    "uint32": (7, 4),
    "int64": (8, 8),
    "uint64": (9, 8),
    "bool": (10, 1),
    "float16": (11, 2),
    "bfloat16": (12, 2),
    "float8_e4m3fn": (13, 1),
    "float8_e5m2": (14, 1),
}
_NAME_OF = {code: name for name, (code, _) in DTYPE_CODES.items()}
_SIZE_OF = {code: size for _, (code, size) in DTYPE_CODES.items()}
# Same-size stand-ins that numpy can hold for dtypes it lacks.
_RAW_NP = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}

# magic u32, version u16, header_size u16, dtype i32, ndim i32,
# layout_kind u32, reserved_flags u32, data_offset u64, data_bytes u64,
# global_shape 8 x i64, local_shape 8 x i64, axis_count u32, reserved0 u32.
_HEAD = struct.Struct("<IHHiiIIQQ8q8qII")
# kind, axis_index, shard_rank, shard_count, split_dim, reserved0 (i32), reserved1 (i64).
_AXIS = struct.Struct("<iiiiiiq")
assert _HEAD.size + MAX_AXES * _AXIS.size == TENSOR_METADATA_SIZE


class LayoutAxis:
    """One parallelism axis of a shard (kind AXIS_TP, ... )."""

    __slots__ = ("kind", "axis_index", "shard_rank", "shard_count", "split_dim",
                 "reserved0", "reserved1")

    def __init__(self, kind, axis_index, shard_rank, shard_count, split_dim=-1,
                 reserved0=0, reserved1=0):
        self.kind = kind
        self.axis_index = axis_index
        self.shard_rank = shard_rank
        self.shard_count = shard_count
        self.split_dim = split_dim
        self.reserved0 = reserved0
        self.reserved1 = reserved1

    def astuple(self):
        return (self.kind, self.axis_index, self.shard_rank, self.shard_count,
                self.split_dim, self.reserved0, self.reserved1)

    def __eq__(self, other):
        return isinstance(other, LayoutAxis) and self.astuple() == other.astuple()

    def __repr__(self):
        return ("LayoutAxis(kind=%d, axis_index=%d, shard_rank=%d, shard_count=%d, "
                "split_dim=%d)" % self.astuple()[:5])


class TensorMetadata:
    """The decoded 304-byte header of a tensor object."""

    __slots__ = ("dtype", "layout_kind", "data_offset", "data_bytes", "global_shape",
                 "local_shape", "axes", "reserved_flags")

    def __init__(self, dtype, global_shape, local_shape=None, layout_kind=LAYOUT_FULL,
                 axes=(), data_bytes=None, data_offset=TENSOR_METADATA_SIZE, reserved_flags=0):
        self.dtype = int(dtype)
        self.global_shape = tuple(int(d) for d in global_shape)
        self.local_shape = tuple(int(d) for d in (local_shape if local_shape is not None
                                                 else global_shape))
        self.layout_kind = layout_kind
        self.axes = list(axes)
        self.data_offset = data_offset
        self.reserved_flags = reserved_flags
        if data_bytes is None:
            data_bytes = _SIZE_OF.get(self.dtype, 0) * _prod(self.local_shape)
        self.data_bytes = data_bytes

    @property
    def ndim(self):
        return len(self.local_shape)

    @property
    def dtype_name(self):
        return _NAME_OF.get(self.dtype, "unknown(%d)" % self.dtype)

    def __repr__(self):
        return ("TensorMetadata(dtype=%s, global_shape=%s, local_shape=%s, layout_kind=%d, "
                "axes=%s, data_bytes=%d)" % (self.dtype_name, self.global_shape,
                                             self.local_shape, self.layout_kind, self.axes,
                                             self.data_bytes))


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _dims(shape):
    return tuple(shape) + (-1,) * (MAX_DIMS - len(shape))


def pack_metadata(meta):
    """Return the 304 header bytes of meta (a TensorMetadata)."""
    if len(meta.local_shape) > MAX_DIMS or len(meta.global_shape) != len(meta.local_shape):
        raise ValueError("tensor must have at most %d dims and matching global/local "
                         "shapes" % MAX_DIMS)
    if len(meta.axes) > MAX_AXES:
        raise ValueError("at most %d layout axes" % MAX_AXES)
    head = _HEAD.pack(MAGIC, VERSION, TENSOR_METADATA_SIZE, meta.dtype, meta.ndim,
                      meta.layout_kind, meta.reserved_flags, meta.data_offset, meta.data_bytes,
                      *_dims(meta.global_shape), *_dims(meta.local_shape), len(meta.axes), 0)
    axes = b"".join(_AXIS.pack(*a.astuple()) for a in meta.axes)
    return head + axes + bytes(MAX_AXES * _AXIS.size - len(axes))


def parse_metadata(buf, total_length=None):
    """Decode and validate a header at the start of buf (bytes-like).

    total_length is the object's length (default: len(buf)). Returns a
    TensorMetadata, or None when any field is invalid, as Mooncake's
    readers do: magic, version, header size, dtype, ndim, layout kind, axes,
    offsets, unused dims (-1) and the byte count must all agree.
    """
    mv = memoryview(buf).cast("B")
    if total_length is None:
        total_length = mv.nbytes
    if mv.nbytes < TENSOR_METADATA_SIZE or total_length < TENSOR_METADATA_SIZE:
        return None
    f = _HEAD.unpack_from(mv, 0)
    magic, version, hsize, dtype, ndim, kind, flags, off, nbytes = f[:9]
    gshape, lshape = f[9:17], f[17:25]
    axis_count = f[25]
    if magic != MAGIC or version != VERSION or hsize != TENSOR_METADATA_SIZE:
        return None
    if dtype not in _SIZE_OF or not 0 <= ndim <= MAX_DIMS:
        return None
    if axis_count > MAX_AXES or kind > LAYOUT_SHARD:
        return None
    if off < TENSOR_METADATA_SIZE or off > total_length or nbytes != total_length - off:
        return None
    if any(d < 0 for d in gshape[:ndim]) or any(d < 0 for d in lshape[:ndim]):
        return None
    if any(d != -1 for d in gshape[ndim:]) or any(d != -1 for d in lshape[ndim:]):
        return None
    if _prod(lshape[:ndim]) * _SIZE_OF[dtype] != nbytes:
        return None
    axes = []
    for i in range(axis_count):
        a = LayoutAxis(*_AXIS.unpack_from(mv, _HEAD.size + i * _AXIS.size))
        if not AXIS_DP <= a.kind <= AXIS_RESERVED:
            return None
        if a.shard_count <= 0 or not 0 <= a.shard_rank < a.shard_count:
            return None
        if not -1 <= a.split_dim < ndim:
            return None
        axes.append(a)
    return TensorMetadata(dtype, gshape[:ndim], lshape[:ndim], kind, axes, nbytes, off, flags)


# ---- numpy / torch adapters ----


def _np():
    import numpy

    return numpy


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def is_tensor(obj):
    """Report whether obj is a numpy array or a torch tensor."""
    t = type(obj)
    mod = t.__module__
    if mod == "numpy" and t.__name__ == "ndarray":
        return True
    if mod.startswith("torch"):
        torch = _torch()
        return torch is not None and isinstance(obj, torch.Tensor)
    try:
        return isinstance(obj, _np().ndarray)
    except ImportError:
        return False


def _is_torch(obj):
    torch = _torch() if type(obj).__module__.startswith("torch") else None
    return torch is not None and isinstance(obj, torch.Tensor)


def dtype_code(obj):
    """Return Mooncake's dtype code of a numpy array/dtype or torch
    tensor/dtype, or -1 when it has none."""
    dt = getattr(obj, "dtype", obj)
    name = str(dt)
    if name.startswith("torch."):
        name = name[6:]
    name = {"bool_": "bool", "float8_e4m3": "float8_e4m3fn"}.get(name, name)
    ent = DTYPE_CODES.get(name)
    return ent[0] if ent else -1


def _as_bytes_view(obj):
    """Return (uint8 numpy view of obj's contiguous bytes, dtype code,
    shape, keepalive). A copy is made only when obj is not contiguous or
    lives on a GPU."""
    np = _np()
    if _is_torch(obj):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        code = dtype_code(t)
        if code < 0:
            raise TypeError("unsupported torch dtype %s" % t.dtype)
        shape = tuple(t.shape)
        if t.numel() == 0:
            return np.empty(0, np.uint8), code, shape, t
        raw = _torch_raw_numpy(t)
        return raw.reshape(-1).view(np.uint8), code, shape, t
    if isinstance(obj, np.ndarray):
        code = dtype_code(obj)
        if code < 0:
            raise TypeError("unsupported numpy dtype %s" % obj.dtype)
        # (ascontiguousarray would turn a 0-d array into a 1-d one.)
        a = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
        return a.reshape(-1).view(np.uint8), code, tuple(obj.shape), a
    raise TypeError("expected a numpy.ndarray or torch.Tensor, not %s" % type(obj).__name__)


def _torch_raw_numpy(t):
    # A numpy view of a CPU torch tensor's memory, through a same-size
    # integer dtype for the types numpy lacks.
    torch = _torch()
    name = str(t.dtype)[6:]
    if name in _RAW_NP:
        t = t.view(getattr(torch, {"uint16": "int16", "uint8": "uint8"}[_RAW_NP[name]]))
    elif name == "bool":
        t = t.view(torch.uint8)
    return t.numpy()


def encoded_size(tensor):
    """Return the size in bytes of tensor's object (header and data)."""
    return TENSOR_METADATA_SIZE + int(tensor.nbytes if hasattr(tensor, "nbytes") else
                                      tensor.numel() * tensor.element_size())


def encode(tensor, metadata=None, dtype=None, out=None):
    """Return one object (a numpy uint8 array: header ‖ data) for tensor.

    metadata overrides the header (for shards); dtype (a name of
    DTYPE_CODES) relabels raw data, e.g. uint8 bytes as float8_e4m3fn. out,
    a numpy uint8 array of exactly the object's size, receives the object
    instead of a new array (saving the allocation and its page faults).
    """
    np = _np()
    data, code, shape, _keep = _as_bytes_view(tensor)
    if dtype is not None:
        if dtype not in DTYPE_CODES:
            raise ValueError("unknown dtype %r" % dtype)
        ncode, size = DTYPE_CODES[dtype]
        if _SIZE_OF[code] != size:
            raise ValueError("cannot relabel %s as %s: element sizes differ"
                             % (_NAME_OF[code], dtype))
        code = ncode
    if metadata is None:
        metadata = TensorMetadata(code, shape)
    if metadata.data_bytes != data.nbytes:
        raise ValueError("header says %d data bytes, tensor has %d"
                         % (metadata.data_bytes, data.nbytes))
    if out is None:
        out = np.empty(TENSOR_METADATA_SIZE + data.nbytes, np.uint8)
    elif out.dtype != np.uint8 or out.nbytes != TENSOR_METADATA_SIZE + data.nbytes:
        raise ValueError("out must be a uint8 array of %d bytes"
                         % (TENSOR_METADATA_SIZE + data.nbytes))
    out[:TENSOR_METADATA_SIZE] = np.frombuffer(pack_metadata(metadata), np.uint8)
    out[TENSOR_METADATA_SIZE:] = data
    return out


def decode_raw(buf):
    """Return (TensorMetadata, uint8 numpy view of the data) of an object,
    or None when its header is invalid. No copy."""
    np = _np()
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    arr = arr.reshape(-1).view(np.uint8)
    meta = parse_metadata(arr)
    if meta is None:
        return None
    return meta, arr[meta.data_offset:meta.data_offset + meta.data_bytes]


def decode(buf, fmt="auto"):
    """Return the tensor of an object (bytes-like or numpy uint8 array), a
    view without copy where possible, or None when it is invalid.

    fmt is "torch", "numpy", or "auto" (torch when importable). bfloat16
    and float8 need torch (or ml_dtypes) and give None otherwise.
    """
    r = decode_raw(buf)
    if r is None:
        return None
    meta, data = r
    np = _np()
    name = meta.dtype_name
    torch = _torch() if fmt in ("auto", "torch") else None
    if fmt == "torch" and torch is None:
        raise ImportError("torch is not installed")
    tdt = getattr(torch, name, None) if torch is not None else None
    if tdt is not None:
        if name in _RAW_NP or name == "bool":
            # Through a same-size integer type torch.from_numpy accepts.
            raw = data.view(np.int16 if name == "bfloat16" else np.uint8)
            t = torch.from_numpy(_writable(raw)).view(tdt)
        else:
            t = torch.from_numpy(_writable(data.view(np.dtype(name))))
        return t.reshape(meta.local_shape)
    if fmt == "torch":
        return None  # this torch lacks the dtype (uint16/32/64 before 2.3, float8 before 2.1)
    try:
        npdt = np.dtype(name)
    except TypeError:
        try:
            import importlib

            importlib.import_module("ml_dtypes")  # registers bfloat16/float8 with numpy
            npdt = np.dtype(name)
        except (ImportError, TypeError):
            return None
    return data.view(npdt).reshape(meta.local_shape)


def _writable(a):
    # torch.from_numpy warns on read-only arrays; copy those (bytes input).
    return a if a.flags.writeable else a.copy()


# ---- tensor parallelism ----


def tp_key(key, rank):
    """Return the key of TP shard rank of key: f"{key}_tp_{rank}"."""
    return "%s_tp_%d" % (key, rank)


def tp_split(tensor, tp_size, split_dim=0):
    """Split tensor evenly along split_dim into tp_size contiguous shards.

    Returns [(shard, TensorMetadata)] with SHARD headers (global and local
    shapes, one TP axis) as Mooncake writes them, or None when the split is
    impossible (dim out of range, not divisible, unsupported dtype).
    """
    shape = tuple(tensor.shape)
    if tp_size <= 0 or not 0 <= split_dim < len(shape) or shape[split_dim] % tp_size:
        return None
    code = dtype_code(tensor)
    if code < 0:
        return None
    step = shape[split_dim] // tp_size
    out = []
    for r in range(tp_size):
        if _is_torch(tensor):
            shard = tensor.narrow(split_dim, r * step, step).contiguous()
        else:
            np = _np()
            idx = [slice(None)] * len(shape)
            idx[split_dim] = slice(r * step, (r + 1) * step)
            shard = np.ascontiguousarray(tensor[tuple(idx)])
        local = tuple(shard.shape)
        axis = LayoutAxis(AXIS_TP, 0, r, tp_size, split_dim, 0, local[split_dim])
        meta = TensorMetadata(code, shape, local, LAYOUT_SHARD, [axis])
        out.append((shard, meta))
    return out
