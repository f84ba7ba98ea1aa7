"""Mask geometry over blocks, in closed form: sums over the blocks of a masked partition.

The closed-form counts of masked schedules sum, over the blocks of a partition, quantities such
as "the width of the key blocks a query block meets".  Every function here returns those sums as
exact Python integers in O(log N) big-integer operations (no array with one element per block or
per row), so a causal or windowed plan or count at N = 10^9 costs microseconds.

Geometry (:mod:`attnio.core.workload`)
--------------------------------------
Query row r (0 <= r < Nq) sees keys [lo_r, hi_r) with

    hi_r = clip(r + 1 + off, 0, Nkv),     lo_r = clip(r + off - W + 1, 0, Nkv)  (0 without window)

``off = Shape.offset`` (``Nkv - Nq`` bottom-right, ``0`` top-left); unmasked: [0, Nkv).  The rows
of a block of queries [r0, r1) see the keys (``kv_range``)

    lo = clip(r0 + off - W + 1, 0, Nkv) (0 without window),  hi = max(lo, clip(r1 + off, 0, Nkv))

and the queries that see some key of a key block [c0, c1) are (``q_range``)

    lo = clip(c0 - off, 0, Nq),  hi = max(lo, clip(c1 - 1 + W - off, 0, Nq)) (Nq without window).

A range [lo, hi) inside [0, Z) *meets* the size-S blocks of [0, Z) (:func:`meet`):

    count = (hi-1)//S - lo//S + 1,   width = min(Z, ((hi-1)//S + 1)·S) - (lo//S)·S   (0 if hi <= lo)

The method
----------
Cut the axis of length ``total`` into ``n = total // B`` full blocks plus, when ``B`` does not
divide ``total``, one partial block (evaluated directly, O(1)).  On the full blocks the raw
bounds are affine in the block index with the same slope: ``raw_lo(i) = B·i + bl``,
``raw_hi(i) = B·i + bh`` with ``bh - bl >= 1`` (a missing bound is modelled by a constant
beyond the clip).  Then

* block i sees something iff ``raw_hi(i) > 0`` and ``raw_lo(i) < Z``: one interval ``[i0, i1)``;
* on it ``lo = clip(raw_lo)``, ``hi = clip(raw_hi)``, and each of ``Σ floor((hi-1)/S)``,
  ``Σ floor(lo/S)`` splits into at most three pieces (clipped low, linear, clipped high); the
  linear piece is one :func:`floor_sum` (O(log) steps of Euclid's algorithm);
* ``width = S·count - e·[hi > S·qmax]`` with ``qmax = (Z-1)//S``, ``e = (qmax+1)·S - Z`` (the last
  S-block of [0, Z) is short by e), and the blocks with ``hi > S·qmax`` are a suffix of [i0, i1);
* every full block has the same size B, so the size-weighted sums are B times the plain ones.

The maximum width (``standard``'s one-pass footprint) is found on at most four pieces where the
width is monotone (evaluated at an end) or equals ``S·count`` with count taking two values
``c, c + 1`` (decided by comparing ``Σ count`` with ``c·length``).

Per-row totals (:func:`row_counts`, used by the bounds) need no floor at all: with
``h = r + 1 + off`` a row sees ``v(h) = max(0, min(h, C, E - h))`` keys, ``C = min(W, Nkv)``,
``E = Nkv + W`` (``E = ∞`` and ``C = Nkv`` without window), a trapezoid whose prefix sums are
closed forms.

:class:`Band` packages one side of this geometry (query blocks against keys, or key blocks
against queries) for the simulator's bulk count of masked loops
(:meth:`attnio.core.memory.TwoLevelMemory.blocks` with ``band=``): the blocks of a partition fall
into at most four runs (blocks that see nothing before, blocks that see something, blocks that
see nothing after, the short last block), and :meth:`Band.visits` gives, for a run, how many full
and short blocks of the other axis its blocks meet in all.

Cost: every function below is O(log max(N, B, S)) big-integer operations, except
:func:`split_sums` (flash_decoding's KV splits), which is O(min(#splits, #query blocks)) of them.
The tests hold every function to brute-force per-block and per-row loops.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .blockmask import BlockMask
from .workload import Shape, cdiv

__all__ = [
    "Band",
    "BlockSums",
    "RowCounts",
    "RowTotals",
    "SplitSums",
    "covered_sums",
    "floor_sum",
    "key_block_max_width",
    "key_block_sums",
    "kv_block",
    "meet",
    "q_block",
    "query_block_max_width",
    "query_block_sums",
    "query_block_width",
    "row_counts",
    "row_totals",
    "split_sums",
    "split_sums_per_block",
    "split_sums_per_split",
    "sum_floor_clip",
]


# ---------------------------------------------------------------------------- arithmetic
def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``Σ_{i=0}^{n-1} ⌊(a·i + b)/m⌋`` exactly, for n >= 0, m >= 1 and any integers a, b.

    AtCoder Library's ``floor_sum`` (Euclid-like recursion, O(log m) iterations; Python integers,
    so no overflow).  Negative a or b are first reduced to [0, m) with Python's floor division:
    ``⌊(a·i + b)/m⌋ = qa·i + qb + ⌊(ra·i + rb)/m⌋`` for ``a = qa·m + ra``, ``b = qb·m + rb``.
    """
    if n <= 0:
        return 0
    if m < 1:
        raise ValueError(f"floor_sum: m must be >= 1, got {m}")
    ans = 0
    if a < 0 or a >= m:
        qa, a = divmod(a, m)
        ans += qa * (n * (n - 1) // 2)
    if b < 0 or b >= m:
        qb, b = divmod(b, m)
        ans += qb * n
    while True:
        if a >= m:
            ans += (n * (n - 1) // 2) * (a // m)
            a %= m
        if b >= m:
            ans += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return ans
        n, b = divmod(y_max, m)
        m, a = a, m


def sum_floor_clip(i0: int, i1: int, a: int, b: int, Z: int, u: int, S: int) -> int:
    """``Σ_{i=i0}^{i1-1} ⌊(clip(a·i + b, 0, Z) + u)/S⌋`` for a >= 0, S >= 1 (0 if i1 <= i0).

    The index range splits where ``a·i + b`` crosses 0 (before: the value is clipped to 0) and Z
    (from there on: clipped to Z); the middle piece is one :func:`floor_sum`.
    """
    if i1 <= i0:
        return 0
    if a == 0:
        return (i1 - i0) * ((min(max(b, 0), Z) + u) // S)
    # p: first index with a·i + b > 0; q: first with a·i + b >= Z (both clamped to [i0, i1])
    p = (-b) // a + 1
    if p < i0:
        p = i0
    elif p > i1:
        p = i1
    q = -((b - Z) // a)  # ⌈(Z - b)/a⌉
    if q < p:
        q = p
    elif q > i1:
        q = i1
    total = 0
    if p > i0:
        total += (p - i0) * (u // S)
    if i1 > q:
        total += (i1 - q) * ((Z + u) // S)
    if q > p:
        total += floor_sum(q - p, S, a, a * p + b + u)
    return total


def _first_at_least(i0: int, i1: int, a: int, b: int, t: int) -> int:
    """The least i in [i0, i1] with ``a·i + b >= t`` (a >= 1), i1 when there is none."""
    i = -((b - t) // a)  # ⌈(t - b)/a⌉
    return i0 if i < i0 else (i1 if i > i1 else i)


# ---------------------------------------------------------------------------- scalar geometry
def kv_block(Nkv: int, r0: int, r1: int, off: int, window: int | None = None,
             causal: bool = True) -> tuple[int, int]:
    """Keys [lo, hi) some row of query block [r0, r1) sees (``base.kv_range``)."""
    if not causal:
        return 0, Nkv
    hi = max(0, min(Nkv, r1 + off))
    lo = 0 if window is None else max(0, min(Nkv, r0 + off - window + 1))
    return lo, max(lo, hi)


def q_block(Nq: int, c0: int, c1: int, off: int, window: int | None = None,
            causal: bool = True) -> tuple[int, int]:
    """Query rows [lo, hi) that see some key of key block [c0, c1) (``base.q_range``)."""
    if not causal:
        return 0, Nq
    lo = max(0, min(Nq, c0 - off))
    hi = Nq if window is None else max(0, min(Nq, c1 - 1 + window - off))
    return lo, max(lo, hi)


def meet(lo: int, hi: int, S: int, Z: int) -> tuple[int, int, int]:
    """(count, first start, width) of the size-S blocks of [0, Z) meeting [lo, hi)
    (``_kernels.meeting`` on one element): ``count = (hi-1)//S - lo//S + 1``,
    ``width = min(Z, ((hi-1)//S + 1)·S) - (lo//S)·S``; (0, (lo//S)·S, 0) when hi <= lo."""
    first = lo // S
    if hi <= lo:
        return 0, first * S, 0
    last = (hi - 1) // S
    return last - first + 1, first * S, min(Z, (last + 1) * S) - first * S


# ---------------------------------------------------------------------------- the engine
def _width_at(i: int, a: int, bl: int, bh: int, Z: int, S: int) -> int:
    lo = min(max(a * i + bl, 0), Z)
    hi = max(lo, min(max(a * i + bh, 0), Z))
    return meet(lo, hi, S, Z)[2]


def _seen_range(n: int, a: int, bl: int, bh: int, Z: int) -> tuple[int, int]:
    """Blocks i in [0, n) with ``hi > lo``: ``a·i + bh > 0`` and ``a·i + bl < Z`` (one interval)."""
    i0 = (-bh) // a + 1
    i0 = 0 if i0 < 0 else (n if i0 > n else i0)
    i1 = -((bl - Z) // a)  # ⌈(Z - bl)/a⌉
    return i0, (i0 if i1 < i0 else (n if i1 > n else i1))


def _linear_sums(n: int, a: int, bl: int, bh: int, Z: int, S: int,
                 lo_zero: bool = False) -> tuple[int, int, int]:
    """(Σ seen, Σ count, Σ width) over blocks i in [0, n) with ``lo = clip(a·i + bl, 0, Z)``,
    ``hi = max(lo, clip(a·i + bh, 0, Z))`` met by the size-S blocks of [0, Z).

    Needs a >= 1, bh > bl, Z >= 1.  On the seen interval [i0, i1):
    ``Σ count = Σ (hi-1)//S - Σ lo//S + (i1 - i0)`` (two :func:`sum_floor_clip`; one,
    ``Σ ⌈hi/S⌉``, when ``lo_zero`` says lo = 0 on every block), and
    ``Σ width = S·Σ count - e·#{i: hi_i > S·qmax}`` (``qmax = (Z-1)//S``, ``e = (qmax+1)·S - Z``).
    """
    if n <= 0:
        return 0, 0, 0
    i0, i1 = _seen_range(n, a, bl, bh, Z)
    m = i1 - i0
    if m == 0:
        return 0, 0, 0
    if lo_zero:
        count = sum_floor_clip(i0, i1, a, bh, Z, S - 1, S)
    else:
        count = (sum_floor_clip(i0, i1, a, bh, Z, -1, S) - sum_floor_clip(i0, i1, a, bl, Z, 0, S)
                 + m)
    qmax = (Z - 1) // S
    excess = (qmax + 1) * S - Z  # the last S-block of [0, Z) is short by this much
    e_last = _first_at_least(i0, i1, a, bh, qmax * S + 1)  # from here hi lies in the last block
    return m, count, S * count - excess * (i1 - e_last)


def _linear_max(n: int, a: int, bl: int, bh: int, Z: int, S: int) -> int:
    """max width over the blocks of :func:`_linear_sums` (0 if none is seen).

    The seen interval splits into pieces where the width is monotone, so its maximum is at an
    end: ``lo = 0`` (width non-decreasing), ``hi`` in the last S-block (``width = Z - S·(lo//S)``,
    non-increasing); and one piece where lo and hi are both linear, ``hi - lo = Δ = bh - bl``, so
    ``count ∈ {c, c+1}`` with ``c = (Δ-1)//S + 1``: the maximum there is ``S·(c+1)`` iff the
    piece's ``Σ count`` exceeds ``c·length`` (one more pair of :func:`sum_floor_clip`).
    """
    if n <= 0:
        return 0
    i0, i1 = _seen_range(n, a, bl, bh, Z)
    if i1 <= i0:
        return 0
    qmax = (Z - 1) // S
    e_last = _first_at_least(i0, i1, a, bh, qmax * S + 1)
    e_lo = _first_at_least(i0, i1, a, bl, 0)  # from here lo = a·i + bl (before: lo = 0)
    cands = {i0, i1 - 1}
    if e_lo > i0:
        cands.add(e_lo - 1)  # lo = 0 on [i0, e_lo): width non-decreasing
    e_mid = max(e_lo, e_last)
    if e_mid < i1:
        cands.add(e_mid)  # hi in the last S-block on [e_mid, i1): width non-increasing
    mx = 0
    if e_lo < e_last:  # lo and hi both linear on [e_lo, e_last)
        c = (bh - bl - 1) // S + 1
        ln = e_last - e_lo
        sc = sum_floor_clip(e_lo, e_last, a, bh, Z, -1, S) - sum_floor_clip(e_lo, e_last, a, bl,
                                                                             Z, 0, S) + ln
        mx = S * (c + 1) if sc > c * ln else S * c
    for i in cands:
        mx = max(mx, _width_at(i, a, bl, bh, Z, S))
    return mx


@dataclass(frozen=True)
class BlockSums:
    """Sums over the size-B blocks of one axis (``total`` long) of their visible ranges [lo, hi)
    on the other axis (``Z`` long), met by that axis' size-S blocks.

    ``size_i`` is the block's length (B, or the remainder for a last partial block), ``seen_i`` is
    ``[hi_i > lo_i]``, ``count_i`` / ``width_i`` are the number and total width of the S-blocks
    meeting [lo_i, hi_i) (both 0 when not seen).

    A frozen dataclass, not a NamedTuple: a tuple's ``count`` method would clash with the
    ``count`` field."""

    blocks: int  # ⌈total/B⌉
    seen: int  # Σ seen_i
    size_seen: int  # Σ seen_i·size_i
    count: int  # Σ count_i
    width: int  # Σ width_i
    size_count: int  # Σ size_i·count_i
    size_width: int  # Σ size_i·width_i


def _affine(total: int, B: int, Z: int, S: int, lo_start: int | None,
            hi_stop: int | None) -> tuple[int, int, int, int]:
    """(n full blocks, remainder, bl, bh): ``raw_lo(i) = B·i + bl``, ``raw_hi(i) = B·i + bh``."""
    if total < 1 or B < 1 or S < 1 or Z < 1:
        raise ValueError("sizes must be >= 1")
    n, rem = divmod(total, B)
    bh = Z if hi_stop is None else B + hi_stop  # a constant >= Z clips to Z for every i >= 0
    bl = min(-B * n - 1, bh - 1) if lo_start is None else lo_start  # <= 0 for every i < n
    if lo_start is not None and hi_stop is None:
        bh = max(bh, bl + 1)
    assert bh > bl
    return n, rem, bl, bh


def _last_block(total: int, B: int, Z: int, lo_start: int | None,
                hi_stop: int | None) -> tuple[int, int]:
    """[lo, hi) of the partial last block [n·B, total)."""
    s = (total // B) * B
    lo = 0 if lo_start is None else min(max(s + lo_start, 0), Z)
    hi = Z if hi_stop is None else min(max(total + hi_stop, 0), Z)
    return lo, max(lo, hi)


def _block_sums(total: int, B: int, Z: int, S: int, lo_start: int | None,
                hi_stop: int | None) -> BlockSums:
    """Blocks [s, e) of [0, total) of size B; ``lo = clip(s + lo_start, 0, Z)`` (0 when
    ``lo_start`` is None), ``hi = max(lo, clip(e + hi_stop, 0, Z))`` (Z when ``hi_stop`` is
    None).  Single keys (S = 1) with no lower end and no block clipped (``0 <= hi_stop <= Z -
    total``, every bottom-right causal shape with Nq <= Nkv): arithmetic series in O(1).
    Unmasked (no lower end, no upper stop): every block sees [0, Z), ⌈Z/S⌉ S-blocks of Z
    words in all (:func:`meet` of [0, Z)), in O(1)."""
    if lo_start is None and hi_stop is None and total >= 1 and B >= 1 and S >= 1 and Z >= 1:
        blocks, k = -(-total // B), -(-Z // S)
        return BlockSums(blocks, blocks, total, blocks * k, blocks * Z, total * k, total * Z)
    if (S == 1 and lo_start is None and hi_stop is not None and 0 <= hi_stop <= Z - total
            and total >= 1 and B >= 1):
        # no row clipped, single keys: block i sees hi_i = e_i + hi_stop >= 1 keys, which
        # are its count and width; the sums are arithmetic series
        n, rem = divmod(total, B)
        full = B * n * (n + 1) // 2 + n * hi_stop  # Σ hi_i over the full blocks
        last = total + hi_stop if rem else 0  # the short last block's
        width, size_width = full + last, B * full + rem * last
        blocks = n + (1 if rem else 0)
        return BlockSums(blocks, blocks, total, width, width, size_width, size_width)
    n, rem, bl, bh = _affine(total, B, Z, S, lo_start, hi_stop)
    seen, count, width = _linear_sums(n, B, bl, bh, Z, S, lo_start is None)
    size_seen, size_count, size_width = B * seen, B * count, B * width
    if rem:
        lo, hi = _last_block(total, B, Z, lo_start, hi_stop)
        c, _, w = meet(lo, hi, S, Z)
        v = int(hi > lo)
        seen += v
        count += c
        width += w
        size_seen += v * rem
        size_count += c * rem
        size_width += w * rem
    return BlockSums(n + (1 if rem else 0), seen, size_seen, count, width, size_count, size_width)


def _block_max(total: int, B: int, Z: int, S: int, lo_start: int | None,
               hi_stop: int | None) -> int:
    """max_i width_i over the blocks of :func:`_block_sums`."""
    n, rem, bl, bh = _affine(total, B, Z, S, lo_start, hi_stop)
    mx = _linear_max(n, B, bl, bh, Z, S)
    if rem:
        lo, hi = _last_block(total, B, Z, lo_start, hi_stop)
        mx = max(mx, meet(lo, hi, S, Z)[2])
    return mx


def _query_bounds(off: int, window: int | None, causal: bool
                  ) -> tuple[int | None, int | None]:
    if not causal:
        return None, None
    return (None if window is None else off - window + 1), off


def _key_bounds(off: int, window: int | None, causal: bool
                ) -> tuple[int | None, int | None]:
    if not causal:
        return None, None
    return -off, (None if window is None else window - 1 - off)


# ---------------------------------------------------------------------------- the public sums
def query_block_sums(Nq: int, Nkv: int, Br: int, Bc: int, off: int, window: int | None = None,
                     causal: bool = True) -> BlockSums:
    """Query blocks of Br rows against key blocks of Bc (``kv_ranges`` + ``meeting``), in O(log).

    Block i = [r0, r1) sees keys ``lo_i = clip(r0 + off - W + 1, 0, Nkv)`` (0 without window),
    ``hi_i = max(lo_i, clip(r1 + off, 0, Nkv))`` (unmasked: [0, Nkv)).  Returned sums (``size`` =
    rows of the block, ``count``/``width`` = number/width of the Bc blocks meeting [lo_i, hi_i)):

    * ``seen = Σ [hi_i > lo_i]``, ``size_seen = Σ [hi_i > lo_i]·rows_i``,
    * ``count = Σ count_i``, ``width = Σ cov_i``, ``size_count = Σ rows_i·count_i``,
      ``size_width = Σ rows_i·cov_i``.

    With ``window=None`` this is also ``visible_hi`` + ``covered`` (square_tiling, approx_poly):
    ``n_i = ⌈hi_i/Bc⌉ = count_i`` and ``w_i = min(Nkv, n_i·Bc) = cov_i``.
    """
    return _block_sums(Nq, Br, Nkv, Bc, *_query_bounds(off, window, causal))


def query_block_max_width(Nq: int, Nkv: int, Br: int, Bc: int, off: int,
                          window: int | None = None, causal: bool = True) -> int:
    """``max_i cov_i`` over the query blocks of :func:`query_block_sums` (standard's one-pass
    softmax holds the widest visible row block), in O(log): see :func:`_linear_max`."""
    return _block_max(Nq, Br, Nkv, Bc, *_query_bounds(off, window, causal))


def covered_sums(Nq: int, Nkv: int, Br: int, S: int, off: int, causal: bool = True) -> BlockSums:
    """``visible_hi`` + ``covered`` (no window): ``n_i = ⌈hi_i/S⌉``, ``w_i = min(Nkv, n_i·S)``,
    ``hi_i = clip(r1_i + off, 0, Nkv)``; seen is ``hi_i > 0``.  Same sums as
    :func:`query_block_sums` with ``window=None``."""
    return query_block_sums(Nq, Nkv, Br, S, off, None, causal)


def key_block_sums(Nq: int, Nkv: int, Br: int, Bc: int, off: int, window: int | None = None,
                   causal: bool = True) -> BlockSums:
    """Key blocks of Bc keys against query blocks of Br rows (``q_ranges`` + ``meeting``), O(log).

    Key block j = [c0, c1) is seen by rows ``lo_j = clip(c0 - off, 0, Nq)``,
    ``hi_j = max(lo_j, clip(c1 - 1 + W - off, 0, Nq))`` (Nq without window; unmasked [0, Nq)).
    Fields as in :class:`BlockSums` with the roles swapped: ``size_seen = Σ [vis_j]·Bc_j``
    (K/V words loaded by flash1 / flash2_backward), ``width = Σ rows_j`` (rows of the Br blocks
    meeting [lo_j, hi_j): flash1's visits, the backward's R), ``count = Σ`` number of such blocks.
    """
    return _block_sums(Nkv, Bc, Nq, Br, *_key_bounds(off, window, causal))


def key_block_max_width(Nq: int, Nkv: int, Br: int, Bc: int, off: int,
                        window: int | None = None, causal: bool = True) -> int:
    """``max_j rows_j`` over the key blocks of :func:`key_block_sums`, in O(log)."""
    return _block_max(Nkv, Bc, Nq, Br, *_key_bounds(off, window, causal))


def layout_sums(bm: BlockMask, Nq: int, Nkv: int, Br: int, Bc: int, *,
                keys: bool = False) -> BlockSums:
    """:class:`BlockSums` of the Br x Bc tiles that meet a kept block of a block-sparse layout.

    Query tiles i (Br rows) against key tiles j (Bc keys), ``seen_i`` when tile row i meets a
    kept block, ``count_i``/``width_i`` the number and width of its kept tiles; ``keys=True``
    swaps the roles (key tiles against the query tiles that see them), as
    :func:`key_block_sums` does for a causal mask.

    Tiles that meet the same layout blocks (and have the same size) are counted together: the
    work is O(distinct block ranges²), at most about (2·layout rows + 1) x (2·layout columns + 1)
    however small the tiles, never O(number of tiles).
    """
    bm.check(Nq, Nkv)
    rows = _tile_groups(Nq, Br, bm.bq)  # (a, b, size, multiplicity) per group of query tiles
    cols = _tile_groups(Nkv, Bc, bm.bk)
    P = np.zeros((bm.Tq + 1, bm.Tk + 1), dtype=np.int64)  # 2-D prefix sums of the layout
    P[1:, 1:] = np.cumsum(np.cumsum(bm.layout, axis=0, dtype=np.int64), axis=1)
    (a, b, _, _), (c, e, _, _) = rows, cols
    kept = (P[b][:, e] - P[a][:, e] - P[b][:, c] + P[a][:, c]) > 0
    if keys:
        kept, rows, cols = kept.T, cols, rows
    size, mult = rows[2], rows[3]
    other_n, other_w = cols[3], cols[3] * cols[2]  # tiles, and their total width, per group
    seen = kept.any(axis=1)
    count = kept.astype(np.int64) @ other_n
    width = kept.astype(np.int64) @ other_w
    return BlockSums(int(mult.sum()), int((mult * seen).sum()), int((mult * seen * size).sum()),
                     int((mult * count).sum()), int((mult * width).sum()),
                     int((mult * size * count).sum()), int((mult * size * width).sum()))


def _tile_groups(total: int, T: int, b: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The size-T tiles of an axis of ``total`` grouped by the layout blocks (of size b) they
    meet: ``(a, e, size, multiplicity)`` arrays, the tiles of a group meeting blocks [a, e) and
    all ``size`` long.  Computed per block of the coarser partition, without listing the tiles
    when they are finer than the blocks."""
    n = -(-total // T)
    if T >= b or n <= 4 * (-(-total // b)) + 4:  # few tiles: list them
        t0 = np.arange(n, dtype=np.int64) * T
        t1 = np.minimum(total, t0 + T)
        keys = np.stack([t0 // b, (t1 - 1) // b + 1, t1 - t0], axis=1)
    else:  # many tiles finer than the blocks: the distinct (first, last block) ranges are few
        starts = np.unique(np.concatenate([
            np.arange(0, total, b, dtype=np.int64) // T,  # the tile holding each block start
            ((np.arange(0, total, b, dtype=np.int64) + b - 1) // T).clip(max=n - 1),
            np.array([n - 1], dtype=np.int64)]))
        t0 = starts * T
        t1 = np.minimum(total, t0 + T)
        # the tiles between two listed ones lie inside one block, all of size T
        gap = np.diff(np.append(starts, n)) - 1
        inner0 = (starts + 1) * T
        keys = np.concatenate([
            np.stack([t0 // b, (t1 - 1) // b + 1, t1 - t0], axis=1),
            np.stack([inner0 // b, inner0 // b + 1, np.full_like(inner0, T)], axis=1)[gap > 0]])
        counts = np.concatenate([np.ones(len(starts), dtype=np.int64), gap[gap > 0]])
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        mult = np.bincount(inv.ravel(), weights=counts, minlength=len(uniq)).astype(np.int64)
        return uniq[:, 0], uniq[:, 1], uniq[:, 2], mult
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    mult = np.bincount(inv.ravel(), minlength=len(uniq)).astype(np.int64)
    return uniq[:, 0], uniq[:, 1], uniq[:, 2], mult


class SplitSums(NamedTuple):
    """flash_decoding's split sums over query blocks i (Br rows) and KV splits p (L keys each)."""

    blocks: int  # ⌈Nq/Br⌉
    seen: int  # Σ_i [hi_i > lo_i]
    rows_seen: int  # Σ_i [hi_i > lo_i]·rows_i
    n_vis: int  # Σ_i n_i            (n_i = splits that block i sees)
    rows_n_vis: int  # Σ_i n_i·rows_i
    cov: int  # Σ_i Σ_p cov_ip    (cov_ip = width of the split's Bc blocks meeting it)


def _combined_start(x: int, L: int, Bc: int) -> int:
    p = x // L
    return p * L + ((x - p * L) // Bc) * Bc


def _combined_end(y: int, L: int, Bc: int, Nkv: int) -> int:
    p = y // L
    p0 = p * L
    return min(p0 + ((y - p0) // Bc + 1) * Bc, p0 + L, Nkv)


def split_sums(Nq: int, Nkv: int, Br: int, Bc: int, splits: int, off: int,
               window: int | None = None, causal: bool = True) -> SplitSums:
    """Sums of flash_decoding's ``_predict`` (``L = ⌈Nkv/splits⌉``, splits [p·L, min(Nkv,(p+1)L))).

    Query block i sees [lo_i, hi_i) (as in :func:`query_block_sums`); in split p it sees
    ``[lo_i, hi_i) ∩ [p0, p1)``, and ``cov_ip`` is the width of the split's Bc blocks (starting at
    p0) meeting that.  ``n_i`` counts the splits with a non-empty intersection.

    Cost O(min(#splits, #query blocks)·log): :func:`split_sums_per_split` when there are no more
    splits than query blocks, else :func:`split_sums_per_block` (the two are equal; the tests
    run both).
    """
    L = cdiv(Nkv, splits)
    if cdiv(Nkv, L) <= cdiv(Nq, Br):
        return split_sums_per_split(Nq, Nkv, Br, Bc, splits, off, window, causal)
    return split_sums_per_block(Nq, Nkv, Br, Bc, splits, off, window, causal)


def split_sums_per_split(Nq: int, Nkv: int, Br: int, Bc: int, splits: int, off: int,
                         window: int | None = None, causal: bool = True) -> SplitSums:
    """:func:`split_sums` split by split: per split one :func:`query_block_sums`-type sum in
    coordinates relative to p0 (``clip(clip(x, 0, Nkv), p0, p1) = clip(x, p0, p1)``)."""
    L = cdiv(Nkv, splits)
    lo_start, hi_stop = _query_bounds(off, window, causal)
    base = _block_sums(Nq, Br, Nkv, Bc, lo_start, hi_stop)
    n_vis = rows_n_vis = cov = 0
    for p in range(cdiv(Nkv, L)):
        p0, p1 = p * L, min(Nkv, (p + 1) * L)
        ls = None if lo_start is None else lo_start - p0
        hs = (p1 - p0) if hi_stop is None else hi_stop - p0  # hi = Nkv clips to p1 - p0
        b = _block_sums(Nq, Br, p1 - p0, Bc, ls, hs)
        n_vis += b.seen
        rows_n_vis += b.size_seen
        cov += b.width
    return SplitSums(cdiv(Nq, Br), base.seen, base.size_seen, n_vis, rows_n_vis, cov)


def split_sums_per_block(Nq: int, Nkv: int, Br: int, Bc: int, splits: int, off: int,
                         window: int | None = None, causal: bool = True) -> SplitSums:
    """:func:`split_sums` query block by query block, O(1) each: ``Σ_p cov_ip`` telescopes to
    ``end(hi_i - 1) - start(lo_i)`` on the partition of [0, Nkv) into every split's Bc blocks."""
    L = cdiv(Nkv, splits)
    T = cdiv(Nq, Br)
    base = _block_sums(Nq, Br, Nkv, Bc, *_query_bounds(off, window, causal))
    n_vis = rows_n_vis = cov = 0
    for i in range(T):
        r0, r1 = i * Br, min(Nq, (i + 1) * Br)
        lo, hi = kv_block(Nkv, r0, r1, off, window, causal)
        if hi <= lo:
            continue
        k = (hi - 1) // L - lo // L + 1
        n_vis += k
        rows_n_vis += k * (r1 - r0)
        cov += _combined_end(hi - 1, L, Bc, Nkv) - _combined_start(lo, L, Bc)
    return SplitSums(T, base.seen, base.size_seen, n_vis, rows_n_vis, cov)


def query_block_width(Nq: int, Nkv: int, Br: int, Bc: int, off: int, window: int | None,
                      i: int, causal: bool = True) -> int:
    """``cov_i`` of the single query block i (0 <= i < ⌈Nq/Br⌉), O(1): a cheap lower bound on
    :func:`query_block_max_width` (the one-pass softmax row of ``standard``)."""
    r0, r1 = i * Br, min(Nq, (i + 1) * Br)
    lo, hi = kv_block(Nkv, r0, r1, off, window, causal)
    return meet(lo, hi, Bc, Nkv)[2]


# ---------------------------------------------------------------------------- per-row totals
class RowTotals(NamedTuple):
    """``bounds._rows``: (rows seeing >= 2 keys, their pairs, all visible pairs, K rows needed,
    V rows needed), plus ``rows1`` (rows seeing >= 1 key: flash2's ``nseen``)."""

    rows2: int
    pairs2: int
    pairs: int
    k_rows: int
    v_rows: int
    rows1: int


def _prefix_v(x: int, C: int, E: int | None) -> int:
    """``Σ_{h <= x} v(h)``, ``v(h) = max(0, min(h, C, E - h))`` (``E = None``: ∞); C <= E - C."""
    if x <= 0:
        return 0
    if x <= C:
        return x * (x + 1) // 2
    base = C * (C + 1) // 2
    if E is None or x <= E - C:
        return base + (x - C) * C
    flat = base + (E - 2 * C) * C  # = prefix at E - C
    x = min(x, E)
    t = E - x  # Σ_{h=E-C+1}^{x} (E - h) = Σ_{t'=E-x}^{C-1} t'
    return flat + (C - 1) * C // 2 - (t - 1) * t // 2


def row_totals(Nq: int, Nkv: int, off: int, window: int | None = None) -> RowTotals:
    """``bounds._rows`` for a causal mask (diagonal offset ``off``, optional window W), in O(1).

    Row r sees ``v_r = hi_r - lo_r`` keys; with ``h = r + 1 + off``:
    ``v_r = max(0, min(h, C, E - h))``, ``C = min(W, Nkv)``, ``E = Nkv + W`` (no window:
    ``C = Nkv``, ``E = ∞``).  So

    * ``pairs = Σ_{h=1+off}^{Nq+off} v(h)`` (trapezoid prefix sums :func:`_prefix_v`);
    * rows with ``v >= k`` are ``h ∈ [k, E - k]`` (none if C < k): an interval of rows, whose
      count is ``rows_k``; ``pairs2 = pairs - (rows1 - rows2)`` (the rows seeing exactly one key);
    * the K (V) rows needed: ``hi`` of the last row with v >= 2 (>= 1) minus ``lo`` of the first.
    """
    if window is not None and window < 1:
        raise ValueError("window must be >= 1")
    C = Nkv if window is None else min(window, Nkv)
    E = None if window is None else Nkv + window
    h0, h1 = 1 + off, Nq + off  # h over the rows, inclusive
    pairs = _prefix_v(h1, C, E) - _prefix_v(h0 - 1, C, E)

    def rows_range(k: int) -> tuple[int, int]:  # rows [a, b) with v >= k
        if C < k:
            return 0, 0
        lo_h = max(h0, k)
        hi_h = h1 if E is None else min(h1, E - k)
        if hi_h < lo_h:
            return 0, 0
        return lo_h - 1 - off, hi_h - off  # r = h - 1 - off

    def span(k: int) -> int:
        a, b = rows_range(k)
        if b <= a:
            return 0
        hi_last = max(0, min(Nkv, b + off))  # hi of row b - 1
        lo_first = 0 if window is None else max(0, min(Nkv, a + off - window + 1))
        return hi_last - lo_first

    a1, b1 = rows_range(1)
    a2, b2 = rows_range(2)
    rows1, rows2 = b1 - a1, b2 - a2
    return RowTotals(rows2, pairs - (rows1 - rows2), pairs, span(2), span(1), rows1)


# ---------------------------------------------------------------------------- on a Shape
@dataclass(frozen=True)
class RowCounts:
    """Per-head counts of the rows and pairs a mask leaves visible (see :func:`row_counts`)."""

    rows2: int   # query rows that see >= 2 keys
    pairs2: int  # their visible (query, key) pairs: the scores an exact algorithm must compute
    pairs: int   # all visible pairs
    k_rows: int  # K rows the output depends on: keys seen by a row that sees >= 2 keys
    v_rows: int  # V rows the output depends on: keys seen by any row
    rows1: int = 0  # query rows that see >= 1 key


@functools.lru_cache(maxsize=4096)
def _row_counts(Nq: int, Nkv: int, causal: bool, offset: int, window: int | None) -> RowCounts:
    if not causal:
        two = Nkv >= 2
        return RowCounts(Nq if two else 0, Nq * Nkv if two else 0, Nq * Nkv, Nkv if two else 0,
                         Nkv, Nq)
    return RowCounts(*row_totals(Nq, Nkv, offset, window))


@functools.lru_cache(maxsize=256)
def _block_row_counts(bm: BlockMask, Nq: int, Nkv: int) -> RowCounts:
    lay = bm.layout
    rows = np.full(bm.Tq, bm.bq, dtype=np.int64)
    rows[-1] = Nq - (bm.Tq - 1) * bm.bq
    width = np.full(bm.Tk, bm.bk, dtype=np.int64)
    width[-1] = Nkv - (bm.Tk - 1) * bm.bk
    v = lay.astype(np.int64) @ width  # keys each row of query block i sees
    one, two = v >= 1, v >= 2
    pairs = int((rows * v).sum())
    pairs2 = int((rows * v * two).sum())
    k_rows = int((width * lay[two].any(axis=0)).sum())  # keys seen by a row seeing >= 2
    v_rows = int((width * lay[one].any(axis=0)).sum())
    return RowCounts(int((rows * two).sum()), pairs2, pairs, k_rows, v_rows,
                     int((rows * one).sum()))


def row_counts(shape: Shape) -> RowCounts:
    """Rows and pairs one head of ``shape`` leaves visible (heads are not multiplied in), O(1).

    Row r sees keys ``[lo_r, hi_r)`` (:mod:`attnio.core.workload`); consecutive rows see
    overlapping or adjacent intervals, so the keys a set of consecutive rows sees form one
    interval, and the K (V) rows needed are the span over the rows that see >= 2 (>= 1) keys.
    With a block mask every row of query block i sees the keys of its kept blocks: the counts
    are summed over the layout (O(Tq·Tk), exact).
    """
    if shape.block_mask is not None:
        return _block_row_counts(shape.block_mask, shape.Nq, shape.Nkv)
    return _row_counts(shape.Nq, shape.Nkv, shape.causal, shape.offset,
                       shape.window if shape.causal else None)


class Run(NamedTuple):
    """A run of consecutive blocks of a :class:`Band`'s partition that behave alike: the same
    size and the same answer to "does the block see anything"."""

    first: int  # index of the run's first block (its representative)
    blocks: int  # how many blocks the run has
    seen: bool  # whether its blocks see a non-empty range of the other axis


@dataclass(frozen=True)
class Band:
    """One side of a mask: the blocks of one axis and the range of the other axis each one sees.

    Block [s, e) of the axis [0, ``total``) sees ``[lo, hi)`` of the other axis [0, ``Z``) with
    ``lo = clip(s + lo_start, 0, Z)`` (0 when ``lo_start`` is None) and
    ``hi = max(lo, clip(e + hi_stop, 0, Z))`` (Z when ``hi_stop`` is None).  Build one with
    :meth:`queries` (query blocks and the keys they see: ``kv_range``) or :meth:`keys` (key
    blocks and the queries that see them: ``q_range``).
    """

    total: int
    Z: int
    lo_start: int | None
    hi_stop: int | None

    @classmethod
    def queries(cls, shape: Shape) -> Band:
        """Query blocks against the keys they see (``kv_range``)."""
        return cls(shape.Nq, shape.Nkv, *_query_bounds(shape.offset, shape.window, shape.causal))

    @classmethod
    def keys(cls, shape: Shape) -> Band:
        """Key blocks against the query rows that see them (``q_range``)."""
        return cls(shape.Nkv, shape.Nq, *_key_bounds(shape.offset, shape.window, shape.causal))

    def within(self, start: int, stop: int) -> Band:
        """The same blocks against the part ``[start, stop)`` of the other axis, in coordinates
        relative to ``start`` (``clip(clip(x, 0, Z), start, stop) = clip(x, start, stop)``)."""
        return Band(self.total, stop - start,
                    None if self.lo_start is None else self.lo_start - start,
                    None if self.hi_stop is None else self.hi_stop - start)

    def range(self, start: int, stop: int) -> tuple[int, int]:
        """``[lo, hi)`` of the other axis that block ``[start, stop)`` sees."""
        Z = self.Z
        lo = 0 if self.lo_start is None else min(max(start + self.lo_start, 0), Z)
        hi = Z if self.hi_stop is None else min(max(stop + self.hi_stop, 0), Z)
        return lo, max(lo, hi)

    def runs(self, B: int) -> list[Run]:
        """The blocks of size B in at most four runs, in order: blocks that see nothing, blocks
        that see something, blocks that see nothing, and the short last block (O(1))."""
        n, rem, bl, bh = _affine(self.total, B, self.Z, 1, self.lo_start, self.hi_stop)
        i0, i1 = _seen_range(n, B, bl, bh, self.Z) if n else (0, 0)
        out = [Run(a, b - a, seen) for a, b, seen in ((0, i0, False), (i0, i1, True),
                                                      (i1, n, False)) if b > a]
        if rem:
            lo, hi = self.range(n * B, self.total)
            out.append(Run(n, 1, hi > lo))
        return out

    def visits(self, B: int, run: Run, S: int) -> tuple[int, int]:
        """(full, short): how many times the blocks of ``run`` meet a full S-block of the other
        axis, and its short last S-block (when S does not divide Z), in all, in O(log N)."""
        Z = self.Z
        qmax = (Z - 1) // S
        excess = (qmax + 1) * S - Z  # the last S-block is short by this much (0: it is full)
        if not run.seen:
            return 0, 0
        n, rem, bl, bh = _affine(self.total, B, Z, S, self.lo_start, self.hi_stop)
        if run.first >= n:  # the short last block of this axis
            lo, hi = self.range(n * B, self.total)
            count = meet(lo, hi, S, Z)[0]
            short = int(excess > 0 and count > 0 and hi > qmax * S)
            return count - short, short
        shift = B * run.first
        _, count, width = _linear_sums(run.blocks, B, bl + shift, bh + shift, Z, S,
                                       self.lo_start is None)
        short = (S * count - width) // excess if excess else 0
        return count - short, short
