"""Unified parallel tensor IO (``_ParallelMixin``): Mooncake's
``*_tensor_with_parallelism*`` calls and its ``ParallelAxis``,
``TensorParallelism`` and ``ReadTarget`` (Mooncake's
docs/source/design/store/unified-parallel-tensor-io.md; where it and
store_py.cpp disagree, we follow the code), with the TP calls of
``_store_tp`` lowered onto the same helpers.

A shard is named by its axes (TP, DP, EP, PP; at most one of each):

- a single TP axis is stored as Mooncake's TP shards, f"{key}_tp_{rank}";
  the tensor written is the shard itself;
- several axes with a TP one: the tensor written is the full tensor, and
  the TP rank's uniform slice of it is stored as
  f"{key}__dp_0of2__tp_1of4_sd0__ep_..._eid3__pp_..._sid7" (axes in DP,
  TP, EP, PP order whatever the order given);
- axes without TP: the tensor written is stored whole under that name.

TP writes also record a 96-byte manifest (dtype, global shape, split dim,
shard count) under f"{key}__parallelism_manifest"; writer_partition writes
slice a full tensor into f"{key}__writer_{r}of{n}_sd{d}" with a manifest
under f"{key}__writer_manifest". Every shard object carries Mooncake's
304-byte header with its global and local shapes and its axes, so these
objects read back in Mooncake and the other way round.

Reads say what they want with a ReadTarget: the object as stored, a shard
(the stored one when it matches, else cut out of the TP shards that cover
it: TP resharding), or the full tensor rebuilt from its TP shards. A
rebuild reads each shard it needs once, scattered straight into the
destination (the user's buffer for the ``_into`` forms, GPU memory
included): the shard's header goes to a scratch page and each row of the
split to its place. The rows of a split dimension other than the first
are separate pieces of one read; where a shard overlaps the target only in
part, the rest of each row is read into a scratch buffer and dropped (the
layout forces those bytes over the wire, never a Python-side copy).
"""

import ctypes
import struct
from collections import namedtuple
from ctypes import byref, c_int

from . import tensor as _tensor
from ._lib import lib
from ._store_args import _INVALID, _group_ids, _int, _ints, _key, _keys, _malloc_array, _pick_groups, log
from ._store_tensors import _is_cuda, _view

_KINDS = {"dp": _tensor.AXIS_DP, "tp": _tensor.AXIS_TP, "ep": _tensor.AXIS_EP, "pp": _tensor.AXIS_PP}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_ORDER = {"dp": 0, "tp": 1, "ep": 2, "pp": 3}
_MODES = ("as_stored", "shard", "full")
_HDR = _tensor.TENSOR_METADATA_SIZE


class ParallelAxis:
    """One parallelism axis of a shard: kind ("tp", "dp", "ep" or "pp"),
    rank and size, split_dim (TP: the dimension split), expert_id (EP) and
    stage_id (PP). Mooncake's takes no constructor arguments; these are
    optional keywords here."""

    def __init__(self, kind="", rank=0, size=1, split_dim=None, expert_id=None, stage_id=None):
        self.kind = kind
        self.rank = rank
        self.size = size
        self.split_dim = split_dim
        self.expert_id = expert_id
        self.stage_id = stage_id

    def __repr__(self):
        return ("ParallelAxis(kind=%r, rank=%r, size=%r, split_dim=%r, expert_id=%r, stage_id=%r)"
                % (self.kind, self.rank, self.size, self.split_dim, self.expert_id, self.stage_id))


class TensorParallelism:
    """A shard's identity: the list of its ParallelAxis."""

    def __init__(self, axes=None):
        self.axes = list(axes) if axes is not None else []

    def __repr__(self):
        return "TensorParallelism(axes=%r)" % (self.axes,)


class ReadTarget:
    """What a read asks for: mode "as_stored" (the object under the key),
    "shard" (the shard parallelism names) or "full" (the whole tensor), and
    the TensorParallelism of the shard or of the layout to rebuild from.
    Setting any other mode raises RuntimeError, as Mooncake's."""

    def __init__(self, mode="as_stored", parallelism=None):
        self._mode = "as_stored"
        self.mode = mode
        self.parallelism = parallelism

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, value):
        m = _mode_of(value)
        if m is None:
            raise RuntimeError("Unsupported ReadTarget mode")
        self._mode = m

    def __repr__(self):
        return "ReadTarget(mode=%r, parallelism=%r)" % (self._mode, self.parallelism)


def _mode_of(value):
    if not isinstance(value, str):
        raise TypeError("ReadTarget mode must be a str, not %s" % type(value).__name__)
    m = value.lower()
    return m if m in _MODES else None


# ---- requests: parsed, validated and named ----

_Axis = namedtuple("_Axis", "kind rank size split_dim expert_id stage_id")
_BAD = object()


def _opt(v, what):
    return None if v is None else _int(v, what)


