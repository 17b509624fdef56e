"""Tensor parallelism (``_TensorParallelMixin``): a tensor split evenly
along a dimension, shard r stored as f"{key}_tp_{r}". Mooncake keeps these
calls as wrappers of the unified parallel IO; here they are lowered onto
its helpers (``_store_parallel``): the shard keys, headers and gathered
shard puts of a one-axis TP layout, and its as-stored reads."""

from . import tensor as _tensor
from ._store_args import _INVALID, _group_ids, _int, _ints, _key, _keys, _pick_groups, log
from ._store_parallel import _HDR, _Axis, _elem_size, _header_at, _rows, _shard_meta, _shard_range, parallel_key
from ._store_tensors import _is_cuda


def _tp_axes(rank, size, split_dim):
    return [_Axis("tp", rank, size, split_dim, None, None)]


class _TensorParallelMixin:
    """The *_tensor_with_tp* calls."""

    def _tp_shards(self, key, shape, code, tp_size, split_dim):
        """[(shard key, header, (split_dim, start, extent))] of every TP
        rank, or None when the split is impossible."""
        if code < 0 or tp_size <= 0 or not 0 <= split_dim < len(shape) or shape[split_dim] % tp_size:
            return None
        out = []
        for r in range(tp_size):
            start, ext = _shard_range(shape[split_dim], r, tp_size)
            local = list(shape)
            local[split_dim] = ext
            axes = _tp_axes(r, tp_size, split_dim)
            out.append((parallel_key(key, axes), _shard_meta(code, shape, local, axes), (split_dim, start, ext)))
        return out

    def _put_tp(self, keys, tensors, config, tp_size, split_dim, upsert=False):
        keys = _keys(keys)
        tensors = list(tensors)
        if not self._h or len(keys) != len(tensors):
            return [_INVALID] * len(keys)
        tp_size, split_dim = _int(tp_size, "tp_size"), _int(split_dim, "split_dim")
        if tp_size <= 1:
            return self._put_tensors(keys, tensors, config, upsert)
        if not _group_ids(config, len(keys))[0]:
            return [_INVALID] * len(keys)
        out = [0] * len(keys)
        # Host shards of every key in one gathered library put.
        batch = []  # (key index, shard key, tensor, header, rows)
        for i, (key, t) in enumerate(zip(keys, tensors)):
            if not _tensor.is_tensor(t):
                raise TypeError("tensor must be a torch.Tensor or numpy.ndarray")
            shards = self._tp_shards(key, tuple(t.shape), _tensor.dtype_code(t), tp_size, split_dim)
            if shards is None:
                log.error("cannot split %s along dim %d into %d shards", tuple(t.shape), split_dim, tp_size)
                out[i] = _INVALID
                continue
            for sk, meta, rng in shards:
                if _is_cuda(t):
                    # Every shard of a key is in the key's group.
                    rc = self._put_shard(sk, t, meta, rng, _pick_groups(config, [i]), upsert)
                    out[i] = out[i] or rc
                else:
                    batch.append((i, sk, t, meta, rng))
        if batch:
            import ctypes

            views, heads, ptr_lists, size_lists = [], [], [], []
            for i, sk, t, meta, rng in batch:
                data, code, shape, keep = _tensor._as_bytes_view(t)
                views.append((data, keep))
                hb = ctypes.create_string_buffer(_tensor.pack_metadata(meta), _HDR)
                heads.append(hb)
                base = data.ctypes.data if data.nbytes else 0
                parts = [(ctypes.addressof(hb), _HDR)] + [(base + o, n) for o, n in
                                                           _rows(shape, _elem_size(code), *rng)]
                ptr_lists.append([p for p, _ in parts])
                size_lists.append([n for _, n in parts])
            res = self._batch_put_multi([b[1] for b in batch], ptr_lists, size_lists,
                                        _pick_groups(config, [b[0] for b in batch]), upsert)
            for (i, *_), rc in zip(batch, res):
                out[i] = out[i] or rc
        return out

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Split tensor evenly along split_dim and store every shard r as
        f"{key}_tp_{r}" (tp_rank is ignored, as in Mooncake). tp_size <= 1
        is put_tensor(key). Returns 0 or the first negative code."""
        return self._put_tp([_key(key)], [tensor], None, tp_size, split_dim)[0]

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp with a ReplicateConfig."""
        return self._put_tp([_key(key)], [tensor], config, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        """put_tensor_with_tp for several tensors; list[int]."""
        return self._put_tp(base_keys, tensors_list, None, tp_size, split_dim)

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        """pub_tensor_with_tp for several tensors; list[int]."""
        return self._put_tp(base_keys, tensors_list, config, tp_size, split_dim)

    def _tp_read_key(self, key, tp_rank, tp_size):
        """The key of shard tp_rank (key itself when tp_size <= 1), or None."""
        tp_rank, tp_size = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        if tp_size <= 1:
            return key
        if not 0 <= tp_rank < tp_size:
            return None
        return parallel_key(key, _tp_axes(tp_rank, tp_size, 0))

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """Return shard tp_rank of key as stored (get_tensor(key) when
        tp_size <= 1; split_dim is not used, as in Mooncake), or None."""
        k = self._tp_read_key(_key(key), tp_rank, tp_size)
        return None if k is None else self._read_whole(k, None)

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        """get_tensor_with_tp for several keys; list[tensor or None]."""
        return [self.get_tensor_with_tp(k, tp_rank, tp_size) for k in _keys(base_keys, "base_keys")]

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp of a full tensor object at buffer_ptr."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank, tp_size,
                                                  split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        """put_tensor_with_tp_from for several buffers: each shard gathered
        from the buffer with no copy; list[int]."""
        keys = _keys(base_keys, "base_keys")
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        tp_size, split_dim = _int(tp_size, "tp_size"), _int(split_dim, "split_dim")
        if tp_size <= 1:
            return self._tensor_from(keys, ptrs, sizes, False)
        out = []
        for k, p, s in zip(keys, ptrs, sizes):
            meta = _header_at(p, s) if p > 0 else None
            if meta is None or meta.local_shape != meta.global_shape:
                out.append(_INVALID)
                continue
            out.append(self._put_with_parallelism_from(
                k, p, s, _TP(tp_size, split_dim), None, None, False, "put_tensor_with_tp_from"))
        return out

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """get_tensor_into of shard tp_rank of key."""
        k = self._tp_read_key(_key(key), tp_rank, tp_size)
        if k is None:
            return None
        return self.get_tensor_into(k, buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1):
        """get_tensor_with_tp_into for several keys; list[tensor or None]."""
        keys = [self._tp_read_key(k, tp_rank, tp_size) for k in _keys(base_keys, "base_keys")]
        if any(k is None for k in keys):
            return [None] * len(keys)
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)


class _TP:
    """A one-axis TP TensorParallelism (rank 0; the _from route stores
    every rank)."""

    def __init__(self, size, split_dim):
        self.axes = [_TPAxis(size, split_dim)]


class _TPAxis:
    kind, rank, expert_id, stage_id = "tp", 0, None, None

    def __init__(self, size, split_dim):
        self.size, self.split_dim = size, split_dim
