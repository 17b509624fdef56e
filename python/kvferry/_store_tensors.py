"""Tensor objects in the store (``_TensorMixin``): Mooncake's 304-byte
header (``kvferry.tensor``) over numpy arrays and torch tensors, host or
CUDA, and Mooncake's module-level tensor helpers."""

import ctypes
import threading
from ctypes import byref, c_int

from . import tensor as _tensor
from ._lib import lib
from ._store_args import _INVALID, _ints, _key, _keys, _malloc_array, log
from .errors import ErrorCode


class _TensorMixin:
    """put_tensor, get_tensor and their upsert, pub, batch, into and
    from forms."""

    def _decode(self, arr):
        fmt = self.tensor_format
        if fmt not in ("auto", "torch", "numpy"):
            raise ValueError("tensor_format must be 'auto', 'torch' or 'numpy'")
        t = _tensor.decode(arr, fmt)
        if t is None:
            log.error("object is not a valid tensor (or its dtype is unavailable here)")
        return t

    def _encode(self, tensor, meta=None, out=None):
        if not _tensor.is_tensor(tensor):
            raise TypeError("tensor must be a torch.Tensor or numpy.ndarray, not %s"
                            % type(tensor).__name__)
        return _tensor.encode(tensor, meta, out=out)

    def _encode_all(self, pairs):
        """Encode [(tensor, meta)] for one synchronous put into this
        thread's reusable scratch memory (objects are copied out by the
        put, so the scratch is free again when it returns)."""
        for t, _ in pairs:
            if not _tensor.is_tensor(t):
                raise TypeError("tensor must be a torch.Tensor or numpy.ndarray, not %s"
                                % type(t).__name__)
        sizes = [_tensor.encoded_size(t) for t, _ in pairs]
        scratch = _scratch(sum(sizes))
        if scratch is None:
            return [self._encode(t, m) for t, m in pairs]
        objs, off = [], 0
        for (t, m), n in zip(pairs, sizes):
            objs.append(self._encode(t, m, scratch[off:off + n]))
            off += n
        return objs

    def _put_objects(self, keys, objs, config, upsert):
        """Put encoded objects (numpy uint8 arrays); list[int]."""
        if not keys:
            return []
        if len(keys) == 1:
            o = objs[0]
            return [self._put_ptr(keys[0], o.ctypes.data, o.nbytes, config, upsert)]
        return self._batch_put_ptrs(keys, [o.ctypes.data for o in objs],
                                    [o.nbytes for o in objs], config, upsert)

    def _put_tensors(self, keys, tensors, config, upsert):
        keys = _keys(keys)
        tensors = list(tensors)
        if not self._h or len(keys) != len(tensors) or not keys:
            return [_INVALID] * len(keys)
        if any(_is_cuda(t) for t in tensors):
            host = [i for i, t in enumerate(tensors) if not _is_cuda(t)]
            out = [None] * len(keys)
            for i, t in enumerate(tensors):
                if _is_cuda(t):
                    out[i] = self._put_cuda(keys[i], t, config, upsert)
            if host:
                res = self._put_tensors([keys[i] for i in host], [tensors[i] for i in host], config, upsert)
                for i, r in zip(host, res):
                    out[i] = r
            return out
        objs = self._encode_all([(t, None) for t in tensors])
        return self._put_objects(keys, objs, config, upsert)

    def _put_cuda(self, key, t, config, upsert, meta=None):
        """Put a CUDA tensor without taking its data through host memory:
        the 304-byte header and the data are joined in GPU scratch memory
        (one small host-to-device and one device-to-device copy) that the
        library sends from GPU memory (CUDA IPC, staged TCP, ...). Scratch
        buffers come from the client's pool (_gpuscratch: registered once,
        reused, bounded, freed at close)."""
        if hasattr(t, "is_contiguous") and not t.is_contiguous():
            t = t.contiguous()  # on the device
        code = _tensor.dtype_code(t)
        if code < 0:
            raise TypeError("unsupported dtype %s" % t.dtype)
        nbytes = t.numel() * t.element_size()
        meta = meta or _tensor.TensorMetadata(code, tuple(t.shape))
        header = _tensor.pack_metadata(meta)
        total = len(header) + nbytes
        dev = _device_index(t)
        pool = self._gpu_scratch()
        if pool is None:
            return _INVALID
        buf = pool.acquire(total, dev)
        try:
            hb = ctypes.create_string_buffer(header, len(header))
            if lib.kvferry_cuda_memcpy(buf, hb, len(header)) != 0 or (
                    nbytes and lib.kvferry_cuda_memcpy(buf + len(header), t.data_ptr(), nbytes) != 0):
                return int(ErrorCode.INTERNAL_ERROR)
            return self._put_ptr(key, buf, total, config, upsert)
        finally:
            pool.release(buf)

    def _gpu_scratch(self):
        """The client's pool of registered GPU scratch buffers (made on
        first use; None when the client is not set up)."""
        with self._mu:
            h = self._h
            if not h:
                return None
            if self._scratch is None:
                from ._gpuscratch import GpuScratchPool

                self._scratch = GpuScratchPool(lambda p, n: lib.mooncake_store_register_buffer(h, p, n),
                                               lambda p: lib.mooncake_store_unregister_buffer(h, p))
            return self._scratch

    def _get_cuda(self, key, device, dst=None):
        """Read key's tensor object into GPU scratch memory of device (the
        library writes GPU memory directly), check its header (copied to the
        host: 304 bytes), then copy the data device-to-device into dst, or
        into a new tensor of torch's made on device when dst is None.
        Returns (payload size or negative code, tensor)."""
        size = self.get_size(key)
        if size < 0:
            return size, None
        if size < _tensor.TENSOR_METADATA_SIZE:
            return _INVALID, None
        pool = self._gpu_scratch()
        if pool is None:
            return _INVALID, None
        buf = pool.acquire(size, device)
        try:
            n = self.get_into(key, buf, size)
            if n < 0:
                return n, None
            head = ctypes.create_string_buffer(_tensor.TENSOR_METADATA_SIZE)
            if lib.kvferry_cuda_memcpy(head, buf, len(head)) != 0:
                return int(ErrorCode.INTERNAL_ERROR), None
            meta = _tensor.parse_metadata(head.raw, n)
            if meta is None:
                return _INVALID, None
            if dst is None:
                torch = _tensor._torch()
                if torch is None:
                    raise ImportError("get_tensor(device=...) needs torch")
                dst = torch.empty(meta.local_shape, dtype=getattr(torch, meta.dtype_name), device="cuda:%d" % device)
            nbytes = dst.numel() * dst.element_size()
            if meta.dtype != _tensor.dtype_code(dst) or meta.ndim != len(dst.shape) or meta.data_bytes != nbytes:
                return _INVALID, None
            if nbytes and lib.kvferry_cuda_memcpy(dst.data_ptr(), buf + meta.data_offset, nbytes) != 0:
                return int(ErrorCode.INTERNAL_ERROR), None
            return meta.data_bytes, dst
        finally:
            pool.release(buf)

    def put_tensor(self, key, tensor):
        """Store a tensor (numpy array or torch tensor) as a tensor object."""
        return self._put_tensors([_key(key)], [tensor], None, False)[0]

    def upsert_tensor(self, key, tensor):
        """put_tensor that replaces an existing object."""
        return self._put_tensors([_key(key)], [tensor], None, True)[0]

    def pub_tensor(self, key, tensor, config=None):
        """put_tensor with a ReplicateConfig."""
        return self._put_tensors([_key(key)], [tensor], config, False)[0]

    def upsert_pub_tensor(self, key, tensor, config=None):
        """upsert_tensor with a ReplicateConfig."""
        return self._put_tensors([_key(key)], [tensor], config, True)[0]

    def batch_put_tensor(self, keys, tensors_list):
        """Store several tensors; list[int]."""
        return self._put_tensors(keys, tensors_list, None, False)

    def batch_upsert_tensor(self, keys, tensors_list):
        """upsert several tensors; list[int]."""
        return self._put_tensors(keys, tensors_list, None, True)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        """Store several tensors with a ReplicateConfig; list[int]."""
        return self._put_tensors(keys, tensors_list, config, False)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        """upsert several tensors with a ReplicateConfig; list[int]."""
        return self._put_tensors(keys, tensors_list, config, True)

    def get_tensor(self, key, device=None):
        """Return the tensor stored under key, or None: a CPU tensor (as
        Mooncake's), or one on device when a CUDA device is given
        ("cuda:1", torch.device), read without a host copy of its data."""
        key = _key(key)
        if not self._h:
            return None
        if device is not None and _is_cuda_device(device):
            n, t = self._get_cuda(key, _device_index(device))
            return t if n >= 0 else None
        n, p = self._get_alloc(key)
        if n < 0 or not p:
            return None
        return self._decode(_malloc_array(p, n))

    def batch_get_tensor(self, keys):
        """Return list[tensor or None]."""
        return [self.get_tensor(k) for k in _keys(keys)]

    def get_tensor_into(self, key, buffer_ptr, size):
        """Read a tensor object into size bytes at buffer_ptr and return a
        tensor viewing its data there (valid while the buffer lives), or None."""
        n = self.get_into(key, buffer_ptr, size)
        if n < 0:
            return None
        return self._decode_at(buffer_ptr, n)

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """get_tensor_into for several keys; list[tensor or None]."""
        res = self.batch_get_into(keys, buffer_ptrs, sizes)
        out = []
        for n, p in zip(res, _ints(buffer_ptrs, "buffer_ptrs")):
            out.append(self._decode_at(p, n) if n >= 0 else None)
        return out

    def _decode_at(self, ptr, n):
        """The tensor of the object of n bytes at ptr, viewing its data: a
        numpy view for host memory; for GPU memory a CUDA tensor through
        torch.as_tensor and __cuda_array_interface__ (only the 304-byte
        header is copied to the host)."""
        dev = c_int(0)
        if not lib.has("kvferry_memory_kind") or lib.kvferry_memory_kind(ptr, byref(dev)) != 2:
            return self._decode(_view(ptr, n))
        head = ctypes.create_string_buffer(_tensor.TENSOR_METADATA_SIZE)
        if n < len(head) or lib.kvferry_cuda_memcpy(head, ptr, len(head)) != 0:
            return None
        meta = _tensor.parse_metadata(head.raw, n)
        torch = _tensor._torch()
        if meta is None or torch is None:
            log.error("object at %#x is not a valid tensor, or torch is missing", ptr)
            return None
        return _cuda_view(torch, ptr + meta.data_offset, meta, dev.value)

    def get_tensor_into_cuda(self, key, tensor):
        """Read a tensor object's payload into a pre-allocated tensor (any
        device) whose dtype, ndim and byte size match. Returns the payload
        size or a negative code."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        """get_tensor_into_cuda for several keys; list[int]."""
        keys = _keys(keys)
        tensors = list(tensors_list)
        if not self._h or len(keys) != len(tensors):
            return [_INVALID] * len(keys)
        out = []
        for key, dst in zip(keys, tensors):
            if _is_cuda(dst):
                out.append(self._get_cuda(key, _device_index(dst), dst)[0])
                continue
            if not _tensor.is_tensor(dst):
                raise TypeError("tensors must be torch tensors or numpy arrays")
            n, p = self._get_alloc(key)
            if n < 0 or not p:
                out.append(n if n < 0 else int(ErrorCode.INTERNAL_ERROR))
                continue
            r = _tensor.decode_raw(_malloc_array(p, n))
            code = _tensor.dtype_code(dst)
            if r is None:
                out.append(_INVALID)
                continue
            meta, data = r
            nbytes = dst.numel() * dst.element_size() if hasattr(dst, "numel") else dst.nbytes
            if meta.dtype != code or meta.ndim != len(dst.shape) or meta.data_bytes != nbytes:
                out.append(_INVALID)
                continue
            _copy_into(dst, data)
            out.append(meta.data_bytes)
        return out

    def _check_tensor_object(self, buffer_ptr, size):
        if buffer_ptr <= 0 or size < _tensor.TENSOR_METADATA_SIZE:
            return False
        return _tensor.parse_metadata(_view(buffer_ptr, size)) is not None

    def _tensor_from(self, keys, buffer_ptrs, sizes, upsert):
        keys = _keys(keys)
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        ok = [self._check_tensor_object(p, s) for p, s in zip(ptrs, sizes)]
        out = [_INVALID] * len(keys)
        idx = [i for i, good in enumerate(ok) if good]
        if idx:
            res = self._batch_put_ptrs([keys[i] for i in idx], [ptrs[i] for i in idx],
                                       [sizes[i] for i in idx], None, upsert)
            for i, r in zip(idx, res):
                out[i] = r
        return out

    def put_tensor_from(self, key, buffer_ptr, size):
        """Store a buffer already laid out as [TensorMetadata][data]."""
        return self._tensor_from([key], [buffer_ptr], [size], False)[0]

    def upsert_tensor_from(self, key, buffer_ptr, size):
        """upsert of a [TensorMetadata][data] buffer."""
        return self._tensor_from([key], [buffer_ptr], [size], True)[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        """put_tensor_from for several buffers; list[int]."""
        return self._tensor_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        """upsert_tensor_from for several buffers; list[int]."""
        return self._tensor_from(keys, buffer_ptrs, sizes, True)


# Synchronous tensor puts encode into a per-thread scratch buffer that is
# reused, up to this size; larger objects get their own allocation.
_SCRATCH_MAX = 1 << 30
_scratch_tls = threading.local()


def _scratch(n):
    """A uint8 numpy array of n bytes of this thread's scratch, or None."""
    import numpy as np

    if n > _SCRATCH_MAX:
        return None
    buf = getattr(_scratch_tls, "buf", None)
    if buf is None or buf.nbytes < n:
        buf = np.empty(min(_SCRATCH_MAX, max(n, 2 * (buf.nbytes if buf is not None else 0))),
                       np.uint8)
        _scratch_tls.buf = buf
    return buf[:n]


