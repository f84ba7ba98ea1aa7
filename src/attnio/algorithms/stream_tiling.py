"""Stream tiling: square tiling's two blocked matmuls with Smith & van de Geijn's word streaming
(arXiv 1702.02017), the softmax formed online in the second phase with one word per row.

The small-cache regime (M < d²/4) writes the scores once and treats Q·Kᵀ and P·V as two blocked
matmuls (:mod:`~attnio.algorithms.square_tiling`).  There each phase holds three tiles (the product
tile and one slab of each operand), and Phase 1 holds the running row max and sum besides.  Smith
& van de Geijn's matmul schedule holds the product tile, one column of one operand, and streams
the other operand one word at a time: footprint ``ab + a + 1`` for an a x b tile, about
2·mnk/√M words moved.  Here both phases are streamed, and the per-row state is put where it costs
least:

* Phase 1 writes the **raw** (scaled) scores a row sees, and keeps no row state at all;
* Phase 2 forms the softmax **online** with **one word per row**, the running log-sum-exp g: the
  output tile is kept normalised (a convex combination of the value rows seen), and each new
  score s enters with weight ``β = 1/(1 + e^(g - s))``: ``O <- O - β·O + β·v``,
  ``g <- logaddexp(g, s)``.  No maximum, no row sum, no log-sum-exp is written or read.

Schedule (a row "sees" keys [0, hi_r): all of them unmasked; ``hi_r = clip(r + 1 + Nkv - Nq, 0,
Nkv)`` bottom-right causal, ``clip(r + 1, 0, Nkv)`` top-left)::

    Phase 1  for each query block i (Br rows), each key block j (Bc keys) some row of i sees:
                 the tile, held as its visible lines (zero)          (<= Br x Bc words)
                 (only the rows of i that see a key of j, and the keys of j some row sees)
                 order "tile", Br <= Bc:  for l in 1..d: load Q[i, l] (<= Br words, a column)
                                              for each key c of j: load K[c, l] (1 word)
                                                  column c (the rows that see c) += scale·Q[., l]·K[c, l]
                 order "tile", Br > Bc:   for l in 1..d: load K[j, l] (<= Bc words, a column)
                                              for each row r of i: load Q[r, l] (1 word)
                                                  row r (the keys of j it sees) += scale·K[., l]·Q[r, l]
                 order "row":   Q_i (its rows that see a key) loaded once per query block;
                                for each key c of j, l in 1..d: load K[c, l] (1 word)
                                    column c += scale · Q_i[., l] · K[c, l]
                 write each line where it lies in A (the scores the rows see, nothing else)
    Phase 2  for each slice group (columns [0, d1) with Br2, Bd2; then [d1, d) with Br2b, Bd2b;
             one group of all d columns when d1 is None), each query block i (Br2 rows; Br2b in
             group 2), each output slice c (Bd2 columns; Bd2b in group 2; the group's last
             slice narrower if its width does not split evenly):
                 O = 0 (Br2 x Bd2), g = -inf (Br2)
                 for each key k that some row of the block sees (rows [top_k, Br2) see it):
                     Bd2 <= Br2: load V[k, c] (Bd2 words); for each row r that sees k:
                                 load A[r, k] (1 word); online step of row r; O[r] += β·V[k, c]
                     Bd2 > Br2:  load A[top_k:, k] (a score column); online step of those rows;
                                 for each column u of c: load V[k, u] (1 word), O[:, u] += β·V[k, u]
                 write O

A causal mask therefore skips every tile no row sees in Phase 1, reads in a tile only the Q rows
and K keys that meet a visible score, writes exactly the Σ_r hi_r scores the rows see, and
Phase 2 reads exactly those, once per output slice.

Fast memory (a = min(Br, Nq), b = min(Bc, Nkv); per slice group g of w_g columns,
a'_g = min(row block, Nq), c_g = min(slice width, w_g))::

    Phase 1   a·b + min(a, b) + 1      (order "tile": the tile, one column, one word)
              a·d + a·b + 1            (order "row": Q_i, the tile, one word)
    Phase 2   a'_g·c_g + min(a'_g, c_g) + a'_g + 1    (the O tile, a V row chunk or a score
                                                       column, one word, g)
    footprint = max(Phase 1, Phase 2 of each group);  the least M is 4 (every side 1).

Two slice groups: d need not split evenly into slices of the best width, and a narrower slice
fits a taller row block (fewer blocks, fewer V reads).  At M = 200, d = 40 the best one-group
Phase 2 is 17 x 10 (T_d = 4: 4 + 40/17 = 6.35 words per Nq·Nkv); slices 14, 13, 13 with row
blocks 12 and 13 take 3 + 14/12 + 26/13 = 6.17 (``tests/algorithms/test_stream_tiling.py``).

Square tiling with the score spill holds ``ab + Bd·(a + b) + 2a`` (Phase 1: m and l) and
``a'c + Bk2·(a' + c) + a'`` (Phase 2: g); at Bd = Bk2 = 1 the streamed phases hold
``3a + b - min(a, b) - 1`` and ``max(a', c) - 1`` fewer words, and move ``Nq + T_d·Nq`` fewer (no
log-sum-exp written or read).  At N = 300, d = 40, M = 200 the least count takes 12 x 15 score
tiles (193 words; 1/Br + 1/Bc = 0.150 against 2/√M = 0.141) where square tiling takes 10 x 15
(195 words with its slabs and row state; 0.167).

Closed form (exact; ``tests/algorithms/test_stream_tiling.py``).  Query block i (Br rows in Phase 1, Br2 in
Phase 2) sees keys ``[0, hi_i)`` (hi of its last row).  A Phase-1 tile (i, j) is computed iff some
row of i sees a key of j; it reads, once per head-dimension index, the rows of i that see key j's
first key and the keys of j below hi_i, and writes the scores its rows see.  Over the tiles, the
K words read are the keys each query block sees, ``d·Σ_i hi_i``; the Q words are, per key block j,
the rows that see its first key, ``d·R`` with ``R = Σ_j q_j`` (``q_j = Nq - clip(c0_j - off, 0,
Nq)``, :func:`attnio.core.masks.key_block_sums` with single rows); order "row" reads each row
that sees a key once, ``d·(Nq - z)``, z = the rows that see none.  Phase-2 block i' reads, per
output slice, every score its rows see once, and every word of ``V[0:hi'_i]`` of the slice's
columns once; a slice group g of w_g columns in slices of c_g with row blocks a_g thus reads
``⌈w_g/c_g⌉·H`` scores (each of its slices, every row block: H) and ``w_g·Σ_i' hi'_i(a_g)`` V
words (each block i', its slices' widths summing to w_g), and writes its Nq·w_g outputs once.
With ``H = Σ_r hi_r`` (Nq·Nkv unmasked), summed over the groups (one: w = d, c = Bd2,
a = Br2; two: w = d1 and d - d1)::

    Phase 1 reads   d·R + d·Σ_i hi_i                  order "tile"
                    d·(Nq - z) + d·Σ_i hi_i           order "row"
    Phase 1 writes  H
    Phase 2 reads   Σ_g ⌈w_g/c_g⌉·H + w_g·Σ_i' hi'_i(a_g)
    Phase 2 writes  Nq·d

Unmasked (Nq x Nkv): ``⌈Nkv/Bc⌉·Nq·d + ⌈Nq/Br⌉·Nkv·d + Nq·Nkv`` (order "tile") and
``Σ_g ⌈w_g/c_g⌉·Nq·Nkv + ⌈Nq/a_g⌉·Nkv·w_g + Nq·d`` (one group: ``T_d·Nq·Nkv + ⌈Nq/Br2⌉·Nkv·d
+ Nq·d``, T_d = ⌈d/Bd2⌉): with every side √M, ``4·Nq·Nkv·d/√M + Nq·Nkv + Nq·d``, the two
blocked matmuls' ideal.  The sums are O(log N) (:func:`attnio.core.masks.covered_sums`;
H is its sum over blocks of one row).  Heads are independent: the count of one head times
``batch·heads`` (grouped-query attention shares no tile).  Count mode is bulk: with a mask, the
query blocks fall into classes that move alike words (those that see no key, those that see
every key, and in between one class per phase of the diagonal modulo Bc in Phase 1, one in
Phase 2), each run once, the keys its blocks see entirely as one uniform loop whose length is a
sum in closed form; only the few blocks where the diagonal meets an edge are walked
(``count_walk``), so a causal count at N = 10⁹ costs milliseconds.

Tiling.  The phases are not coupled (Phase 2 needs no Phase-1 block size), so each is searched by
itself and the best three of each are combined: the module declares the phases
(:meth:`StreamTiling._phases`), the mapper searches them
(:func:`attnio.algorithms.mapper.phase_best`).  Candidates: for each side on a geometric ladder
(:func:`attnio.algorithms.common.ladder`) the largest other side that fits (in closed
form), then the first side grown back to the most that fits, each also snapped down to the least
size with the same number of blocks; order "row" with the fewest query blocks and a few more;
with a mask, row blocks that meet the diagonal where it enters (z, z/2, z/3, z/4 for the z rows
that see no key); every side within a factor 2 of √M with the largest other side (at most 96).
All are scored exactly, O(log N) each with a mask, except the near-√M band, of which the 8 of
least unmasked count are (a cut the phases declare, ``keep``).  Phase 2 then adds, for T slices
with T within 1 of the best three's, two slice groups (:meth:`StreamTiling._two_groups`, the
phases' ``seed``): narrower slices with taller row blocks and wider ones, or T - 1 or T - 2 equal
slices and a remainder with a row block of its own, at widths near ⌈d/T⌉ or that fit a few row
blocks fewer or more; each group takes its best row block (:func:`_group_rows`), scored
exactly.  A cold causal plan at N = 10⁹ spends about 1.4 ms here
(0.1 ms of it the two groups).  Measured: the least closed form over every tiling, two-group
ones included, on random tiny shapes (the test: Nq, Nkv <= 10, d <= 4, both masks, 5% allowed
with a mask for Phase 1; Phase 2 alone was the least on 3000 shapes with Nq, Nkv <= 14, d <= 8);
Phase 2 within 0.07% of the least over every split d1 and every slice width (each group with
:func:`_group_rows`' row block) on the held-out grid's shapes with M < 4d²; and no worse than a
dense search of both phases (every Br and Br2 with the largest other side, and a few smaller
ones) on 40 held-out shapes (one slice group; the two-group candidates only add).

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((30, 8)) for _ in range(3))
>>> r = attnio.run("stream_tiling", Q, K, V, M=60, causal=True)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V, causal=True)).max() < 1e-12)
True
>>> ALGORITHM.cost(Shape.make(30, 8, causal=True), r.tiling).io.total == r.io.total
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_visible_hi
from . import mapper
from ._kernels import online_lse_step
from .base import Algorithm, prefix_block_keys
from .common import ladder, prefix_block_keys_many, store_lines
from .protocol import Phase, Phases

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["ALGORITHM", "StreamTiling", "StreamTilingTiling"]

ORDERS = ("tile", "row")
_OFFER = 3  # best of each phase combined into the candidate tilings (Phase.offer)
_BAND = 8  # sides near √M scored exactly with a mask, ranked by the unmasked count (Phase.keep)


@dataclass(frozen=True)
class StreamTilingTiling:
    """Phase 1: score tiles Br x Bc (``order`` "tile": one column held, the other operand
    streamed; "row": Q_i resident, K streamed); Phase 2: output tiles Br2 x Bd2 over the first
    ``d1`` output columns (every column when ``d1`` is None), and Br2b x Bd2b over the other
    ``d - d1`` (a second slice group: set all three or none)."""

    Br: int
    Bc: int
    Br2: int
    Bd2: int
    order: str = "tile"
    d1: int | None = None
    Br2b: int | None = None
    Bd2b: int | None = None

    def __repr__(self) -> str:  # the second group only when there is one
        more = ("" if self.d1 is None and self.Br2b is None and self.Bd2b is None
                else f", d1={self.d1!r}, Br2b={self.Br2b!r}, Bd2b={self.Bd2b!r}")
        return (f"StreamTilingTiling(Br={self.Br!r}, Bc={self.Bc!r}, Br2={self.Br2!r}, "
                f"Bd2={self.Bd2!r}, order={self.order!r}{more})")


def _groups(d: int, t: StreamTilingTiling) -> tuple[tuple[int, int, int, int], ...]:
    """Phase 2's slice groups as (first column, columns, row block, slice width)."""
    if t.d1 is None or t.Br2b is None or t.Bd2b is None:
        return ((0, d, t.Br2, t.Bd2),)
    return ((0, t.d1, t.Br2, t.Bd2), (t.d1, d - t.d1, t.Br2b, t.Bd2b))


