"""``MooncakeDistributedStore``, put together from the store's modules."""

from ._safetensors import _SafetensorsMixin
from ._store_core import _StoreCore
from ._store_multi import _MultiBufferMixin
from ._store_parallel import _ParallelMixin
from ._store_ranges import _RangesMixin
from ._store_replicas import _ReplicaMixin
from ._store_segments import _SegmentMixin
from ._store_tensors import _TensorMixin
from ._store_tp import _TensorParallelMixin
from ._store_versioned import _VersionedMixin


class MooncakeDistributedStore(_StoreCore, _MultiBufferMixin, _TensorMixin, _ParallelMixin,
                               _TensorParallelMixin, _VersionedMixin, _ReplicaMixin, _SegmentMixin,
                               _SafetensorsMixin, _RangesMixin):
    """A store client (Mooncake ``mooncake.store.MooncakeDistributedStore``).

    tensor_format selects what tensor getters return: "auto" (torch
    tensors when torch is importable, else numpy arrays), "torch" or
    "numpy" (kvferry addition).
    """
