"""Tensor parallelism (``_TensorParallelMixin``): a tensor split evenly
along a dimension, shard r stored as f"{key}_tp_{r}"."""

from . import tensor as _tensor
from ._store_args import _INVALID, _group_ids, _int, _ints, _key, _keys, _pick_groups, log
from ._store_tensors import _view


class _TensorParallelMixin:
    """The *_tensor_with_tp* calls."""

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
        out = []
        for i, (key, t) in enumerate(zip(keys, tensors)):
            if not _tensor.is_tensor(t):
                raise TypeError("tensor must be a torch.Tensor or numpy.ndarray")
            shards = _tensor.tp_split(t, tp_size, split_dim)
            if shards is None:
                log.error("cannot split %s along dim %d into %d shards", tuple(t.shape),
                          split_dim, tp_size)
                out.append(_INVALID)
                continue
            objs = self._encode_all(shards)
            # Every shard of a key is in the key's group.
            res = self._put_objects([_tensor.tp_key(key, r) for r in range(tp_size)], objs,
                                    _pick_groups(config, [i] * tp_size), upsert)
            out.append(next((r for r in res if r != 0), 0))
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

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """Return shard tp_rank of key (get_tensor(key) when tp_size <= 1), or None."""
        key = _key(key)
        tp_rank, tp_size = _int(tp_rank, "tp_rank"), _int(tp_size, "tp_size")
        if tp_size <= 1:
            return self.get_tensor(key)
        if not 0 <= tp_rank < tp_size:
            return None
        return self.get_tensor(_tensor.tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        """get_tensor_with_tp for several keys; list[tensor or None]."""
        return [self.get_tensor_with_tp(k, tp_rank, tp_size) for k in _keys(base_keys, "base_keys")]

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp of a full tensor object at buffer_ptr."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank, tp_size,
                                                  split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        """put_tensor_with_tp_from for several buffers; list[int]."""
        keys = _keys(base_keys, "base_keys")
        ptrs, sizes = _ints(buffer_ptrs, "buffer_ptrs"), _ints(sizes, "sizes")
        if not self._h or len(ptrs) != len(keys) or len(sizes) != len(keys):
            return [_INVALID] * len(keys)
        if _int(tp_size, "tp_size") <= 1:
            return self._tensor_from(keys, ptrs, sizes, False)
        out = []
        for k, p, s in zip(keys, ptrs, sizes):
            t = _tensor.decode(_view(p, s), "numpy") if self._check_tensor_object(p, s) else None
            if t is None and self._check_tensor_object(p, s):
                t = _tensor.decode(_view(p, s), "torch")
            if t is None:
                out.append(_INVALID)
                continue
            out.append(self._put_tp([k], [t], None, tp_size, split_dim)[0])
        return out

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """get_tensor_into of shard tp_rank of key."""
        key = _key(key)
        if _int(tp_size, "tp_size") > 1:
            key = _tensor.tp_key(key, _int(tp_rank, "tp_rank"))
        return self.get_tensor_into(key, buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1):
        """get_tensor_with_tp_into for several keys; list[tensor or None]."""
        keys = _keys(base_keys, "base_keys")
        if _int(tp_size, "tp_size") > 1:
            keys = [_tensor.tp_key(k, _int(tp_rank, "tp_rank")) for k in keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)
