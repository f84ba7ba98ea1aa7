"""Split-KV attention (FlashDecoding): partial results per KV split, then a reduction.

For decoding (few queries, a long KV cache) one query block cannot keep a GPU busy, so
FlashDecoding splits the keys into ``splits`` ranges processed independently; each writes a
partial output and its logsumexp to slow memory, and a reduction combines them.  Under the
sequential I/O model the split buys no I/O, it costs some: this module counts exactly how much.

Schedule, per head, with the keys cut into ``splits`` ranges of ``L = ceil(Nkv/splits)`` keys
(as a GPU runs the splits in parallel, then the reduction)::

    for each split p, each query block i (Br rows) that sees some key of p ([lo, hi) after the mask):
        load Q_i;  O = 0, m = -inf, l = 0           # FlashAttention-2 over the split's keys,
        for each Bc block of the split meeting [lo, hi): load K_j, V_j; online softmax update
        write O_p = O / l  (Br·d words) and lse_p = m + log l  (Br words)
    for each query block i:  # the reduction
        for each split p it sees: load O_p, lse_p and fold them (online softmax over splits)
        write O_i

With ``splits = 1`` there is nothing to reduce: the partial is the output, written once, and the
schedule is FlashAttention-2's.

Closed form.  Query block i sees keys ``[lo_i, hi_i)`` (all keys unmasked; causal/window as in
``flash2``).  For split p, ``[lo_ip, hi_ip) = [lo_i, hi_i) ∩ [p·L, (p+1)·L)`` and ``cov_ip`` is the
width of the Bc blocks of the split (blocks start at p·L) meeting it; ``n_i`` is the number of
splits with ``hi_ip > lo_ip``.  Then with ``splits > 1``

    reads  = sum_i [ n_i·Br_i·d + 2·d·sum_p cov_ip  +  n_i·Br_i·(d + 1) ]
    writes = sum_i [ n_i·Br_i·(d + 1) + Br_i·d ]

(a block that sees no key writes zeros: Br_i·d).  With ``splits = 1`` it is ``flash2``'s count.
So the split costs, against ``flash2`` with the same Br, ``(n_i - 1)·Br_i·d`` extra Q reads plus
``2·n_i·Br_i·(d + 1)`` partial words: for decoding (Nq small) against a long cache this is
``2·s·Nq·(d + 1) + (s-1)·Nq·d`` words next to the ``2·Nkv·d`` of reading the cache, negligible while
``s·Nq << Nkv``, and it is all the I/O the split costs.  With a mask the search bounds every
candidate by the one-split count at Bc = 1 plus those partial words (``_lower_total``), so it
scores one split count (O(splits) sums each) where no more can win.

Fast memory: the split phase holds Q_i, O_i, K_j, V_j, S_ij and three vectors
(``2·Br·d + 2·Bc·d + Br·Bc + 3·Br``, as ``flash2``); the reduction holds the accumulator, one
partial O_p and lse_p, and three vectors (``2·Br·d + 4·Br``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from . import mapper
from .base import Algorithm
from .common import HeadGroup
from .flash2 import ALGORITHM as FLASH2
from .flash2 import Flash2Tiling


@dataclass(frozen=True)
class SplitKVTiling:
    """Br query rows, Bc key rows per block, and the number of KV splits."""

    Br: int
    Bc: int
    splits: int = 1


def _fp(d: int, Br: int, Bc: int, splits: int) -> int:
    main = 2 * Br * d + 2 * Bc * d + Br * Bc + 3 * Br
    return main if splits == 1 else max(main, 2 * Br * d + 4 * Br)


def _fold_partial(acc: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray, Op: np.ndarray,
                  lse: np.ndarray) -> None:
    """Fold a normalised partial output O_p with logsumexp lse_p into (acc, m, l); ``acc`` is
    kept divided by 2^e, e the binary exponent of l, as :func:`K_.online_update_fa2` keeps its
    accumulator (so it stays within max |V|), and :func:`K_.normalise_rows` finishes it."""
    np.maximum(m, lse, out=t)
    ts = K_.safe_max(t)
    alpha = np.exp(m - ts)
    beta = np.exp(lse - ts)
    e_old = np.frexp(l)[1]
    l *= alpha
    l += beta
    e_new = np.frexp(l)[1]
    acc *= np.ldexp(alpha, e_old - e_new)[:, None]
    acc += np.ldexp(beta, -e_new)[:, None] * Op
    m[:] = t


class FlashDecoding(Algorithm[SplitKVTiling]):
    name = "flash_decoding"
    summary = "split-KV (FlashDecoding): partials per KV split written, then reduced"
    Tiling = SplitKVTiling
    supports_window = True

    def footprint(self, shape: Shape, tiling: SplitKVTiling) -> int:
        L = cdiv(shape.Nkv, tiling.splits)
        return _fp(shape.d, min(tiling.Br, shape.Nq), min(tiling.Bc, L), tiling.splits)

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1, 1)

    def validate_tiling(self, shape: Shape, tiling: SplitKVTiling) -> None:
        super().validate_tiling(shape, tiling)
        if tiling.splits > shape.Nkv:
            raise ParameterError(
                f"tiling.splits must be in [1, Nkv={shape.Nkv}], got {tiling.splits}"
            )

    def candidate_tilings(self, shape: Shape, M: int) -> list[SplitKVTiling]:
        """FlashAttention-2's least-I/O (Br, Bc) with 1, 2, 4, 8 and 16 splits.

        A split never lowers the count (module docstring): with ``splits = 1`` this schedule is
        flash2's, so flash2's best tile is the best here too and the other splits are there to be
        compared, not searched over every tile.
        """
        t = _flash2_best(shape.head(), M)
        out = []
        for s in (1, 2, 4, 8, 16):
            if s <= shape.Nkv:
                c = SplitKVTiling(t.Br, min(t.Bc, cdiv(shape.Nkv, s)), s)
                if self.footprint(shape, c) <= M:
                    out.append(c)
        return out

    def steps(self, shape: Shape, tiling: SplitKVTiling) -> int:
        L = cdiv(shape.Nkv, tiling.splits)
        return cdiv(shape.Nq, tiling.Br) * tiling.splits * cdiv(L, tiling.Bc)

    def _predict(self, shape: Shape, tiling: SplitKVTiling) -> IOCount:
        d, Bc, s = shape.d, tiling.Bc, tiling.splits
        L = cdiv(shape.Nkv, s)
        if not shape.causal:  # every query block sees every split whole
            nsplit, Tr = cdiv(shape.Nkv, L), cdiv(shape.Nq, tiling.Br)
            cov = shape.Nkv  # each split's Bc blocks tile it exactly
            if s == 1:
                return IOCount(shape.Nq * d + 2 * d * cov * Tr, shape.Nq * d)
            reads = nsplit * shape.Nq * d + 2 * d * cov * Tr + nsplit * shape.Nq * (d + 1)
            return IOCount(reads, nsplit * shape.Nq * (d + 1) + shape.Nq * d)
        if s == 1:  # one split: flash2's count, O(log N)
            q = masks.query_block_sums(shape.Nq, shape.Nkv, tiling.Br, Bc, shape.offset,
                                       shape.window)
            return IOCount(q.size_seen * d + 2 * d * q.width, shape.Nq * d)
        # O(min(#splits, #query blocks)·log N)
        ss = masks.split_sums(shape.Nq, shape.Nkv, tiling.Br, Bc, s, shape.offset, shape.window)
        reads = ss.rows_n_vis * d + 2 * d * ss.cov + ss.rows_n_vis * (d + 1)
        writes = ss.rows_n_vis * (d + 1) + shape.Nq * d
        return IOCount(reads, writes)

    def _lower_total(self, shape: Shape) -> Callable[[SplitKVTiling], float] | None:
        """With a mask, a bound for the search's branch and bound: the count with one split
        and Bc = 1 at the same Br (one O(log N) sum per Br), plus ``2·(d + 1)·R₁`` with more
        splits (R₁ the rows of the query blocks that see a key).  Every count is at least it:
        a block's Bc blocks (of a split, or of the whole key range) cover at least the keys it
        sees, which is its width at Bc = 1 (``Σ_p cov_ip >= hi_i - lo_i``), and with splits a
        block that sees a key sees at least one split, so ``Σ_i n_i·Br_i >= R₁``: the Q reads
        are at least ``R₁·d`` and the partials move ``2·Σ_i n_i·Br_i·(d + 1)``.  The splits'
        sums cost O(splits) each: the search scores one split and passes over the rest.
        None unmasked (each count is a few integer operations)."""
        if not shape.causal or shape.block_mask is not None:
            return None
        d, heads = shape.d, shape.n_heads
        at_br: dict[int, tuple[int, int]] = {}

        def lower(t: SplitKVTiling) -> float:
            if t.Br not in at_br:
                q = masks.query_block_sums(shape.Nq, shape.Nkv, t.Br, 1, shape.offset,
                                           shape.window)
                at_br[t.Br] = (q.size_seen * d + 2 * d * q.width + shape.Nq * d, q.size_seen)
            one, rows = at_br[t.Br]
            return (one + (2 * (d + 1) * rows if t.splits > 1 else 0)) * heads
        return lower

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: SplitKVTiling, scale: float) -> None:
        d, Nq, s = shape.d, shape.Nq, tiling.splits
        L = cdiv(shape.Nkv, s)
        nsplit = cdiv(shape.Nkv, L)
        band = masks.Band.queries(shape) if shape.causal else None  # the keys each block sees
        if s == 1:  # one split: the partial is the output
            self._split(mem, HeadGroup.one(Q, K, V, O), shape=shape, tiling=tiling, scale=scale,
                        band=band, sp=Block(0, 0, shape.Nkv))
            return
        Op = mem.scratch("O_part", (nsplit * Nq, d))
        Lp = mem.scratch("lse_part", (nsplit * Nq,))
        partials = HeadGroup.one(Q, K, V, Op, Lp)  # the splits write the partials
        # the splits' partials, each split against the query blocks that see part of it (the
        # body depends on the split's position: iterated split by split)
        for sp in mem.blocks(shape.Nkv, L, uniform=not shape.causal):
            self._split(mem, partials, shape=shape, tiling=tiling, scale=scale, band=band, sp=sp)
        # the reduction: each query block folds the partials of the splits it sees
        for qb in mem.blocks(Nq, tiling.Br, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            if hi <= lo:  # every row of the block is masked: its output is 0
                z = mem.alloc((qb.size, d), 0.0, label="O_i")
                mem.store(z, O, qb)
                mem.free(z)
                continue
            acc = mem.alloc((qb.size, d), 0.0, label="O_i")
            m = mem.alloc((qb.size,), -np.inf, label="m_i")
            l = mem.alloc((qb.size,), 0.0, label="l_i")
            t = mem.alloc((qb.size,), 0.0, label="tmp")
            for sp in mem.blocks(shape.Nkv, L, lo=lo, hi=hi, band=band):  # the visible splits
                rows = slice(sp.index * Nq + qb.start, sp.index * Nq + qb.stop)
                Opt = mem.load(Op, rows, label="O_p")
                lse = mem.load(Lp, rows, label="lse_p")
                mem.compute(_fold_partial, acc, m, l, t, Opt, lse, writes=4)
                mem.free(Opt, lse)
            mem.compute(K_.normalise_rows, acc, l, writes=1)
            mem.store(acc, O, qb)
            mem.free(acc, m, l, t)

    def _split(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
               tiling: SplitKVTiling, scale: float, band: masks.Band | None, sp: Block) -> None:
        """One split ``sp`` of the head ``heads``: its partial outputs into ``heads.Os[0]`` and
        logsumexps into ``heads.lse[0]`` (stacked split by split), or, with ``heads.lse`` None
        (one split), the output itself (zeros for query blocks that see no key)."""
        Q, K, V, O = heads.Qs[0], heads.K, heads.V, heads.Os[0]
        Lp = None if heads.lse is None else heads.lse[0]
        d, Nq = shape.d, shape.Nq
        sband = None if band is None else band.within(sp.start, sp.stop)
        Ks, Vs = mem.view(K, sp.slice), mem.view(V, sp.slice)
        for qb in mem.blocks(Nq, tiling.Br, band=sband):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            slo, shi = max(lo, sp.start) - sp.start, min(hi, sp.stop) - sp.start
            if shi <= slo:  # the block sees no key of this split
                if Lp is None:  # nor any other: its output is 0
                    z = mem.alloc((qb.size, d), 0.0, label="O_i")
                    mem.store(z, O, qb)
                    mem.free(z)
                continue
            Qi = mem.load(Q, qb, label="Q_i")
            Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
            m = mem.alloc((qb.size,), -np.inf, label="m_i")
            l = mem.alloc((qb.size,), 0.0, label="l_i")
            t = mem.alloc((qb.size,), 0.0, label="tmp")
            for kb in mem.blocks(sp.size, tiling.Bc, lo=slo, hi=shi, band=sband):
                Kj = mem.load(Ks, kb, label="K_j")
                Vj = mem.load(Vs, kb, label="V_j")
                S = mem.alloc((qb.size, kb.size), label="S_ij")
                mem.matmul(S, Qi, Kj, transpose_b=True, alpha=scale)
                absolute = Block(kb.index, kb.start + sp.start, kb.stop + sp.start)
                K_.mask_tile(mem, S, shape, qb, absolute)
                mem.compute(K_.online_update_fa2, S, m, l, t, Oi, Vj, writes=5)
                mem.free(S, Kj, Vj)
            mem.compute(K_.normalise_rows, Oi, l, writes=1)
            if Lp is None:
                mem.store(Oi, O, qb)
            else:
                rows = slice(sp.index * Nq + qb.start, sp.index * Nq + qb.stop)
                mem.compute(K_.logsumexp, t, m, l, writes=1)
                mem.store(Oi, O, rows)
                mem.store(t, Lp, rows)
            mem.free(Qi, Oi, m, l, t)


@functools.lru_cache(maxsize=256)
def _flash2_best(shape: Shape, M: int) -> Flash2Tiling:
    """FlashAttention-2's least-I/O tiling of ``shape`` (its default tiling): the mapper's
    search, shared with the planner's own row for flash2 on a one-head workload."""
    found = mapper.best_of(FLASH2, shape, M)
    if found is None:  # (it cannot run: default_tiling says why)
        return FLASH2.default_tiling(shape, M)
    best: Flash2Tiling = found.tiling
    return best


ALGORITHM = FlashDecoding()
