"""Deprecated alias: this module moved to :mod:`attnio.experiments.sweep` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.sweep", "attnio.experiments.sweep")

from .experiments.sweep import *  # noqa: E402,F401,F403
