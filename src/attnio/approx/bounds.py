"""Deprecated alias: this module moved to :mod:`attnio.bounds.approximate` (the alias goes in attnio 0.3)."""

from ..core.compat import warn_moved

warn_moved("attnio.approx.bounds", "attnio.bounds.approximate")

from ..bounds.approximate import *  # noqa: E402,F401,F403
