"""The backward pass in two passes, dQ first: the group's query heads stacked over one K/V stream,
D = rowsum(dO ∘ O) formed there; then dK, dV with K/V blocks stationary.

``split_backward`` reads O and dO once in a preprocessing pass (to write D), then dO again in each
of its two passes, and its dQ pass streams K and V past every query head's blocks separately.
This schedule runs the dQ pass first and

* forms D_i there: the block's dO_i is loaded for the pass anyway, so O_i is read once beside it,
  D_i = rowsum(dO_i ∘ O_i) computed in fast memory and written for the second pass (no separate
  preprocessing pass: dO is read twice, not three times, and rows that see no key read neither);
* stacks ``G`` query heads of a key/value head (a divisor of its ``g``): the same Br query rows of
  the G heads are held together and each K_j, V_j streamed past serves all of them, so K and V
  are read once per stacked block instead of once per head's block (under a causal mask the
  stacked rows see the same keys: G heads of Br rows see fewer keys than one head of G·Br).

Per key/value head with g query heads::

    pass A, per stack of G query heads, per query block i (Br rows):
        if block i sees no key: write dQ_i = 0, D_i = 0 for each head; continue
        for each head h:  load dO_i, O_i; D_i = rowsum(dO_i ∘ O_i); write D_i; free O_i
        for each head h:  load Q_i, L_i;  dQ_i = 0 in fast memory
        for each key/value block j (Bc2 rows) that block i sees:
            load K_j, V_j
            for each head h:  P = exp(scale·Q_i K_jᵀ − L_i) (masked: 0);  dS = P ∘ (dO_i V_jᵀ − D_i)
                              dQ_i += scale·dS K_j
        for each head h: write dQ_i
    pass B (split_backward's pass 1), per key/value block j (Bc rows):
        if no query sees block j: write dK_j = dV_j = 0; continue
        load K_j, V_j;  dK_j = dV_j = 0 in fast memory
        for each query head, each query block i (Br1 rows) that sees block j:
            load Q_i, dO_i, L_i, D_i;  P, dS as above
            dV_j += Pᵀ dO_i;  dK_j += scale·dSᵀ Q_i
        write dK_j, dV_j

Closed form per key/value head.  Pass A: with ``S = Σ_i [seen_i]·rows_i`` and
``W = Σ_i cov_i`` over the query blocks of Br rows against key blocks of Bc2
(:func:`attnio.core.masks.query_block_sums`: ``size_seen`` and ``width``), each seen row of each
head reads Q, dO, O (3d) and L (1); each stack reads 2d words per covered key row; every row
writes D (1: 0 where its block sees no key, as pass B may load it beside a row that does) and
dQ (d).  Pass B: with ``R₁ = Σ_j rows_j`` and ``C = Σ_j vis_j·Bc_j``
(:func:`attnio.core.masks.key_block_sums` at (Br1, Bc): ``width`` and ``size_seen``) as in
``split_backward``::

    reads  = g·(3d + 1)·S + (g/G)·2d·W + 2d·C + g·(2d + 2)·R₁
    writes = g·Nq + g·Nq·d + 2·Nkv·d

times ``batch·kv_heads``.  Against ``split_backward`` (same Bc, Br1, Bc2 and Br2 = Br, G = 1) this
saves ``g·(2·Nq·d − (d − 1)·S)`` (= g·(Nd + N) unmasked): the preprocessing's second
reading of dO (and its reading of O and dO for rows that see nothing).  Unmasked, N = Nq = Nkv, one head, Bc ≈ M/(4d),
Br ≈ M/(3d): ≈ 14·N²d²/M as ``split_backward``, one N·d less.

Fast memory.  Pass A holds, for G heads, Q_i, dO_i, dQ_i (3·G·Br·d), L_i, D_i (2·G·Br), K_j, V_j
(2·Bc2·d) and one head's P and dS (2·Br·Bc2); while D is formed it holds instead the dO_i and D_i
of the heads done so far and one O_i (at most G·Br·(d + 1) + Br·d, less).  Pass B holds K_j, V_j,
dK_j, dV_j (4·Bc·d), Q_i, dO_i (2·Br1·d), L_i, D_i (2·Br1), P and dS (2·Br1·Bc)::

    footprint = max(G·Br·(3d + 2) + 2·Bc2·d + 2·Br·Bc2,  4·Bc·d + 2·Br1·d + 2·Br1 + 2·Br1·Bc)

so M >= 6d + 4.  ``group`` is read as gcd(group, g): a divisor of the heads per key/value head.

Tiling.  The count is the sum of the two passes' and each has its own tile sizes: the candidates
pair the best few of each pass, scored apart (pass B's are ``split_backward``'s pass 1's; pass
A's range over the divisors G of g that fit and, for each, Br over powers of two and the sizes of
the fewest blocks, with the widest Bc2 that fits).  Block-sparse layouts are not supported (use
``flash2_backward``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from . import mapper
from .base import BackwardSchedule, block_sizes, divisors_upto
from .common import fp_group_pass_a, fp_split_pass1, stacked_rows
from .flash2_backward import probabilities
from .split_backward import BACKWARD as SPLIT
from .split_backward import dkdv_pass


@dataclass(frozen=True)
class GroupSplitTiling:
    """Pass A (dQ, D): ``group`` query heads of ``Br`` rows each held, ``Bc2`` key rows per step;
    pass B (dK, dV): ``Bc`` key rows held, ``Br1`` query rows per step."""

    group: int
    Br: int
    Bc2: int
    Bc: int
    Br1: int


def pass_a_sides(shape: Shape, M: int) -> list[tuple[int, int, int]]:
    """Pass A's candidate sides ``(G, Br, Bc2)``: G a divisor of the group whose one-row block
    fits (``G·Br·(3d + 2) + 2d + 2·Br <= M``), Br over the powers of two and the sizes of the
    fewest blocks below the most that fit, Bc2 the widest that fits."""
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    out = []
    most_g = max(1, (M - 2 * d) // (3 * d + 4))
    for G in divisors_upto(shape.group, most_g):
        br_max = min(Nq, (M - 2 * d) // (G * (3 * d + 2) + 2))
        for br in block_sizes(Nq, br_max):
            bc2 = min(Nkv, (M - G * br * (3 * d + 2)) // (2 * d + 2 * br))
            if bc2 >= 1:
                out.append((G, br, bc2))
    return out


def _dq_step(P: np.ndarray, dS: np.ndarray, dQ: np.ndarray, Q: np.ndarray, dO: np.ndarray,
             L: np.ndarray, D: np.ndarray, Kj: np.ndarray, Vj: np.ndarray, *, scale: float,
             mask: tuple[int, int, int, int | None] | None) -> None:
    probabilities(P, dS, Q, dO, L, D, Kj, Vj, scale, mask)
    dQ += scale * (dS @ Kj)


class GroupSplitBackward(BackwardSchedule[GroupSplitTiling]):
    """dQ first with the group's query heads stacked and D formed in passing, then dK, dV with
    K/V blocks stationary."""

    name = "group_split_backward"
    summary = ("backward in two passes, dQ first (a group's query heads stacked on one K/V "
               "stream, D formed there), then dK, dV with K/V blocks stationary")
    Tiling = GroupSplitTiling
    supports_window = True

    def footprint(self, shape: Shape, t: GroupSplitTiling) -> int:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        return max(fp_group_pass_a(d, stacked_rows(shape, t.group), min(t.Br, Nq), min(t.Bc2, Nkv)),
                   fp_split_pass1(d, min(t.Bc, Nkv), min(t.Br1, Nq)))

    def min_M(self, shape: Shape) -> int:
        return max(fp_group_pass_a(shape.d, 1, 1, 1), fp_split_pass1(shape.d, 1, 1))

    def steps(self, shape: Shape, t: GroupSplitTiling) -> int:
        return (cdiv(shape.Nq, t.Br1) * cdiv(shape.Nkv, t.Bc)
                + cdiv(shape.Nq, t.Br) * cdiv(shape.Nkv, t.Bc2))

    # ------------------------------------------------------------------ counts
    def _passA(self, shape: Shape, G: int, Br: int, Bc2: int) -> IOCount:
        d, g = shape.d, shape.group
        s = masks.query_block_sums(shape.Nq, shape.Nkv, Br, Bc2, shape.offset, shape.window,
                                   shape.causal)
        return IOCount(g * (3 * d + 1) * s.size_seen + (g // G) * 2 * d * s.width,
                       g * shape.Nq + g * shape.Nq * d)

    def _total(self, shape: Shape, t: GroupSplitTiling) -> IOCount:
        Nq, Nkv = shape.Nq, shape.Nkv
        io = (self._passA(shape, stacked_rows(shape, t.group), min(t.Br, Nq), min(t.Bc2, Nkv))
              + SPLIT._pass1(shape, min(t.Bc, Nkv), min(t.Br1, Nq)))
        return io.scaled(shape.n_kv_heads)

    def candidate_tilings(self, shape: Shape, M: int) -> list[GroupSplitTiling]:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        ones: list[tuple[int, int, int]] = []  # pass B: (words, Bc, Br1)
        b = 1
        while b <= Nq:  # Br1 a power of two, the widest Bc that fits
            bc = min(Nkv, (M - 2 * b * d - 2 * b) // (4 * d + 2 * b))
            if bc >= 1:
                ones.append((SPLIT._pass1(shape, bc, b).total, bc, b))
            b *= 2
        twos = [(self._passA(shape, G, br, bc2).total, G, br, bc2)
                for G, br, bc2 in pass_a_sides(shape, M)]  # pass A: (words, G, Br, Bc2)
        # the passes' words add up: the mapper's declared cut keeps each pass's best 3 (by words,
        # then sides), and their product is the candidate list
        return [GroupSplitTiling(G, br, bc2, bc, br1)
                for _, bc, br1 in mapper.preranked(ones, None, 3)
                for _, G, br, bc2 in mapper.preranked(twos, None, 3)]

    # ------------------------------------------------------------------ the schedule
    def one_kv_head(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                    kv: dict[str, SlowArray], *, shape: Shape, tiling: GroupSplitTiling,
                    scale: float) -> None:
        sides = (stacked_rows(shape, tiling.group), min(tiling.Br, shape.Nq),
                 min(tiling.Bc2, shape.Nkv))
        dq_pass(mem, qv, kv, shape=shape, sides=sides, scale=scale)
        dkdv_pass(mem, qv, kv, shape=shape, Bc=min(tiling.Bc, shape.Nkv),
                  Br1=min(tiling.Br1, shape.Nq), scale=scale)


def dq_pass(mem: TwoLevelMemory, qv: dict[str, list[SlowArray]], kv: dict[str, SlowArray], *,
            shape: Shape, sides: tuple[int, int, int], scale: float, spill: bool = False) -> None:
    """Pass A on one K/V head (module docstring) with the sides ``(G, Br, Bc2)`` (as
    :func:`pass_a_sides` gives them: G query heads stacked, Br query rows, Bc2 key rows): dQ,
    with D formed per query block.  ``spill`` (``group_spill_backward``): D is not written
    (nothing reads it later), and each P and dS tile is written to ``qv["P"]``, ``qv["dS"]``
    instead."""
    G, Br, Bc2 = sides
    d, Nkv = shape.d, shape.Nkv
    qband = masks.Band.queries(shape) if shape.causal else None
    for s in range(len(qv["Q"]) // G):  # G query heads stacked
        heads = range(s * G, (s + 1) * G)
        for qb in mem.blocks(shape.Nq, Br, band=qband):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            if hi <= lo:  # no key: dQ = 0, and D = 0 (pass B's blocks of Br1 rows may
                for h in heads:  # hold these rows, with P = 0 there: 0·D must be 0)
                    z = mem.alloc((qb.size, d), 0.0, label="dQ_i")
                    mem.store(z, qv["dQ"][h], qb)
                    mem.free(z)
                    if not spill:
                        z0 = mem.alloc((qb.size,), 0.0, label="D_i")
                        mem.store(z0, qv["D"][h], qb)
                        mem.free(z0)
                continue
            dO, D, Q, L, dQ = [], [], [], [], []
            for h in heads:
                dOi = mem.load(qv["dO"][h], qb, label="dO_i")
                Oi = mem.load(qv["O"][h], qb, label="O_i")
                Di = mem.alloc((qb.size,), label="D_i")
                mem.compute(K_.row_sum_dot, Di, dOi, Oi, writes=1)
                if not spill:
                    mem.store(Di, qv["D"][h], qb)
                mem.free(Oi)
                dO.append(dOi)
                D.append(Di)
            for h in heads:
                Q.append(mem.load(qv["Q"][h], qb, label="Q_i"))
                L.append(mem.load(qv["L"][h], qb, label="L_i"))
                dQ.append(mem.alloc((qb.size, d), 0.0, label="dQ_i"))
            for kb in mem.blocks(Nkv, Bc2, lo=lo, hi=hi, band=qband):
                Kj = mem.load(kv["K"], kb, label="K_j")
                Vj = mem.load(kv["V"], kb, label="V_j")
                mk = K_.mask_of(shape, qb, kb)
                for x, h in enumerate(heads):
                    P = mem.alloc((qb.size, kb.size), label="P_ij")
                    dS = mem.alloc((qb.size, kb.size), label="dS_ij")
                    mem.compute(lambda *a, mk=mk: _dq_step(*a, scale=scale, mask=mk),
                                P, dS, dQ[x], Q[x], dO[x], L[x], D[x], Kj, Vj, writes=3)
                    if spill:
                        mem.store(P, qv["P"][h], qb, kb)
                        mem.store(dS, qv["dS"][h], qb, kb)
                    mem.free(P, dS)
                mem.free(Kj, Vj)
            for x, h in enumerate(heads):
                mem.store(dQ[x], qv["dQ"][h], qb)
            mem.free(*dO, *D, *Q, *L, *dQ)


BACKWARD = GroupSplitBackward()