def _view(ptr, n):
    """A numpy uint8 view of n bytes at ptr (the caller keeps them alive)."""
    import numpy as np

    if n <= 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


class _CudaArray:
    """__cuda_array_interface__ (v2) over device memory, for torch.as_tensor."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 2}


def _cuda_view(torch, ptr, meta, dev):
    """A torch CUDA tensor of meta's dtype and local shape viewing ptr."""
    name = meta.dtype_name
    raw = {"bfloat16": ("<i2", "int16"), "float8_e4m3fn": ("|u1", "uint8"), "float8_e5m2": ("|u1", "uint8"),
           "bool": ("|u1", "uint8")}.get(name)
    import numpy as np

    typestr = raw[0] if raw else np.dtype(name).str
    t = torch.as_tensor(_CudaArray(ptr, meta.local_shape, typestr), device="cuda:%d" % dev)
    if raw:
        t = t.view(getattr(torch, name))
    return t


def _is_cuda(t):
    """Report whether t is a CUDA tensor (torch's, or one that looks so)."""
    return getattr(getattr(t, "device", None), "type", None) == "cuda"


def _is_cuda_device(d):
    return getattr(d, "type", None) == "cuda" or (isinstance(d, str) and d.split(":")[0] == "cuda")


def _device_index(x):
    """The CUDA device index of a tensor, torch.device or "cuda:N"."""
    d = getattr(x, "device", x)
    if isinstance(d, str):
        _, _, idx = d.partition(":")
        return int(idx) if idx else 0
    idx = getattr(d, "index", None)
    return idx if idx is not None else 0


