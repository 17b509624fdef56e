"""``mooncake.engine``: re-exports ``kvferry.engine``."""

from kvferry.engine import *  # noqa: F401,F403
from kvferry.engine import __all__  # noqa: F401
