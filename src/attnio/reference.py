"""Deprecated alias: this module moved to :mod:`attnio.core.reference` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.reference", "attnio.core.reference")

from .core.reference import *  # noqa: E402,F401,F403
