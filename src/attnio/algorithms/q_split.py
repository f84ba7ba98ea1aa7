"""Q-stationary with a thin pass for split rows: one query block fewer than fits whole, the rows
that do not fit kept on ``d - δ`` output columns and finished by a narrow second pass.

A Q-stationary schedule holds a query block's Q rows and output while K and V stream past; with a
one-word row state (the running log-sum-exp g of :func:`~attnio.algorithms._kernels.online_lse_step`,
the output kept normalised) a block of Br rows holds ``Br·(2d + 1)`` words plus one key and one
value row.  Unmasked, the count is ``Nq·d + 2d·Nkv·T + Nq·d`` with T = ⌈Nq/Br⌉ blocks, and T is
set by M through a ceiling: at M = Nd/2, T = 5 where 4 blocks would need ``N/4·(2d + 1) + 2d``
words, a little more than M.  ``q_split`` takes T blocks anyway and makes up the deficit
``D = G·Br·(2d + 1) + 2d - M`` by holding, for σ rows of each block (``σ·δ·G >= D``), only the
first ``d - δ`` output columns; the last δ columns of those rows come from a thin pass that reads
their Q rows again, every key row and only δ words of each value row.

Layout.  The T main blocks take their rows from two contiguous regions: the *split* rows
``[0, S)`` and the *full* rows ``[S, Nq)``.  Main block i (i < T; ``rows_i`` as in a partition of
Nq rows into blocks of Br, the last one short) holds ``σ_i = min(σ, rows_i)`` split rows
``[i·σ, i·σ + σ_i)`` and ``f_i = rows_i - σ_i`` full rows ``[S + i·(Br - σ), S + i·(Br - σ) + f_i)``,
so ``S = Σ σ_i`` and the full region is a partition into blocks of ``Bf = Br - σ`` (T of them, or
T - 1 when the last main block holds split rows only).  Keeping the split rows together makes each
thin block one contiguous run of rows, and under a causal mask puts the split rows where the fewest
keys are seen.  Unmasked the count does not depend on where the split rows lie.

Schedule (per group of G query heads sharing one K/V head; a row "sees" keys ``[0, hi_r)``,
``hi_r = clip(r + 1 + offset, 0, Nkv)`` causal, all of them unmasked)::

    Main pass  for each main block i:
                   hi = the keys its last row sees (its full rows' last, else its split rows')
                   hi = 0: write zeros (the held columns of its rows); next block
                   per head: load Q of its split rows and of its full rows; O = 0 on the held
                   columns (d - δ for split rows, d for full rows), g = -inf (one word a row)
                   for each key j < hi:
                       load k_j (d words), load v_j (d words)
                       per head, per row r:  s = scale·q_r·k_j (a register)
                           r sees j:  β = 1/(1 + e^(g_r - s)), g_r = logaddexp(g_r, s),
                                      O_r = O_r - β·O_r + β·v_j   (its held columns)
                           else:      O_r += 0·v_j  (weight 0: a non-finite value propagates
                                      as it does in the reference's P·V)
                   write O (the held columns)
    Thin pass  (σ > 0) for each thin block [t0, t1) of the split rows (Br2 rows):
                   hi = the keys row t1 - 1 sees; hi = 0: write zeros on columns [d - δ, d)
                   per head: load Q[t0:t1] (d words a row); O = 0 (δ columns), g = -inf
                   for each key j < hi: load k_j (d), load v_j[d - δ:d] (δ); the same step
                   write O[t0:t1, d - δ:d]

The thin pass recomputes each split row's scores and g over the same keys in the same order: each
pass forms the row's softmax by itself (the weights agree up to the rounding of the dot
products), so both parts of the row are within rounding of the reference.  The per-row loop
runs as one ``mem.compute`` per key and segment: every score is a register used by its own row's
step and dropped (as in stream_tiling's ``_row_step``), so no score tile is held.

Fast memory (``a = min(Br, Nq)``, ``a2 = min(Br2, S)``; main block 0 is the largest)::

    main  G·(a·(2d + 1) - σ·δ) + 2d       (Q and g of every row, O on the held columns, k_j, v_j)
    thin  G·a2·(d + δ + 1) + d + δ        (Q, O on δ columns, g; k_j and δ words of v_j)
    footprint = max(main, thin)           (main alone when σ = 0: then no thin pass)

For a backward pass the main pass also writes g, which is each row's logsumexp once every key
has passed: Nq more writes a head (``cost(..., lse=True)``).

The least M is 4d + 1 (one row, σ = 0).  With σ = 0 this is Q-stationary with a one-word row
state: ``Br·(2d + 1) + 2d`` against q_stationary_min's ``Br·(2d + 3) + 1``.

Closed form (exact; ``tests/algorithms/test_q_split.py``).  Main block i reads its Q rows once, if it sees a
key, and ``2d`` words per key it sees (``[0, hi_i)``, ``kv_range``); thin block t reads ``d`` words
per row (if it sees a key) and ``d + δ`` per key it sees.  Every output word is written once:
``d - δ`` columns of a split row by the main pass and δ by the thin pass (zeros where a block
sees nothing), ``d`` of a full row.  So, for one group::

    reads  = G·d·Σ_i [hi_i > 0]·rows_i + 2d·Σ_i hi_i
           + G·d·Σ_t [hi_t > 0]·rows_t + (d + δ)·Σ_t hi_t
    writes = G·Nq·d

Unmasked: ``hi = Nkv`` everywhere, so ``reads = G·Nq·d + 2d·Nkv·T + G·S·d + (d + δ)·Nkv·T2`` with
``T2 = ⌈S/Br2⌉`` (T2 = 0 when σ = 0).  Causal: main block i's ``hi_i`` is that of its full segment
(its last rows), which is the i-th block of the full region, so Σ_i hi_i and the full rows of the
blocks that see a key are :func:`attnio.core.masks.query_block_sums` of ``Nq - S`` rows in blocks
of Bf at offset ``offset + S``; the blocks that see a key are a suffix (hi grows with i), which
gives their split rows (``σ`` each, ``σ_last`` for the last); when the last main block holds split
rows only (T - 1 full blocks) it adds ``hi(S)`` and, if that is positive, its rows.  The thin
sums are query_block_sums of the S split rows in blocks of Br2.  All O(log N).  Heads: the
group's count times ``batch·heads/G`` (:class:`~attnio.algorithms.base.GroupedAlgorithm`).

At N = 3000, d = 40, M = 60000, unmasked: FlashAttention-2's best is 5 query blocks, 12·N·d =
1 440 000 words; here T = 4 blocks of 750 rows, D = 750·81 + 80 - 60000 = 830, δ = 7, σ = 119,
S = 476 split rows in one thin block: ``Nd + 8·Nd + 476·40 + 47·3000 + Nd = 1 360 040`` words,
11.33·N·d.

Tiling.  For each divisor G of the group whose one-row block fits: the fewest main blocks T0 that
fit whole and a few more (σ = 0; with a mask also powers of two, as q_stationary_min), and
T0 - 1 and T0 - 2 blocks with splitting: ``Br = ⌈Nq/T⌉``, the deficit D, δ on a small ladder in
[1, d - 1], its top (d - 1, d - 2, d - 3: under a causal mask the split rows are the first rows,
the thin pass is cheap and the fewest split rows are best) and around ``√(d·D·T/Nq)`` (where the
unmasked count ``T·D·d/δ + δ·Nkv`` is least), ``σ = ⌈D/(G·δ)⌉`` (kept only if σ < Br) and δ
then lowered to ``⌈D/(G·σ)⌉``; Br2 the largest thin block that fits and that size snapped down
to as many blocks.  The search bounds every candidate in O(1) (``_lower_total``: exact
unmasked and, under a causal mask, where no row is clipped) and scores them exactly (two
O(log N) sums under a mask) in order of that bound until it passes the least count: at
N = 10⁹, causal, d = 128, M = 65536 one of the 39 candidates is scored.  Measured
(``tests/algorithms/test_q_split.py``): unmasked, the least count of every tiling on tiny shapes; with a mask
within 8% of it where every row sees a key (19% where some do not: the least then puts the rows
that see no key in the split region, an uneven partition the search does not list).

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((40, 6)) for _ in range(3))
>>> t = QSplitTiling(Br=20, sigma=5, delta=2, Br2=8)
>>> M = ALGORITHM.footprint(Shape.make(40, 6), t)
>>> r = attnio.run("q_split", Q, K, V, M=M, tiling=t, causal=True)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V, causal=True)).max() < 1e-12)
True
>>> ALGORITHM.cost(Shape.make(40, 6, causal=True), t).io.total == r.io.total
True
>>> from attnio.algorithms import mapper
>>> mapper.search(ALGORITHM, Shape.make(3000, 40), 60000).predicted.total
1360040
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..core import masks
from ..core.checks import check_int
from ..core.errors import ParameterError
from ..core.memory import Block, IOCount, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_visible_hi
from . import _kernels as K_
from .base import GroupedAlgorithm, block_sizes, divisors_upto, prefix_block_keys
from .common import HeadGroup, prefix_block_keys_many
from .protocol import TilingRows

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["ALGORITHM", "QSplit", "QSplitTiling"]


@dataclass(frozen=True)
class QSplitTiling:
    """Main blocks of Br query rows, ``sigma`` of each (the split rows, taken in turn from the
    first rows of the sequence: the module docstring's layout) holding output columns
    [0, d - delta) only; thin blocks of Br2 split rows for columns [d - delta, d); ``group``
    query heads share each streamed K/V row.  ``sigma = 0``: no split, no thin pass."""

    Br: int
    sigma: int = 0
    delta: int = 1
    Br2: int = 1
    group: int = 1


class _Layout(NamedTuple):
    Br: int  # main block rows, clamped to Nq
    T: int  # main blocks
    sigma: int  # split rows of a main block (all but the last)
    sig_last: int  # split rows of the last main block
    S: int  # split rows in all: rows [0, S)
    Bf: int  # full rows of a main block (all but the last): the full region's block size


def _layout(Nq: int, t: QSplitTiling) -> _Layout:
    Br = min(t.Br, Nq)
    T = cdiv(Nq, Br)
    last = Nq - (T - 1) * Br
    sl = min(t.sigma, last)
    return _Layout(Br, T, t.sigma, sl, (T - 1) * t.sigma + sl, Br - t.sigma)


def _split_rows(Nq: int, Br: int, sigma: int) -> int:
    """``_layout(Nq, QSplitTiling(Br, sigma)).S`` for Br <= Nq: the split rows in all."""
    T = -(-Nq // Br)
    return (T - 1) * sigma + min(sigma, Nq - (T - 1) * Br)


def _main_fp(d: int, Br: int, sigma: int, delta: int, G: int) -> int:
    return G * (Br * (2 * d + 1) - sigma * delta) + 2 * d


def _thin_fp(d: int, Br2: int, delta: int, G: int) -> int:
    return G * Br2 * (d + delta + 1) + d + delta


#: δ values tried besides those around the unmasked optimum (clipped to [1, d - 1])
_LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


class QSplit(GroupedAlgorithm[QSplitTiling]):
    name = "q_split"
    summary = ("Q-stationary with one block fewer than fits: the rows over M keep d - δ output "
               "columns, a thin pass (δ columns of V) finishes them")
    Tiling = QSplitTiling
    supports_backward = True  # writes g, each row's logsumexp (Nq words a head), when asked

    def footprint(self, shape: Shape, tiling: QSplitTiling) -> int:
        # _layout, _main_fp, _thin_fp and _split_rows inline (the search asks for every candidate)
        d, t, Nq = shape.d, tiling, shape.Nq
        G, sigma, delta = t.group, t.sigma, t.delta
        Br = t.Br if t.Br < Nq else Nq
        main = G * (Br * (2 * d + 1) - sigma * delta) + 2 * d
        if sigma == 0:
            return main
        T1 = -(-Nq // Br) - 1
        last = Nq - T1 * Br
        S = T1 * sigma + (sigma if sigma < last else last)
        thin = G * (t.Br2 if t.Br2 < S else S) * (d + delta + 1) + d + delta
        return main if main > thin else thin

    def min_M(self, shape: Shape) -> int:
        return _main_fp(shape.d, 1, 0, 0, 1)

    def validate_tiling(self, shape: Shape, tiling: QSplitTiling) -> None:
        check_int("tiling.sigma", tiling.sigma, minimum=0)
        super().validate_tiling(shape, dataclasses.replace(tiling, sigma=1))
        if tiling.sigma and not tiling.delta < shape.d:
            raise ParameterError(f"tiling.delta must be below d = {shape.d} when sigma > 0, got "
                                 f"{tiling.delta}", param="tiling")
        if tiling.sigma >= min(tiling.Br, shape.Nq):
            raise ParameterError(f"tiling.sigma must be below min(Br, Nq) = "
                                 f"{min(tiling.Br, shape.Nq)}, got {tiling.sigma}",
                                 param="tiling")

    def steps(self, shape: Shape, tiling: QSplitTiling) -> int:
        L = _layout(shape.Nq, tiling)
        thin = cdiv(L.S, tiling.Br2) if tiling.sigma else 0
        return (L.T + thin) * shape.Nkv

    # ------------------------------------------------------------------ tilings
    def candidate_tilings(self, shape: Shape, M: int) -> list[QSplitTiling]:
        return [QSplitTiling(*c) for c in self._candidates(shape, M)]

    def _candidates(self, shape: Shape, M: int) -> list[tuple[int, int, int, int, int]]:
        """The candidates as (Br, sigma, delta, Br2, group) tuples (the tiling's fields in
        order), in :meth:`candidate_tilings`' order."""
        d, Nq = shape.d, shape.Nq
        out: list[tuple[int, int, int, int, int]] = []
        for G in divisors_upto(shape.group, max(0, (M - 2 * d) // (2 * d + 1))):
            br_max = min(Nq, (M - 2 * d) // (G * (2 * d + 1)))
            if br_max < 1:
                continue
            t0 = cdiv(Nq, br_max)
            out.extend((Br, 0, 1, 1, G)
                       for Br in block_sizes(Nq, br_max, more=3, powers=bool(shape.causal)))
            if d >= 2:
                for T in range(max(1, t0 - 2), t0):
                    out.extend(self._split_tilings(shape, M, T, G))
        return out

    def _tiling_rows(self, shape: Shape, M: int) -> TilingRows[QSplitTiling]:
        """The candidates as rows (:class:`~attnio.algorithms.protocol.TilingRows`) for the
        mapper's search: their footprints and bounds over numpy (:meth:`_row_footprints`,
        :meth:`_row_lowers`), a tiling made only for the rows scored."""
        rows = np.array(self._candidates(shape, M), dtype=np.int64).reshape(-1, 5)
        return TilingRows(rows, QSplitTiling, functools.partial(self._row_footprints, shape),
                          self._row_lowers(shape))

    @staticmethod
    def _row_footprints(shape: Shape, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """:meth:`footprint` of each row (Br, sigma, delta, Br2, group), over numpy (every
        candidate's footprint is within a few times M <= 2^60: no int64 overflow)."""
        d, Nq = shape.d, shape.Nq
        Br, sigma, delta, Br2, G = (rows[:, i] for i in range(5))
        Br = np.minimum(Br, Nq)
        main = G * (Br * (2 * d + 1) - sigma * delta) + 2 * d
        T1 = -(-Nq // Br) - 1
        S = T1 * sigma + np.minimum(sigma, Nq - T1 * Br)
        thin = G * np.minimum(Br2, S) * (d + delta + 1) + d + delta
        out: npt.NDArray[np.int64] = np.where(sigma == 0, main, np.maximum(main, thin))
        return out

    def _row_lowers(self, shape: Shape
                    ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]] | None:
        """:meth:`_lower_total` over rows (Br, sigma, delta, Br2, group) at once, float64 (the
        same bounds within float rounding, which the mapper's margin covers): under a causal
        mask :meth:`_lower_totals`' arrays, unmasked its closed form; None where
        :meth:`_lower_total` is."""
        if self._lower_total(shape) is None:
            return None
        if shape.causal:
            return self._masked_lowers(shape)
        d, Nq, Nkv, n = shape.d, shape.Nq, shape.Nkv, shape.n_heads

        def plain(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            Br, sigma, delta, Br2, G = (rows[:, i] for i in range(5))
            Br = np.minimum(Br, Nq)
            T = -(-Nq // Br)
            S = (T - 1) * sigma + np.minimum(sigma, Nq - (T - 1) * Br)
            Gf = G.astype(np.float64)
            reads = Gf * float(d * Nq) + T.astype(np.float64) * float(2 * d * Nkv)
            thin = ((sigma > 0) & (S > 0), Gf * float(d) * S
                    + (d + delta).astype(np.float64) * (-(-S // np.maximum(Br2, 1))) * float(Nkv))
            reads = reads + np.where(thin[0], thin[1], 0.0)
            return (n // G).astype(np.float64) * (reads + Gf * float(Nq * d))
        return plain

    @staticmethod
    def _split_tilings(shape: Shape, M: int, T: int, G: int
                       ) -> list[tuple[int, int, int, int, int]]:
        """T main blocks (fewer than fit whole), their deficit made up by split rows: as
        (Br, sigma, delta, Br2, group) tuples."""
        d, Nq = shape.d, shape.Nq
        Br = cdiv(Nq, T)
        D = _main_fp(d, Br, 0, 0, G) - M
        if D <= 0:
            return []
        best = math.isqrt(d * D * T // Nq)
        deltas = {x for x in _LADDER if x < d} | {x for x in (d - 1, d - 2, d - 3) if x >= 1}
        deltas.update(x for x in range(best - 1, best + 3) if 1 <= x < d)
        out: list[tuple[int, int, int, int, int]] = []
        append = out.append  # (cdiv and _split_rows inline: a few hundred with grouped heads)
        T1 = -(-Nq // Br) - 1  # _split_rows: (blocks - 1)·σ + min(σ, the last block's rows)
        last = Nq - T1 * Br
        for sigma in sorted({-(-D // (G * x)) for x in deltas}):
            if sigma >= Br:
                continue
            delta = -(-D // (G * sigma))  # the least δ for these split rows (<= the one tried)
            S = T1 * sigma + (sigma if sigma < last else last)
            br2 = (M - d - delta) // (G * (d + delta + 1))
            if br2 > S:
                br2 = S
            if br2 < 1:
                continue
            snap = -(-S // -(-S // br2))  # the least size with as many thin blocks (<= br2)
            if snap < br2:
                append((Br, sigma, delta, snap, G))
            append((Br, sigma, delta, br2, G))
        return out

    def _lower_total(self, shape: Shape) -> Callable[[QSplitTiling], float] | None:
        """A bound on the count of every tiling in O(1) (the search's branch and bound): a
        group writes ``G·Nq·d`` and reads ``G·d·Nq + 2d·T·Nkv`` in the main pass unmasked, and
        under a causal mask at least ``G·d·rows1`` of Q (``rows1`` rows see a key) and
        ``2d·Σ_i hi_i`` of K and V, the main blocks' full rows being blocks of Bf consecutive
        rows from row S (:func:`prefix_block_keys`; where rows are clipped, ``Σ_i hi_i >= 0``);
        the thin pass, when there is one, reads ``G·d·S`` of Q (under the mask: where every row
        sees a key, offset >= 0) and ``(d + δ)·Σ_t hi_t`` (rows [0, S) in blocks of Br2)."""
        if shape.block_mask is not None or (shape.causal and shape.window is not None):
            return None
        d, Nq, Nkv, n = shape.d, shape.Nq, shape.Nkv, shape.n_heads
        causal, off = shape.causal, shape.offset
        rows1 = masks.row_counts(shape).rows1

        def lower(t: QSplitTiling) -> float:
            G, sigma = t.group, t.sigma
            Br = t.Br if t.Br < Nq else Nq  # _layout's T, S and Bf, inline
            T = -(-Nq // Br)
            S = (T - 1) * sigma + min(sigma, Nq - (T - 1) * Br)
            if not causal:
                reads: float = G * d * Nq + 2 * d * T * Nkv
                if sigma and S:
                    reads += G * d * S + (d + t.delta) * cdiv(S, t.Br2) * Nkv
            else:
                reads = G * d * rows1 + 2 * d * (
                    prefix_block_keys(Nkv, off + S, Nq - S, Br - sigma) or 0)
                if sigma and S:
                    reads += (G * d * S * (off >= 0) + (d + t.delta)
                              * (prefix_block_keys(Nkv, off, S, min(t.Br2, S)) or 0))
            return (n // G) * (reads + G * Nq * d)
        return lower

    def _lower_totals(self, shape: Shape
                      ) -> Callable[[list[QSplitTiling]], npt.NDArray[np.float64]] | None:
        """:meth:`_lower_total` of a list of tilings in one call, numpy over the list (the
        search bounds every candidate: a few hundred with grouped heads), in float64: the same
        bounds within float rounding (the mapper's margin covers it; the test holds the two
        together).  :func:`prefix_block_keys` inline: None (bounded by 0) where rows are
        clipped.  Under a causal mask only: unmasked ``_lower_total`` is a few integer
        operations a tiling."""
        arrays = self._masked_lowers(shape)
        if arrays is None:
            return None

        def lowers(ts: list[QSplitTiling]) -> npt.NDArray[np.float64]:
            return arrays(np.array([(t.Br, t.sigma, t.delta, t.Br2, t.group) for t in ts],
                                   dtype=np.int64).reshape(-1, 5))
        return lowers

    def _masked_lowers(self, shape: Shape
                       ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]] | None:
        """:meth:`_lower_totals` over rows (Br, sigma, delta, Br2, group); None unmasked or
        where :meth:`_lower_total` is None."""
        if self._lower_total(shape) is None or not shape.causal:
            return None  # (unmasked the bound one tiling at a time is cheaper than numpy's)
        d, Nq, Nkv, n, off = shape.d, shape.Nq, shape.Nkv, shape.n_heads, shape.offset
        rows1 = masks.row_counts(shape).rows1

        def keys(o: npt.NDArray[np.int64], m: npt.NDArray[np.int64],
                 B: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            """:func:`prefix_block_keys` (Nkv, o, m, B) over arrays, 0 where it is None."""
            keys = prefix_block_keys_many(Nkv, o, m, B)  # (finite or NaN: blocks of >= 1 row)
            keys[np.isnan(keys)] = 0.0
            return keys

        def arrays(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            Br, sigma, delta, Br2, G = (rows[:, i] for i in range(5))
            Br = np.minimum(Br, Nq)
            T = -(-Nq // Br)
            S = (T - 1) * sigma + np.minimum(sigma, Nq - (T - 1) * Br)
            Gf, thin = G.astype(np.float64), (sigma > 0) & (S > 0)
            reads = Gf * (d * rows1) + 2 * d * keys(off + S, Nq - S, Br - sigma)
            more = (Gf * d * S * float(off >= 0) + (d + delta).astype(np.float64)
                    * keys(np.full_like(S, off), S, np.minimum(Br2, S)))
            reads = reads + np.where(thin, more, 0.0)
            return (n // G).astype(np.float64) * (reads + Gf * (Nq * d))
        return arrays

    # ------------------------------------------------------------------ counts
    def _group_count(self, shape: Shape, tiling: QSplitTiling) -> IOCount:
        """The module docstring's closed form, one group of ``tiling.group`` heads."""
        d, G, Nkv, t = shape.d, tiling.group, shape.Nkv, tiling
        L = _layout(shape.Nq, t)
        off = shape.offset if shape.causal else 0
        full = masks.query_block_sums(shape.Nq - L.S, Nkv, L.Bf, 1, off + L.S, None,
                                      shape.causal)
        rows, width = full.size_seen, full.width
        if full.blocks == L.T:  # every main block has full rows; those that see a key: a suffix
            rows += L.sigma * full.seen - (L.sigma - L.sig_last) * (full.seen > 0)
        else:  # the last main block holds its split rows only
            rows += L.sigma * full.seen
            h = kv_visible_hi(shape, L.S)
            rows += L.sig_last * (h > 0)
            width += h
        reads = G * d * rows + 2 * d * width
        if t.sigma:
            thin = masks.query_block_sums(L.S, Nkv, t.Br2, 1, off, None, shape.causal)
            reads += G * d * thin.size_seen + (d + t.delta) * thin.width
        return IOCount(reads=reads, writes=G * shape.Nq * d)

    # ------------------------------------------------------------------ the schedule
    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: QSplitTiling, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head: the main pass, then the
        thin pass over the split rows.  ``heads.lse`` (optional) receives each row's
        logsumexp, the main pass's g (Nq more writes a head)."""
        d = shape.d
        L = _layout(shape.Nq, tiling)
        dm = d - tiling.delta if tiling.sigma else d  # the columns a split row holds in main
        main = functools.partial(self._main_block, mem, heads, L, dm, shape, scale)
        if shape.causal and mem.bulk:
            self._main_bulk(mem, heads, L, dm, shape, main)
        else:
            for qb in mem.blocks(shape.Nq, L.Br, uniform=not shape.causal):
                main(qb)
        if not tiling.sigma:
            return
        cols = slice(dm, d)
        # thin block [t0, t1) sees keys [0, clip(t1 + offset, 0, Nkv)): a band (a masked bulk
        # count runs each run of alike blocks once, the keys with the run's visits)
        band = masks.Band(L.S, shape.Nkv, None, shape.offset) if shape.causal else None
        thin = dataclasses.replace(heads, lse=None)  # the logsumexp is the main pass's
        for tb in mem.blocks(L.S, tiling.Br2, band=band):
            hi = kv_visible_hi(shape, tb.stop)
            if hi <= 0:
                K_.store_empty_rows(mem, heads.Os, tb, d, cols=cols)
                continue
            _stream(mem, thin, [(tb, cols)], hi, cols, shape, scale, band=band)

    @staticmethod
    def _segments(L: _Layout, dm: int, d: int, qb: Block) -> list[tuple[Block, slice]]:
        """Main block ``qb``'s row segments: its split rows (``dm`` columns held) and its full
        rows (``d``), the empty ones left out."""
        i = qb.index
        s0, f0 = i * L.sigma, L.S + i * L.Bf
        ns = min(L.sigma, qb.size)
        segs = [(Block(i, s0, s0 + ns), slice(0, dm)),
                (Block(i, f0, f0 + qb.size - ns), slice(0, d))]
        return [(b, c) for b, c in segs if b.size > 0]

    def _main_block(self, mem: TwoLevelMemory, heads: HeadGroup, L: _Layout, dm: int,
                    shape: Shape, scale: float, qb: Block, keys: bool = True) -> None:
        """Main block ``qb`` (without its key loop when not ``keys``: a masked bulk count runs
        the keys of alike blocks apart)."""
        d = shape.d
        segs = self._segments(L, dm, d, qb)
        hi = kv_visible_hi(shape, segs[-1][0].stop)
        if hi <= 0:  # no row of the block sees a key: its output is 0
            for b, c in segs:
                K_.store_empty_rows(mem, heads.Os, b, d, heads.lse, cols=c)
            return
        _stream(mem, heads, segs, hi if keys else 0, slice(0, d), shape, scale)

    def _main_bulk(self, mem: TwoLevelMemory, heads: HeadGroup, L: _Layout, dm: int,
                   shape: Shape, main: Callable[..., None]) -> None:
        """The main pass in masked bulk count mode.  The whole blocks but the last move alike
        words but for their keys: block i sees ``clip(S + (i + 1)·Bf + offset, 0, Nkv)`` of
        them, so those that see none, those that see all and those in between are three runs,
        each run once; the keys of the middle run, their sum in closed form, run once more as
        one uniform loop with stand-ins for the held tiles (the same words, none moved).  The
        last blocks are walked."""
        Qs, K, V = heads.Qs, heads.K, heads.V
        Nq, Nkv, Br, Bf, d = shape.Nq, shape.Nkv, L.Br, L.Bf, shape.d
        n = min(Nq // Br, L.T - 1)  # whole blocks with both segments at their full size
        c = L.S + shape.offset
        ie = max(0, min(n, -c // Bf))  # c + (i + 1)·Bf <= 0: no key
        isat = max(ie, min(n, -(-(Nkv - c) // Bf) - 1))  # c + (i + 1)·Bf >= Nkv: every key
        for i0, count, keys in ((0, ie, True), (ie, isat - ie, False), (isat, n - isat, True)):
            if count <= 0:
                continue
            for _ in mem.blocks(count, 1):  # the main loop's steps, one per block
                main(Block(i0, i0 * Br, (i0 + 1) * Br), keys)
            if keys:
                continue
            seen = count * c + Bf * (count * (2 * i0 + count + 1) // 2)  # Σ (c + (i + 1)·Bf)
            segs = self._segments(L, dm, d, Block(i0, i0 * Br, (i0 + 1) * Br))
            held = [mem.alloc(shp, label=lab) for _ in Qs for b, col in segs
                    for shp, lab in (((b.size, d), "Q_i"), ((b.size, col.stop - col.start), "O_i"),
                                     ((b.size,), "g_i"))]
            for kb in mem.blocks(seen, 1):
                k = mem.load(K, kb, label="k_j")
                v = mem.load(V, kb, slice(0, d), label="v_j")
                mem.free(k, v)
            mem.free(*held)
        for qb in mem.blocks(Nq, Br, lo=n * Br, uniform=False):
            main(qb)


def _stream(mem: TwoLevelMemory, heads: HeadGroup, segs: list[tuple[Block, slice]], hi: int,
            vcols: slice, shape: Shape, scale: float, *, band: masks.Band | None = None) -> None:
    """Row segments ``segs`` (rows, held output columns) of every head of ``heads`` against
    keys [0, hi): Q rows, O on the held columns and g held; each key row and the ``vcols`` words
    of its value row streamed; O written on the held columns (and g, each row's logsumexp, to
    ``heads.lse`` when given).  ``band``: the mask's band of the enclosing loop (``hi`` its
    range)."""
    Qs, K, V, Os, lse = heads.Qs, heads.K, heads.V, heads.Os, heads.lse
    per_head = []
    for Q in Qs:
        held = []
        for b, c in segs:
            q = mem.load(Q, b, label="Q_i")
            o = mem.alloc((b.size, c.stop - c.start), 0.0, label="O_i")
            g = mem.alloc((b.size,), -np.inf, label="g_i")
            held.append((b, c, q, o, g))
        per_head.append(held)
    for kb in mem.blocks(shape.Nkv, 1, hi=hi, band=band):
        k = mem.load(K, kb, label="k_j")
        v = mem.load(V, kb, vcols, label="v_j")
        for held in per_head:
            for b, c, q, o, g in held:
                mem.compute(_key_step(shape, b.start, kb.start, scale, c.start - vcols.start),
                            o, g, q, k, v, writes=2)
        mem.free(k, v)
    for h, (held, O) in enumerate(zip(per_head, Os)):
        for b, c, q, o, g in held:
            mem.store(o, O, b, c)
            if lse is not None:
                mem.store(g, lse[h], b)
            mem.free(q, o, g)


def _key_step(shape: Shape, r0: int, j: int, scale: float, c0: int) -> Callable[..., None]:
    """Key j into rows [r0, r0 + n) of a segment: the rows that see it (a suffix, ``top`` on)
    take the online step (their scores registers), the others weight 0; O holds the value
    row's columns from ``c0`` of the loaded ``v``."""
    def fn(O: np.ndarray, g: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        n = O.shape[0]
        top = min(n, max(0, j - shape.offset - r0)) if shape.causal else 0
        w = v[0, c0:c0 + O.shape[1]]
        s = scale * (q[top:] @ k[0])  # one score a row, each a register
        K_.online_lse_step(s, g[top:], O[top:])
        O[top:] += s[:, None] * w
        if top:
            O[:top] += 0.0 * w
    return fn


ALGORITHM = QSplit()
