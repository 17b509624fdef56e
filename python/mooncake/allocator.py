"""Mooncake's ``mooncake.allocator``: kvferry's shareable GPU memory
allocator (see ``kvferry.allocator``)."""

from kvferry.allocator import MemoryBackend, NVLinkAllocator

__all__ = ["MemoryBackend", "NVLinkAllocator"]
