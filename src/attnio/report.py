"""Deprecated alias: this module moved to :mod:`attnio.experiments.report` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.report", "attnio.experiments.report")

from .experiments.report import *  # noqa: E402,F401,F403