def _parse_axis(obj):
    if not all(hasattr(obj, a) for a in ("kind", "rank", "size")):
        log.error("ParallelAxis must provide kind, rank, and size")
        return None
    kind = obj.kind
    if not isinstance(kind, str):
        raise TypeError("ParallelAxis.kind must be a str, not %s" % type(kind).__name__)
    if kind.lower() not in _KINDS:
        log.error("unsupported parallel axis kind %r", kind)
        return None
    return _Axis(kind.lower(), _int(obj.rank, "rank"), _int(obj.size, "size"),
                 _opt(getattr(obj, "split_dim", None), "split_dim"),
                 _opt(getattr(obj, "expert_id", None), "expert_id"),
                 _opt(getattr(obj, "stage_id", None), "stage_id"))


def _parse_parallelism(obj):
    """The axes of a TensorParallelism (any object with .axes), or _BAD."""
    if not hasattr(obj, "axes"):
        log.error("TensorParallelism must provide axes")
        return _BAD
    out = []
    for a in obj.axes:
        ax = _parse_axis(a)
        if ax is None:
            return _BAD
        out.append(ax)
    return out


def _validate(axes, ctx):
    """axes, or None (logged) when they do not name a shard."""
    if axes is None or axes is _BAD:
        if axes is None:
            log.error("%s: parallelism is required", ctx)
        return None
    if not axes or len(axes) > _tensor.MAX_AXES:
        log.error("%s: parallelism needs 1 to %d axes, not %d", ctx, _tensor.MAX_AXES, len(axes))
        return None
    seen = set()
    for a in axes:
        why = None
        if a.size <= 0 or not 0 <= a.rank < a.size:
            why = "invalid rank/size"
        elif a.kind in seen:
            why = "duplicate axis kinds are not supported"
        elif a.kind == "tp" and a.split_dim is None:
            why = "TP axis requires split_dim"
        elif a.kind in ("dp", "ep", "pp") and a.split_dim is not None:
            why = "%s axis must not provide split_dim" % a.kind.upper()
        elif a.kind == "ep" and a.expert_id is None:
            why = "EP axis requires expert_id"
        elif a.kind == "pp" and a.stage_id is None:
            why = "PP axis requires stage_id"
        if why:
            log.error("%s: %s (%s axis)", ctx, why, a.kind)
            return None
        seen.add(a.kind)
    return axes


def _canonical(axes):
    return sorted(axes, key=lambda a: _ORDER[a.kind])


def _tp_index(axes):
    return next((i for i, a in enumerate(axes) if a.kind == "tp"), None)


def _legacy(axes):
    """A single TP axis: stored under Mooncake's f"{key}_tp_{rank}"."""
    return len(axes) == 1 and axes[0].kind == "tp"


def _suffix(a):
    s = "%s_%dof%d" % (a.kind, a.rank, a.size)
    if a.split_dim is not None:
        s += "_sd%d" % a.split_dim
    if a.expert_id is not None:
        s += "_eid%d" % a.expert_id
    if a.stage_id is not None:
        s += "_sid%d" % a.stage_id
    return s


def parallel_key(key, axes):
    """The key of the shard of key that axes name."""
    if _legacy(axes):
        return _tensor.tp_key(key, axes[0].rank)
    return key + "".join("__" + _suffix(a) for a in _canonical(axes))


def writer_key(key, rank, size, split_dim):
    """The key of a writer_partition shard."""
    return "%s__writer_%dof%d_sd%d" % (key, rank, size, split_dim)


def _with_tp_rank(axes, rank, size=None):
    return [a._replace(rank=rank, size=a.size if size is None else size) if a.kind == "tp" else a for a in axes]


def _shard_range(extent, rank, count):
    start = extent * rank // count
    return start, extent * (rank + 1) // count - start


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


# ---- headers and manifests ----


def _shard_meta(dtype, global_shape, local_shape, axes):
    """The SHARD header of a shard with axes (Mooncake's: each axis's
    split extent in reserved1, EP's expert_id and PP's stage_id in
    reserved0), or None."""
    if not axes or len(axes) > _tensor.MAX_AXES or len(global_shape) != len(local_shape):
        return None
    lay = []
    for i, a in enumerate(axes):
        r1 = 0
        if a.split_dim is not None:
            if not 0 <= a.split_dim < len(local_shape):
                return None
            r1 = local_shape[a.split_dim]
        r0 = a.expert_id if a.kind == "ep" else a.stage_id if a.kind == "pp" else 0
        lay.append(_tensor.LayoutAxis(_KINDS[a.kind], i, a.rank, a.size,
                                      -1 if a.split_dim is None else a.split_dim, r0 or 0, r1))
    return _tensor.TensorMetadata(dtype, tuple(global_shape), tuple(local_shape), _tensor.LAYOUT_SHARD, lay)


def _axes_of(meta):
    """The canonical axes a SHARD header names, or None."""
    if meta is None or meta.layout_kind != _tensor.LAYOUT_SHARD:
        return None
    out = []
    for a in meta.axes:
        name = _KIND_NAMES.get(a.kind)
        if name is None:
            return None
        out.append(_Axis(name, a.shard_rank, a.shard_count, a.split_dim if a.split_dim >= 0 else None,
                         a.reserved0 if name == "ep" else None, a.reserved0 if name == "pp" else None))
    return _canonical(out)


