"""Deprecated alias: this module moved to :mod:`attnio.core.memory` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.memory", "attnio.core.memory")

from .core.memory import *  # noqa: E402,F401,F403
