"""Mask geometry over blocks: which keys each query block sees, and sums over the blocks.

The closed-form counts of masked schedules sum, over the blocks of a partition, quantities such
as "the width of the key blocks a query block meets".  These functions compute the per-block
terms as int64 arrays (vectorised forms of :func:`~attnio.core.workload.kv_range` and
:func:`~attnio.core.workload.q_range`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .workload import Shape, cdiv

__all__ = ["RowCounts", "block_counts", "covered", "kv_ranges", "meeting", "q_ranges", "row_counts",
           "visible_hi"]


def block_counts(total: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts and stops of the partition of [0, total) into blocks of ``size`` (int64 arrays)."""
    n = cdiv(total, size)
    starts = np.arange(n, dtype=np.int64) * size
    stops = np.minimum(starts + size, total)
    return starts, stops


def visible_hi(shape: Shape, stops: np.ndarray) -> np.ndarray:
    """For row blocks ending at ``stops``: keys [0, hi) are visible to some row of the block."""
    if not shape.causal:
        return np.full_like(stops, shape.Nkv)
    return np.clip(stops + shape.offset, 0, shape.Nkv)


def covered(hi: np.ndarray, size: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Number and total width of the ``size``-blocks of [0, total) that meet [0, hi)."""
    nblk = -(-hi // size)
    width = np.minimum(nblk * size, total)
    return nblk, width


def kv_ranges(shape: Shape, starts: np.ndarray, stops: np.ndarray):
    """Vectorised :func:`~attnio.core.workload.kv_range`: visible keys [lo, hi) per query block."""
    hi = visible_hi(shape, stops)
    lo = np.zeros_like(hi)
    if shape.causal and shape.window is not None:
        lo = np.clip(starts + shape.offset - shape.window + 1, 0, shape.Nkv)
    return lo, np.maximum(lo, hi)


def q_ranges(shape: Shape, starts: np.ndarray, stops: np.ndarray):
    """Vectorised :func:`~attnio.core.workload.q_range`: query rows [lo, hi) that see each key
    block."""
    if not shape.causal:
        return np.zeros_like(starts), np.full_like(starts, shape.Nq)
    lo = np.clip(starts - shape.offset, 0, shape.Nq)
    hi = np.full_like(starts, shape.Nq)
    if shape.window is not None:
        hi = np.clip(stops - 1 + shape.window - shape.offset, 0, shape.Nq)
    return lo, np.maximum(lo, hi)


def meeting(lo: np.ndarray, hi: np.ndarray, size: int, total: int):
    """Number, first start and total width of the ``size``-blocks of [0, total) meeting [lo, hi)."""
    empty = hi <= lo
    first = lo // size
    last = np.maximum(hi - 1, 0) // size
    count = np.where(empty, 0, last - first + 1)
    width = np.where(empty, 0, np.minimum(total, (last + 1) * size) - first * size)
    return count, first * size, width


@dataclass(frozen=True)
class RowCounts:
    """Per-head counts of the rows and pairs a mask leaves visible (see :func:`row_counts`)."""

    rows2: int   # query rows that see >= 2 keys
    pairs2: int  # their visible (query, key) pairs: the scores an exact algorithm must compute
    pairs: int   # all visible pairs
    k_rows: int  # K rows the output depends on: keys seen by a row that sees >= 2 keys
    v_rows: int  # V rows the output depends on: keys seen by any row


@functools.lru_cache(maxsize=4096)
def _row_counts(Nq: int, Nkv: int, causal: bool, offset: int, window: int | None) -> RowCounts:
    if not causal:
        two = Nkv >= 2
        return RowCounts(Nq if two else 0, Nq * Nkv if two else 0, Nq * Nkv, Nkv if two else 0,
                         Nkv)
    r = np.arange(Nq, dtype=np.int64)
    hi = np.clip(r + 1 + offset, 0, Nkv)
    lo = np.zeros_like(hi) if window is None else np.clip(r + offset - window + 1, 0, Nkv)
    v = np.maximum(hi - lo, 0)
    two, one = v >= 2, v >= 1

    def span(m: np.ndarray) -> int:
        return int(hi[m].max() - lo[m].min()) if m.any() else 0

    return RowCounts(int(two.sum()), int(v[two].sum()), int(v.sum()), span(two), span(one))


def row_counts(shape: Shape) -> RowCounts:
    """Rows and pairs one head of ``shape`` leaves visible (heads are not multiplied in).

    Row r sees keys ``[lo_r, hi_r)`` (:mod:`attnio.core.workload`); consecutive rows see
    overlapping or adjacent intervals, so the keys a set of consecutive rows sees form one
    interval, and the K (V) rows needed are the span over the rows that see >= 2 (>= 1) keys.
    """
    return _row_counts(shape.Nq, shape.Nkv, shape.causal, shape.offset,
                       shape.window if shape.causal else None)
