"""Deprecated aliases of the first layout's module paths (kept for one release, gone in 0.3)."""

from __future__ import annotations

import warnings

__all__ = ["warn_moved"]


def warn_moved(old: str, new: str) -> None:
    """Warn, once per import of the alias module ``old``, that it moved to ``new``."""
    warnings.warn(f"{old} moved to {new}; this alias goes in attnio 0.3", DeprecationWarning,
                  stacklevel=3)
