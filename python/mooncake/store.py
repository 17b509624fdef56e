"""``mooncake.store``: re-exports ``kvferry.store``."""

from kvferry.store import *  # noqa: F401,F403
from kvferry.store import (  # noqa: F401
    __all__,
    _deserialize_tensor,
    _serialize_tensor,
    _tensor_metadata_size,
)
