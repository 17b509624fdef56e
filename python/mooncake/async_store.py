"""``mooncake.async_store``: re-exports the asyncio store of ``kvferry.store``."""

from kvferry.store import MooncakeDistributedStoreAsync  # noqa: F401

__all__ = ["MooncakeDistributedStoreAsync"]
