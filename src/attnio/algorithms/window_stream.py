"""Sliding-window attention in the small-cache regime: stream tiling restricted to the band.

When the band of a sliding window (about ``W + Br`` keys a query block) does not fit in fast
memory, :mod:`~attnio.algorithms.window_cache` falls back to FlashAttention-2's streaming, which
reloads the band for every query block of ``Br ~ M/(2d)`` rows: about ``2d·Nq·W/Br`` words, far
above the blocked-matmul cost when M < d².  This schedule is
:mod:`~attnio.algorithms.stream_tiling`'s two streamed blocked matmuls (Smith & van de Geijn's
word streaming; the scores written once, the softmax formed online with one word a row) with
every tile and every key loop cut to the band: the words moved scale with the visible scores
``H = Σ_r (hi_r - lo_r)`` (about ``Nq·W``), not with ``Nq·Nkv``.

Geometry (:mod:`attnio.core.masks`): row r sees keys ``[lo_r, hi_r)`` (both non-decreasing in r,
consecutive rows' ranges overlap or touch), so a block of query rows sees one interval of keys
(``kv_range``) and a block of keys is seen by one interval of rows (``q_range``).

Schedule (one head)::

    Phase 1  for each query block i (Br rows) that sees a key, keys [lo_i, hi_i) (kv_range):
               for each key block j (Bc keys, aligned to multiples of Bc) meeting [lo_i, hi_i):
                 rows R_ij = q_range(j) ∩ block i (the rows of i that see a key of j),
                 keys C_ij = [lo_i, hi_i) ∩ block j (the keys of j some row of i sees);
                 the tile held as its visible lines (one per key, the rows that see it; or one
                 per row, the keys it sees, when Br > Bc), zero
                 for l in 1..d:
                     Br <= Bc: load Q[R_ij, l] (a column);  for c in C_ij: load K[c, l] (1 word),
                               line c += scale·Q[., l]·K[c, l]
                     Br > Bc:  load K[C_ij, l] (a column); for r in R_ij: load Q[r, l] (1 word),
                               line r += scale·K[., l]·Q[r, l]
                 write each line where it lies in A (the raw scaled scores a row sees; a
                 ring of C columns, key c in column c mod C: :func:`ring_width`)
    Phase 2  for each query block i (Br2 rows), each output slice s (Bd2 columns; the last one
             narrower when Bd2 does not divide d):
                 O = 0 (Br2 x Bd2), g = -inf (Br2: the running log-sum-exp)
                 for each key k in [lo_i, hi_i) (rows [t0, t1) of the block see it):
                     Bd2 <= Br2: load V[k, s] (Bd2 words); for r in [t0, t1): load A[r, k]
                                 (1 word); β = 1/(1 + e^(g_r - a)), g_r = logaddexp(g_r, a),
                                 O_r = O_r - β·O_r + β·V[k, s]
                     Bd2 > Br2:  load A[t0:t1, k] (a score column), the same step for those
                                 rows; for u in s: load V[k, u] (1 word), O[t0:t1, u] += β·V[k, u]
                     rows outside [t0, t1) take V[k, s] with weight 0 (no word moves)
                 write O

Closed form (exact; ``tests/algorithms/test_window_stream.py``).  A Phase-1 tile (i, j) reads
``d·(|R_ij| + |C_ij|)``.  Over the tiles, the rows R_ij of a key block j partition its rows
``q_range(j)`` (the query blocks partition the rows, and a row of q_range(j) sees a key of j,
so its tile is visited), and the keys C_ij of a query block i partition ``kv_range(i)`` (every
key of it is seen by some row of i: the rows' ranges overlap or touch).  So, with
``QS(Bc) = Σ_j |q_range(j)|`` over the key blocks of Bc and ``KS(B) = Σ_i |kv_range(i)|`` over
the query blocks of B rows (:func:`attnio.core.masks.key_block_sums` and
:func:`~attnio.core.masks.query_block_sums` against single rows or keys, O(log N))::

    Phase 1 reads   d·QS(Bc) + d·KS(Br)           writes  H   (each visible score once)
    Phase 2 reads   T_d·H + d·KS(Br2)             writes  Nq·d     (T_d = ⌈d/Bd2⌉)

Phase 2: each (block, slice) reads, for each key its rows see, the slice of V (``Σ`` over the
slices: d words a key) and one score per row that sees it (``Σ`` over the keys: the block's
visible scores, once per slice).  Unmasked this is stream_tiling's order "tile" with one slice
group: ``⌈Nkv/Bc⌉·Nq·d + ⌈Nq/Br⌉·Nkv·d + Nq·Nkv`` and ``T_d·Nq·Nkv + ⌈Nq/Br2⌉·Nkv·d + Nq·d``,
word for word (:meth:`WindowStream.covered_by`).  With a window W (Nq = Nkv = N, bottom-right)
``QS ~ N·(W + Bc - 1)/Bc``, ``KS(B) ~ N·(W + B - 1)/B`` and ``H ~ N·W``, so with every side √M
the count is about ``4·N·W·d/√M + N·W + N·d``: the two banded matmuls, ``N·W`` in place of
``N²``.  Heads are independent: one head's count times ``batch·heads``.

Fast memory (a = min(Br, Nq), b = min(Bc, Nkv), a2 = min(Br2, Nq), c = min(Bd2, d))::

    Phase 1   a·b + min(a, b) + 1      (the tile's lines, one column, one word)
    Phase 2   a2·c + min(a2, c) + a2 + 1   (O, a V row slice or a score column, g, one word)
    footprint = max of the two;  the least M is 4 (every side 1).

Tiling.  The phases are independent (no side of one enters the other's count or steps), so
each is searched by itself: the module declares them (:meth:`WindowStream._phases`), the
mapper searches them (:func:`attnio.algorithms.mapper.phase_best`).  Phase 1 takes, for each
side on a geometric ladder, the largest other side that fits (either orientation); Phase 2, for
each slice count T (the distinct widths ⌈d/T⌉), the tallest row block that fits (KS falls as
the block grows).  Every candidate is counted (nothing is cut), its steps only where it can be
among the best: the three of least (count, steps) of each phase, ties to the larger tile, and
the nine pairs are the candidates; the first is the least.

Bulk counting.  In a block, the key blocks (Phase 1) or keys (Phase 2) that every row sees move
alike words: one uniform loop; so does a tile's loop over the d columns.  The tiles and keys at
the two ends of a block's band are counted by their sums, not line by line or key by key: a
tile's H words (:func:`overlap_sum`, a concave piecewise-linear overlap summed in closed form)
held through its d columns and stored as lines of about the same length (the same stores and
words, :func:`_tile_by_sums`); a Phase-2 block's end keys as the one most rows see plus the
others' steps and words (:func:`_keys`).  With a window the blocks themselves are counted by
their sums (:mod:`attnio.core.masks`, O(log N)): Phase 1 of every full query block at once when
one of them holds a full tile (Br rows that all see Bc keys: the largest footprint, run as
itself for the peak; :func:`_all_scores`), else the interior blocks (full, their band inside
the keys) at once with the tile of the largest footprint found in closed form
(:func:`_interior_scores`, :func:`_peak_tile`) and the others walked; Phase 2 of every full row
block at once, an interior block run as itself (:func:`_all_outputs`).  The bulk count moves
the same words, steps and peak as the step-by-step one, and a windowed count at N = 10⁹ takes
about a millisecond whatever the window; causal without a window it is stream_tiling's.  Tests
hold the bulk count to the step-by-step one on drawn shapes
(``tests/algorithms/test_window_stream.py``).

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((40, 8)) for _ in range(3))
>>> r = attnio.run("window_stream", Q, K, V, M=60, causal=True, window=9)
>>> ref = attnio.reference.attention(Q, K, V, causal=True, window=9)
>>> bool(np.abs(r.output - ref).max() < 1e-12)
True
>>> ALGORITHM.cost(Shape.make(40, 8, causal=True, window=9), r.tiling).io.total == r.io.total
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range, q_range
from . import mapper
from ._kernels import online_lse_step
from .base import Algorithm
from .common import ladder, split_sizes, store_lines
from .protocol import Phase, Phases
from .stream_tiling import StreamTiling, StreamTilingTiling

__all__ = ["ALGORITHM", "WindowStream", "WindowStreamTiling"]

_OFFER = 3  # the best of each phase combined into the candidates (Phase.offer)


@dataclass(frozen=True)
class WindowStreamTiling:
    """Phase 1: score tiles Br x Bc (cut to the band); Phase 2: output tiles Br2 x Bd2."""

    Br: int
    Bc: int
    Br2: int
    Bd2: int


def _combine(p1: tuple[int, int], p2: tuple[int, int]) -> WindowStreamTiling:
    """The tiling of a Phase-1 choice (Br, Bc) and a Phase-2 one (Br2, Bd2)."""
    return WindowStreamTiling(*p1, *p2)


def _fp1(a: int, b: int) -> int:
    return a * b + min(a, b) + 1


def _fp2(a: int, c: int) -> int:
    return a * c + min(a, c) + a + 1


def _mask(shape: Shape) -> tuple[int, int | None, bool]:
    return shape.offset, (shape.window if shape.causal else None), shape.causal


@functools.lru_cache(maxsize=4096)
def _ks(Nq: int, Nkv: int, B: int, off: int, window: int | None, causal: bool) -> int:
    """KS(B) = Σ_i |kv_range(i)| over the query blocks of B rows, O(log N)."""
    return masks.query_block_sums(Nq, Nkv, B, 1, off, window, causal).width


@functools.lru_cache(maxsize=4096)
def _qs(Nq: int, Nkv: int, Bc: int, off: int, window: int | None, causal: bool) -> int:
    """QS(Bc) = Σ_j |q_range(j)| over the key blocks of Bc keys, O(log N)."""
    return masks.key_block_sums(Nq, Nkv, 1, Bc, off, window, causal).width


def _visible(shape: Shape) -> int:
    """H: the scores the rows see (Nq·Nkv unmasked), O(1)."""
    return masks.row_counts(shape).pairs


def _phase1(shape: Shape, Br: int, Bc: int) -> IOCount:
    args = (shape.Nq, shape.Nkv)
    return IOCount(shape.d * (_qs(*args, Bc, *_mask(shape)) + _ks(*args, Br, *_mask(shape))),
                   _visible(shape))


def _phase2(shape: Shape, Br2: int, Bd2: int) -> IOCount:
    d = shape.d
    reads = cdiv(d, Bd2) * _visible(shape) + d * _ks(shape.Nq, shape.Nkv, Br2, *_mask(shape))
    return IOCount(reads, shape.Nq * d)


def _cols1(M: int, a: int) -> int:
    """The widest b with ``a·b + min(a, b) + 1 <= M`` (0: none)."""
    b = (M - 1 - a) // a
    if b >= a:
        return b
    return max(0, min(a - 1, (M - 1) // (a + 1)))


def _rows2(M: int, c: int) -> int:
    """The tallest a with ``a·c + min(a, c) + a + 1 <= M`` (0: none)."""
    a = (M - 1 - c) // (c + 1)
    if a >= c:
        return a
    return max(0, min(c - 1, (M - 1) // (c + 2)))


def ring_width(shape: Shape, Bc: int) -> int:
    """C, the columns of the slow score array: key c in column c mod C.  A row's keys are one
    interval of at most ``w = max_r (hi_r - lo_r)`` (``min(W, Nkv)`` under a window), so with
    C >= w no two scores of a row share a column; C is a multiple of Bc, so a key block is one
    run of columns; when that reaches Nkv, C = Nkv (column = key).  The counts do not depend on
    this layout; it keeps a compute-mode run's slow memory at about Nq·(W + Bc) words."""
    w = masks.query_block_max_width(shape.Nq, shape.Nkv, 1, 1, *_mask(shape))
    C = cdiv(max(w, 1), Bc) * Bc
    return C if C < shape.Nkv else shape.Nkv