def _matches(axes, meta):
    st = _axes_of(meta)
    return st is not None and st == _canonical(axes)


def _tp_compatible(canon, meta, rank, size):
    """Whether meta is TP shard rank of size of the layout canon names:
    every other axis equal, the TP axis equal but for its rank."""
    st = _axes_of(meta)
    if st is None or len(st) != len(canon) or _tp_index(st) != _tp_index(canon):
        return False
    ti = _tp_index(canon)
    want = canon[ti]._replace(rank=rank, size=size)
    return all(s == (want if i == ti else r) for i, (r, s) in enumerate(zip(canon, st)))


# WriterShardManifest: magic, version, header_size, dtype, ndim, split_dim,
# shard_count, reserved0, (4 bytes of padding), global_shape 8 x i64.
_MANIFEST = struct.Struct("<IHHiiiii4x8q")
_MANIFEST_MAGIC = 0x574D414E


def pack_manifest(dtype, shape, split_dim, count):
    """The 96 bytes of Mooncake's shard manifest."""
    dims = tuple(shape) + (-1,) * (_tensor.MAX_DIMS - len(shape))
    return _MANIFEST.pack(_MANIFEST_MAGIC, 1, _MANIFEST.size, dtype, len(shape), split_dim, count, 0, *dims)


def parse_manifest(buf):
    """(dtype, global shape, split dim, shard count) of a manifest, or None."""
    if buf is None or len(buf) < _MANIFEST.size:
        return None
    f = _MANIFEST.unpack_from(bytes(buf[:_MANIFEST.size]))
    magic, version, hsize, dtype, ndim, sd, count = f[:7]
    dims = f[8:]
    if (magic != _MANIFEST_MAGIC or version != 1 or hsize != _MANIFEST.size or not 0 <= ndim <= _tensor.MAX_DIMS
            or count <= 0 or not 0 <= sd < ndim or any(d < 0 for d in dims[:ndim])
            or dtype not in {c for c, _ in _tensor.DTYPE_CODES.values()}):
        return None
    return dtype, tuple(dims[:ndim]), sd, count


def _elem_size(code):
    return next(s for c, s in _tensor.DTYPE_CODES.values() if c == code)


def _rows(shape, es, split_dim, start, ext):
    """(offset, bytes) of the rows of [start, start+ext) along split_dim in
    the row-major bytes of a tensor of shape, adjacent rows merged."""
    before, inner, g = _prod(shape[:split_dim]), _prod(shape[split_dim + 1:]), shape[split_dim]
    row = ext * inner * es
    if row == 0:
        return []
    if ext == g:
        return [(0, before * row)]
    return [((i * g + start) * inner * es, row) for i in range(before)]


def _is_device(ptr):
    dev = c_int(0)
    return lib.has("kvferry_memory_kind") and lib.kvferry_memory_kind(ptr, byref(dev)) == 2


def _header_at(ptr, n):
    """The tensor header of the n-byte object at ptr (host or GPU memory),
    or None."""
    if n < _HDR:
        return None
    if _is_device(ptr):
        head = ctypes.create_string_buffer(_HDR)
        if lib.kvferry_cuda_memcpy(head, ptr, _HDR) != 0:
            return None
        return _tensor.parse_metadata(head.raw, n)
    return _tensor.parse_metadata(_view(ptr, _HDR), n)


def _write_at(ptr, data):
    """Copy bytes to ptr (host or GPU memory)."""
    buf = ctypes.create_string_buffer(data, len(data))
    if _is_device(ptr):
        return lib.kvferry_cuda_memcpy(ptr, buf, len(data)) == 0
    ctypes.memmove(ptr, buf, len(data))
    return True


def _tensor_code(tensor):
    if not (_tensor.is_tensor(tensor) or _is_cuda(tensor)):
        raise TypeError("tensor must be a torch.Tensor or numpy.ndarray, not %s" % type(tensor).__name__)
    return _tensor.dtype_code(tensor)


def _parse_writer(obj, ctx):
    if not all(hasattr(obj, a) for a in ("rank", "size", "split_dim")):
        log.error("%s: writer_partition must provide rank, size, and split_dim", ctx)
        return None
    r, n, d = _int(obj.rank, "rank"), _int(obj.size, "size"), _int(obj.split_dim, "split_dim")
    if n <= 0 or not 0 <= r < n or d < 0:
        log.error("%s: invalid writer partition", ctx)
        return None
    return r, n, d


def _uniform(shape, split_dim, count, ctx):
    if not 0 <= split_dim < len(shape) or count <= 0:
        log.error("%s: invalid shard parameters (split_dim %d of %s, %d shards)", ctx, split_dim,
                  tuple(shape), count)
        return False
    if shape[split_dim] % count:
        log.error("%s: only uniform sharding is supported (%d along dim %d into %d)", ctx, shape[split_dim],
                  split_dim, count)
        return False
    return True


