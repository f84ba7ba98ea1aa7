"""Minimal-footprint Q-stationary attention: a block of query rows held with its accumulators, K and
V streamed past it one word at a time.

Schedule (FlashAttention-2's loop order with key/value tiles of one key, and each key and value
row streamed word by word, so no K/V tile and no score tile wider than one key is ever held)::

    for each query block Q_i (Br rows) that sees a key:
        load Q_i;  O_i = 0, m_i = -inf, l_i = 0, s_i = 0 in fast memory     (Br·(2d + 3) words)
        for each key j that some row of the block sees:
            for l = 1..d: load k_jl (1 word);  s_i += Q_i[:, l]·k_jl        (s_i = the scores)
            mask s_i (rows that do not see key j: -inf);  online-softmax step:
                m' = max(m_i, s_i);  s_i = exp(s_i - m');  α = exp(m_i - m')
                l_i = α·l_i + s_i;  O_i = α·O_i;  m_i = m'
            for l = 1..d: load v_jl (1 word);  O_i[:, l] += s_i·v_jl
        O_i = diag(l_i)⁻¹ O_i;  write O_i

Fast memory: ``Br·(2d + 3) + 1`` words (Q_i, O_i, m_i, l_i, s_i and the one streamed word), the
``2ad + 3a + 1`` words of issue 25 for a = Br query rows: the least footprint of any schedule that
keeps a query block's output in fast memory while the keys pass.  FlashAttention-2 with Bc = 1 holds
one K row, one V row and a score column on top: ``Br·(2d + 4) + 2d``.

Closed form.  Query block i reads Q_i once (rows_i·d) and every word of the keys and values it
sees, [lo_i, hi_i) (``kv_range``): ``2·d·(hi_i - lo_i)``; O is written once.  This is exactly
FlashAttention-2's count with Bc = 1 (its cov_i is then hi_i - lo_i), so the count is
:meth:`Flash2._group_count <attnio.algorithms.flash2.Flash2>` at (Br, 1, G):

    reads  = Σ_i [hi_i > lo_i]·G·rows_i·d + 2·d·Σ_i (hi_i - lo_i)     (= G·Nq·d + 2·Tr·Nkv·d unmasked)
    writes = G·Nq·d

per group of G query heads sharing a K/V head (``group``: each streamed word serves all G heads;
fast memory ``G·Br·(2d + 3) + 1``).  For a backward pass it also writes the logsumexp of every row
(through the score column s_i): Nq more writes a head (``cost(..., lse=True)``).  What it gains over FlashAttention-2 is room: at equal M its
query blocks are larger by about (2d + Br)/(2d + 4) rows per row, so Tr is smaller, most at small M
(M = 5d: Br = 2 against 1).

Tiling.  The count falls with Tr = ⌈Nq/Br⌉ only (unmasked): the candidates are the Br of the fewest
query blocks and a few more blocks (and powers of two when masked), for every divisor G of the group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.memory import Block, IOCount, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from .base import GroupedAlgorithm, block_sizes, divisors_upto
from .common import HeadGroup, row_stream_lower
from .flash2 import ALGORITHM as _FLASH2
from .flash2 import Flash2Tiling


@dataclass(frozen=True)
class QStationaryMinTiling:
    """Br query rows per block; ``group`` query heads share each streamed K/V word."""

    Br: int
    group: int = 1


def _fp(d: int, Br: int, G: int = 1) -> int:
    return G * Br * (2 * d + 3) + 1


def accumulate_score(col: int) -> Callable[..., None]:
    def fn(s: np.ndarray, Q: np.ndarray, w: np.ndarray) -> None:
        s += Q[:, col] * w[0, 0]
    return fn


def _key_step(shape: Shape, r0: int, j: int) -> Callable[..., None]:
    """Mask the score column of key j, then the online-softmax step (s becomes the weights)."""
    off, window, causal = shape.offset, shape.window, shape.causal

    def fn(s: np.ndarray, m: np.ndarray, l: np.ndarray, O: np.ndarray) -> None:
        if causal:
            K_.apply_causal_mask(s[:, None], r0, j, off, window)
        mn = np.maximum(m, s)
        ms = K_.safe_max(mn)
        alpha = np.exp(m - ms)
        s -= ms
        np.exp(s, out=s)
        # the accumulator is kept divided by 2^e, e the binary exponent of l, as
        # online_update_fa2 keeps it (|O| <= max |V|, finite near the largest float)
        e_old = np.frexp(l)[1]
        l *= alpha
        l += s
        e_new = np.frexp(l)[1]
        O *= np.ldexp(alpha, e_old - e_new)[:, None]
        np.ldexp(s, -e_new, out=s)
        m[:] = mn
    return fn


def accumulate_output(col: int) -> Callable[..., None]:
    def fn(O: np.ndarray, s: np.ndarray, w: np.ndarray) -> None:
        O[:, col] += s * w[0, 0]
    return fn


class QStationaryMin(GroupedAlgorithm[QStationaryMinTiling]):
    name = "q_stationary_min"
    summary = ("Q-stationary with the least footprint: Q_i, O_i, m, l and one score per row held, "
               "K and V streamed one word at a time")
    Tiling = QStationaryMinTiling
    supports_window = True
    supports_backward = True  # writes the logsumexp (Nq words a head) when asked

    def footprint(self, shape: Shape, tiling: QStationaryMinTiling) -> int:
        return _fp(shape.d, min(tiling.Br, shape.Nq), tiling.group)

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1)

    def steps(self, shape: Shape, tiling: QStationaryMinTiling) -> int:
        return cdiv(shape.Nq, tiling.Br) * shape.Nkv

    def candidate_tilings(self, shape: Shape, M: int) -> list[QStationaryMinTiling]:
        d, Nq = shape.d, shape.Nq
        out: list[QStationaryMinTiling] = []
        # groups whose one-row block fits: G (2d + 3) + 1 <= M
        for G in divisors_upto(shape.group, max(0, (M - 1) // (2 * d + 3))):
            br_max = min(Nq, (M - 1) // (G * (2 * d + 3)))
            out.extend(QStationaryMinTiling(Br, G)
                       for Br in block_sizes(Nq, br_max, powers=bool(shape.causal)))
        return out

    def _lower_total(self, shape: Shape) -> Callable[[QStationaryMinTiling], float] | None:
        """The count itself unmasked; under a causal mask without a window a bound in O(1) for
        the search's branch and bound: ``G·d·rows1`` of Q (rows that see a key) and the K/V
        rows the blocks stream, ``2d·Σ_i hi_i`` (:func:`~attnio.algorithms.base.prefix_block_keys`,
        exact where no row is clipped), plus ``G·Nq·d`` written, per group."""
        lower = row_stream_lower(shape)
        return None if lower is None else (lambda t: lower(t.Br, t.group))

    # ------------------------------------------------------------------ counts
    def _group_count(self, shape: Shape, tiling: QStationaryMinTiling) -> IOCount:
        """FlashAttention-2's count with one-key column blocks (module docstring)."""
        return _FLASH2._group_count(shape, Flash2Tiling(tiling.Br, 1, tiling.group))

    # ------------------------------------------------------------------ the schedule
    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: QStationaryMinTiling, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head; ``heads.lse``
        (optional) receives each row's logsumexp, for the backward pass (Nq more writes a
        head)."""
        d = shape.d
        band = masks.Band.queries(shape) if shape.causal else None  # the keys each block sees
        for qb in mem.blocks(shape.Nq, tiling.Br, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            if hi <= lo:  # no row of the block sees a key: its output is 0
                K_.store_empty_rows(mem, heads.Os, qb, d, heads.lse)
                continue
            stationary_block(mem, heads, qb, lo, hi, shape, scale, band=band)


def stationary_block(mem: TwoLevelMemory, heads: HeadGroup, qb: Block, lo: int, hi: int,
                     shape: Shape, scale: float, *, band: masks.Band | None = None) -> None:
    """One query block ``qb`` of the heads ``heads.Qs`` against keys [lo, hi) (lo < hi): Q_i,
    O_i, m, l and a score column per head held (``G·(2rd + 3r)`` words); K and V a word at a
    time; O_i (and with ``heads.lse`` each row's logsumexp) written.  Also ``row_hybrid``'s
    mode c.  ``band``: the mask's band of the enclosing query loop (a masked bulk count runs
    each run of alike query blocks once, the keys with the run's visits)."""
    Qs, K, V, Os, lse = heads.Qs, heads.K, heads.V, heads.Os, heads.lse
    d = shape.d
    held = []
    for Q in Qs:
        Qi = mem.load(Q, qb, label="Q_i")
        Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
        m = mem.alloc((qb.size,), -np.inf, label="m_i")
        l = mem.alloc((qb.size,), 0.0, label="l_i")
        s = mem.alloc((qb.size,), label="s_i")
        held.append((Qi, Oi, m, l, s))
    for kb in mem.blocks(shape.Nkv, 1, lo=lo, hi=hi, band=band):  # each key moves 2d words
        j = kb.start
        for _, _, _, _, s in held:
            mem.compute(lambda x: x.fill(0.0), s, writes=1)
        for cb in mem.blocks(d, 1):
            w = mem.load(K, j, cb, label="k_jl")
            for Qi, _, _, _, s in held:
                mem.compute(accumulate_score(cb.start), s, Qi, w, writes=1)
            mem.free(w)
        for _, Oi, m, l, s in held:
            mem.compute(lambda x: x.__imul__(scale), s, writes=1)
            mem.compute(_key_step(shape, qb.start, j), s, m, l, Oi, writes=4)
        for cb in mem.blocks(d, 1):
            w = mem.load(V, j, cb, label="v_jl")
            for _, Oi, _, _, s in held:
                mem.compute(accumulate_output(cb.start), Oi, s, w, writes=1)
            mem.free(w)
    for g, (Qi, Oi, m, l, s) in enumerate(held):
        if lse is not None:  # logsumexp = m + log l into the score column, written
            mem.compute(K_.logsumexp, s, m, l, writes=1)
            mem.store(s, lse[g], qb)
        mem.compute(K_.normalise_rows, Oi, l, writes=1)
        mem.store(Oi, Os[g], qb)
        mem.free(Qi, Oi, m, l, s)


ALGORITHM = QStationaryMin()
