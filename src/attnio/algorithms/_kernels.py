"""Arithmetic shared by the exact schedules: functions on fast-tile arrays only.

Each function here receives numpy arrays that :meth:`TwoLevelMemory.compute` took from fast
tiles, and works in place.  Elementwise temporaries are register-level and not counted.
"""

from __future__ import annotations

import numpy as np

from .base import Shape, cdiv

NEG_INF = -np.inf


def apply_causal_mask(S: np.ndarray, r0: int, c0: int, offset: int) -> None:
    """Set ``S[r, c] = -inf`` where key ``c0 + c`` is after query ``r0 + r`` + offset."""
    rows = np.arange(r0, r0 + S.shape[0])[:, None]
    cols = np.arange(c0, c0 + S.shape[1])[None, :]
    S[cols > rows + offset] = NEG_INF


def tile_needs_mask(shape: Shape, r0: int, c1: int, causal: bool) -> bool:
    """True when a (rows from r0) x (cols up to c1) tile has masked entries."""
    return causal and (c1 - 1) > r0 + shape.offset


def safe_max(t: np.ndarray) -> np.ndarray:
    """Row maxima with -inf (rows that saw nothing) replaced by 0, for subtraction."""
    return np.where(np.isfinite(t), t, 0.0)


def online_update_fa2(S, m, l, t, O, V) -> None:
    """FlashAttention-2 inner step: fold the score tile S into (m, l, unnormalised O)."""
    np.max(S, axis=1, out=t)
    np.maximum(t, m, out=t)  # t = new row max
    ts = safe_max(t)
    S -= ts[:, None]
    np.exp(S, out=S)
    alpha = np.exp(m - ts)  # e^{m_old - m_new}; 0 where m_old = -inf
    l *= alpha
    l += S.sum(axis=1)
    O *= alpha[:, None]
    O += S @ V
    m[:] = t


def normalise_rows(O, l) -> None:
    """O <- diag(l)^-1 O, with rows of l = 0 (fully masked) left at 0."""
    safe = np.where(l > 0, l, 1.0)
    O /= safe[:, None]


def online_update_fa1(S, m, l, t1, t2, O, V) -> None:
    """FlashAttention-1 inner step (Algorithm 1, lines 10-12) on a normalised O block."""
    np.max(S, axis=1, out=t1)
    np.maximum(t1, m, out=t1)  # m_new
    ts = safe_max(t1)
    S -= ts[:, None]
    np.exp(S, out=S)  # P~ scaled by e^{m~ - m_new}
    np.sum(S, axis=1, out=t2)
    alpha = np.exp(m - ts)
    t2 += alpha * l  # l_new
    O *= (alpha * l)[:, None]
    O += S @ V
    safe = np.where(t2 > 0, t2, 1.0)
    O /= safe[:, None]
    m[:] = t1
    l[:] = t2


def block_counts(total: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts and stops of the partition of [0, total) into blocks of ``size`` (int64 arrays)."""
    n = cdiv(total, size)
    starts = np.arange(n, dtype=np.int64) * size
    stops = np.minimum(starts + size, total)
    return starts, stops


def visible_hi(shape: Shape, stops: np.ndarray, causal: bool) -> np.ndarray:
    """For row blocks ending at ``stops``: keys [0, hi) are visible to some row of the block."""
    if not causal:
        return np.full_like(stops, shape.Nkv)
    return np.clip(stops + shape.offset, 0, shape.Nkv)


def covered(hi: np.ndarray, size: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Number and total width of the ``size``-blocks of [0, total) that meet [0, hi)."""
    nblk = -(-hi // size)
    width = np.minimum(nblk * size, total)
    return nblk, width
