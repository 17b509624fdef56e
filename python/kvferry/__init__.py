"""kvferry: Mooncake's transfer engine and store, from one Go library.

``kvferry.engine`` and ``kvferry.store`` are pure Python over ctypes and
mirror Mooncake's ``mooncake.engine`` and ``mooncake.store`` modules; the
``mooncake`` package shipped beside this one re-exports them, so code
written for Mooncake runs unchanged. The shared library is found through
``KVFERRY_LIB``, next to this package, in the source tree's ``build/lib``,
or on the loader path (see ``kvferry._lib``).
"""

import logging

from ._lib import LibraryNotFound, library_path
from .errors import ErrorCode, TransferError, error_name

__version__ = "0.1.0"

# A library logs nothing unless the application configures logging.
logging.getLogger("kvferry").addHandler(logging.NullHandler())

__all__ = [
    "ErrorCode",
    "LibraryNotFound",
    "TransferError",
    "api_version",
    "error_name",
    "library_path",
    "library_version",
    "metrics_text",
    "__version__",
]


def api_version():
    """Return KVFERRY_API_VERSION of the loaded library."""
    from ._lib import lib

    return lib.kvferry_api_version()


def library_version():
    """Return the version string of the loaded library."""
    from ._lib import lib

    return lib.kvferry_version().decode()


def metrics_text():
    """Return the library's Prometheus metrics in text exposition format."""
    import ctypes

    from ._lib import lib

    n = lib.kvferry_metrics_text(None, 0)
    while True:
        buf = ctypes.create_string_buffer(int(n) + 1)
        m = lib.kvferry_metrics_text(buf, len(buf))
        if m < len(buf):
            return buf.value.decode(errors="replace")
        n = m
