"""Deprecated alias: this module moved to :mod:`attnio.cachesim.validation` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.verify", "attnio.cachesim.validation")

from .cachesim.validation import *  # noqa: E402,F401,F403
