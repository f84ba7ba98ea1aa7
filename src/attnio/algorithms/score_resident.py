"""Score-resident attention: a query block's whole visible score rows held in fast memory, so the
softmax is exact in one pass and nothing but Q, K, V and O ever moves.

Not in the registry by itself: it is :mod:`~attnio.algorithms.row_hybrid`'s mode "a" (that
schedule's ``modes="a"`` tiling is this one with one-column slices), and alone its count grows as
N³ (blocks of about M/N rows each read all of K and V), so only the hybrid, which switches each
block to whichever mode moves fewer words, is offered to the planner.  ``ALGORITHM`` runs it
directly (``attnio.run(score_resident.ALGORITHM, ...)``).

FlashAttention holds a query block's output O_i (Br×d) while K and V stream past; square tiling
writes the scores.  When a query row sees fewer keys than d (small N, or a causal mask's early
rows), the score rows are the smaller object: hold S_i (r×w, w the keys the block sees) instead of
O_i, and stream Q, K and V column slices through it::

    for each query block [q0, q1) (r rows, keys [lo, hi) visible, w = hi - lo), last block first:
        S_i = 0 (r×w, one per query head of the group)
        for each slice c of Bd head-dimension columns:            # phase a: S_i = Q_i K^T
            load K[lo:hi, c] (w×Bd)
            for each query head h of the group: load Q_h[q0:q1, c] (r×Bd);  S_h += scale·Q K^T
        for each head: mask S_h;  P_h = softmax(S_h) by rows         # exact: the rows are whole
        for each slice c:                                            # phase b: O_i = P_i V
            load V[lo:hi, c] (w×Bd)
            for each head: O = P_h V[lo:hi, c] (r×Bd);  write O_h[q0:q1, c]
        (a block that sees no key writes its output rows as zeros, r×Bd at a time)

No running maximum, no rescaling, no partial output: every word of Q is read once, every output
word written once, and K and V are read once per query block (per group of query heads sharing a
K/V head: their score rows are held together, so a K or V slice serves all G of them).

Blocks.  The partition is built from the last query row down (``blocks``): the block ending at
row e takes the most rows r whose tiles fit in the budget, ``footprint(r, w) <= budget`` with
``w`` the keys rows [e - r, e) see.  Under a causal mask the last rows see the most keys, so they
get the smallest blocks, and the short remainder block lands on the first rows, which see the
fewest keys (a uniform partition would put it last, where it costs most).

Fast memory of a block (r rows, w keys, bd = min(Bd, d)): the G score blocks and one K (or V)
slice and one Q (or O) slice, ``G·r·w + bd·(w + r)``; the softmax's row vector (r words) fits in
the slices' room.  A block seeing no key holds one r×bd zero tile.  The tiling's footprint is the
largest over its blocks.

Closed form (exact; checked by ``tests/algorithms/test_kv_and_q_stationary.py``).  Per group of G query heads on
one K/V head, blocks b with r_b rows and w_b visible keys::

    reads  = Σ_{w_b > 0} (G·r_b·d + 2·w_b·d)
    writes = G·Nq·d

Unmasked (w_b = Nkv, T blocks): ``reads = G·Nq·d + 2·T·Nkv·d`` with T ≈ G·Nq·Nkv / budget, against
FlashAttention-2's ``Nq·d + 2·Tr·Nkv·d`` with Tr ≈ 2·Nq·d / M: fewer blocks when Nkv < 2d.
Bottom-right causal, Nq = Nkv = N: r(q) ≈ budget/(G·q) rows at row q, so Σ_b w_b ≈ G·N³/(3·budget)
words of K (and of V) per group: ``2d·N³/(3M)`` a query head, against FlashAttention-2's
``2d·N²/(2·Br)`` ≈ ``d·N²·2d/M``: fewer when N < 3d.

Tiling: ``budget`` (the most words any block may hold), ``Bd`` (the slice width: I/O does not
depend on it except through the blocks it leaves room for) and ``group`` (query heads per block,
a divisor of heads/kv_heads).  A partition of more than :data:`MAX_BLOCKS` blocks is not offered
(the schedule is for the shapes where rows are short; the planner stays fast at N = 10⁹).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, IOCount, TwoLevelMemory
from ..core.workload import Shape, kv_range
from . import _kernels as K_
from .base import GroupedAlgorithm, divisors_upto
from .common import HeadGroup

__all__ = ["ALGORITHM", "MAX_BLOCKS", "ScoreResident", "ScoreResidentTiling", "blocks",
           "resident_block"]

#: The most query blocks a partition may have to be offered (a count walks them one by one).
MAX_BLOCKS = 2048

#: The head-dimension slice widths tried (each capped at d), and d itself (wider slices leave
#: less room for rows, so they tie with one-column slices only when the blocks are the same).
_SLICES = (1,)

#: (q0, q1, lo, hi) per query block, ascending.
_Part = tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class ScoreResidentTiling:
    """``budget`` words per block; head-dimension slices of ``Bd`` columns; ``group`` query
    heads per block."""

    budget: int
    Bd: int = 1
    group: int = 1


def _fp(G: int, r: int, w: int, bd: int) -> int:
    return G * r * w + bd * (w + r) if w > 0 else r * bd


@functools.lru_cache(maxsize=4096)
def blocks(shape: Shape, budget: int, Bd: int, G: int) -> _Part | None:
    """The query blocks ``(q0, q1, lo, hi)``, ascending, built from the last row down, each with
    the most rows whose tiles fit in ``budget``; None when a single row does not fit or the
    partition would have more than :data:`MAX_BLOCKS` blocks."""
    Nq, d = shape.Nq, shape.d
    bd = min(Bd, d)
    # every block holds at most budget/G scores of a head: too many blocks, cheaply
    if shape.causal and shape.window is None:
        visible = masks.covered_sums(Nq, shape.Nkv, 1, 1, shape.offset).size_width
    elif not shape.causal:
        visible = Nq * shape.Nkv
    else:
        visible = 0
    if G * visible > MAX_BLOCKS * budget:
        return None
    out: list[tuple[int, int, int, int]] = []
    e = Nq
    if not shape.causal or shape.window is None:  # w depends on the block's end only: O(1) a block
        Nkv, off, causal = shape.Nkv, shape.offset, shape.causal
        while e > 0:
            if len(out) >= MAX_BLOCKS:
                return None
            hi = min(Nkv, max(0, e + off)) if causal else Nkv  # kv_range(shape, e - 1, e)
            r = (budget - bd * hi) // (G * hi + bd) if hi > 0 else budget // bd
            r = min(r, e)
            if r < 1:
                return None
            out.append((e - r, e, 0, hi))
            e -= r
        return tuple(reversed(out))
    while e > 0:  # a window: w grows with r (lo falls), so search the largest r that fits
        if len(out) >= MAX_BLOCKS:
            return None
        a, b = 0, e
        while a < b:
            mid = (a + b + 1) // 2
            lo, hi = kv_range(shape, e - mid, e)
            if _fp(G, mid, max(0, hi - lo), bd) <= budget:
                a = mid
            else:
                b = mid - 1
        if a < 1:
            return None
        lo, hi = kv_range(shape, e - a, e)
        out.append((e - a, e, lo, max(lo, hi)))
        e -= a
    return tuple(reversed(out))


def _softmax_rows(S: np.ndarray, l: np.ndarray) -> None:
    """S <- softmax(S) by rows, exactly (whole rows); rows that see nothing become 0."""
    np.max(S, axis=1, out=l)
    S -= K_.safe_max(l)[:, None]
    np.exp(S, out=S)
    np.sum(S, axis=1, out=l)
    S /= np.where(l > 0, l, 1.0)[:, None]


def _scores(scale: float) -> Callable[..., None]:
    def fn(S: np.ndarray, Q: np.ndarray, K: np.ndarray) -> None:
        S += scale * (Q @ K.T)
    return fn


def _product(O: np.ndarray, P: np.ndarray, V: np.ndarray) -> None:
    np.matmul(P, V, out=O)


class ScoreResident(GroupedAlgorithm[ScoreResidentTiling]):
    name = "score_resident"
    summary = ("a query block's whole score rows held: exact softmax in one pass, Q, K, V "
               "streamed by column slices, O written once; wins when rows are short (N < ~2-3d)")
    Tiling = ScoreResidentTiling
    supports_window = True

    # ------------------------------------------------------------------ sizes
    def _part(self, shape: Shape, tiling: ScoreResidentTiling) -> _Part:
        part = blocks(shape, tiling.budget, tiling.Bd, tiling.group)
        if part is None:
            raise ParameterError(f"{self.name}: budget={tiling.budget} does not fit one query row "
                                 f"of this shape with Bd={tiling.Bd}, group={tiling.group}, or "
                                 f"needs more than {MAX_BLOCKS} blocks", param="tiling")
        return part

    def footprint(self, shape: Shape, tiling: ScoreResidentTiling) -> int:
        part = blocks(shape, tiling.budget, tiling.Bd, tiling.group)
        if part is None:
            return 1 << 62  # fits no memory: the search skips it
        bd = min(tiling.Bd, shape.d)
        return max(_fp(tiling.group, q1 - q0, hi - lo, bd) for q0, q1, lo, hi in part)

    def min_M(self, shape: Shape) -> int:
        """One row of the widest-seeing block with one-column slices: ``w + (w + 1)``."""
        w = 0
        if shape.causal and shape.window is not None:
            w = min(shape.Nkv, shape.window)
        else:
            lo, hi = kv_range(shape, shape.Nq - 1, shape.Nq)
            w = hi - lo
        return max(1, _fp(1, 1, w, 1))

    def validate_tiling(self, shape: Shape, tiling: ScoreResidentTiling) -> None:
        super().validate_tiling(shape, tiling)
        self._part(shape, tiling)

    def steps(self, shape: Shape, tiling: ScoreResidentTiling) -> int:
        part = blocks(shape, tiling.budget, tiling.Bd, tiling.group)
        td = -(-shape.d // tiling.Bd)
        return (1 << 62) if part is None else 2 * td * len(part)

    def count_walk(self, shape: Shape, tiling: ScoreResidentTiling) -> int:
        """Count mode walks the query blocks one by one (at most :data:`MAX_BLOCKS`)."""
        part = blocks(shape, tiling.budget, tiling.Bd, tiling.group)
        return 0 if part is None else len(part)

    def candidate_tilings(self, shape: Shape, M: int) -> list[ScoreResidentTiling]:
        if shape.block_mask is not None:
            return []
        out: list[ScoreResidentTiling] = []
        d = shape.d
        for G in divisors_upto(shape.group, min(64, M)):
            for bd in sorted({min(b, d) for b in (*_SLICES, d)}):
                if blocks(shape, M, bd, G) is None:
                    break  # wider slices leave less room
                out.append(ScoreResidentTiling(M, bd, G))
        return out

    # ------------------------------------------------------------------ counts
    def _group_count(self, shape: Shape, tiling: ScoreResidentTiling) -> IOCount:
        G, d = tiling.group, shape.d
        reads = 0
        for q0, q1, lo, hi in self._part(shape, tiling):
            if hi > lo:
                reads += G * (q1 - q0) * d + 2 * (hi - lo) * d
        return IOCount(reads, G * shape.Nq * d)

    # ------------------------------------------------------------------ the schedule
    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: ScoreResidentTiling, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head (no logsumexp: no
        backward)."""
        for q0, q1, lo, hi in self._part(shape, tiling):
            resident_block(mem, heads, Block(0, q0, q1), lo, hi, shape=shape, bd=tiling.Bd,
                           scale=scale)


