"""Arithmetic shared by the exact schedules: functions on fast-tile arrays only.

Each function here receives numpy arrays that :meth:`TwoLevelMemory.compute` took from fast
tiles, and works in place.  Elementwise temporaries are register-level and not counted.
"""

from __future__ import annotations

import numpy as np

from .base import Shape, cdiv

NEG_INF = -np.inf


def apply_causal_mask(S: np.ndarray, r0: int, c0: int, offset: int, window: int | None = None) -> None:
    """Set ``S[r, c] = -inf`` where key ``c0 + c`` is after query ``r0 + r`` + offset, or (with a
    window) ``window`` or more keys before it."""
    rows = np.arange(r0, r0 + S.shape[0])[:, None] + offset
    cols = np.arange(c0, c0 + S.shape[1])[None, :]
    masked = cols > rows
    if window is not None:
        masked |= cols <= rows - window
    S[masked] = NEG_INF


def tile_needs_mask(shape: Shape, r0: int, c1: int, causal: bool, r1: int | None = None,
                    c0: int | None = None) -> bool:
    """True when the tile of rows [r0, r1) x cols [c0, c1) has masked entries."""
    if not causal:
        return False
    if (c1 - 1) > r0 + shape.offset:
        return True
    if shape.window is not None and r1 is not None and c0 is not None:
        return c0 <= (r1 - 1) + shape.offset - shape.window
    return False


def mask_tile(mem, S, shape: Shape, qb, kb, causal: bool) -> None:
    """Mask the score tile of query block ``qb`` x key block ``kb`` in fast memory, if needed."""
    if tile_needs_mask(shape, qb.start, kb.stop, causal, qb.stop, kb.start):
        r0, c0, off, w = qb.start, kb.start, shape.offset, shape.window
        mem.compute(lambda s: apply_causal_mask(s, r0, c0, off, w), S, writes=1)


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


def logsumexp(out, m, l) -> None:
    """out = m + log(l) per row (-inf where the row saw no key)."""
    with np.errstate(divide="ignore"):
        out[:] = np.where(l > 0, safe_max(m) + np.log(np.where(l > 0, l, 1.0)), -np.inf)


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


def kv_ranges(shape: Shape, starts: np.ndarray, stops: np.ndarray, causal: bool):
    """Vectorised :func:`base.kv_range`: visible keys [lo, hi) per query block."""
    hi = visible_hi(shape, stops, causal)
    lo = np.zeros_like(hi)
    if causal and shape.window is not None:
        lo = np.clip(starts + shape.offset - shape.window + 1, 0, shape.Nkv)
    return lo, np.maximum(lo, hi)


def q_ranges(shape: Shape, starts: np.ndarray, stops: np.ndarray, causal: bool):
    """Vectorised :func:`base.q_range`: query rows [lo, hi) that see each key block."""
    if not causal:
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
