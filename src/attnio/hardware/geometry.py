"""Per-block mask geometry as arrays: the blocks a kernel's CTAs work on, one entry per block.

The closed forms of :mod:`attnio.core.masks` sum over blocks without listing them; a GPU grid
needs the blocks themselves (one CTA per query block), so the hardware model lists them here.
"""

from __future__ import annotations

import numpy as np

from ..core.workload import Shape, cdiv

__all__ = ["block_counts", "kv_ranges", "meeting", "q_ranges"]


def block_counts(total: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts and stops of the partition of [0, total) into blocks of ``size`` (int64 arrays)."""
    n = cdiv(total, size)
    starts = np.arange(n, dtype=np.int64) * size
    stops = np.minimum(starts + size, total)
    return starts, stops


def kv_ranges(shape: Shape, starts: np.ndarray,
              stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`~attnio.core.workload.kv_range`: visible keys [lo, hi) per query block."""
    hi = (np.clip(stops + shape.offset, 0, shape.Nkv) if shape.causal
          else np.full_like(stops, shape.Nkv))
    lo = np.zeros_like(hi)
    if shape.causal and shape.window is not None:
        lo = np.clip(starts + shape.offset - shape.window + 1, 0, shape.Nkv)
    return lo, np.maximum(lo, hi)


def q_ranges(shape: Shape, starts: np.ndarray,
             stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`~attnio.core.workload.q_range`: query rows [lo, hi) that see each key
    block."""
    if not shape.causal:
        return np.zeros_like(starts), np.full_like(starts, shape.Nq)
    lo = np.clip(starts - shape.offset, 0, shape.Nq)
    hi = np.full_like(starts, shape.Nq)
    if shape.window is not None:
        hi = np.clip(stops - 1 + shape.window - shape.offset, 0, shape.Nq)
    return lo, np.maximum(lo, hi)


def meeting(lo: np.ndarray, hi: np.ndarray, size: int,
            total: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Number, first start and total width of the ``size``-blocks of [0, total) meeting [lo, hi)
    (``total`` an int, or an array broadcast with ``lo`` and ``hi``)."""
    empty = hi <= lo
    first = lo // size
    last = np.maximum(hi - 1, 0) // size
    count = np.where(empty, 0, last - first + 1)
    width = np.where(empty, 0, np.minimum(total, (last + 1) * size) - first * size)
    return count, first * size, width


