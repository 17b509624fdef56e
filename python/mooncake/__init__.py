"""Mooncake-compatible package names, served by kvferry.

``from mooncake.engine import TransferEngine`` and
``from mooncake.store import MooncakeDistributedStore`` give kvferry's
implementations (``kvferry.engine``, ``kvferry.store``), so code written for
Mooncake's Python wheel runs unchanged on libkvferry.so.
"""
