"""Deprecated alias: this module moved to :mod:`attnio.hardware.devices` (the alias goes in attnio 0.3)."""

from .core.compat import warn_moved

warn_moved("attnio.devices", "attnio.hardware.devices")

from .hardware.devices import *  # noqa: E402,F401,F403