def resident_block(mem: TwoLevelMemory, heads: HeadGroup, rows: Block, lo: int, hi: int, *,
                   shape: Shape, bd: int, scale: float) -> None:
    """One query block ``rows`` of the heads ``heads.Qs`` against keys [lo, hi), the score rows
    held whole (``G·r·w + bd·(w + r)`` words); writes the block's output rows."""
    Qs, K, V, Os = heads.Qs, heads.K, heads.V, heads.Os
    d = shape.d
    q0, q1 = rows.start, rows.stop
    r = q1 - q0
    if hi <= lo:  # no row of the block sees a key: its output is 0
        for Oh in Os:
            for cb in mem.blocks(d, bd):
                z = mem.alloc((r, cb.size), 0.0, label="O_ic")
                mem.store(z, Oh, rows, cb)
                mem.free(z)
        return
    keys = slice(lo, hi)
    Ss = [mem.alloc((r, hi - lo), 0.0, label="S_i") for _ in Qs]
    for cb in mem.blocks(d, bd):
        Kc = mem.load(K, keys, cb, label="K_c")
        for Qh, S in zip(Qs, Ss):
            Qc = mem.load(Qh, rows, cb, label="Q_ic")
            mem.compute(_scores(scale), S, Qc, Kc, writes=1)
            mem.free(Qc)
        mem.free(Kc)
    for S in Ss:
        if K_.tile_needs_mask(shape, q0, hi, q1, lo):
            off, win = shape.offset, shape.window
            mem.compute(lambda s, q0=q0, lo=lo: K_.apply_causal_mask(s, q0, lo, off, win),
                        S, writes=1)
        l = mem.alloc((r,), label="l_i")
        mem.compute(_softmax_rows, S, l, writes=2)
        mem.free(l)
    for cb in mem.blocks(d, bd):
        Vc = mem.load(V, keys, cb, label="V_c")
        for Oh, S in zip(Os, Ss):
            Oc = mem.alloc((r, cb.size), label="O_ic")
            mem.compute(_product, Oc, S, Vc, writes=1)
            mem.store(Oc, Oh, rows, cb)
            mem.free(Oc)
        mem.free(Vc)
    mem.free(*Ss)

ALGORITHM = ScoreResident()
