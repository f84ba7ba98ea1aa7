"""Deprecated alias: this module moved to :mod:`attnio.cachesim.caches` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.cache", "attnio.cachesim.caches")

from .cachesim.caches import *  # noqa: E402,F401,F403