def _every_row(shape: Shape, ib: Block, Bc: int) -> tuple[int, int]:
    """[a, b): the key blocks of Bc keys every row of block ``ib`` sees entirely (their tiles
    move alike: the block's rows and the Bc keys); a = b = the band's low end when none."""
    lo, hi = kv_range(shape, ib.start, ib.stop)
    m0 = max(lo, kv_range(shape, ib.stop - 1, ib.stop)[0])  # the last row's first key
    m1 = min(hi, kv_range(shape, ib.start, ib.start + 1)[1])  # the first row's end
    a = cdiv(m0, Bc) * Bc
    b = m1 if m1 == shape.Nkv else m1 // Bc * Bc
    return (a, b) if b > a else (lo, lo)


def _interior(shape: Shape, B: int, S: int, K: int) -> tuple[int, int, int]:
    """(i_a, i_b, period): the interior query blocks [i_a, i_b) of B rows under a window (full,
    their band inside [0, K)) and the period of their classes against the S-key grid."""
    W, off = shape.window, shape.offset
    assert W is not None
    i_a = max(0, cdiv(W - 1 - off, B))
    i_b = max(i_a, min((K - off) // B, shape.Nq // B))
    return i_a, i_b, S // math.gcd(B, S)


def _walked(shape: Shape, B: int, S: int, K: int) -> int:
    """Query blocks of B rows a bulk count runs one by one, the interior ones counted as one
    (:meth:`WindowStream._blocks`: Phase 1's interior by its sums, Phase 2's (S = 1) as one
    class)."""
    blocks = cdiv(shape.Nq, B)
    if shape.window is None:
        return blocks
    i_a, i_b, _ = _interior(shape, B, S, K)
    return blocks - (i_b - i_a) + min(1, i_b - i_a)


def _as_stream(shape: Shape) -> bool:
    """A causal workload without a window: counted as stream_tiling (the same words)."""
    return shape.causal and shape.window is None


def _stream_tiling(t: WindowStreamTiling) -> StreamTilingTiling:
    """stream_tiling's order "tile" with one slice group: this schedule without a window."""
    return StreamTilingTiling(t.Br, t.Bc, t.Br2, t.Bd2)


class WindowStream(Algorithm[WindowStreamTiling]):
    name = "window_stream"
    summary = ("sliding window, small cache: stream tiling's two streamed blocked matmuls cut to "
               "the band (scores written once, softmax online with one word a row)")
    Tiling = WindowStreamTiling
    supports_window = True

    # ------------------------------------------------------------------ sizes
    def footprint(self, shape: Shape, tiling: WindowStreamTiling) -> int:
        t = tiling
        return max(_fp1(min(t.Br, shape.Nq), min(t.Bc, shape.Nkv)),
                   _fp2(min(t.Br2, shape.Nq), min(t.Bd2, shape.d)))

    def min_M(self, shape: Shape) -> int:
        return _fp2(1, 1)

    def slow_workspace(self, shape: Shape, tiling: WindowStreamTiling) -> int:
        """Words of slow workspace a compute-mode run allocates: the score ring, Nq rows of
        :func:`ring_width` columns (the runner's memory estimate takes it)."""
        return shape.Nq * ring_width(shape, min(tiling.Bc, shape.Nkv))

    def steps(self, shape: Shape, tiling: WindowStreamTiling) -> int:
        t = tiling
        off, window, causal = _mask(shape)
        tiles = masks.query_block_sums(shape.Nq, shape.Nkv, t.Br, t.Bc, off, window,
                                       causal).count
        return tiles + cdiv(shape.Nq, t.Br2) * cdiv(shape.d, t.Bd2)

    def count_walk(self, shape: Shape, tiling: WindowStreamTiling) -> int:
        """What a bulk count walks one by one, for the runner's time estimate, in its unit of a
        walked block (a tile or a key range here, counted by its sums, costs about an eighth of
        one, 25-40 us on 2 cores; counted as a quarter, as the estimate is an upper one):
        unmasked, a tile or two of one or two representative query blocks; with a window, per
        walked query block (the short last one and all the full ones as one when a block holds
        a full tile, :func:`_all_scores`; else the blocks outside the interior, and the
        interior as one, :meth:`_blocks`) its tiles some row does not see entirely, at most
        ⌈Br/Bc⌉ + 2 at each end of its band, and the run of tiles every row sees; per walked
        Phase-2 block (the short last one, an interior one and the other full ones as one,
        :func:`_all_outputs`; block by block without an interior) and slice (at most two: a
        full and a short one) the keys at the two ends of its band and the run every row
        sees."""
        t = tiling
        if _as_stream(shape):
            return _STREAM.count_walk(shape, _stream_tiling(t))
        Bc = min(t.Bc, shape.Nkv)
        slices = min(2, cdiv(shape.d, t.Bd2))
        if not shape.causal:  # alike query blocks run once (two: the short last one)
            return cdiv(min(2, cdiv(shape.Nq, t.Br)) * 2 + min(2, cdiv(shape.Nq, t.Br2))
                        * slices * 3, 4)
        if _full_tile(shape, t) is not None:  # every full block at once, the short one walked
            walked = 2
        else:
            walked = _walked(shape, t.Br, Bc, (shape.Nkv // Bc) * Bc)
        i_a, i_b, _ = _interior(shape, t.Br2, 1, shape.Nkv)
        walked2 = 3 if i_b > i_a else _walked(shape, t.Br2, 1, shape.Nkv)
        tiles = walked * (2 * (cdiv(t.Br, Bc) + 2) + 1)
        return cdiv(tiles + walked2 * slices * 3, 4)

    def covered_by(self, shape: Shape) -> str | None:
        """Without a window this is stream_tiling's order "tile" with one slice group, word for
        word (module docstring), and stream_tiling searches more (order "row", two slice
        groups): the planner leaves such workloads to it.  With a window it is planned."""
        return "stream_tiling" if shape.window is None else None

    # ------------------------------------------------------------------ counts
    def _predict(self, shape: Shape, tiling: WindowStreamTiling) -> IOCount:
        t = tiling
        return _phase1(shape, t.Br, t.Bc) + _phase2(shape, t.Br2, t.Bd2)

    # ------------------------------------------------------------------ tilings
    def _phases(self, shape: Shape, M: int, **options: Any) -> Phases[WindowStreamTiling]:
        """The two phases, for the mapper's per-phase search (:func:`.mapper.phase_best`: no side
        of one phase enters the other's count or steps; they share only M), each choice built to
        fit (the other side the most that fits):

        * Phase 1: (Br, Bc), for each side on a geometric ladder
          (:func:`attnio.algorithms.common.ladder`) the largest other side that fits (the
          footprint is symmetric); cost ``d·(QS(Bc) + KS(Br)) + H`` and its tiles;
        * Phase 2: (Br2, Bd2), for each distinct slice width ⌈d/T⌉ the tallest row block that
          fits (KS falls as the block grows); cost ``T_d·H + d·KS(Br2) + Nq·d`` and its
          output tiles.

        Each phase's count is its own lower bound (exact, O(log N) from cached sums), so the
        mapper's branch and bound takes the steps (Phase 1's: a further O(log N) sum) only of
        the choices that can be among the :data:`_OFFER` best.  Ties of count and steps go to
        the larger tile (``order``).  The :data:`_OFFER` best of each phase are paired."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        off, window, causal = _mask(shape)

        def cands1() -> set[tuple[int, int]]:
            pairs: set[tuple[int, int]] = set()
            for a in ladder(Nq, M):
                b = min(Nkv, _cols1(M, a))
                if b >= 1:
                    pairs.add((a, b))
            for b in ladder(Nkv, M):
                a = min(Nq, _cols1(M, b))  # the footprint is symmetric in (a, b)
                if a >= 1:
                    pairs.add((a, b))
            return pairs

        def cands2() -> set[tuple[int, int]]:
            pairs: set[tuple[int, int]] = set()
            for c in {cdiv(d, T) for T in range(1, d + 1)}:
                a = min(Nq, _rows2(M, c))
                if a >= 1:
                    pairs.add((a, c))
            return pairs

        H, mk = _visible(shape), (off, window, causal)

        def count1(c: tuple[int, int]) -> int:  # _phase1(shape, *c).total
            return d * (_qs(Nq, Nkv, c[1], *mk) + _ks(Nq, Nkv, c[0], *mk)) + H

        def count2(c: tuple[int, int]) -> int:  # _phase2(shape, *c).total
            return cdiv(d, c[1]) * H + d * _ks(Nq, Nkv, c[0], *mk) + Nq * d

        def larger(c: tuple[int, int]) -> tuple[int, tuple[int, int]]:
            return -c[0] * c[1], c

        phase1 = Phase(
            cost=lambda c: (count1(c), masks.query_block_sums(Nq, Nkv, c[0], c[1], off, window,
                                                              causal).count),
            footprint=None,  # every candidate is built to fit
            candidates=cands1, lower=count1, offer=_OFFER, order=larger)
        phase2 = Phase(
            cost=lambda c: (count2(c), cdiv(Nq, c[0]) * cdiv(d, c[1])),
            footprint=None,
            candidates=cands2, lower=count2, offer=_OFFER, order=larger)
        return Phases((phase1, phase2), _combine)

    def candidate_tilings(self, shape: Shape, M: int) -> list[WindowStreamTiling]:
        """The best few of each phase (:meth:`_phases`, searched by the mapper), paired; empty
        when M < min_M."""
        if mapper.needs_M(self, shape, M) is not None:
            return []
        return mapper.phase_tilings(self, shape, M)

    # ------------------------------------------------------------------ the schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: WindowStreamTiling,
                 scale: float) -> None:
        t = tiling
        if _as_stream(shape) and not mem.computing:
            # a causal count without a window: stream_tiling's, word for word (covered_by), whose
            # bulk count runs alike query blocks once; this schedule's interior needs a window
            _STREAM.schedule(mem, Q, K, V, O, shape=shape, tiling=_stream_tiling(t), scale=scale)
            return
        C = ring_width(shape, min(t.Bc, shape.Nkv))
        A = mem.scratch("A", (shape.Nq, C))  # the raw scaled scores a row sees: a ring
        Bc = min(t.Bc, shape.Nkv)
        run = _Run(mem, shape, t, C, scale, (Q, K, V, O, A))

        def scores(ib: Block) -> None:  # Phase 1 of query block ib
            lo, hi = kv_range(shape, ib.start, ib.stop)
            a, b = _every_row(shape, ib, t.Bc)
            for x, y, alike in ((lo, a, False), (a, b, True), (max(lo, b), hi, False)):
                for jb in mem.blocks(shape.Nkv, t.Bc, lo=x, hi=y, uniform=alike):
                    _tile(run, ib, jb, (lo, hi))

        def outputs(ib: Block) -> None:  # Phase 2 of row block ib
            _output_block(run, ib)

        # Phase 1's blocks are counted by their sums (all of them, or the interior ones); Phase
        # 2's interior ones are all alike (module docstring, "Bulk counting")
        if not (mem.bulk and shape.causal and shape.window is not None
                and _all_scores(run, scores)):
            self._blocks(mem, shape, t.Br, Bc, (shape.Nkv // Bc) * Bc, scores,
                         lambda i_a, i_b: _interior_scores(run, i_a, i_b))
        if not (mem.bulk and shape.causal and shape.window is not None
                and _all_outputs(run, outputs)):
            self._blocks(mem, shape, t.Br2, 1, shape.Nkv, outputs)

    @staticmethod
    def _blocks(mem: TwoLevelMemory, shape: Shape, B: int, S: int, K: int,
                body: Callable[[Block], None],
                interior: Callable[[int, int], None] | None = None) -> None:
        """``body`` on every query block of B rows.  In a bulk count with a window, the interior
        blocks (full, their band [r0 + off - W + 1, r1 + off) inside [0, K)) move alike words
        when they meet the S-key grid alike, i.e. by ``(r0 + off) mod S``: blocks i and
        i + S/gcd(B, S) do; each class runs once, its count multiplied, or, given ``interior``,
        ``interior(i_a, i_b)`` counts the interior blocks [i_a, i_b) at once."""
        Nq = shape.Nq
        if not (mem.bulk and shape.causal and shape.window is not None):
            for ib in mem.blocks(Nq, B, uniform=not shape.causal):
                body(ib)
            return
        i_a, i_b, period = _interior(shape, B, S, K)
        for ib in mem.blocks(Nq, B, hi=i_a * B, uniform=False):
            body(ib)
        if interior is not None:
            if i_b > i_a:
                interior(i_a, i_b)
        else:
            for first in range(i_a, min(i_b, i_a + period)):
                rep = Block(first, first * B, (first + 1) * B)
                for _ in mem.blocks(cdiv(i_b - first, period), 1):  # the class's blocks' steps
                    body(rep)
        for ib in mem.blocks(Nq, B, lo=i_b * B, uniform=False):
            body(ib)


@dataclass(frozen=True)
class _Run:
    """What the steps of one head's run share: the memory, the workload, the tiling, the score
    ring's width C, the scale, and the slow arrays (Q, K, V, O, A)."""

    mem: TwoLevelMemory
    shape: Shape
    t: WindowStreamTiling
    C: int
    scale: float
    arrays: tuple[SlowArray, SlowArray, SlowArray, SlowArray, SlowArray]


def _rows_held(shape: Shape, t: WindowStreamTiling) -> bool:
    """Whether Phase 1 holds a tile as its rows (a K column held) rather than its keys."""
    return min(t.Br, shape.Nq) > min(t.Bc, shape.Nkv)


def _by_rows(run: _Run) -> bool:
    return _rows_held(run.shape, run.t)


def _tile_box(shape: Shape, ib: Block, jb: Block, band: tuple[int, int]
              ) -> tuple[int, int, int, int]:
    """(r0, r1, k0, k1): tile (i, j)'s rows R_ij and keys C_ij (module docstring)."""
    q0, q1 = q_range(shape, jb.start, jb.stop)
    k0, k1 = max(jb.start, band[0]), min(jb.stop, band[1])
    return max(ib.start, q0), min(ib.stop, q1), k0, k1


def _tile(run: _Run, ib: Block, jb: Block, band: tuple[int, int]) -> None:
    """Tile (i, j) of Phase 1: rows R_ij, keys C_ij (module docstring), held as lines (in a bulk
    count, by its sums: :func:`_tile_by_sums`)."""
    mem, shape, C, scale = run.mem, run.shape, run.C, run.scale
    Q, K, _, _, A = run.arrays
    d = shape.d
    r0, r1, k0, k1 = _tile_box(shape, ib, jb, band)
    if mem.bulk:
        _tile_by_sums(run, (r0, r1, k0, k1))
        return
    by_rows = _by_rows(run)  # a K column held
    if by_rows:  # line r: the keys of C_ij row r sees
        spans = [(max(k0, a), min(k1, b))
                 for a, b in (kv_range(shape, r, r + 1) for r in range(r0, r1))]
    else:  # line c: the rows of R_ij that see key c
        spans = [(max(r0, a), min(r1, b))
                 for a, b in (q_range(shape, c, c + 1) for c in range(k0, k1))]
    lines = [mem.alloc((1, b - a) if by_rows else (b - a, 1), 0.0, label="S_line")
             for a, b in spans]
    for lb in mem.blocks(d, 1):
        if by_rows:
            k = mem.load(K, slice(k0, k1), lb, label="K_jl")
            for x in range(r1 - r0):  # each row a different line: walked
                w = mem.load(Q, r0 + x, lb, label="q_rl")
                a, b = spans[x]
                mem.compute(_row_update(scale, a - k0), lines[x], k, w, writes=1)
                mem.free(w)
            mem.free(k)
            continue
        q = mem.load(Q, slice(r0, r1), lb, label="Q_il")
        for x in range(k1 - k0):
            w = mem.load(K, k0 + x, lb, label="k_cl")
            a, b = spans[x]
            mem.compute(_column_update(scale, a - r0), lines[x], q, w, writes=1)
            mem.free(w)
        mem.free(q)
    base = jb.start - jb.start % C  # key c in column c - base (no wrap in a key block)
    for x, line in enumerate(lines):
        a, b = spans[x]
        if by_rows:
            mem.store(line, A, r0 + x, slice(a - base, b - base))
        else:
            mem.store(line, A, slice(a, b), k0 + x - base)
        mem.free(line)


# ---------------------------------------------------------------------- bulk counting by sums
def _pos_sum(a: int, b: int, slope: int, c: int) -> int:
    """``Σ_{x=a}^{b-1} max(0, slope·x + c)`` for a slope of -1, 0 or 1, in O(1)."""
    if slope == 0:
        return max(0, b - a) * max(0, c)
    if slope == 1:
        a = max(a, 1 - c)  # x + c >= 1
    else:
        b = min(b, c)  # c - x >= 1
    n = b - a
    if n <= 0:
        return 0
    return n * c + slope * (n * (a + b - 1) // 2)


def overlap_sum(x0: int, x1: int, lo: int, hi: int, v: int | None, u: int | None) -> int:
    """``Σ_{x=x0}^{x1-1} |[lo, hi) ∩ [x + v, x + u)|``, in O(1): the words of the lines of a
    tile, x a row (v, u: the offsets of the keys it sees) or a key (of the rows that see it);
    None: no bound on that side.  The overlap is a concave piecewise-linear function of x: on
    each of its (at most three) linear pieces an arithmetic series."""
    cuts = {x0, x1}
    for c in ((hi - u) if u is not None else None, (lo - v) if v is not None else None):
        if c is not None and x0 < c < x1:
            cuts.add(c)
    pts = sorted(cuts)
    total = 0
    for a, b in zip(pts, pts[1:]):
        m_slope, m_c = (1, u) if u is not None and a < hi - u else (0, hi)
        x_slope, x_c = (1, v) if v is not None and a >= lo - v else (0, lo)
        total += _pos_sum(a, b, m_slope - x_slope, m_c - x_c)
    return total


def _row_offsets(shape: Shape) -> tuple[int | None, int | None]:
    """(v, u): row r sees the keys [r + v, r + u) (clipped to [0, Nkv)); None: unbounded."""
    off, window, causal = _mask(shape)
    return ((off - window + 1) if window is not None else None), (off + 1 if causal else None)


def _key_offsets(shape: Shape) -> tuple[int | None, int | None]:
    """(v, u): key k is seen by the rows [k + v, k + u) (clipped to [0, Nq)); None: unbounded."""
    off, window, causal = _mask(shape)
    return (-off if causal else None), ((window - off) if window is not None else None)


def _store_lines(run: _Run, lines: int, words: int) -> None:
    """Store ``lines`` lines of ``words`` words in all (a bulk count's stand-in for a tile's
    lines, :func:`split_sizes`): the same stores and words, one line resident at a time."""
    store_lines(run.mem, run.arrays[4], _by_rows(run), lines, words)


def _tile_by_sums(run: _Run, box: tuple[int, int, int, int]) -> None:
    """Bulk count of one Phase-1 tile, rows [r0, r1) and keys [k0, k1): its words, steps and
    peak as :func:`_tile` step by step, without walking its lines (H words in all,
    :func:`overlap_sum`): the lines held as one tile of H words through the d columns (one
    column held, the other side's words one at a time, :meth:`TwoLevelMemory.repeat`), then
    stored as lines of about the same length (:func:`_store_lines`)."""
    mem, shape = run.mem, run.shape
    Q, K = run.arrays[0], run.arrays[1]
    r0, r1, k0, k1 = box
    H = overlap_sum(r0, r1, k0, k1, *_row_offsets(shape))
    by_rows = _by_rows(run)
    held = mem.alloc((H,), label="S_lines")
    for lb in mem.blocks(shape.d, 1):
        if by_rows:
            col = mem.load(K, slice(k0, k1), lb, label="K_jl")
            for _ in mem.repeat(r1 - r0):
                mem.free(mem.load(Q, r0, lb, label="q_rl"))
        else:
            col = mem.load(Q, slice(r0, r1), lb, label="Q_il")
            for _ in mem.repeat(k1 - k0):
                mem.free(mem.load(K, k0, lb, label="k_cl"))
        mem.free(col)
    mem.free(held)
    _store_lines(run, (r1 - r0) if by_rows else (k1 - k0), H)


def _tiles_by_sums(run: _Run, tiles: int, rows: int, keys: int, words: int) -> None:
    """Bulk count of ``tiles`` Phase-1 tiles whose rows |R_ij|, keys |C_ij| and visible scores
    H_ij sum to ``rows``, ``keys`` and ``words``: each tile's step and d column steps, the held
    columns in :func:`split_sizes` sizes, the other side's words one at a time, the lines stored.
    The same words and steps as the tiles one by one; never more resident than the largest of
    them (whose peak :func:`_tile_by_sums` gives)."""
    if tiles <= 0:
        return
    mem, d = run.mem, run.shape.d
    Q, K = run.arrays[0], run.arrays[1]
    by_rows = _by_rows(run)
    src, held, other, singles = (K, keys, Q, rows) if by_rows else (Q, rows, K, keys)
    for size, k in split_sizes(held, tiles):
        for _ in mem.blocks(k, 1):  # the tiles' steps
            for lb in mem.blocks(d, 1):
                mem.free(mem.load(src, slice(0, size), lb, label="K_jl" if by_rows else "Q_il"))
    for _ in mem.repeat(d * singles):
        mem.free(mem.load(other, 0, 0, label="q_rl" if by_rows else "k_cl"))
    _store_lines(run, rows if by_rows else keys, words)


def _peak_tile(shape: Shape, t: WindowStreamTiling, i_a: int, i_b: int) -> tuple[Block, Block]:
    """The interior tile (query block i in [i_a, i_b), key block j) of the largest footprint
    (lines + held column + one word).  An interior tile's words depend only on where its key
    block starts against its band, s = j·Bc - lo_i, through a footprint that is symmetric about
    s* = (W + Br - 1 - Bc)/2 and does not increase away from it (the band's rows and keys mirror
    into each other), so the best is an achievable s nearest s* on either side: s ≡ -lo_i
    (mod Bc), all values ≡ -lo (mod gcd(Br, Bc)) once the interior spans a period of
    Bc/gcd(Br, Bc) blocks (i from the modular inverse), else per block.  O(1) or O(period)."""
    Br = t.Br
    Bc = min(t.Bc, shape.Nkv)
    W = shape.window
    assert W is not None
    beta = shape.offset - W + 1  # lo_i = i·Br + beta
    two_s = W + Br - 1 - Bc  # 2·s*
    g = math.gcd(Br, Bc)
    period = Bc // g
    cands: list[tuple[int, int]] = []
    if i_b - i_a < period:
        for i in range(i_a, i_b):
            j = (2 * (i * Br + beta) + two_s) // (2 * Bc)
            cands += [(i, j), (i, j + 1)]
    else:
        sigma = (-beta) % g
        k = (two_s - 2 * sigma) // (2 * g)
        inv = pow((Br // g) % period, -1, period) if period > 1 else 0
        for s in (sigma + g * k, sigma + g * (k + 1)):
            i0 = ((-(s + beta)) // g * inv) % period  # i·Br ≡ -(s + beta) (mod Bc)
            i = i_a + (i0 - i_a) % period
            cands.append((i, (s + i * Br + beta) // Bc))
    best, at = -1, None
    for i, j in cands:
        ib = Block(i, i * Br, (i + 1) * Br)
        jb = Block(j, j * Bc, (j + 1) * Bc)
        r0, r1, k0, k1 = _tile_box(shape, ib, jb, kv_range(shape, ib.start, ib.stop))
        if r1 <= r0 or k1 <= k0:
            continue
        fp = overlap_sum(r0, r1, k0, k1, *_row_offsets(shape)) + (
            (k1 - k0) if _rows_held(shape, t) else (r1 - r0))
        if fp > best:
            best, at = fp, (ib, jb)
    assert at is not None
    return at


def _interior_scores(run: _Run, i_a: int, i_b: int) -> None:
    """Bulk count of Phase 1 on the interior query blocks [i_a, i_b) at once: their steps, the
    tile of the largest footprint as itself (:func:`_peak_tile`, :func:`_tile_by_sums`) and the
    other tiles by their sums (:func:`_tiles_by_sums`), in O(log N): the tiles are the Bc key
    blocks meeting each band (``query_block_sums(..).count``), their rows add up to Σ_j
    |q_range(j)| over the interior rows, their keys to Σ_i |kv_range(i)|, their scores to W a
    row."""
    mem, shape, Br = run.mem, run.shape, run.t.Br
    Bc = min(run.t.Bc, shape.Nkv)
    W = shape.window
    assert W is not None
    rows = (i_b - i_a) * Br
    off = shape.offset + i_a * Br  # the interior rows as a workload of their own
    tiles = masks.query_block_sums(rows, shape.Nkv, Br, Bc, off, W).count
    keys = masks.query_block_sums(rows, shape.Nkv, Br, 1, off, W).width
    seen = masks.key_block_sums(rows, shape.Nkv, 1, Bc, off, W).width
    for _ in mem.blocks(i_b - i_a, 1):  # the blocks' steps
        pass
    ib, jb = _peak_tile(shape, run.t, i_a, i_b)
    r0, r1, k0, k1 = box = _tile_box(shape, ib, jb, kv_range(shape, ib.start, ib.stop))
    for _ in mem.blocks(shape.Nkv, run.t.Bc, lo=jb.start, hi=jb.start + 1, uniform=False):
        _tile_by_sums(run, box)
    H = overlap_sum(r0, r1, k0, k1, *_row_offsets(shape))
    _tiles_by_sums(run, tiles - 1, seen - (r1 - r0), keys - (k1 - k0), rows * W - H)


def _full_tile(shape: Shape, t: WindowStreamTiling) -> tuple[Block, Block] | None:
    """A full tile of a full query block (all its Br rows see all Bc keys of a full key block):
    the largest footprint any tile has (Br·Bc + min(Br, Bc) + 1), or None when none of a few
    candidates has one (the block whose last row is the last to see key 0, the ends of the
    interior, the interior's peak tile: :func:`_peak_tile`).  A band of at least Br + 2·Bc
    keys has one in every interior block."""
    Br, Bc = t.Br, min(t.Bc, shape.Nkv)
    nf = shape.Nq // Br
    W = shape.window
    assert W is not None
    K = (shape.Nkv // Bc) * Bc
    i_a, i_b, _ = _interior(shape, Br, Bc, K)
    cands = {(W - shape.offset) // Br - 1, i_a - 1, i_a, i_b - 1}
    if i_b > i_a:
        cands.add(_peak_tile(shape, t, i_a, i_b)[0].index)
    for i in sorted(c for c in cands if 0 <= c < nf):
        ib = Block(i, i * Br, (i + 1) * Br)
        a, b = _every_row(shape, ib, t.Bc)
        if min(b, K) - a >= Bc:
            j = a // Bc
            return ib, Block(j, j * Bc, (j + 1) * Bc)
    return None


def _all_scores(run: _Run, scores: Callable[[Block], None]) -> bool:
    """Bulk count of Phase 1 of every full query block at once, when one of them holds a full
    tile (:func:`_full_tile`, whose footprint no tile exceeds; it runs as itself for the peak):
    the blocks' steps and the other tiles by their sums (:func:`_tiles_by_sums`): the tiles are
    the Bc key blocks meeting each band (``query_block_sums(..).count``), their rows add up to
    Σ_j |q_range(j)| over those rows, their keys to Σ_i |kv_range(i)|, their scores to the
    visible ones (:func:`overlap_sum`), all in O(log N) whatever the window; then the short
    last block one by one.  False (nothing counted) when no full tile is found: the caller walks
    the ends of the sequence and counts the interior by :func:`_interior_scores`."""
    mem, shape, t = run.mem, run.shape, run.t
    full = _full_tile(shape, t)
    if full is None:
        return False
    Br, Bc, W = t.Br, min(t.Bc, shape.Nkv), shape.window
    nf = shape.Nq // Br
    rows = nf * Br
    tiles = masks.query_block_sums(rows, shape.Nkv, Br, Bc, shape.offset, W).count
    keys = masks.query_block_sums(rows, shape.Nkv, Br, 1, shape.offset, W).width
    seen = masks.key_block_sums(rows, shape.Nkv, 1, Bc, shape.offset, W).width
    words = overlap_sum(0, rows, 0, shape.Nkv, *_row_offsets(shape))
    for _ in mem.blocks(nf, 1):  # the blocks' steps
        pass
    ib, jb = full
    for _ in mem.blocks(shape.Nkv, t.Bc, lo=jb.start, hi=jb.start + 1, uniform=False):
        _tile_by_sums(run, (ib.start, ib.stop, jb.start, jb.stop))
    _tiles_by_sums(run, tiles - 1, seen - Br, keys - Bc, words - Br * Bc)
    for ib in mem.blocks(shape.Nq, Br, lo=rows, uniform=False):
        scores(ib)
    return True


def _key_rows(shape: Shape, ib: Block, k: int) -> int:
    """How many rows of block ``ib`` see key k."""
    v, u = _key_offsets(shape)
    return overlap_sum(k, k + 1, ib.start, ib.stop, v, u)


def _keys(run: _Run, acc: tuple[FastTile, ...], ib: Block, db: Block, v_held: bool,
          lo: int, hi: int) -> None:
    """Phase 2: the keys [lo, hi) of row block ``ib``, which only some of its rows see, into
    slice ``db``: one by one, or in a bulk count by their sums (the key most rows see as
    itself, for the peak; the others' steps and words in :func:`split_sizes` sizes: the same steps,
    words and peak)."""
    mem, shape = run.mem, run.shape
    if not mem.bulk or hi - lo <= 1:
        for kb in mem.blocks(shape.Nkv, 1, lo=lo, hi=hi, uniform=False):
            _key(run, acc, ib, kb, db, v_held)
        return
    v, u = _key_offsets(shape)
    cands = {lo, hi - 1}
    for c in ((ib.stop - u) if u is not None else None, (ib.start - v) if v is not None else None):
        if c is not None:
            cands.update(min(hi - 1, max(lo, x)) for x in (c - 1, c, c + 1))
    top = max(sorted(cands), key=lambda k: _key_rows(shape, ib, k))
    for kb in mem.blocks(shape.Nkv, 1, lo=top, hi=top + 1, uniform=False):
        _key(run, acc, ib, kb, db, v_held)
    rows = overlap_sum(lo, hi, ib.start, ib.stop, v, u) - _key_rows(shape, ib, top)
    _keys_by_sums(run, db, v_held, hi - lo - 1, rows)


def _keys_by_sums(run: _Run, db: Block, v_held: bool, keys: int, rows: int) -> None:
    """Bulk count of ``keys`` Phase-2 keys into slice ``db`` that ``rows`` rows see in all: each
    key's step, its V slice (or score column) and its rows' words and steps, in :func:`split_sizes`
    sizes (the same steps and words as :func:`_key` one by one; no column taller than theirs)."""
    if keys <= 0:
        return
    mem = run.mem
    V, A = run.arrays[2], run.arrays[4]
    for size, k in split_sizes(rows, keys):
        for _ in mem.blocks(k, 1):  # the keys' steps
            if v_held:
                vt = mem.load(V, 0, db, label="V_kc")
                for _ in mem.blocks(size, 1):
                    mem.free(mem.load(A, 0, 0, label="a_rk"))
                mem.free(vt)
            else:
                st = mem.load(A, slice(0, size), 0, label="A_ik")
                for cc in mem.blocks(db.size, 1):
                    mem.free(mem.load(V, 0, db.start + cc.start, label="v_ku"))
                mem.free(st)


def _all_outputs(run: _Run, outputs: Callable[[Block], None]) -> bool:
    """Bulk count of Phase 2 of every full row block at once, when the interior has one (its
    footprint is the largest: every row sees W keys, a key up to min(W, Br2) rows): that block
    as itself (:func:`_output_block`), the others' steps, output tiles and keys by their sums
    (:func:`_keys_by_sums`; the keys a block sees add up to Σ_i |kv_range(i)|, their rows to
    the visible scores), for every output slice; then the short last block.  False (nothing
    counted) without an interior block."""
    mem, shape, Br2, Bd2 = run.mem, run.shape, run.t.Br2, run.t.Bd2
    i_a, i_b, _ = _interior(shape, Br2, 1, shape.Nkv)
    if i_b <= i_a:
        return False
    W, d = shape.window, shape.d
    nf = shape.Nq // Br2
    rows = nf * Br2
    keys = masks.query_block_sums(rows, shape.Nkv, Br2, 1, shape.offset, W).width
    words = overlap_sum(0, rows, 0, shape.Nkv, *_row_offsets(shape))
    for ib in mem.blocks(shape.Nq, Br2, lo=i_a * Br2, hi=i_a * Br2 + 1, uniform=False):
        outputs(ib)  # the block of the largest footprint, as itself
        lo, hi = kv_range(shape, ib.start, ib.stop)
        keys, words = keys - (hi - lo), words - Br2 * (W or 0)
    O = run.arrays[3]
    for _ in mem.blocks(nf - 1, 1):  # the other full blocks' steps, slices and output tiles
        for db in mem.blocks(d, Bd2):
            Oc = mem.alloc((Br2, db.size), label="O_ic")
            mem.store(Oc, O, slice(0, Br2), db)
            mem.free(Oc)
    v_held = min(Bd2, d) <= min(Br2, shape.Nq)
    for width, k in ((Bd2, d // Bd2), (d % Bd2, 1)):
        for _ in mem.repeat(k if width else 0):  # each slice of that width
            _keys_by_sums(run, Block(0, 0, width), v_held, keys, words)
    for ib in mem.blocks(shape.Nq, Br2, lo=rows, uniform=False):
        outputs(ib)
    return True


def _output_block(run: _Run, ib: Block) -> None:
    """Row block ``ib`` of Phase 2, every slice.  The keys all its rows see,
    ``[lo of its last row, hi of its first row)``, move alike: one uniform loop."""
    mem, shape, Br2, Bd2 = run.mem, run.shape, run.t.Br2, run.t.Bd2
    O = run.arrays[3]
    lo, hi = kv_range(shape, ib.start, ib.stop)
    m0 = kv_range(shape, ib.stop - 1, ib.stop)[0]
    m1 = kv_range(shape, ib.start, ib.start + 1)[1]
    m0, m1 = max(lo, m0), min(hi, m1)
    v_held = min(Bd2, shape.d) <= min(Br2, shape.Nq)  # else a score column held
    for db in mem.blocks(shape.d, Bd2):
        Oc = mem.alloc((ib.size, db.size), 0.0, label="O_ic")
        if hi > lo:
            g = mem.alloc((ib.size,), -np.inf, label="g_i")  # running log-sum-exp
            acc = (Oc, g)
            if m1 > m0:
                _keys(run, acc, ib, db, v_held, lo, m0)
                for kb in mem.blocks(shape.Nkv, 1, lo=m0, hi=m1):  # every row: alike
                    _key(run, acc, ib, kb, db, v_held)
                rest = m1
            else:
                rest = lo
            _keys(run, acc, ib, db, v_held, rest, hi)
            mem.free(g)
        mem.store(Oc, O, ib, db)  # normalised all along (zero where no key is seen)
        mem.free(Oc)


def _key(run: _Run, acc: tuple[FastTile, ...], ib: Block, kb: Block, db: Block,
     v_held: bool) -> None:
    """Key kb into the output tile for the rows [t0, t1) of the block that see it; the
    others take it with weight 0 (as a dense P·V does: a non-finite value reaches them as
    it reaches the reference's rows; no word moves)."""
    mem, shape, C = run.mem, run.shape, run.C
    V, A = run.arrays[2], run.arrays[4]
    a, b = q_range(shape, kb.start, kb.stop)
    col = kb.start % C  # its column in the score ring
    t0, t1 = max(a, ib.start) - ib.start, min(b, ib.stop) - ib.start
    if v_held:
        v = mem.load(V, kb, db, label="V_kc")
        for rc in mem.blocks(t1 - t0, 1):
            w = mem.load(A, ib.start + t0 + rc.start, col, label="a_rk")
            mem.compute(_row_step(t0 + rc.start), *acc, w, v, writes=2)
            mem.free(w)
        if t1 - t0 < ib.size:
            mem.compute(_zero_weight(t0, t1), acc[0], v, writes=1)
        mem.free(v)
        return
    s = mem.load(A, slice(ib.start + t0, ib.start + t1), col, label="A_ik")
    mem.compute(_column_step(t0, t1), s, *acc, writes=3)
    for cc in mem.blocks(db.size, 1):
        w = mem.load(V, kb, db.start + cc.start, label="v_ku")
        mem.compute(_add_column(cc.start, t0, t1), acc[0], s, w, writes=1)
        mem.free(w)
    mem.free(s)


# ---------------------------------------------------------------------- word arithmetic
def _column_update(scale: float, top: int) -> Callable[..., None]:
    """A score column (rows [top, top + h) of the held Q column) += scale·q·w."""
    def fn(s: np.ndarray, q: np.ndarray, w: np.ndarray) -> None:
        s[:, 0] += scale * q[top:top + s.shape[0], 0] * w[0, 0]
    return fn


def _row_update(scale: float, first: int) -> Callable[..., None]:
    """A score row (keys [first, first + n) of the held K column) += scale·k·w."""
    def fn(s: np.ndarray, k: np.ndarray, w: np.ndarray) -> None:
        s[0, :] += scale * k[first:first + s.shape[1], 0] * w[0, 0]
    return fn


def _row_step(r: int) -> Callable[..., None]:
    """Row r takes one score it sees (the word w): the online step, then O[r] += β·v."""
    def fn(O: np.ndarray, g: np.ndarray, w: np.ndarray, v: np.ndarray) -> None:
        p = w.reshape(1).copy()  # a register
        online_lse_step(p, g[r:r + 1], O[r:r + 1])
        O[r] += p[0] * v[0]
    return fn


def _column_step(t0: int, t1: int) -> Callable[..., None]:
    """A key's score column for rows [t0, t1) (all of which see it): the online step; the
    column becomes the weights β."""
    def fn(s: np.ndarray, O: np.ndarray, g: np.ndarray) -> None:
        online_lse_step(s[:, 0], g[t0:t1], O[t0:t1])
    return fn


def _add_column(u: int, t0: int, t1: int) -> Callable[..., None]:
    """O[t0:t1, u] += β·w (the weights held, one streamed V word); the other rows weight 0."""
    def fn(O: np.ndarray, p: np.ndarray, w: np.ndarray) -> None:
        O[t0:t1, u] += p[:, 0] * w[0, 0]
        O[:t0, u] += 0.0 * w[0, 0]
        O[t1:, u] += 0.0 * w[0, 0]
    return fn


def _zero_weight(t0: int, t1: int) -> Callable[..., None]:
    """O[r] += 0·v for the rows outside [t0, t1), which do not see the key."""
    def fn(O: np.ndarray, v: np.ndarray) -> None:
        O[:t0] += 0.0 * v[0]
        O[t1:] += 0.0 * v[0]
    return fn


ALGORITHM = WindowStream()


_STREAM = StreamTiling()
