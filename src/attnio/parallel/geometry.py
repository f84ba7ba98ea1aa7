"""Closed-form pair counts under the mask, for the schedules' work and the bounds' caps.

Query row r of one head sees keys ``[lo_r, hi_r)`` (:mod:`attnio.core.workload`); with
``h = r + 1 + offset`` it sees ``v(h) = max(0, min(h, C, E - h))`` keys, ``C = min(W, Nkv)`` and
``E = Nkv + W`` under a window W (no window: ``C = Nkv``, ``E = ∞``), and every key unmasked.
``v`` is piecewise linear in h (breakpoints 0, C, E - C, E), so its sum over an arithmetic
progression of rows is a sum of a few arithmetic series: O(1) whatever N.  A rectangle of keys
``[c0, c1)`` is the difference of two truncations (the keys below c1 minus those below c0): row r
sees the keys of ``[lo_r, hi_r)`` below c, ``max(0, min(hi_r, c) - lo_r)``, which is the same
formula with ``Nkv`` replaced by c (the offset kept).

>>> from attnio.core.workload import Shape
>>> s = Shape(8, 8, 1, causal=True)
>>> ap_pairs(s, 0, 1, 8), ap_pairs(s, 0, 2, 4), rect_pairs(s, 4, 8, 0, 4)
(36, 16, 16)
"""

from __future__ import annotations

from ..core.workload import Shape

__all__ = ["ap_pairs", "max_keys_per_row", "max_rows_per_key", "rect_pairs"]


def _series(h0: int, s: int, n: int, lo: int, hi: int) -> tuple[int, int]:
    """(count, sum of h) over the terms ``h = h0 + s·t``, t in [0, n), with lo < h <= hi."""
    if hi <= lo or n <= 0:
        return 0, 0
    t0 = max(0, (lo - h0) // s + 1)
    t1 = min(n - 1, (hi - h0) // s)
    if t1 < t0:
        return 0, 0
    cnt = t1 - t0 + 1
    return cnt, cnt * h0 + s * (t0 + t1) * cnt // 2


def _ap_sum(h0: int, s: int, n: int, C: int, E: int | None) -> int:
    """Σ_t v(h0 + s·t), ``v(h) = max(0, min(h, C, E - h))`` (E None: ∞), C <= E - C."""
    big = h0 + s * n + 1  # beyond every term
    total = 0
    cnt, sm = _series(h0, s, n, 0, C)  # 0 < h <= C: v = h
    total += sm
    top = big if E is None else E - C
    cnt, _ = _series(h0, s, n, C, top)  # C < h <= E - C: v = C
    total += cnt * C
    if E is not None:
        cnt, sm = _series(h0, s, n, E - C, E)  # E - C < h < E: v = E - h
        total += cnt * E - sm
    return total


def _trunc(shape: Shape, start: int, step: int, n: int, c: int) -> int:
    """Visible pairs of rows ``start + step·t`` (t < n) with the keys below c."""
    if c <= 0 or n <= 0:
        return 0
    if not shape.causal:
        return n * c
    W = shape.window
    C = c if W is None else min(W, c)
    E = None if W is None else c + W
    return _ap_sum(start + 1 + shape.offset, step, n, C, E)


def ap_pairs(shape: Shape, start: int, step: int, n: int) -> int:
    """Visible (row, key) pairs of one head over the query rows ``start + step·t``, t < n."""
    return _trunc(shape, start, step, n, shape.Nkv)


def rect_pairs(shape: Shape, r0: int, r1: int, c0: int, c1: int) -> int:
    """Visible pairs of one head in query rows ``[r0, r1)`` x keys ``[c0, c1)``."""
    n = r1 - r0
    return _trunc(shape, r0, 1, n, c1) - _trunc(shape, r0, 1, n, c0)


def max_keys_per_row(shape: Shape) -> int:
    """The most keys one query row sees (the visible keys of a row, maximised over rows)."""
    if not shape.causal:
        return shape.Nkv
    W = shape.window
    C = shape.Nkv if W is None else min(W, shape.Nkv)
    E = None if W is None else shape.Nkv + W
    h0, h1 = 1 + shape.offset, shape.Nq + shape.offset

    def v(h: int) -> int:
        return max(0, min(h, C, h if E is None else E - h))

    return max(v(h0), v(h1), v(min(max(C, h0), h1)))


def max_rows_per_key(shape: Shape) -> int:
    """The most query rows of one head that see one key."""
    if not shape.causal:
        return shape.Nq
    W = shape.window
    # key c is seen by rows [t, t + W) ∩ [0, Nq), t = c - offset (W = ∞ without a window)
    t0, t1 = -shape.offset, shape.Nkv - 1 - shape.offset

    def cnt(t: int) -> int:
        hi = shape.Nq if W is None else min(shape.Nq, t + W)
        return max(0, hi - max(0, t))

    return max(cnt(t0), cnt(t1), cnt(min(max(0, t0), t1)))