def _copy_into(dst, data):
    """Copy raw bytes (numpy uint8) into a numpy array or torch tensor."""
    import numpy as np

    if hasattr(dst, "numel"):  # torch
        import torch

        src = torch.from_numpy(data.copy() if not data.flags.writeable else data)
        flat = dst.view(-1).view(torch.uint8) if dst.is_contiguous() else None
        if flat is None:
            raise ValueError("destination tensor must be contiguous")
        flat.copy_(src)
    else:
        if not dst.flags.c_contiguous:
            raise ValueError("destination array must be contiguous")
        dst.reshape(-1).view(np.uint8)[:] = data


# Mooncake's module-level helpers.


def _tensor_metadata_size():
    """Return the size of the tensor object header (304)."""
    return _tensor.TENSOR_METADATA_SIZE


def _serialize_tensor(t):
    """Return (metadata bytes, data pointer, data bytes, owner) for a tensor."""
    data, code, shape, keep = _tensor._as_bytes_view(t)
    meta = _tensor.pack_metadata(_tensor.TensorMetadata(code, shape))
    return meta, (data.ctypes.data if data.nbytes else 0), data.nbytes, (keep, data)


def _deserialize_tensor(data):
    """Return the tensor of an object's bytes, or None."""
    return _tensor.decode(data)