class _ParallelMixin:
    """The *_tensor_with_parallelism* calls and the shard machinery the TP
    calls share."""

    # ---- writing ----

    def _put_parts(self, key, parts, config, upsert):
        parts = [p for p in parts if p[1]]
        return self._batch_put_multi([key], [[p for p, _ in parts]], [[n for _, n in parts]], config, upsert)[0]

    def _put_shard(self, key, tensor, meta, rng, config, upsert):
        """Put meta's header and tensor's data (rows rng = (split_dim,
        start, extent) of it, or all) as one object, gathered from the
        tensor's memory with no copy (CUDA tensors: sliced on the device
        and sent from GPU memory)."""
        if _is_cuda(tensor):
            t = tensor if rng is None else tensor.narrow(rng[0], rng[1], rng[2])
            return self._put_cuda(key, t, config, upsert, meta)
        data, code, shape, keep = _tensor._as_bytes_view(tensor)
        hdr = ctypes.create_string_buffer(_tensor.pack_metadata(meta), _HDR)
        base = data.ctypes.data if data.nbytes else 0
        rows = [(0, data.nbytes)] if rng is None else _rows(shape, _elem_size(code), *rng)
        rc = self._put_parts(key, [(ctypes.addressof(hdr), _HDR)] + [(base + o, n) for o, n in rows], config, upsert)
        del keep
        return rc

    def _put_manifest(self, key, blob, config, upsert):
        b = ctypes.create_string_buffer(blob, len(blob))
        return self._put_ptr(key, ctypes.addressof(b), len(blob), config, upsert)

    def _put_with_parallelism(self, key, tensor, parallelism, config, writer_partition, upsert, ctx):
        key = _key(key)
        if writer_partition is not None and parallelism is not None:
            log.error("%s: writer_partition cannot be combined with parallelism", ctx)
            return _INVALID
        if not _group_ids(config, 1)[0]:
            return _INVALID
        if writer_partition is not None:
            wp = _parse_writer(writer_partition, ctx)
            if wp is None or not self._h:
                return _INVALID
            return self._write_writer(key, tensor, wp, config, upsert, ctx)
        if parallelism is None:
            if not self._h:
                return _INVALID
            return self._put_tensors([key], [tensor], config, upsert)[0]
        axes = _validate(_parse_parallelism(parallelism), ctx)
        if axes is None or not self._h:
            return _INVALID
        code = _tensor_code(tensor)
        if code < 0:
            log.error("%s: unsupported tensor dtype", ctx)
            return _INVALID
        shape = tuple(tensor.shape)
        ti = _tp_index(axes)
        if ti is None:
            # Stored whole under the axes' name (no manifest).
            meta = _shard_meta(code, shape, shape, axes)
            if meta is None:
                return _INVALID
            return self._put_shard(parallel_key(key, axes), tensor, meta, None, config, upsert)
        tp = axes[ti]
        if len(axes) == 1:
            # The tensor is the shard: its global shape is inferred.
            if not 0 <= tp.split_dim < len(shape):
                log.error("%s: split_dim %d out of range for %s", ctx, tp.split_dim, shape)
                return _INVALID
            gshape = list(shape)
            gshape[tp.split_dim] *= tp.size
            meta = _shard_meta(code, gshape, shape, axes)
            if meta is None:
                return _INVALID
            rc = self._put_shard(parallel_key(key, axes), tensor, meta, None, config, upsert)
        else:
            # The tensor is the full tensor: the TP rank's slice is stored.
            if not _uniform(shape, tp.split_dim, tp.size, ctx):
                return _INVALID
            gshape = list(shape)
            start, ext = _shard_range(shape[tp.split_dim], tp.rank, tp.size)
            local = list(shape)
            local[tp.split_dim] = ext
            meta = _shard_meta(code, shape, local, axes)
            if meta is None:
                return _INVALID
            rc = self._put_shard(parallel_key(key, axes), tensor, meta, (tp.split_dim, start, ext), config, upsert)
        if rc != 0:
            return rc
        return self._put_manifest(key + "__parallelism_manifest", pack_manifest(code, gshape, tp.split_dim, tp.size),
                                  config, upsert)

    def _write_writer(self, key, tensor, wp, config, upsert, ctx):
        rank, size, sd = wp
        code = _tensor_code(tensor)
        shape = tuple(tensor.shape)
        if code < 0 or not _uniform(shape, sd, size, ctx):
            return _INVALID
        start, ext = _shard_range(shape[sd], rank, size)
        local = list(shape)
        local[sd] = ext
        meta = _shard_meta(code, shape, local, [_Axis("tp", rank, size, sd, None, None)])
        rc = self._put_shard(writer_key(key, rank, size, sd), tensor, meta, (sd, start, ext), config, upsert)
        if rc != 0:
            return rc
        return self._put_manifest(key + "__writer_manifest", pack_manifest(code, shape, sd, size), config, upsert)

    def _put_with_parallelism_from(self, key, ptr, size, parallelism, config, writer_partition, upsert, ctx):
        key = _key(key)
        ptr, size = _int(ptr, "buffer_ptr"), _int(size, "size")
        if writer_partition is not None and parallelism is not None:
            log.error("%s: writer_partition cannot be combined with parallelism", ctx)
            return _INVALID
        if not _group_ids(config, 1)[0] or not self._h or ptr <= 0 or size < _HDR:
            return _INVALID
        meta = _header_at(ptr, size)
        if meta is None:
            log.error("%s: invalid tensor object metadata", ctx)
            return _INVALID
        if writer_partition is None and parallelism is None:
            return self._batch_put_ptrs([key], [ptr], [size], config, upsert)[0]
        data = ptr + meta.data_offset
        es = _elem_size(meta.dtype)
        hdr = ctypes.create_string_buffer(_HDR)

        def put(k, m, rng):
            ctypes.memmove(hdr, _tensor.pack_metadata(m), _HDR)
            rows = [(0, meta.data_bytes)] if rng is None else _rows(meta.global_shape, es, *rng)
            return self._put_parts(k, [(ctypes.addressof(hdr), _HDR)] + [(data + o, n) for o, n in rows],
                                   config, upsert)

        if writer_partition is not None:
            wp = _parse_writer(writer_partition, ctx)
            if wp is None or meta.local_shape != meta.global_shape or not _uniform(meta.global_shape, wp[2], wp[1], ctx):
                return _INVALID
            rank, n, sd = wp
            start, ext = _shard_range(meta.global_shape[sd], rank, n)
            local = list(meta.global_shape)
            local[sd] = ext
            m = _shard_meta(meta.dtype, meta.global_shape, local, [_Axis("tp", rank, n, sd, None, None)])
            rc = put(writer_key(key, rank, n, sd), m, (sd, start, ext))
            if rc != 0:
                return rc
            return self._put_manifest(key + "__writer_manifest", pack_manifest(meta.dtype, meta.global_shape, sd, n),
                                      config, upsert)
        axes = _validate(_parse_parallelism(parallelism), ctx)
        if axes is None:
            return _INVALID
        ti = _tp_index(axes)
        if ti is None:
            m = _shard_meta(meta.dtype, meta.global_shape, meta.local_shape, axes)
            return _INVALID if m is None else put(parallel_key(key, axes), m, None)
        # A full tensor object: every TP shard of it is stored (Mooncake's
        # _from route), without a manifest.
        tp = axes[ti]
        if meta.local_shape != meta.global_shape or not _uniform(meta.global_shape, tp.split_dim, tp.size, ctx):
            return _INVALID
        for r in range(tp.size):
            ar = _with_tp_rank(axes, r)
            start, ext = _shard_range(meta.global_shape[tp.split_dim], r, tp.size)
            local = list(meta.global_shape)
            local[tp.split_dim] = ext
            m = _shard_meta(meta.dtype, meta.global_shape, local, ar)
            rc = _INVALID if m is None else put(parallel_key(key, ar), m, (tp.split_dim, start, ext))
            if rc != 0:
                return rc
        return 0

    def _batch_with_parallelism(self, keys, values, parallelisms, config, writer_partitions, one, direct, ctx):
        keys = _keys(keys)
        values = list(values)
        n = len(keys)
        if not _group_ids(config, n)[0]:
            return [_INVALID] * n
        if parallelisms is not None and writer_partitions is not None:
            log.error("%s: writer_partitions cannot be combined with parallelisms", ctx)
            return [_INVALID] * n
        if len(values) != n:
            log.error("%s: values and keys must have the same length", ctx)
            return [_INVALID] * n
        if parallelisms is None and writer_partitions is None:
            return direct(keys, values)
        reqs = parallelisms if parallelisms is not None else writer_partitions
        if not isinstance(reqs, list) or len(reqs) != n:
            log.error("%s: %s must be a list as long as keys", ctx,
                      "parallelisms" if parallelisms is not None else "writer_partitions")
            return [_INVALID] * n
        out = []
        for i in range(n):
            cfg = _pick_groups(config, [i])
            if parallelisms is not None:
                out.append(one(keys[i], values[i], reqs[i], cfg, None))
            else:
                out.append(one(keys[i], values[i], None, cfg, reqs[i]))
        return out

    def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None, writer_partition=None):
        """Store tensor, or the shard of it that parallelism (a
        TensorParallelism) or writer_partition (any object with rank, size
        and split_dim) names; see the module's text for what is stored
        where. Returns 0 or a negative code (INVALID_PARAMS for a request
        that names no shard)."""
        return self._put_with_parallelism(key, tensor, parallelism, config, writer_partition, False,
                                          "put_tensor_with_parallelism")

    def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None, writer_partition=None):
        """put_tensor_with_parallelism that replaces existing objects."""
        return self._put_with_parallelism(key, tensor, parallelism, config, writer_partition, True,
                                          "upsert_tensor_with_parallelism")

    def batch_put_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None, config=None,
                                          writer_partitions=None):
        """put_tensor_with_parallelism for several tensors (parallelisms or
        writer_partitions: None, or lists as long as keys); list[int]."""
        return self._batch_with_parallelism(
            keys, tensors_list, parallelisms, config, writer_partitions,
            lambda k, t, p, c, w: self._put_with_parallelism(k, t, p, c, w, False, "batch_put_tensor_with_parallelism"),
            lambda ks, ts: self._put_tensors(ks, ts, config, False), "batch_put_tensor_with_parallelism")

    def batch_upsert_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None, config=None,
                                             writer_partitions=None):
        """batch_put_tensor_with_parallelism that replaces existing objects."""
        return self._batch_with_parallelism(
            keys, tensors_list, parallelisms, config, writer_partitions,
            lambda k, t, p, c, w: self._put_with_parallelism(k, t, p, c, w, True,
                                                             "batch_upsert_tensor_with_parallelism"),
            lambda ks, ts: self._put_tensors(ks, ts, config, True), "batch_upsert_tensor_with_parallelism")

    def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None, config=None,
                                         writer_partition=None):
        """put_tensor_with_parallelism of the tensor object ([TensorMetadata]
        [data]) at buffer_ptr: stored as is, sliced by writer_partition, or,
        for a TP parallelism, as every TP shard of it; shards are gathered
        from the buffer with no copy."""
        return self._put_with_parallelism_from(key, buffer_ptr, size, parallelism, config, writer_partition, False,
                                               "put_tensor_with_parallelism_from")

    def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None, config=None,
                                            writer_partition=None):
        """put_tensor_with_parallelism_from that replaces existing objects."""
        return self._put_with_parallelism_from(key, buffer_ptr, size, parallelism, config, writer_partition, True,
                                               "upsert_tensor_with_parallelism_from")

    def _from_direct(self, keys, ptrs, sizes, config, upsert):
        ptrs, sizes = _ints(ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if config is None:
            return self._tensor_from(keys, ptrs, sizes, upsert)
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys) or not all(
                p > 0 and _header_at(p, s) is not None for p, s in zip(ptrs, sizes)):
            return [_INVALID] * len(keys)
        return self._batch_put_ptrs(keys, ptrs, sizes, config, upsert) if keys else []

    def _batch_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, upsert,
                                     ctx):
        ptrs, szs = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if len(szs) != len(ptrs):
            return [_INVALID] * len(_keys(keys))
        return self._batch_with_parallelism(
            keys, list(zip(ptrs, szs)), parallelisms, config, writer_partitions,
            lambda k, v, p, c, w: self._put_with_parallelism_from(k, v[0], v[1], p, c, w, upsert, ctx),
            lambda ks, vs: self._from_direct(ks, [v[0] for v in vs], [v[1] for v in vs], config, upsert), ctx)

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                               writer_partitions=None):
        """put_tensor_with_parallelism_from for several buffers; list[int]."""
        return self._batch_with_parallelism_from(keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, False,
                                "batch_put_tensor_with_parallelism_from")

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                                  writer_partitions=None):
        """batch_put_tensor_with_parallelism_from that replaces existing
        objects."""
        return self._batch_with_parallelism_from(keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, True,
                                "batch_upsert_tensor_with_parallelism_from")

    # ---- reading ----

    def _object(self, key):
        """The object under key as a numpy uint8 array, or None."""
        n, p = self._get_alloc(key)
        if n < 0 or not p:
            return None
        return _malloc_array(p, n)

    def _read_whole(self, key, into):
        """The tensor stored under key (into: read into (ptr, size))."""
        if into is None:
            return self.get_tensor(key)
        return self.get_tensor_into(key, into[0], into[1])

    def _read_target(self, key, target, into, ctx):
        key = _key(key)
        if target is None:
            mode, par = "as_stored", None
        else:
            if not (hasattr(target, "mode") and hasattr(target, "parallelism")):
                log.error("%s: ReadTarget must provide mode and parallelism", ctx)
                return None
            mode = _mode_of(target.mode)
            if mode is None:
                log.error("%s: unsupported ReadTarget mode %r", ctx, target.mode)
                return None
            par = None if target.parallelism is None else _parse_parallelism(target.parallelism)
            if par is _BAD:
                return None
        if not self._h:
            return None
        if par is None and mode == "as_stored":
            return self._read_whole(key, into)
        if par is None and mode == "full":
            return self._read_writer_full(key, into, ctx)
        axes = _validate(par, ctx)
        if axes is None:
            return None
        if mode == "shard":
            t = self._read_stored_shard(key, axes, into)
            if t is not None:
                return t
            if _tp_index(axes) is not None:
                t = self._rebuild(key, axes, into, True, ctx)
                if t is not None:
                    return t
            if into is None and _legacy(axes):
                a = axes[0]
                return self.get_tensor(key if a.size <= 1 else _tensor.tp_key(key, a.rank))
            log.error("%s: parallelism metadata mismatch for key %r", ctx, key)
            return None
        if mode == "full":
            if _tp_index(axes) is None:
                log.error("%s: full reconstruction requires a TP axis", ctx)
                return None
            return self._rebuild(key, axes, into, False, ctx)
        log.error("%s: unsupported ReadTarget mode %r with parallelism", ctx, mode)
        return None

    def _read_stored_shard(self, key, axes, into):
        """The stored shard axes name, when its header says so."""
        routes = [(parallel_key(key, axes), False)]
        if _legacy(axes):
            a = axes[0]
            routes.append((writer_key(key, a.rank, a.size, a.split_dim or 0), True))
        for rk, writer in routes:
            if into is None:
                arr = self._object(rk)
                meta = _tensor.parse_metadata(arr) if arr is not None else None
            else:
                n = self.get_into(rk, into[0], into[1])
                meta = _header_at(into[0], n) if n >= 0 else None
            if meta is None or not _matches(axes, meta) or (writer and len(meta.axes) != 1):
                continue
            return self._decode(arr) if into is None else self._decode_at(into[0], _HDR + meta.data_bytes)
        return None

    def _read_writer_full(self, key, into, ctx):
        arr = self._object(key + "__writer_manifest")
        m = parse_manifest(arr) if arr is not None else None
        if m is None:
            return self._read_whole(key, into)
        dtype, gshape, sd, count = m

        def check(r, meta):
            st = _axes_of(meta)
            return st is not None and st == [_Axis("tp", r, count, sd, None, None)]

        keys = [writer_key(key, r, count, sd) for r in range(count)]
        out = _tensor.TensorMetadata(dtype, gshape, gshape, _tensor.LAYOUT_FULL)
        return self._gather(keys, dtype, gshape, sd, check, 0, gshape[sd], out, into, ctx)

    def _rebuild(self, key, axes, into, shard, ctx):
        """The full tensor (shard False), or the TP shard axes name cut out
        of the stored TP shards (True)."""
        canon = _canonical(axes)
        ti = _tp_index(canon)
        req = canon[ti]
        for layout in (self._layout_from_manifest, self._layout_from_first):
            lay = layout(key, canon, ti, req, ctx)
            if lay is None:
                continue
            keys, dtype, gshape, sd, check = lay
            if not _uniform(gshape, sd, req.size, ctx):
                return None
            if shard:
                ts, te = _shard_range(gshape[sd], req.rank, req.size)
                local = list(gshape)
                local[sd] = te
                out = _shard_meta(dtype, gshape, local, axes)
            else:
                ts, te = 0, gshape[sd]
                out = _tensor.TensorMetadata(dtype, gshape, gshape, _tensor.LAYOUT_FULL)
            if out is None:
                return None
            t = self._gather(keys, dtype, gshape, sd, check, ts, te, out, into, ctx)
            if t is not None:
                return t
        return None

    def _layout_from_manifest(self, key, canon, ti, req, ctx):
        arr = self._object(key + "__parallelism_manifest")
        m = parse_manifest(arr) if arr is not None else None
        if m is None:
            return None
        dtype, gshape, sd, count = m
        if (req.split_dim is not None and req.split_dim != sd) or gshape[sd] % count:
            return None
        keys = [parallel_key(key, _with_tp_rank(canon, r, count)) for r in range(count)]
        return keys, dtype, gshape, sd, lambda r, meta: _tp_compatible(canon, meta, r, count)

    def _layout_from_first(self, key, canon, ti, req, ctx):
        """The layout read off the header of the first TP shard (objects
        written without a manifest, e.g. by put_tensor_with_tp)."""
        if _legacy(canon):
            first = key if req.size <= 1 else _tensor.tp_key(key, 0)
        else:
            first = parallel_key(key, _with_tp_rank(canon, 0))
        arr = self._object(first)
        meta = _tensor.parse_metadata(arr) if arr is not None else None
        tp = next((a for a in (meta.axes if meta is not None else []) if a.kind == _tensor.AXIS_TP), None)
        if meta is None or meta.layout_kind != _tensor.LAYOUT_SHARD or tp is None:
            log.error("%s: no TP shard matched the requested layout for key %r", ctx, key)
            return None
        sd, gshape = tp.split_dim, meta.global_shape
        if req.split_dim is not None and req.split_dim != sd:
            log.error("%s: split_dim mismatch for key %r", ctx, key)
            return None
        if _legacy(canon):
            count = tp.shard_count
            keys = [key if count <= 1 else _tensor.tp_key(key, r) for r in range(count)]

            def check(r, m):
                a = next((x for x in m.axes if x.kind == _tensor.AXIS_TP), None)
                return (m.layout_kind == _tensor.LAYOUT_SHARD and a is not None and a.shard_rank == r
                        and a.shard_count == count and a.split_dim == sd)
        else:
            count = req.size
            keys = [parallel_key(key, _with_tp_rank(canon, r)) for r in range(count)]

            def check(r, m):
                return _tp_compatible(canon, m, r, count)
        if not 0 <= sd < len(gshape) or gshape[sd] % count:
            return None
        return keys, meta.dtype, gshape, sd, check

    def _gather(self, keys, dtype, gshape, sd, check, ts, te, out, into, ctx):
        """Read the shards of keys (uniform along sd) that overlap the
        target rows [ts, ts+te), each once and scattered straight into the
        destination, check their headers, write out's header in front and
        return the tensor (None on any failure)."""
        import numpy as np

        count = len(keys)
        es = _elem_size(dtype)
        g = gshape[sd]
        before, inner = _prod(gshape[:sd]), _prod(gshape[sd + 1:])
        unit = inner * es  # bytes of one index along sd, in one row
        tshape = list(gshape)
        tshape[sd] = te
        total = _HDR + _prod(tshape) * es
        ext = g // count
        # Which shards overlap, and the pieces of each object in order:
        # ("h", 304) its header, ("d", offset in the target data, bytes),
        # ("x", bytes) dropped.
        plans = []
        trash = 0
        for r in range(count):
            s = r * ext
            lo, hi = max(s, ts), min(s + ext, ts + te)
            if hi <= lo:
                continue
            pieces = [("h", _HDR)]
            drop = 0
            pre, mid, post = (lo - s) * unit, (hi - lo) * unit, (s + ext - hi) * unit
            for i in range(before):
                drop += pre
                if mid:
                    if drop:
                        pieces.append(("x", drop))
                        trash = max(trash, drop)
                        drop = 0
                    pieces.append(("d", (i * te + (lo - ts)) * unit, mid))
                drop += post
            if drop:
                pieces.append(("x", drop))
                trash = max(trash, drop)
            plans.append((r, pieces))
        scratch_n = _HDR * len(plans) + trash
        if into is None:
            buf = np.empty(total + scratch_n, np.uint8)
            base = buf.ctypes.data
            scratch = base + total
            reg = (base, buf.nbytes)
        else:
            ptr, size = into
            if size < total:
                log.error("%s: buffer of %d bytes too small for the %d of the tensor", ctx, size, total)
                return None
            base = ptr
            sbuf = np.empty(max(scratch_n, 1), np.uint8)
            scratch = sbuf.ctypes.data
            reg = (scratch, sbuf.nbytes)
        # Registered, the pieces move with no staging copy.
        registered = self.register_buffer(*reg) == 0
        try:
            hdr_at = {r: scratch + i * _HDR for i, (r, _) in enumerate(plans)}
            trash_at = scratch + _HDR * len(plans)
            rkeys, ptr_lists, size_lists = [], [], []
            for r, pieces in plans:
                ps, ss = [], []
                for p in pieces:
                    if p[0] == "h":
                        ps.append(hdr_at[r])
                        ss.append(_HDR)
                    elif p[0] == "x":
                        ps.append(trash_at)
                        ss.append(p[1])
                    else:
                        ps.append(base + _HDR + p[1])
                        ss.append(p[2])
                rkeys.append(keys[r])
                ptr_lists.append(ps)
                size_lists.append(ss)
            res = self.batch_get_into_multi_buffers(rkeys, ptr_lists, size_lists) if rkeys else []
            want = _HDR + before * ext * unit
            local = list(gshape)
            local[sd] = ext
            for (r, _), n in zip(plans, res):
                meta = _tensor.parse_metadata(_view(hdr_at[r], _HDR), want) if n == want else None
                if (meta is None or meta.dtype != dtype or meta.global_shape != tuple(gshape)
                        or meta.local_shape != tuple(local) or not check(r, meta)):
                    log.error("%s: shard %r missing or not part of the layout (read %d bytes)", ctx, keys[r], n)
                    return None
            if not _write_at(base, _tensor.pack_metadata(out)):
                return None
        finally:
            if registered:
                self.unregister_buffer(reg[0])
        if into is None:
            return self._decode(buf[:total])
        return self._decode_at(base, total)

    def get_tensor_with_parallelism(self, key, target=None):
        """Read what target (a ReadTarget; None: as stored) asks for: the
        object under key, a shard, or the full tensor. Returns the tensor
        (a CPU tensor, as Mooncake's) or None."""
        return self._read_target(key, target, None, "get_tensor_with_parallelism")

    def batch_get_tensor_with_parallelism(self, keys, targets=None):
        """get_tensor_with_parallelism for several keys (targets: None or a
        list as long as keys); list[tensor or None]."""
        keys = _keys(keys)
        if targets is None:
            return self.batch_get_tensor(keys)
        if not isinstance(targets, list) or len(targets) != len(keys):
            log.error("batch_get_tensor_with_parallelism: targets must be a list as long as keys")
            return [None] * len(keys)
        return [self._read_target(k, t, None, "batch_get_tensor_with_parallelism") for k, t in zip(keys, targets)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None):
        """get_tensor_with_parallelism into size bytes at buffer_ptr (host
        or GPU memory; laid out [TensorMetadata][data]); returns a tensor
        viewing the buffer, or None."""
        buffer_ptr, size = _int(buffer_ptr, "buffer_ptr"), _int(size, "size")
        if buffer_ptr <= 0 or size < 0:
            return None
        return self._read_target(key, target, (buffer_ptr, size), "get_tensor_with_parallelism_into")

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None):
        """get_tensor_with_parallelism_into for several keys; list[tensor or
        None]."""
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            log.error("batch_get_tensor_with_parallelism_into: keys, buffer_ptrs and sizes differ in length")
            return [None] * n
        if targets is not None and (not isinstance(targets, list) or len(targets) != n):
            log.error("batch_get_tensor_with_parallelism_into: targets must be a list as long as keys")
            return [None] * n
        if targets is None:
            return self.batch_get_tensor_into(keys, ptrs, sizes)
        return [self.get_tensor_with_parallelism_into(k, p, s, t) if p > 0 and s >= 0 else None
                for k, p, s, t in zip(keys, ptrs, sizes, targets)]

