"""Deprecated alias: this module moved to :mod:`attnio.core.errors` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.errors", "attnio.core.errors")

from .core.checks import check_int  # noqa: E402,F401
from .core.errors import *  # noqa: E402,F401,F403
