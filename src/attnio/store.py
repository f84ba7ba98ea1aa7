"""Deprecated alias: this module moved to :mod:`attnio.experiments.store` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.store", "attnio.experiments.store")

from .experiments.store import *  # noqa: E402,F401,F403