def _fp1(d: int, a: int, b: int, order: str) -> int:
    if order == "row":
        return a * d + a * b + 1
    return a * b + min(a, b) + 1


def _fp2(a: int, c: int) -> int:
    return a * c + min(a, c) + a + 1


@functools.lru_cache(maxsize=4096)
def _sums(Nq: int, Nkv: int, B: int, S: int, off: int) -> masks.BlockSums:
    """:func:`masks.covered_sums` of the B-row blocks against S-key blocks (causal), cached: the
    search scores the same (B, S) pairs again when it combines the phases."""
    return masks.covered_sums(Nq, Nkv, B, S, off)


@functools.lru_cache(maxsize=1024)
def _key_sums(Nq: int, Nkv: int, Bc: int, off: int) -> masks.BlockSums:
    """:func:`masks.key_block_sums` of the Bc-key blocks against single rows: ``width`` is
    Σ_j (the rows that see key block j's first key), O(log N), cached."""
    return masks.key_block_sums(Nq, Nkv, 1, Bc, off)


def _hi_sum(Nq: int, Nkv: int, B: int, off: int) -> int:
    """Σ_i hi_i over the query blocks of B rows under a causal mask (no window): the keys
    each block sees, ``_sums(Nq, Nkv, B, 1, off).width``.  Where no row is clipped
    (``0 <= off <= Nkv - Nq``) block i < T - 1 sees ``(i + 1)·B + off`` keys and the last
    ``Nq + off``, so the sum is ``B·T(T - 1)/2 + (T - 1)·off + Nq + off`` in O(1) (the search
    asks it of every row block it scores); else the O(log N) sum."""
    if 0 <= off <= Nkv - Nq:
        T = -(-Nq // B)
        return B * T * (T - 1) // 2 + (T - 1) * off + Nq + off
    return _sums(Nq, Nkv, B, 1, off).width


def _seen(shape: Shape) -> int:
    """Σ_r hi_r: the scores the rows see (Nq·Nkv unmasked), O(log N)."""
    if not shape.causal:
        return shape.Nq * shape.Nkv
    return _sums(shape.Nq, shape.Nkv, 1, 1, shape.offset).size_width


def _phase1(shape: Shape, Br: int, Bc: int, order: str) -> IOCount:
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    if not shape.causal:
        q = Nq * d if order == "row" else cdiv(Nkv, Bc) * Nq * d
        return IOCount(q + cdiv(Nq, Br) * Nkv * d, Nq * Nkv)
    if order == "row":  # the rows that see a key, once
        q = Nq - max(0, min(Nq, -shape.offset))
    else:  # per key block, the rows that see its first key
        q = _key_sums(Nq, Nkv, Bc, shape.offset).width
    k = _sums(Nq, Nkv, Br, 1, shape.offset).width  # per query block, the keys it sees
    return IOCount((q + k) * d, _seen(shape))


def _phase2(shape: Shape, Br2: int, Bd2: int, w: int) -> IOCount:
    """One slice group: w output columns in slices of Bd2, row blocks of Br2."""
    Nq, Nkv = shape.Nq, shape.Nkv
    Td = cdiv(w, Bd2)
    if not shape.causal:
        return IOCount(Td * Nq * Nkv + cdiv(Nq, Br2) * Nkv * w, Nq * w)
    s = _sums(Nq, Nkv, Br2, 1, shape.offset)  # width-1 slices: w_i = hi_i
    return IOCount(Td * _seen(shape) + w * s.width, Nq * w)


def _phase1_total(shape: Shape, c: tuple[int, ...]) -> int:
    """``_phase1(shape, Br, Bc, ORDERS[o]).total`` of a search candidate (Br, Bc, o), the
    closed form inline (the search scores a few hundred)."""
    if shape.causal:
        Nq, Nkv, off = shape.Nq, shape.Nkv, shape.offset
        if c[2]:  # order "row": the rows that see a key, once
            q = Nq - max(0, min(Nq, -off))
        else:  # per key block, the rows that see its first key
            q = _key_sums(Nq, Nkv, c[1], off).width
        return (q + _hi_sum(Nq, Nkv, c[0], off)) * shape.d + _seen(shape)
    Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
    q = Nq * d if c[2] else -(-Nkv // c[1]) * Nq * d
    return q + -(-Nq // c[0]) * Nkv * d + Nq * Nkv


def _phase2_total(shape: Shape, Br2: int, Bd2: int, w: int) -> int:
    """``_phase2(shape, Br2, Bd2, w).total``, the closed form inline."""
    if shape.causal:
        return (-(-w // Bd2) * _seen(shape)
                + w * _hi_sum(shape.Nq, shape.Nkv, Br2, shape.offset) + shape.Nq * w)
    Nq, Nkv = shape.Nq, shape.Nkv
    return -(-w // Bd2) * Nq * Nkv + -(-Nq // Br2) * Nkv * w + Nq * w


def _plain_cost1(Nq: int, Nkv: int, d: int, c: tuple[int, ...]) -> tuple[int, int]:
    """Unmasked, ``(_phase1_total(shape, c), cdiv(Nq, Br)·cdiv(Nkv, Bc))`` of a Phase-1
    candidate (Br, Bc, order index), in one step (the search scores a few hundred)."""
    tr, tc = -(-Nq // c[0]), -(-Nkv // c[1])
    return (Nq * d if c[2] else tc * Nq * d) + tr * Nkv * d + Nq * Nkv, tr * tc


def _plain_cost2(Nq: int, Nkv: int, d: int, g: tuple[int, ...]) -> tuple[int, int]:
    """Unmasked, ``(_p2_total(shape, g), _p2_steps(Nq, d, g))`` of a Phase-2 candidate, in one
    step: a slice group of w columns in slices of Bd2, row blocks of Br2, moves
    ``⌈w/Bd2⌉·Nq·Nkv + ⌈Nq/Br2⌉·Nkv·w + Nq·w`` words in ``⌈Nq/Br2⌉·⌈w/Bd2⌉`` tiles."""
    tr, td = -(-Nq // g[0]), -(-d // g[1]) if len(g) == 2 else -(-g[2] // g[1])
    w = d if len(g) == 2 else g[2]
    total, steps = td * Nq * Nkv + tr * Nkv * w + Nq * w, tr * td
    if len(g) == 2:
        return total, steps
    w = d - g[2]
    tr, td = -(-Nq // g[3]), -(-w // g[4])
    return total + td * Nq * Nkv + tr * Nkv * w + Nq * w, steps + tr * td


def _plain_lowers1(Nq: int, Nkv: int, d: int, cs: list[tuple[int, ...]]) -> np.ndarray:
    """:func:`_plain_cost1`'s counts of the Phase-1 candidates ``cs`` (Br, Bc, order index) in
    float64, over the pool at once: the unmasked phase's bounds (:class:`~.protocol.Phase`
    ``lowers``; within float rounding of the exact count, which the mapper's margin covers)."""
    br, bc, o = (np.array(x, dtype=np.int64) for x in zip(*cs))
    tc = (-(-Nkv // bc)).astype(np.float64)
    return (np.where(o == 1, float(Nq * d), tc * float(Nq * d))
            + (-(-Nq // br)).astype(np.float64) * float(Nkv * d) + float(Nq * Nkv))


def _plain_lowers2(Nq: int, Nkv: int, d: int, gs: list[tuple[int, ...]]) -> np.ndarray:
    """:func:`_plain_cost2`'s counts of one-group Phase-2 candidates ``gs`` (Br2, Bd2) in
    float64, as :func:`_plain_lowers1`."""
    br2, bd2 = (np.array(x, dtype=np.int64) for x in zip(*gs))
    return ((-(-d // bd2)).astype(np.float64) * float(Nq * Nkv)
            + (-(-Nq // br2)).astype(np.float64) * float(Nkv * d) + float(Nq * d))


def _plain_rows1(Nq: int, Nkv: int, d: int, rows: npt.NDArray[np.int64]
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`_plain_cost1` of Phase-1 choices given as rows (Br, Bc, order index), at once in
    int64 (the caller checks that every count fits: ``3·Nq·Nkv·d < 2^62``)."""
    tr, tc = -(-Nq // rows[:, 0]), -(-Nkv // rows[:, 1])
    q = np.where(rows[:, 2] == 1, Nq * d, tc * (Nq * d))
    return q + tr * (Nkv * d) + Nq * Nkv, tr * tc


def _plain_rows2(Nq: int, Nkv: int, d: int, rows: npt.NDArray[np.int64]
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`_plain_cost2` of one-group Phase-2 choices given as rows (Br2, Bd2), at once in
    int64, as :func:`_plain_rows1`."""
    tr, td = -(-Nq // rows[:, 0]), -(-d // rows[:, 1])
    return td * (Nq * Nkv) + tr * (Nkv * d) + Nq * d, tr * td


def _plain_ranked1(Nq: int, Nkv: int, d: int, cs: list[tuple[int, ...]]
                   ) -> Iterable[tuple[int, tuple[int, ...]]]:
    """``(_plain_cost1(Nq, Nkv, d, c)[0], c)`` for each Phase-1 choice c of ``cs``: the pool
    the masked search ranks by its unmasked count (``Phase.ranked``), over numpy where int64
    holds every count (the same integers)."""
    if not cs or 3 * Nq * Nkv * d >= 1 << 62:
        return [(_plain_cost1(Nq, Nkv, d, c)[0], c) for c in cs]
    br, bc, o = (np.array(x, dtype=np.int64) for x in zip(*cs))
    q = np.where(o == 1, Nq * d, -(-Nkv // bc) * (Nq * d))
    return zip((q + -(-Nq // br) * (Nkv * d) + Nq * Nkv).tolist(), cs)


def _plain_ranked2(Nq: int, Nkv: int, d: int, gs: list[tuple[int, ...]]
                   ) -> Iterable[tuple[int, tuple[int, ...]]]:
    """``(_plain_cost2(Nq, Nkv, d, g)[0], g)`` for each one-group Phase-2 choice g of ``gs``,
    as :func:`_plain_ranked1`."""
    if not gs or 3 * Nq * Nkv * d >= 1 << 62:
        return [(_plain_cost2(Nq, Nkv, d, g)[0], g) for g in gs]
    br2, bd2 = (np.array(x, dtype=np.int64) for x in zip(*gs))
    return zip((-(-d // bd2) * (Nq * Nkv) + -(-Nq // br2) * (Nkv * d) + Nq * d).tolist(), gs)


def _p2_total(shape: Shape, g: tuple[int, ...]) -> int:
    """``_p2(shape, g).total``."""
    if len(g) == 2:
        return _phase2_total(shape, g[0], g[1], shape.d)
    return _phase2_total(shape, g[0], g[1], g[2]) + _phase2_total(shape, g[3], g[4],
                                                                  shape.d - g[2])


def _row_keys(shape: Shape, B: int) -> float:
    """A lower bound on Σ_i hi_i over the query blocks of B rows (causal, no window): the
    search's branch and bound (:func:`~attnio.algorithms.base.prefix_block_keys`, else
    P/B: each row of a block sees at most its hi_i keys)."""
    keys = prefix_block_keys(shape.Nkv, shape.offset, shape.Nq, min(B, shape.Nq))
    return _seen(shape) / min(B, shape.Nq) if keys is None else keys


def _phase1_lower(shape: Shape, c: tuple[int, ...]) -> float:
    """A lower bound on :func:`_phase1_total` under a causal mask: the rows that see a key
    (order "row", exact) or ``P/Bc`` (order "tile": the rows that see a key block's first key
    see all its later keys' too, so P <= Bc·Σ_j rows_j), plus the keys of :func:`_row_keys`,
    times d, plus the P scores written."""
    P = _seen(shape)
    q = shape.Nq - max(0, min(shape.Nq, -shape.offset)) if c[2] else P / min(c[1], shape.Nkv)
    return (q + _row_keys(shape, c[0])) * shape.d + P


def _phase2_lower(shape: Shape, Br2: int, Bd2: int, w: int) -> float:
    """A lower bound on :func:`_phase2_total` under a causal mask (``s.width`` by
    :func:`_row_keys`; the rest exact)."""
    return -(-w // Bd2) * _seen(shape) + w * _row_keys(shape, Br2) + shape.Nq * w


def _p2_lower(shape: Shape, g: tuple[int, ...]) -> float:
    if len(g) == 2:
        return _phase2_lower(shape, g[0], g[1], shape.d)
    return _phase2_lower(shape, g[0], g[1], g[2]) + _phase2_lower(shape, g[3], g[4],
                                                                  shape.d - g[2])


class _Lowers:
    """:func:`_phase1_lower`, :func:`_phase2_lower` and :func:`_p2_lower` of one masked shape
    (causal, no window), its constants taken once and :func:`_row_keys` kept per row block: the
    same floats, for the search's several hundred bounds."""

    def __init__(self, shape: Shape) -> None:
        self.Nq, self.Nkv, self.d, self.off = shape.Nq, shape.Nkv, shape.d, shape.offset
        self.P = _seen(shape)
        self.rows_q = self.Nq - max(0, min(self.Nq, -self.off))  # the rows that see a key
        self.keys: dict[int, float] = {}

    def row_keys(self, B: int) -> float:
        """:func:`_row_keys`."""
        B = min(B, self.Nq)
        k = self.keys.get(B)
        if k is None:
            pk = prefix_block_keys(self.Nkv, self.off, self.Nq, B)
            k = self.keys[B] = self.P / B if pk is None else pk
        return k

    def phase1(self, c: tuple[int, ...]) -> float:
        """:func:`_phase1_lower`."""
        q = self.rows_q if c[2] else self.P / min(c[1], self.Nkv)
        return (q + self.row_keys(c[0])) * self.d + self.P

    def phase2(self, Br2: int, Bd2: int, w: int) -> float:
        """:func:`_phase2_lower`."""
        return -(-w // Bd2) * self.P + w * self.row_keys(Br2) + self.Nq * w

    def p2(self, g: tuple[int, ...]) -> float:
        """:func:`_p2_lower`."""
        if len(g) == 2:
            return self.phase2(g[0], g[1], self.d)
        return self.phase2(g[0], g[1], g[2]) + self.phase2(g[3], g[4], self.d - g[2])

    def _row_keys_many(self, B: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """:meth:`row_keys` over an array of row blocks (float64)."""
        B = np.minimum(B, self.Nq)
        keys = prefix_block_keys_many(self.Nkv, self.off, self.Nq, B)
        return np.where(np.isnan(keys), self.P / B, keys)

    def phase1_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """:meth:`phase1` of a pool of choices given as rows (Br, Bc, order index) at once
        (the mapper's ``row_lowers``): the same bounds within float rounding."""
        br, bc, o = rows[:, 0], rows[:, 1], rows[:, 2]
        q = np.where(o == 1, float(self.rows_q), self.P / np.minimum(bc, self.Nkv))
        return (q + self._row_keys_many(br)) * self.d + self.P

    def p2_rows(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """:meth:`p2` of a pool of one-group choices given as rows (Br2, Bd2) at once."""
        br2, bd2 = rows[:, 0], rows[:, 1]
        return ((-(-self.d // bd2)).astype(np.float64) * self.P
                + self.d * self._row_keys_many(br2) + self.Nq * self.d)


def _p2(shape: Shape, g: tuple[int, ...]) -> IOCount:
    """Phase 2 of a search candidate: (Br2, Bd2) over every column, or (Br2, Bd2, d1, Br2b,
    Bd2b) in two slice groups."""
    if len(g) == 2:
        return _phase2(shape, g[0], g[1], shape.d)
    return _phase2(shape, g[0], g[1], g[2]) + _phase2(shape, g[3], g[4], shape.d - g[2])


def _combine(p1: tuple[int, ...], g: tuple[int, ...]) -> StreamTilingTiling:
    """The tiling of a Phase-1 choice (Br, Bc, order index) and a Phase-2 one (Br2, Bd2[, d1,
    Br2b, Bd2b])."""
    return StreamTilingTiling(p1[0], p1[1], g[0], g[1], ORDERS[p1[2]], *g[2:])


def _p2_steps(Nq: int, d: int, g: tuple[int, ...]) -> int:
    """Phase 2's output tiles (row blocks x slices, over the groups) of a search candidate."""
    if len(g) == 2:
        return cdiv(Nq, g[0]) * cdiv(d, g[1])
    return cdiv(Nq, g[0]) * cdiv(g[2], g[1]) + cdiv(Nq, g[3]) * cdiv(d - g[2], g[4])


def _max1(M: int, x: int) -> int:
    """The largest y with ``_fp1(·, x, y, "tile") = xy + min(x, y) + 1 <= M`` (symmetric)."""
    y = (M - 1 - x) // x  # y >= x
    return y if y >= x else (M - 1) // (x + 1)  # else y < x


def _cols2(M: int, a: int) -> int:
    """The largest c with ``_fp2(a, c) <= M``."""
    c = (M - 1 - 2 * a) // a  # c >= a
    return c if c >= a else (M - 1 - a) // (a + 1)  # else c < a


def _rows2(M: int, c: int) -> int:
    """The largest a with ``_fp2(a, c) <= M``."""
    a = (M - 1 - c) // (c + 1)  # a > c
    return a if a > c else min(c, (M - 1) // (c + 2))  # else a <= c


if TYPE_CHECKING:
    _Sides = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]


def _max1_many(M: int, x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """:func:`_max1` over an array (every value below 2M: no int64 overflow)."""
    y = (M - 1 - x) // x
    out: npt.NDArray[np.int64] = np.where(y >= x, y, (M - 1) // (x + 1))
    return out


def _cols2_many(M: int, a: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """:func:`_cols2` over an array."""
    c = (M - 1 - 2 * a) // a
    out: npt.NDArray[np.int64] = np.where(c >= a, c, (M - 1 - a) // (a + 1))
    return out


def _rows2_many(M: int, c: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """:func:`_rows2` over an array."""
    a = (M - 1 - c) // (c + 1)
    out: npt.NDArray[np.int64] = np.where(a > c, a, np.minimum(c, (M - 1) // (c + 2)))
    return out


def _snap(total: int, x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The least size with as many blocks of ``total`` as x (x >= 1)."""
    out: npt.NDArray[np.int64] = -(-total // -(-total // x))
    return out


def _pairs(X: int, Y: int, M: int, ymax: _Sides, xmax: _Sides) -> npt.NDArray[np.int64]:
    """(x, y) pairs worth scoring, x in [1, X] and y in [1, Y]: for each x on a geometric ladder
    (:func:`attnio.algorithms.common.ladder`) the largest y that fits (``ymax``), then the
    largest x for that y; the same from the sides of y; each also snapped down to the least
    size with as many blocks.  A side below a quarter of min(X, Y, √M) is skipped (the count
    falls with 1/x + 1/y at x·y ≈ M: such a tile is never the least, and the other pass reaches
    the clamped sides).  O(log M) pairs, over each ladder at once (``ymax`` and ``xmax`` take
    arrays: :func:`_max1_many`, :func:`_cols2_many`, :func:`_rows2_many`), as the rows (x, y)
    of an int64 array (some repeated).  Where X = Y and one function gives both sides (Phase 1
    of a square workload: ``xy + min(x, y) + 1`` is symmetric), the pass from the sides of y
    is the pass from x mirrored, (x, y) -> (y, x), and is taken so."""
    floor = max(1, min(X, Y, math.isqrt(M)) // 4)
    x = np.array(ladder(X, M), dtype=np.int64)
    y = np.minimum(Y, ymax(x))
    keep = (x >= floor) & (y >= floor)
    x, y = x[keep], y[keep]
    x2 = np.minimum(X, xmax(y))  # the other side grown back to the most that fits
    if X == Y and ymax is xmax:  # a square pass: the sides of y are those of x, mirrored
        half = np.stack([np.concatenate([x, x, x2, _snap(X, x2)]),
                         np.concatenate([y, _snap(Y, y), y, y])], axis=1)
        return np.concatenate([half, half[:, ::-1]])
    ys = np.array(ladder(Y, M), dtype=np.int64)
    xs = np.minimum(X, xmax(ys))
    keep = (xs >= floor) & (ys >= floor)
    xs, ys = xs[keep], ys[keep]
    y2 = np.minimum(Y, ymax(xs))
    xx = np.concatenate([x, x, x2, _snap(X, x2), xs, _snap(X, xs), xs, xs])
    yy = np.concatenate([y, _snap(Y, y), y, y, ys, ys, y2, _snap(Y, y2)])
    return np.stack([xx, yy], axis=1)


def _band(X: int, Y: int, M: int, ymax: _Sides) -> npt.NDArray[np.int64]:
    """Every x in [√M/2, 2√M] ∩ [1, X] (at most 96 of them: a step of √M/48 beyond), with the
    largest y <= Y that fits and that y snapped down to as many blocks: where the least count
    lies (1/x + 1/y at x·y ≈ M), between the ladder's rungs (``ymax`` over an array); as
    the rows (x, y) of an int64 array (some repeated)."""
    r = math.isqrt(M)
    x = np.arange(max(1, r // 2), min(X, 2 * r) + 1, max(1, r // 48), dtype=np.int64)
    y = np.minimum(Y, ymax(x))
    x, y = x[y >= 1], y[y >= 1]
    return np.stack([np.concatenate([x, x]), np.concatenate([y, _snap(Y, y)])], axis=1)


def _rows(shape: Shape, amax: int) -> set[int]:
    """Row-block sizes up to ``amax`` worth scoring besides the ladder: the fewest blocks and a
    few more, and with a mask the sizes whose blocks meet the diagonal where it enters (the z
    rows that see no key, z/2, z/3, z/4: a block then holds no row that sees nothing)."""
    if amax < 1:
        return set()
    Nq = shape.Nq
    t0 = cdiv(Nq, amax)
    out = {cdiv(Nq, t) for t in range(t0, min(Nq, t0 + 3) + 1)}
    if shape.causal:
        z = max(0, min(Nq, -shape.offset))
        out |= {z // k for k in range(1, 5) if 1 <= z // k <= amax}
    return out


def _group_rows(shape: Shape, M: int, c: int, w: int, lowers: _Lowers | None = None) -> int:
    """The best row block of a slice group (w columns in slices of c, ``_fp2 <= M``; 0 if none
    fits): a completion (:func:`~attnio.algorithms.mapper.completion`) over the largest that
    fits, that snapped down to as many blocks, and with a mask the sizes of :func:`_rows`,
    scored exactly (ties: the fewest blocks), by branch and bound on :func:`_phase2_lower`
    with a mask where some row is clipped (``lowers``: the shape's, else made here); where
    none is, every count is O(1) (:func:`_hi_sum`) and all are scored: the key breaks every
    tie, so the same choice.

    Where no row is clipped (unmasked, or ``0 <= offset <= Nkv - Nq``) and w >= 1, the
    choice depends on the tallest block that fits, amax, only through its block count
    t0 = ⌈Nq/amax⌉ (:func:`_uniform_rows`)."""
    amax = min(shape.Nq, _rows2(M, min(c, w)))
    if amax < 1:
        return 0
    if w >= 1 and _unclipped(shape):
        return _uniform_rows(shape, cdiv(shape.Nq, amax))
    sizes = {amax, cdiv(shape.Nq, cdiv(shape.Nq, amax))}

    def key(a: int) -> tuple[int, int, int]:
        return (_phase2_total(shape, a, c, w), cdiv(shape.Nq, a), a)

    if not shape.causal:
        best = mapper.completion(sorted(sizes), key)
    elif 0 <= shape.offset <= shape.Nkv - shape.Nq:  # no row clipped: every count is O(1)
        best = mapper.completion(sorted(sizes | _rows(shape, amax)), key)  # (_hi_sum)
    else:
        low = _Lowers(shape) if lowers is None else lowers
        best = mapper.completion(sorted(sizes | _rows(shape, amax)), key,
                                 lower=lambda a: low.phase2(a, c, w))
    assert best is not None
    return best[1]


def _unclipped(shape: Shape) -> bool:
    """Whether no row's keys are clipped: unmasked, or causal with ``0 <= offset <= Nkv -
    Nq`` (no window: the schedule refuses one)."""
    return not shape.causal or 0 <= shape.offset <= shape.Nkv - shape.Nq


def _uniform_rows(shape: Shape, t0: int) -> int:
    """:func:`_group_rows` where no row is clipped and w >= 1, from t0 = ⌈Nq/amax⌉ alone.
    The group's count is ``⌈w/c⌉·P + w·h(a) + Nq·w`` with h(a) = Σ_i hi_i (unmasked
    ⌈Nq/a⌉·Nkv; causal :func:`_hi_sum`'s closed form ``a·T(T-1)/2 + (T-1)·off + Nq + off``,
    T = ⌈Nq/a⌉), so the key (count, blocks, a) orders the sizes as (h(a), T, a) does, for
    every (c, w).  At a given T, h never falls as a grows: amax (T = t0) never beats the
    size snapped down to as many blocks, ⌈Nq/t0⌉, which is among the sizes; unmasked the
    sizes are those two, so the choice is ⌈Nq/t0⌉; causal, the rest are ⌈Nq/t⌉ for t in
    t0 .. t0 + 3 (:func:`_rows`; z = 0 rows see no key), all scored."""
    Nq = shape.Nq
    if not shape.causal:
        return cdiv(Nq, t0)
    Nkv, off = shape.Nkv, shape.offset
    best = mapper.completion(sorted({cdiv(Nq, t) for t in range(t0, min(Nq, t0 + 3) + 1)}),
                             lambda a: (_hi_sum(Nq, Nkv, a, off), cdiv(Nq, a), a))
    assert best is not None
    return best[1]


def _pair(rows: Callable[[int, int], int], d: int, c1: int, d1: int,
          c2: int) -> set[tuple[int, ...]]:
    """The two-group Phase-2 candidate (Br2, Bd2, d1, Br2b, Bd2b): columns [0, d1) in slices of
    c1, the rest in slices of c2, each with its best row block (``rows(c, w)``, 0: none fits);
    empty if a group fits none."""
    a1, a2 = rows(c1, d1), rows(c2, d - d1)
    return {(a1, c1, d1, a2, c2)} if a1 and a2 else set()


@dataclass(frozen=True)
class _ScoresPass:
    """What every block of Phase 1 shares: Q and K (inputs), A (the scores' scratch), the
    workload, the tiling and the score scale."""

    Q: SlowArray
    K: SlowArray
    A: SlowArray
    shape: Shape
    t: StreamTilingTiling
    scale: float


@dataclass(frozen=True)
class _OutputsPass:
    """What every block of one slice group of Phase 2 shares: A (the scores), V, O, the
    workload, and whether a V row chunk is held (else a score column)."""

    A: SlowArray
    V: SlowArray
    O: SlowArray
    shape: Shape
    v_held: bool


class StreamTiling(Algorithm[StreamTilingTiling]):
    name = "stream_tiling"
    summary = ("square tiling with word streaming (Smith & van de Geijn): raw scores written once, "
               "the softmax formed online in P·V; least footprint per tile")
    Tiling = StreamTilingTiling
    windowed_form = "window_stream"  # its form for sliding windows (named in the refusal)

    def footprint(self, shape: Shape, tiling: StreamTilingTiling) -> int:
        t = tiling
        a, b = min(t.Br, shape.Nq), min(t.Bc, shape.Nkv)
        return max(_fp1(shape.d, a, b, t.order),
                   *(_fp2(min(a2, shape.Nq), min(c, w)) for _, w, a2, c in _groups(shape.d, t)))

    def min_M(self, shape: Shape) -> int:
        return _fp2(1, 1)

    def validate_tiling(self, shape: Shape, tiling: StreamTilingTiling) -> None:
        super().validate_tiling(shape, tiling)
        if tiling.order not in ORDERS:
            raise ParameterError(f"tiling.order must be one of {ORDERS}, got {tiling.order!r}",
                                 param="tiling")
        second = (tiling.d1, tiling.Br2b, tiling.Bd2b)
        if any(v is not None for v in second) and any(v is None for v in second):
            raise ParameterError("tiling.d1, tiling.Br2b and tiling.Bd2b make the second slice "
                                 f"group together: set all three or none, got {second}",
                                 param="tiling")
        if tiling.d1 is not None and tiling.d1 >= shape.d:
            raise ParameterError(f"tiling.d1 (the first slice group's columns) must be below "
                                 f"d = {shape.d}, got {tiling.d1}", param="tiling")

    def steps(self, shape: Shape, tiling: StreamTilingTiling) -> int:
        t = tiling
        return (cdiv(shape.Nq, t.Br) * cdiv(shape.Nkv, t.Bc)
                + sum(cdiv(shape.Nq, a) * cdiv(w, c) for _, w, a, c in _groups(shape.d, t)))

    def _predict(self, shape: Shape, tiling: StreamTilingTiling) -> IOCount:
        t = tiling
        io = _phase1(shape, t.Br, t.Bc, t.order)
        for _, w, a, c in _groups(shape.d, t):
            io = io + _phase2(shape, a, c, w)
        return io

    # ------------------------------------------------------------------ tilings
    def _phases(self, shape: Shape, M: int, **options: Any) -> Phases[StreamTilingTiling]:
        """The two phases, for the mapper's per-phase search (:func:`.mapper.phase_best`: the
        phases' counts and steps add up, no side of one enters the other's count).  Each phase
        lists its candidates (module docstring, "Tiling") and the sides near √M (:func:`_band`),
        the side pairs as numpy rows (``Phase.rows``): unmasked every one is scored, the rows
        at once in int64 (``row_costs``; as tuples where a count could pass 2^62); with a mask
        the sides near √M are a pool cut to the :data:`_BAND` of least *unmasked* count (a
        declared heuristic cut) and the candidates and rows are scored by branch and bound on
        a lower bound (:func:`_phase1_lower`, :func:`_p2_lower`, over arrays).  Phase 2's best seed the two-slice-group candidates around their
        slice counts (:meth:`_two_groups`, the coupling rule).  The :data:`_OFFER` best of each
        phase make the candidates (their product)."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        masked = shape.causal
        max1, cols2, rows2 = (functools.partial(f, M) for f in (_max1_many, _cols2_many,
                                                                 _rows2_many))

        def tile(xy: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:  # order "tile" (0)
            return np.concatenate([xy, np.zeros((len(xy), 1), dtype=np.int64)], axis=1)

        def pairs1() -> npt.NDArray[np.int64]:
            return tile(_pairs(Nq, Nkv, M, max1, max1))

        def pairs2() -> npt.NDArray[np.int64]:
            return _pairs(Nq, d, M, cols2, rows2)

        def band2() -> npt.NDArray[np.int64]:
            return np.concatenate([_band(Nq, d, M, cols2), _band(d, Nq, M, rows2)[:, ::-1]])

        def cands1() -> list[tuple[int, ...]]:  # (besides the pairs' rows)
            out: list[tuple[int, ...]] = []
            for a in _rows(shape, min(Nq, (M - 1) // (d + 1))):  # "row": a·d + a·b + 1 <= M
                out += [(a, 1, 1), (a, min(Nkv, (M - 1 - a * d) // a), 1)]
            if masked:  # row blocks that meet the diagonal where it enters
                out += [(a, min(Nkv, _max1(M, a)), 0) for a in _rows(shape, Nq)
                        if _max1(M, a) >= 1]
            return out

        def cands2() -> list[tuple[int, ...]]:  # (besides the pairs' rows)
            if not masked:
                return []
            return [(a, min(d, _cols2(M, a))) for a in _rows(shape, Nq) if _cols2(M, a) >= 1]

        low = _Lowers(shape) if masked else None

        def seed(best: list[tuple[int, ...]]) -> set[tuple[int, ...]]:  # the coupling rule
            return self._two_groups(shape, M, {cdiv(d, g[1]) + k for g in best
                                               for k in (-1, 0, 1)}, low)

        if low is not None:
            def ranked1() -> Iterable[tuple[int, tuple[int, ...]]]:
                band = _band(Nq, Nkv, M, max1).tolist()
                return _plain_ranked1(Nq, Nkv, d, list({(a, b, 0) for a, b in band}))

            def ranked2() -> Iterable[tuple[int, tuple[int, ...]]]:
                return _plain_ranked2(Nq, Nkv, d, list(set(map(tuple, band2().tolist()))))

            phase1 = Phase(
                cost=lambda c: (_phase1_total(shape, c), cdiv(Nq, c[0]) * cdiv(Nkv, c[1])),
                footprint=None,  # every candidate is built to fit (the sides of most that fit)
                candidates=cands1,  # (bounded with the rows: tuples of their width)
                rows=pairs1, row_lowers=low.phase1_rows,
                ranked=ranked1, keep=_BAND, offer=_OFFER)
            phase2 = Phase(
                cost=lambda g: (_p2_total(shape, g), _p2_steps(Nq, d, g)),
                footprint=None, candidates=cands2,
                rows=pairs2, row_lowers=low.p2_rows,
                ranked=ranked2, keep=_BAND, seed=seed,
                offer=_OFFER, order=lambda g: (len(g), g))  # one slice group before two on ties
        elif 3 * Nq * Nkv * d < 1 << 62:  # unmasked, int64 holds every count: rows at once
            phase1 = Phase(
                cost=functools.partial(_plain_cost1, Nq, Nkv, d), footprint=None,
                candidates=cands1,
                rows=lambda: np.concatenate([pairs1(), tile(_band(Nq, Nkv, M, max1))]),
                row_costs=functools.partial(_plain_rows1, Nq, Nkv, d), offer=_OFFER)
            phase2 = Phase(
                cost=functools.partial(_plain_cost2, Nq, Nkv, d), footprint=None,
                rows=lambda: np.concatenate([pairs2(), band2()]),
                row_costs=functools.partial(_plain_rows2, Nq, Nkv, d), seed=seed,
                offer=_OFFER, order=lambda g: (len(g), g))
        else:  # unmasked, counts beyond int64: every choice as a tuple
            def every1() -> list[tuple[int, ...]]:
                rows = np.concatenate([pairs1(), tile(_band(Nq, Nkv, M, max1))])
                return [*map(tuple, rows.tolist()), *cands1()]

            phase1 = Phase(
                cost=functools.partial(_plain_cost1, Nq, Nkv, d), footprint=None,
                candidates=every1, lowers=functools.partial(_plain_lowers1, Nq, Nkv, d),
                offer=_OFFER)
            phase2 = Phase(
                cost=functools.partial(_plain_cost2, Nq, Nkv, d), footprint=None,
                candidates=lambda: map(tuple, np.concatenate([pairs2(), band2()]).tolist()),
                lowers=functools.partial(_plain_lowers2, Nq, Nkv, d), seed=seed,
                offer=_OFFER, order=lambda g: (len(g), g))
        return Phases((phase1, phase2), _combine)

    @staticmethod
    def _two_groups(shape: Shape, M: int, counts: Iterable[int], lowers: _Lowers | None = None
                    ) -> set[tuple[int, ...]]:
        """Phase-2 candidates of T slices for each T in ``counts``: uniform slices of
        w = ⌈d/T⌉, and two slice groups, each with its best row block (:func:`_group_rows`):

        * k slices of c1 < w columns, then the other d - k·c1 in T - k slices of at most
          ``cap`` >= w, k the most for which they cover it (c1 = w - 1, cap = w: the balanced
          split, k = T - d mod T);
        * k = T - 1 or T - 2 slices of c, and the remaining d - k·c columns in T - k slices
          (a remainder slice with a row block of its own: uniform slices give it theirs).

        c1, cap and c range over the widths within 2 of w and the widest that fit a row block
        as tall as w's (``n*`` blocks) or n* - 3 .. n* + 2 blocks: at most a few dozen
        candidates per T, O(log N) each.

        A group's row block depends on its (c, w) only through the tallest block that fits,
        ``amax = min(Nq, _rows2(M, min(c, w)))``: for w >= 1 the group's count is ``⌈w/c⌉·P
        + w·Σ_i hi_i(a) + Nq·w`` (unmasked ``Σ_i hi_i(a) = ⌈Nq/a⌉·Nkv``), a constant plus w
        times a function of a, so :func:`_group_rows`' key (count, blocks, a) orders the row
        blocks of its sizes (a function of amax) the same for every (c, w) of one amax: its
        choice is made once per amax."""
        d, Nq = shape.d, shape.Nq
        if lowers is None and shape.causal:
            lowers = _Lowers(shape)  # (``lowers``: the shape's bounds, shared with the search)
        by_amax: dict[int, int] = {}
        by_group: dict[tuple[int, int], int] = {}  # (the groups asked again, a few times each)
        uniform = _unclipped(shape)

        def rows(c: int, w: int) -> int:
            a = by_group.get((c, w))
            if a is not None:
                return a
            if w < 1:  # (no such group is made; the rule above needs w >= 1)
                a = _group_rows(shape, M, c, w, lowers)
            elif (amax := min(Nq, _rows2(M, min(c, w)))) < 1:
                a = 0
            else:
                at = cdiv(Nq, amax) if uniform else amax  # (:func:`_uniform_rows`: t0 alone)
                a = by_amax.get(at)
                if a is None:
                    a = by_amax[at] = (_uniform_rows(shape, at) if uniform
                                       else _group_rows(shape, M, c, w, lowers))
            by_group[(c, w)] = a
            return a
        out: set[tuple[int, ...]] = set()
        for T in counts:
            if not 1 <= T <= d:
                continue
            wide = cdiv(d, T)
            a = rows(wide, d)
            if not a:
                continue
            out.add((a, wide))
            n = cdiv(Nq, a)  # n*: the row blocks of slices of w columns
            level = {j: min(d, _cols2(M, cdiv(Nq, n + j))) for j in range(-3, 3) if n + j > 0}
            widths = {wide + j for j in range(-2, 3)} | set(level.values())
            for c1 in (c for c in widths if 1 <= c < wide):
                for cap in (c for c in widths if c >= wide):
                    k = min(T - 1, (T * cap - d) // (cap - c1))
                    if k >= 1:
                        out |= _pair(rows, d, c1, k * c1, cdiv(d - k * c1, T - k))
            for c in (c for c in widths if c >= 1):
                for k in (T - 1, T - 2):
                    if k >= 1 and k * c < d:
                        out |= _pair(rows, d, cdiv(d - k * c, T - k), d - k * c, c)
        return out

    def candidate_tilings(self, shape: Shape, M: int) -> list[StreamTilingTiling]:
        """The best few of each phase (:meth:`_phases`, searched by the mapper), combined;
        empty when M < min_M."""
        if mapper.needs_M(self, shape, M) is not None:
            return []
        return mapper.phase_tilings(self, shape, M)

    def count_walk(self, shape: Shape, tiling: StreamTilingTiling) -> int:
        """With a mask, a bulk count walks the diagonal of one query block per phase class and
        of the few blocks at its edges (:func:`_row_classes`): about
        ``(P + ⌈(Br + Bc)/Br⌉ + 3)·(⌈Br/Bc⌉ + 2)`` tiles in Phase 1 (P = Bc/gcd(Br, Bc), at most
        the blocks; order "row": 5 tiles a block, the others in bulk) and ``8·(a_g + 1)`` keys
        per slice group in Phase 2 (fewer with a V chunk held), whatever N; none without."""
        if not shape.causal:
            return 0
        t = tiling
        Br, Bc = min(t.Br, shape.Nq), min(t.Bc, shape.Nkv)
        classes = min(Bc // math.gcd(Br, Bc), cdiv(shape.Nq, Br)) + cdiv(Br + Bc, Br) + 3
        diagonal = 5 if t.order == "row" else cdiv(Br, Bc) + 2  # "row": the middle tiles bulk
        return classes * diagonal + sum(8 * (min(a, shape.Nq) + 1)
                                        for _, _, a, _ in _groups(shape.d, t))

    # ------------------------------------------------------------------ the schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: StreamTilingTiling, scale: float) -> None:
        A = mem.scratch("A", (shape.Nq, shape.Nkv))  # the raw (scaled) scores a row sees
        self._scores(mem, Q, K, A, shape, tiling, scale)
        self._outputs(mem, A, V, O, shape, tiling)

    def _scores(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, A: SlowArray,
                shape: Shape, t: StreamTilingTiling, scale: float) -> None:
        """Phase 1.  Key blocks that every row of the query block sees entirely (the keys before
        its first row's end) are alike; those the diagonal crosses, and a short last one, are
        walked one by one.  Order "row" loads the rows of Q_i that see a key.  A masked bulk
        count runs alike query blocks once (:meth:`_scores_bulk`)."""
        z = max(0, min(shape.Nq, -shape.offset)) if shape.causal else 0  # rows that see nothing
        p = _ScoresPass(Q, K, A, shape, t, scale)
        if shape.causal and mem.bulk:
            self._scores_bulk(mem, p, z)
            return
        for ib in mem.blocks(shape.Nq, t.Br, uniform=not shape.causal):
            self._scores_block(mem, p, ib, z)

    def _scores_block(self, mem: TwoLevelMemory, p: _ScoresPass, ib: Block, z: int, *,
                      full_part: bool = True) -> None:
        """Query block ``ib`` of Phase 1 (without its fully seen key blocks when not
        ``full_part``: a masked bulk count runs those apart)."""
        Q, shape, t = p.Q, p.shape, p.t
        hi = kv_visible_hi(shape, ib.stop)
        full = kv_visible_hi(shape, ib.start + 1) // t.Bc * t.Bc
        Qi = (mem.load(Q, slice(max(ib.start, z), ib.stop), label="Q_i")
              if (t.order == "row" and hi > 0) else None)
        if full_part:
            for jb in mem.blocks(shape.Nkv, t.Bc, hi=full):
                self._tile(mem, p, Qi, ib, jb, hi)
        if mem.bulk and Qi is not None:
            self._diagonal_tiles_bulk(mem, p, Qi, ib, full, hi)
        else:
            for jb in mem.blocks(shape.Nkv, t.Bc, lo=full, hi=hi, uniform=False):
                self._tile(mem, p, Qi, ib, jb, hi)
        if Qi is not None:
            mem.free(Qi)

    def _diagonal_tiles_bulk(self, mem: TwoLevelMemory, p: _ScoresPass, Qi: FastTile, ib: Block,
                             full: int, hi: int) -> None:
        """The key blocks [full, hi) the diagonal of query block ``ib`` crosses, Q_i held, in
        bulk count mode.  The first (the most lines: the peak), the last (maybe short) and, for
        an exact mean, the second are walked; between them every tile is Bc whole columns whose
        column c holds ``r1 + off - c`` rows, so they load alike words (one uniform loop, with a
        stand-in for their lines) and write, on average, ``S/T`` words each (S their lines' sum,
        an arithmetic series, T their number), stored as one tile of the loop.  O(Bc) where
        walking them costs O(Br)."""
        K, A, shape, t, scale = p.K, p.A, p.shape, p.t, p.scale
        Bc, off, d = t.Bc, shape.offset, shape.d
        j0, j1 = full // Bc, (hi - 1) // Bc  # the first and last tiles (inclusive)

        def walk(j: int) -> None:
            for jb in mem.blocks(shape.Nkv, Bc, lo=max(full, j * Bc), hi=min(hi, (j + 1) * Bc),
                                 uniform=False):
                self._tile(mem, p, Qi, ib, jb, hi)

        def tile_sum(j: int) -> int:  # Σ_c (r1 + off - c) over the Bc columns of tile j
            return Bc * (ib.stop + off - j * Bc) - Bc * (Bc - 1) // 2

        if hi <= full or j1 - j0 < 3:
            for j in range(j0, j1 + 1) if hi > full else ():
                walk(j)
            return
        walk(j0)
        ja, T = j0 + 1, j1 - j0 - 1
        S = T * tile_sum(ja) - Bc * Bc * (T * (T - 1) // 2)
        if S % T:  # Bc odd and T even: one more by itself, then the mean is whole
            walk(ja)
            ja, T = ja + 1, T - 1
            S -= tile_sum(ja - 1)
        for _ in mem.blocks(T * Bc, Bc):  # the tiles' steps, one run
            lines = mem.alloc((tile_sum(ja), 1), 0.0, label="S_line")  # the most of them
            for lb in mem.blocks(d, 1):
                for kc in mem.blocks(Bc, 1):
                    w = mem.load(K, ja * Bc + kc.start, lb, label="k_cl")
                    mem.compute(_column_update(scale, lb.start), lines, Qi, w, writes=1)
                    mem.free(w)
            mem.free(lines)
            rows, rest = divmod(S // T, Bc)  # the mean tile's words: rows x Bc, and the rest
            for shp, where in (((rows, Bc), (slice(0, rows), slice(ja * Bc, ja * Bc + Bc))),
                               ((1, rest), (ib.start, slice(ja * Bc, ja * Bc + rest)))):
                if shp[0] and shp[1]:
                    out = mem.alloc(shp, 0.0, label="S_line")
                    mem.store(out, A, *where)
                    mem.free(out)
        walk(j1)

    def _scores_bulk(self, mem: TwoLevelMemory, p: _ScoresPass, z: int) -> None:
        """Phase 1 in masked bulk count mode: the query blocks in classes that move alike words
        (:func:`_row_classes`), each run once with its multiplicity.  In the interior (the
        diagonal crosses only full key blocks) a block's diagonal tiles depend on its first
        row's phase modulo Bc only, so the blocks of one phase (an arithmetic progression) run
        their diagonal once; their fully seen key blocks (as many as the phase's blocks see in
        all, a sum in closed form) run once more, as one uniform loop, with a stand-in for Q_i
        (the same words resident, none moved)."""
        shape, t = p.shape, p.t
        Nq, Nkv, off, Br, Bc = shape.Nq, shape.Nkv, shape.offset, t.Br, t.Bc
        kfull = Nkv // Bc * Bc
        for kind, i0, count, step in _row_classes(Nq, Br, off, Nkv, kfull, 0, Bc):
            if kind == "walk":
                for ib in mem.blocks(Nq, Br, lo=i0 * Br, hi=min(Nq, (i0 + count) * Br),
                                     uniform=False):
                    self._scores_block(mem, p, ib, z)
                continue
            rep = Block(i0, i0 * Br, min(Nq, (i0 + 1) * Br))
            interior = kind == "phase"
            for _ in mem.blocks(count, 1):  # the query loop's steps, one per block
                self._scores_block(mem, p, rep, z, full_part=not interior)
            if not interior:
                continue
            # the fully seen key blocks of the class: block i0 + k·step sees
            # ⌊(r0 + 1 + off)/Bc⌋ of them, growing by step·Br/Bc (a whole number) with k
            first = (i0 * Br + 1 + off) // Bc
            seen = count * first + (step * Br // Bc) * (count * (count - 1) // 2)
            if not seen:
                continue
            last = i0 + (count - 1) * step
            lb = Block(last, last * Br, (last + 1) * Br)  # it sees key block 0 entirely
            held = mem.alloc((Br, shape.d), label="Q_i") if t.order == "row" else None
            for jb in mem.blocks(seen * Bc, Bc):
                self._tile(mem, p, held, lb, jb, kv_visible_hi(shape, lb.stop))
            if held is not None:
                mem.free(held)

    @staticmethod
    def _tile(mem: TwoLevelMemory, p: _ScoresPass, Qi: FastTile | None, ib: Block, jb: Block,
              hi: int) -> None:
        """One score tile, held as its visible lines: a column per key (the rows that see it,
        a suffix of the block) or, with a K column held, a row per query (the keys it sees, a
        prefix); each line written where it lies in A.  Only the rows that see a key of the
        tile, ``[r_lo, r1)``, and the keys some row sees, ``[c0, c_hi)``, are read."""
        Q, K, A, shape, t, scale = p.Q, p.K, p.A, p.shape, p.t, p.scale
        d, r0, r1, c0 = shape.d, ib.start, ib.stop, jb.start
        c_hi = min(jb.stop, hi)
        r_lo = max(r0, min(r1, c0 - shape.offset)) if shape.causal else r0
        by_rows = Qi is None and min(t.Br, shape.Nq) > min(t.Bc, shape.Nkv)  # a K column held
        if by_rows:
            lens = [min(c_hi, kv_visible_hi(shape, r + 1)) - c0 for r in range(r_lo, r1)]
        else:
            lens = [r1 - max(r_lo, min(r1, c - shape.offset)) if shape.causal else r1 - r0
                    for c in range(c0, c_hi)]
        if mem.bulk:
            _tile_by_sums(mem, p, Qi, (r_lo, r1, c0, c_hi), lens, by_rows)
            return
        lines = [mem.alloc((1, n) if by_rows else (n, 1), 0.0, label="S_line") if n > 0 else None
                 for n in lens]
        for lb in mem.blocks(d, 1):
            if by_rows:
                k = mem.load(K, slice(c0, c_hi), lb, label="K_jl")
                for rc in mem.blocks(r1 - r_lo, 1):
                    w = mem.load(Q, r_lo + rc.start, lb, label="q_rl")
                    line = lines[rc.start]
                    if line is not None:
                        mem.compute(_row_update(scale), line, k, w, writes=1)
                    mem.free(w)
                mem.free(k)
                continue
            q = Qi if Qi is not None else mem.load(Q, slice(r_lo, r1), lb, label="Q_il")
            col = lb.start if Qi is not None else 0
            for kc in mem.blocks(c_hi - c0, 1):
                w = mem.load(K, c0 + kc.start, lb, label="k_cl")
                line = lines[kc.start]
                if line is not None:
                    mem.compute(_column_update(scale, col), line, q, w, writes=1)
                mem.free(w)
            if Qi is None:
                mem.free(q)
        for x, line in enumerate(lines):
            if line is None:
                continue
            if by_rows:
                mem.store(line, A, r_lo + x, slice(c0, c0 + lens[x]))
            else:
                mem.store(line, A, slice(r1 - lens[x], r1), c0 + x)
            mem.free(line)

    def _outputs(self, mem: TwoLevelMemory, A: SlowArray, V: SlowArray, O: SlowArray,
                 shape: Shape, t: StreamTilingTiling) -> None:
        """Phase 2.  Keys every row of the block sees (before its first row's end, ``h0``) are
        alike; each key after it is seen by a suffix of the rows, walked one by one.  Each slice
        group (columns [lo, lo + w)) runs by itself with its own row blocks and slices.  A masked
        bulk count runs alike row blocks once: in the interior (the block's keys all inside
        [0, Nkv)) every block walks the same a - 1 keys of its diagonal, and the keys they all
        see entirely, their sum in closed form, run once more as one uniform loop, with
        stand-ins for the output tile and its log-sum-exp (the same words resident, none
        moved)."""
        Nq, Nkv, off = shape.Nq, shape.Nkv, shape.offset
        for lo, w, a, c in _groups(shape.d, t):
            p = _OutputsPass(A, V, O, shape, min(c, w) <= min(a, Nq))  # else a score column held
            if not (shape.causal and mem.bulk):
                for ib in mem.blocks(Nq, a, uniform=not shape.causal):
                    self._output_block(mem, p, ib, lo, w, c)
                continue
            for kind, i0, count, _ in _row_classes(Nq, a, off, Nkv, Nkv, 1, 1):
                if kind == "walk":
                    for ib in mem.blocks(Nq, a, lo=i0 * a, hi=min(Nq, (i0 + count) * a),
                                         uniform=False):
                        self._output_block(mem, p, ib, lo, w, c)
                    continue
                rep = Block(i0, i0 * a, min(Nq, (i0 + 1) * a))
                interior = kind == "phase"
                for _ in mem.blocks(count, 1):  # the row-block loop's steps, one per block
                    self._output_block(mem, p, rep, lo, w, c, full_part=not interior)
                # the keys the class's blocks see entirely: r0 + 1 + off each
                seen = a * (count * (2 * i0 + count - 1) // 2) + count * (1 + off)
                if not interior or not seen:
                    continue
                for sb in _partition(w, c):  # each run of equal slices: its slices x keys
                    db = Block(sb.index, lo + sb.start, lo + sb.stop)
                    Oc = mem.alloc((a, db.size), label="O_ic")
                    g = mem.alloc((a,), label="g_i")
                    for kb in mem.blocks(sb.index * seen, 1):
                        self._key(mem, p, (Oc, g), rep, kb, db, 0)
                    mem.free(Oc, g)

    def _output_block(self, mem: TwoLevelMemory, p: _OutputsPass, ib: Block, lo: int, w: int,
                      c: int, *, full_part: bool = True) -> None:
        """Row block ``ib`` of one slice group of Phase 2 (without the keys all its rows see
        when not ``full_part``: a masked bulk count runs those apart)."""
        O, shape, v_held = p.O, p.shape, p.v_held
        hi = kv_visible_hi(shape, ib.stop)
        h0 = kv_visible_hi(shape, ib.start + 1)
        for sb in mem.blocks(w, c):
            db = Block(sb.index, lo + sb.start, lo + sb.stop)
            Oc = mem.alloc((ib.size, db.size), 0.0, label="O_ic")
            if hi == 0:  # no row of the block sees a key: its output is 0
                mem.store(Oc, O, ib, db)
                mem.free(Oc)
                continue
            g = mem.alloc((ib.size,), -np.inf, label="g_i")  # running log-sum-exp
            acc = (Oc, g)
            if full_part:
                for kb in mem.blocks(shape.Nkv, 1, hi=h0):
                    self._key(mem, p, acc, ib, kb, db, 0)
            if mem.bulk and v_held:
                self._diagonal_bulk(mem, p, acc, ib, db, h0, hi)
            else:
                for kb in mem.blocks(shape.Nkv, 1, lo=h0, hi=hi, uniform=False):
                    top = max(0, kb.start - shape.offset - ib.start)  # rows [top, size)
                    self._key(mem, p, acc, ib, kb, db, top)
            mem.store(Oc, O, ib, db)  # normalised all along
            mem.free(Oc, g)

    @staticmethod
    def _diagonal_bulk(mem: TwoLevelMemory, p: _OutputsPass, acc: tuple[FastTile, ...],
                       ib: Block, db: Block, h0: int, hi: int) -> None:
        """The keys [h0, hi) of row block ``ib`` that a suffix of its rows sees, in bulk count
        mode with a V row chunk held (:meth:`_key`): each key loads its chunk (a uniform loop,
        run once), and its rows [top, size) one score each: their sum over the keys, in closed
        form, runs once as one loop with a stand-in for the chunk (the same words resident,
        none moved).  O(1) where walking the keys costs O(size)."""
        A, V, shape = p.A, p.V, p.shape
        n = hi - h0
        if n <= 0:
            return
        t0 = h0 - shape.offset - ib.start  # top of key h0 before the clip at 0
        t1 = t0 + n - 1
        lo = max(t0, 1)
        rows = n * ib.size - ((lo + t1) * (t1 - lo + 1) // 2 if t1 >= lo else 0)
        for kb in mem.blocks(shape.Nkv, 1, lo=h0, hi=hi):  # the key loop's steps
            mem.free(mem.load(V, kb, db, label="V_kc"))
        v = mem.alloc((1, db.size), label="V_kc")
        kb = Block(h0, h0, h0 + 1)
        for _ in mem.blocks(rows, 1):  # a step per row and key, as the rows loop
            w = mem.load(A, ib.start, kb, label="a_rk")
            mem.compute(_row_step(0), *acc, w, v, writes=2)
            mem.free(w)
        mem.free(v)

    @staticmethod
    def _key(mem: TwoLevelMemory, p: _OutputsPass, acc: tuple[FastTile, ...], ib: Block,
             kb: Block, db: Block, top: int) -> None:
        """Key kb into the output tile, for its rows [top, size): with a V row chunk held, their
        scores streamed one word at a time; else their score column held and the V words of the
        chunk streamed.  Rows [0, top) take the key with weight 0, as a dense P·V does (so a
        non-finite value reaches them as it reaches the reference's rows; no word moves)."""
        A, V = p.A, p.V
        r0 = ib.start + top
        if p.v_held:
            v = mem.load(V, kb, db, label="V_kc")
            for rc in mem.blocks(ib.size - top, 1):
                w = mem.load(A, r0 + rc.start, kb, label="a_rk")
                mem.compute(_row_step(top + rc.start), *acc, w, v, writes=2)
                mem.free(w)
            if top:
                mem.compute(_zero_weight(top), acc[0], v, writes=1)
            mem.free(v)
            return
        s = mem.load(A, slice(r0, ib.stop), kb, label="A_ik")
        mem.compute(_column_step(top), s, *acc, writes=3)
        for cc in mem.blocks(db.size, 1):
            w = mem.load(V, kb, db.start + cc.start, label="v_ku")
            mem.compute(_add_column(cc.start, top), acc[0], s, w, writes=1)
            mem.free(w)
        mem.free(s)


def _partition(w: int, c: int) -> list[Block]:
    """The runs of equal slices of ``[0, w)`` in slices of c: (count, start, stop) of one
    representative each, as ``Block(count, start, stop)``."""
    c = min(c, w)
    out = [Block(w // c, 0, c)]
    if w % c:
        out.append(Block(1, w // c * c, w))
    return out


def _row_classes(N: int, B: int, off: int, Nkv: int, kfull: int, lead: int, S: int
                 ) -> list[tuple[str, int, int, int]]:
    """The row blocks ``[i·B, (i+1)·B)`` of ``[0, N)`` under the causal mask (row r sees keys
    ``[0, clip(r + 1 + off, 0, Nkv))``) in classes whose blocks move alike words, for a masked
    bulk count: ``(kind, first, count, step)`` with kind

    * "walk": blocks ``first .. first + count - 1``, walked one by one (the few where the
      diagonal meets an edge, and a short last block);
    * "alike": ``count`` blocks alike in every way (those that see no key, those that see every
      key from their first row on);
    * "phase": the interior blocks ``first + k·step`` (k < count) of one phase of their first
      row modulo S (``step = S/gcd(B, S)``): alike but for the keys all their rows see.

    The interior: ``r0 + lead + off >= 0`` and ``r1 + off <= kfull`` (the diagonal inside
    ``[0, kfull)``).  O(S) classes whatever N."""
    n = N // B  # full blocks
    ie = max(0, min(n, -off // B))  # (i + 1)·B + off <= 0: see no key
    isat = max(ie, min(n, -(-(Nkv - 1 - off) // B)))  # i·B + 1 + off >= Nkv: see every key
    ia = max(ie, min(isat, -(-(-lead - off) // B)))
    ib = max(ia, min(isat, (kfull - off) // B))
    out: list[tuple[str, int, int, int]] = []
    if ie:
        out.append(("alike", 0, ie, 1))
    if ia > ie:
        out.append(("walk", ie, ia - ie, 1))
    step = S // math.gcd(B, S)
    for k in range(min(step, ib - ia)):
        out.append(("phase", ia + k, -(-(ib - ia - k) // step), step))
    if isat > ib:
        out.append(("walk", ib, isat - ib, 1))
    if n > isat:
        out.append(("alike", isat, n - isat, 1))
    if N % B:
        out.append(("walk", n, 1, 1))
    return out


# ---------------------------------------------------------------------- word arithmetic
def _column_update(scale: float, col: int) -> Callable[..., None]:
    """A score column (the last h rows of the block) += scale · q[-h:, col] · w."""
    def fn(s: np.ndarray, q: np.ndarray, w: np.ndarray) -> None:
        s[:, 0] += scale * q[q.shape[0] - s.shape[0]:, col] * w[0, 0]
    return fn


def _row_update(scale: float) -> Callable[..., None]:
    """A score row (the first n keys of the block) += scale · k[:n] · w."""
    def fn(s: np.ndarray, k: np.ndarray, w: np.ndarray) -> None:
        s[0, :] += scale * k[:s.shape[1], 0] * w[0, 0]
    return fn


def _column_step(top: int) -> Callable[..., None]:
    """A key's score column for rows [top, size) of the tile (all of which see it)."""
    def fn(s: np.ndarray, O: np.ndarray, g: np.ndarray) -> None:
        online_lse_step(s[:, 0], g[top:], O[top:])
    return fn


def _add_column(u: int, top: int) -> Callable[..., None]:
    """O[top:, u] += p·w: the weight column p (held) times one streamed V word (rows above top,
    which do not see the key: weight 0)."""
    def fn(O: np.ndarray, p: np.ndarray, w: np.ndarray) -> None:
        O[top:, u] += p[:, 0] * w[0, 0]
        if top:
            O[:top, u] += 0.0 * w[0, 0]
    return fn


def _zero_weight(top: int) -> Callable[..., None]:
    """O[:top] += 0·v: the rows that do not see the key take it with weight 0."""
    def fn(O: np.ndarray, v: np.ndarray) -> None:
        O[:top] += 0.0 * v[0]
    return fn


def _row_step(r: int) -> Callable[..., None]:
    """Row r of the tile takes one score it sees (the word w): the online step, then
    O[r] += p·v (v the held V row chunk)."""
    def fn(O: np.ndarray, g: np.ndarray, w: np.ndarray, v: np.ndarray) -> None:
        p = w.reshape(1).copy()  # a register
        online_lse_step(p, g[r:r + 1], O[r:r + 1])
        O[r] += p[0] * v[0]
    return fn


ALGORITHM = StreamTiling()


def _tile_by_sums(mem: TwoLevelMemory, p: _ScoresPass, Qi: FastTile | None,
                  box: tuple[int, int, int, int], lens: list[int], by_rows: bool) -> None:
    """A bulk count of one score tile (:meth:`StreamTiling._tile`: rows [r_lo, r1), keys
    [c0, c_hi), its visible lines of ``lens`` words): the same words, steps and peak without a
    fast tile per line.  The lines are held as one tile of their H words through the d columns
    (the held column and one word of the other side, as step by step: the same peak), then
    stored as as many lines of about the same length (:func:`.common.store_lines`), one resident
    at a time (never more than step by step, where they all are until stored)."""
    Q, K, A, d = p.Q, p.K, p.A, p.shape.d
    r_lo, r1, c0, c_hi = box
    H = sum(n for n in lens if n > 0)
    n_lines = sum(1 for n in lens if n > 0)
    held = mem.alloc((H,), label="S_lines") if H else None
    for lb in mem.blocks(d, 1):
        if by_rows:
            k = mem.load(K, slice(c0, c_hi), lb, label="K_jl")
            for rc in mem.blocks(r1 - r_lo, 1):
                mem.free(mem.load(Q, r_lo + rc.start, lb, label="q_rl"))
            mem.free(k)
            continue
        q = Qi if Qi is not None else mem.load(Q, slice(r_lo, r1), lb, label="Q_il")
        for kc in mem.blocks(c_hi - c0, 1):
            mem.free(mem.load(K, c0 + kc.start, lb, label="k_cl"))
        if Qi is None:
            mem.free(q)
    if held is not None:
        mem.free(held)
    store_lines(mem, A, by_rows, n_lines, H)
