"""The parallel layouts of test_parallel.py, shared with its writer peers
(peer_parallel.py): deterministic tensors and, per layout, what each writer
process puts (one shard each)."""

import numpy as np

import _util  # noqa: F401  (puts python/ on sys.path)
from kvferry.store import ParallelAxis, TensorParallelism


class WriterPartition:
    """What Mooncake's writer_partition reads: rank, size, split_dim."""

    def __init__(self, rank, size, split_dim):
        self.rank, self.size, self.split_dim = rank, size, split_dim


def tensor(seed, shape, dtype):
    """A deterministic tensor of shape and dtype."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    return rng.integers(0, 100, shape).astype(dtype)


def ax(kind, rank, size, split_dim=None, expert_id=None, stage_id=None):
    return ParallelAxis(kind, rank, size, split_dim, expert_id, stage_id)


def par(*axes):
    return TensorParallelism(list(axes))


def chunk(t, n, dim, r):
    """numpy's own slicing of shard r of n along dim."""
    step = t.shape[dim] // n
    idx = [slice(None)] * t.ndim
    idx[dim] = slice(r * step, (r + 1) * step)
    return t[tuple(idx)]


TP_FULL = tensor(1, (6, 8, 5), "float32")               # TP 4 along dim 1
DP_FULL = [tensor(10 + d, (8, 4), "int32") for d in range(2)]    # per DP rank, TP 2 along dim 0
PP_FULL = [tensor(20 + s, (3, 4, 8), "float16") for s in range(2)]  # per stage, TP 2 along dim 2
EXPERTS = [tensor(30 + e, (4, 6), "float64") for e in range(4)]  # per expert
WRITER_FULL = tensor(40, (8, 3), "uint8")               # 4 writer partitions along dim 0


def writes(layout):
    """[(tensor, parallelism, writer_partition)], one per writer process."""
    if layout == "tp":
        return [(np.ascontiguousarray(chunk(TP_FULL, 4, 1, r)), par(ax("tp", r, 4, 1)), None) for r in range(4)]
    if layout == "dp_tp":
        return [(DP_FULL[d], par(ax("dp", d, 2), ax("tp", t, 2, 0)), None) for d in range(2) for t in range(2)]
    if layout == "pp_tp":
        # Axes given TP first: the stored names and headers do not depend on it.
        return [(PP_FULL[s], par(ax("tp", t, 2, 2), ax("pp", s, 2, stage_id=10 + s)), None)
                for s in range(2) for t in range(2)]
    if layout == "ep":
        return [(EXPERTS[e], par(ax("ep", e, 4, expert_id=100 + e)), None) for e in range(4)]
    if layout == "ep_tp":
        return [(EXPERTS[e], par(ax("ep", e, 2, expert_id=100 + e), ax("tp", t, 2, 1)), None)
                for e in range(2) for t in range(2)]
    if layout == "writer":
        return [(WRITER_FULL, None, WriterPartition(r, 4, 0)) for r in range(4)]
    raise ValueError(layout)


LAYOUTS = ("tp", "dp_tp", "pp_tp", "ep", "ep_tp", "writer")
