"""Deprecated alias: this module moved to :mod:`attnio.pebble.dag` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.dag", "attnio.pebble.dag")

from .pebble.dag import *  # noqa: E402,F401,F403
