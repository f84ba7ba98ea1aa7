"""Deprecated alias: this module moved to :mod:`attnio.blocks.matmul` (the alias goes in attnio 0.3)."""

from ..core.compat import warn_moved

warn_moved("attnio.algorithms.matmul", "attnio.blocks.matmul")

from ..blocks.matmul import *  # noqa: E402,F401,F403
from ..blocks.matmul import BlockedMatmul as Matmul  # noqa: E402,F401
