"""dQ first with the group's query heads stacked (``group_split_backward``'s pass A), P and dS
written as they are formed, then dK and dV as output-stationary matmuls over them.

``group_split_backward``'s second pass holds a K/V block with its dK, dV accumulators (4·Bc·d
words) and streams every query row that sees it, recomputing P and dS: each query row is read
(2d + 2 words) once per K/V block of Bc ≈ M/(4d) keys.  Pass A forms every P and dS tile anyway;
written once (2 words a pair), they let dV = Σ_h P_hᵀ dO_h and dK = s·Σ_h dS_hᵀ Q_h run as
``small_cache_backward``'s output-stationary phases 3 and 5, whose output blocks of ``a`` keys
by ``bc`` columns (a·bc + r·(a + bc) words) hold about four times as many keys when bc = d: each
query row then costs 2d words (dO or Q) per block of a ≈ M/d keys plus 2 words per pair (P or dS
read).  Where M is near d² and N small under a causal mask (N = 300, d = 160, M = 24,000, 8 query
heads on 2) that is fewer words than recomputing.  Per key/value head with g query heads::

    pass A (group_split_backward's, with G of the g heads stacked, Br query rows, Bc2 keys a step):
        dQ_i as there, D_i = rowsum(dO_i ∘ O_i) formed and kept in fast memory (never written);
        each P and dS tile (Br x Bc2, masked entries 0) written to a slow workspace
    dV: for each output block A (a = ka·Bc2 keys, a multiple of Bc2) and column block (bc):
            for each query head h, each query block I (Br rows) whose written keys meet A:
                for each slice of r rows of I: load P_h[rows, W_I ∩ A], dO_h[rows, cols];
                acc[W_I ∩ A] += Pᵀ dO
            write the block
    dK: the same with dS and Q, scaled by s

W_I is the run of keys pass A wrote for block I: the Bc2-blocks that meet the keys I sees,
[⌊lo_I/Bc2⌋·Bc2, min(⌈hi_I/Bc2⌉·Bc2, Nkv)).  The last two phases read exactly what pass A wrote
(no workspace entry is read unwritten).

Closed form.  With the sums of :func:`attnio.core.masks.query_block_sums` over query blocks of Br
rows: against key blocks of Bc2, ``S`` (size_seen: rows of blocks that see a key), ``W`` (width:
Σ_I |W_I|) and ``SW`` (size_width: Σ_I rows_I·|W_I|, the pairs written); against key blocks of a,
``Sa`` (size_count: Σ_I rows_I·(the a-blocks that meet the keys I sees)); ``Tc = ⌈d/bc⌉``::

    reads  = g·(3d + 1)·S + (g/G)·2d·W                    (pass A: Q, dO, O, L; K, V)
             + 2·g·(Tc·SW + d·Sa)                          (dV, dK: P or dS; dO or Q)
    writes = g·Nq·d + 2·g·SW + 2·Nkv·d                     (dQ; P and dS; dK, dV)

times ``batch·kv_heads``.  Derivation: pass A is group_split_backward's (its module docstring)
less the D writes (g·Nq); it writes each tile it forms, Σ_I rows_I·|W_I| pairs of P and of dS.
The output blocks A partition the keys, so per column block the slices read each written pair
once (Tc·SW of P, as many of dS); a query block I contributes to A iff W_I meets A, and as A is
a union of Bc2-blocks that is iff the keys I sees meet A: Σ_A Σ_I rows_I·[meets] = Sa rows of dO
(or Q), each row d words over the column blocks.

Fast memory: pass A as group_split_backward's (``G·Br·(3d + 2) + 2·Bc2·d + 2·Br·Bc2``: the P and
dS tiles it writes are the ones it holds); the matmul phases hold the accumulator (a·bc), a slice
of P or dS (r·a at most) and of dO or Q (r·bc)::

    footprint = max(G·Br·(3d + 2) + 2·Bc2·d + 2·Br·Bc2,  a·bc + r·(a + bc))

so M >= 5d + 4.  The matmul phases' loops visit each (A, I) pair (the written runs meet A
unevenly near the diagonal); a pair's words depend on the sizes of A and I and on the width of
the run inside A only, so bulk count mode counts the pairs of each kind (O(a/Br + a/gcd(Br, a))
whatever N) and runs each kind once.  Masks (causal of both
alignments, sliding windows) and grouped-query attention; block-sparse layouts are not
supported (use ``flash2_backward``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from ..core import masks
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import mapper
from .base import BackwardSchedule, kv_head_groups
from .common import fp_group_pass_a, stacked_rows
from .group_split_backward import dq_pass, pass_a_sides

__all__ = ["BACKWARD", "GroupSpillBackward", "GroupSpillTiling"]


@dataclass(frozen=True)
class GroupSpillTiling:
    """Pass A: ``group`` query heads of ``Br`` rows held, ``Bc2`` keys a step; the dV, dK
    phases: output blocks of ``ka·Bc2`` keys by ``bc`` columns, reduced over slices of ``r``
    rows."""

    group: int
    Br: int
    Bc2: int
    ka: int
    bc: int
    r: int


@dataclass(frozen=True)
class _Sides:
    G: int
    Br: int
    Bc2: int
    a: int
    bc: int
    r: int


def _sides(shape: Shape, t: GroupSpillTiling) -> _Sides:
    Br, Bc2 = min(t.Br, shape.Nq), min(t.Bc2, shape.Nkv)
    return _Sides(stacked_rows(shape, t.group), Br, Bc2, min(t.ka * Bc2, shape.Nkv),
                  min(t.bc, shape.d), min(t.r, Br))


def _fp_matmul(a: int, bc: int, r: int) -> int:
    return a * bc + r * (a + bc)


def _written(shape: Shape, lo: int, hi: int, Bc2: int) -> tuple[int, int]:
    """W_I: the keys pass A wrote for a query block seeing [lo, hi) (its Bc2-blocks)."""
    return (lo // Bc2) * Bc2, min(cdiv(hi, Bc2) * Bc2, shape.Nkv)


class GroupSpillBackward(BackwardSchedule[GroupSpillTiling]):
    """group_split_backward's pass A writing P and dS, then dK, dV as output-stationary
    matmuls."""

    name = "group_spill_backward"
    summary = ("backward: dQ first (a group's query heads stacked, D formed there), P and dS "
               "written, then dK, dV as output-stationary matmuls over them")
    Tiling = GroupSpillTiling
    supports_window = True

    def footprint(self, shape: Shape, t: GroupSpillTiling) -> int:
        s = _sides(shape, t)
        return max(fp_group_pass_a(shape.d, s.G, s.Br, s.Bc2), _fp_matmul(s.a, s.bc, s.r))

    def min_M(self, shape: Shape) -> int:
        return max(fp_group_pass_a(shape.d, 1, 1, 1), _fp_matmul(1, 1, 1))

    def workspace(self, shape: Shape) -> int:
        """P and dS of every query head (and the D scratch every backward view carries)."""
        return shape.n_heads * shape.Nq * (1 + 2 * shape.Nkv)

    def steps(self, shape: Shape, t: GroupSpillTiling) -> int:
        s = _sides(shape, t)
        return (cdiv(shape.Nq, s.Br) * cdiv(shape.Nkv, s.Bc2)
                + 2 * cdiv(shape.Nkv, s.a) * cdiv(shape.d, s.bc) * cdiv(shape.Nq, s.r))

    # ------------------------------------------------------------------ counts
    def _sums(self, shape: Shape, Br: int, B: int) -> masks.BlockSums:
        return masks.query_block_sums(shape.Nq, shape.Nkv, Br, B, shape.offset, shape.window,
                                      shape.causal)

    def _passA(self, shape: Shape, G: int, Br: int, Bc2: int) -> tuple[IOCount, int]:
        """Pass A's count (one K/V head) and the pairs it writes per query head (SW)."""
        d, g = shape.d, shape.group
        q = self._sums(shape, Br, Bc2)
        return (IOCount(g * (3 * d + 1) * q.size_seen + (g // G) * 2 * d * q.width,
                        g * shape.Nq * d + 2 * g * q.size_width), q.size_width)

    def _matmuls(self, shape: Shape, Br: int, a: int, bc: int, SW: int) -> IOCount:
        """The dV and dK phases' count (one K/V head)."""
        d, g = shape.d, shape.group
        Sa = self._sums(shape, Br, a).size_count
        return IOCount(2 * g * (cdiv(d, bc) * SW + d * Sa), 2 * shape.Nkv * d)

    def _total(self, shape: Shape, t: GroupSpillTiling) -> IOCount:
        s = _sides(shape, t)
        io, SW = self._passA(shape, s.G, s.Br, s.Bc2)
        return (io + self._matmuls(shape, s.Br, s.a, s.bc, SW)).scaled(shape.n_kv_heads)

    # ------------------------------------------------------------------ tilings
    def candidate_tilings(self, shape: Shape, M: int) -> list[GroupSpillTiling]:
        """Pass A's (G, Br, Bc2) as group_split_backward's candidates (G a divisor of g that
        fits, Br over powers of two and the sizes of the fewest blocks, the widest Bc2 that fits
        and half of it); each a partial tiling the mapper completes with the output block of
        least count (:func:`~attnio.algorithms.mapper.completion`, the first on ties): bc = d or
        ⌈d/2⌉, a the largest multiple of Bc2 that fits with one-row slices, or the fewest
        blocks of that size; r the most rows that fit (r changes no count).  The 8 of least
        count are kept (:func:`~attnio.algorithms.mapper.preranked`)."""
        d, Nkv = shape.d, shape.Nkv
        if mapper.needs_M(self, shape, M) is not None:
            return []
        out: list[tuple[int, GroupSpillTiling]] = []
        for G, br, bc2_max in pass_a_sides(shape, M):
            for bc2 in sorted({bc2_max, max(1, bc2_max // 2)}):
                io, SW = self._passA(shape, G, br, bc2)

                def sides(bc2: int = bc2) -> Iterator[tuple[int, int]]:  # (bc, ka) that fit
                    for bc in sorted({d, cdiv(d, 2)}):
                        ka_max = (M - bc) // (bc + 1) // bc2  # r = 1
                        if ka_max < 1:
                            continue
                        ka_few = cdiv(cdiv(Nkv, cdiv(Nkv, ka_max * bc2)), bc2)
                        for ka in {ka_max, min(ka_max, ka_few)}:
                            yield bc, ka

                def count(side: tuple[int, int], br: int = br, bc2: int = bc2,
                          io: IOCount = io, SW: int = SW) -> int:
                    bc, ka = side
                    return (io + self._matmuls(shape, br, min(ka * bc2, Nkv), bc, SW)).total

                best = mapper.completion(sides(), count)
                if best is not None:
                    total, (bc, ka) = best
                    a = min(ka * bc2, Nkv)
                    r = max(1, min(br, (M - a * bc) // (a + bc)))
                    out.append((total, GroupSpillTiling(G, br, bc2, ka, bc, r)))
        return [t for _, t in mapper.preranked(out, lambda c: c[0], 8)]

    # ------------------------------------------------------------------ the schedule
    def run_schedule(self, mem: TwoLevelMemory, arrays: dict[str, SlowArray], *, shape: Shape,
                     tiling: GroupSpillTiling, scale: float) -> None:
        """``arrays``: Q, K, V, O, dO, L (inputs) and dQ, dK, dV (outputs), stacked by head."""
        self.check_shape(shape)
        s = _sides(shape, tiling)
        for qv, kv in kv_head_groups(mem, arrays, shape, {"P": shape.Nkv, "dS": shape.Nkv}):
            dq_pass(mem, qv, kv, shape=shape, sides=(s.G, s.Br, s.Bc2), scale=scale, spill=True)
            self._by_keys(mem, qv["P"], qv["dO"], kv["dV"], shape, s, 1.0)
            self._by_keys(mem, qv["dS"], qv["Q"], kv["dK"], shape, s, scale)

    def _by_keys(self, mem: TwoLevelMemory, X: list[SlowArray], Y: list[SlowArray],
                 out: SlowArray, shape: Shape, s: _Sides, alpha: float) -> None:
        """out[A] = alpha·Σ_h X_h[:, A]ᵀ Y_h over the written runs, output-stationary.  Every
        (A, I) pair is visited step by step; bulk count mode runs each kind of pair once
        (:meth:`_by_keys_bulk`)."""
        if mem.bulk:
            self._by_keys_bulk(mem, X, Y, out, shape, s, alpha)
            return
        d, Nq = shape.d, shape.Nq
        products = [_Product(x, y, alpha, s.r) for x, y in zip(X, Y)]
        for A in mem.blocks(shape.Nkv, s.a, uniform=False):
            for cb in mem.blocks(d, s.bc):
                acc = mem.alloc((A.size, cb.size), 0.0, label="acc")
                for h in range(len(X)):
                    for qb in mem.blocks(Nq, s.Br, uniform=False):
                        lo, hi = kv_range(shape, qb.start, qb.stop)
                        if hi <= lo:
                            continue
                        w0, w1 = _written(shape, lo, hi, s.Bc2)
                        w0, w1 = max(w0, A.start), min(w1, A.stop)
                        if w1 <= w0:
                            continue
                        _pair(mem, products[h], acc, qb, cb, A, w0, w1)
                mem.store(acc, out, A, cb)
                mem.free(acc)

    def _by_keys_bulk(self, mem: TwoLevelMemory, X: list[SlowArray], Y: list[SlowArray],
                      out: SlowArray, shape: Shape, s: _Sides, alpha: float) -> None:
        """:meth:`_by_keys` in bulk count mode, O(a/Br + a/gcd(Br, a)) whatever N.

        A pair (A, I) moves words that depend on the sizes of A and of I and on the width of
        the written run inside A only, so the counts, the peak and the steps depend on how
        many pairs of each kind there are (:func:`_pair_kinds`).  The output blocks of each
        size run once with their multiplicity (accumulator, store), and each kind of pair once
        with its own, the accumulator held as a stand-in (the same words resident, none moved);
        the query blocks an (A, column block, head) meets no written key of take their step."""
        d, Nq, Nkv, g = shape.d, shape.Nq, shape.Nkv, len(X)
        kinds = _pair_kinds(shape, s)
        product = _Product(X[0], Y[0], alpha, s.r)  # the heads move alike words: one runs
        tq, tcb = cdiv(Nq, s.Br), cdiv(d, s.bc)
        sizes = [(s.a, Nkv // s.a, Block(0, 0, s.a))]
        if Nkv % s.a:
            sizes.append((Nkv % s.a, 1, Block(Nkv // s.a, Nkv // s.a * s.a, Nkv)))
        for size, count, A in sizes:
            for _ in mem.blocks(count, 1):  # the output blocks' steps
                for cb in mem.blocks(d, s.bc):
                    acc = mem.alloc((A.size, cb.size), 0.0, label="acc")
                    mem.store(acc, out, A, cb)
                    mem.free(acc)
            pairs = 0
            for cb in _column_runs(d, s.bc):
                acc = mem.alloc((A.size, cb.size), label="acc")
                for (asize, qsize, width), n in sorted(kinds.items()):
                    if asize != size:
                        continue
                    if cb.start == 0:
                        pairs += n
                    qb = Block(0, 0, qsize) if qsize == min(s.Br, Nq) else \
                        Block(Nq // s.Br, Nq - qsize, Nq)
                    for _ in mem.blocks(n * cb.index * g, 1):  # a step per pair and head
                        _pair(mem, product, acc, qb, cb, A, A.start, A.start + width)
                mem.free(acc)
            for _ in mem.blocks((count * tq - pairs) * tcb * g, 1):  # query blocks skipped
                pass


@dataclass(frozen=True)
class _Product:
    """One head's operands of ``alpha·Xᵀ Y`` (X: its P or dS, Y: its dO or Q), read ``r``
    query rows at a time."""

    X: SlowArray
    Y: SlowArray
    alpha: float
    r: int


def _pair(mem: TwoLevelMemory, p: _Product, acc: FastTile, qb: Block, cb: Block, A: Block,
          w0: int, w1: int) -> None:
    """acc[w0 - A.start : w1 - A.start] += alpha·X[I, w0:w1]ᵀ Y[I, cb] (I = ``qb``), r rows at
    a time (``p``: X, Y, alpha, r)."""
    X, Y, alpha, r = p.X, p.Y, p.alpha, p.r
    for rb in mem.blocks(qb.size, r):
        rows = slice(qb.start + rb.start, qb.start + rb.stop)
        x = mem.load(X, rows, slice(w0, w1), label="X_rw")
        y = mem.load(Y, rows, cb, label="Y_rc")
        c0, c1 = w0 - A.start, w1 - A.start
        mem.compute(lambda c, a, b, c0=c0, c1=c1: c[c0:c1].__iadd__(alpha * (a.T @ b)),
                    acc, x, y, writes=1)
        mem.free(x, y)


def _column_runs(d: int, bc: int) -> list[Block]:
    """The column blocks of ``[0, d)`` in runs of equal size: ``Block(count, start, stop)``
    of a representative each."""
    bc = min(bc, d)
    out = [Block(d // bc, 0, bc)]
    if d % bc:
        out.append(Block(1, d // bc * bc, d))
    return out


def _pairs_of(shape: Shape, s: _Sides, lo: int, hi: int
              ) -> tuple[list[tuple[int, int]], int]:
    """The pairs a query block seeing keys [lo, hi) (hi > lo) makes with the output blocks:
    ``(partials, middle)``, the (A size, width) of the first and last output blocks its
    written run meets, and the number of whole blocks (size a, width a) between them."""
    Nkv, a = shape.Nkv, s.a
    w0, w1 = _written(shape, lo, hi, s.Bc2)
    fa, la = w0 // a, (w1 - 1) // a
    def size(A: int) -> int:
        return min(Nkv, (A + 1) * a) - A * a
    if fa == la:
        return [(size(fa), w1 - w0)], 0
    return [(size(fa), (fa + 1) * a - w0), (size(la), w1 - la * a)], la - fa - 1


def _pair_kinds(shape: Shape, s: _Sides) -> dict[tuple[int, int, int], int]:
    """How many (A, I) pairs there are of each kind ``(A size, I rows, width)``, per head and
    column block, in O(a/Br + a/gcd(Br, a)): the query blocks fall into intervals where each
    end of the keys they see is constant (clipped) or moves with the block inside the whole
    output blocks; the few where an end lies in the short last output block are counted one
    by one, the others in classes of one phase modulo a (an arithmetic progression of
    blocks), whose pairs differ only in their number of whole blocks, linear in the block."""
    Nq, Nkv, Br, a, off = shape.Nq, shape.Nkv, s.Br, s.a, shape.offset
    afull = Nkv // a * a
    W = shape.window if shape.causal else None
    kinds: dict[tuple[int, int, int], int] = {}

    def add(key: tuple[int, int, int], n: int) -> None:
        if n:
            kinds[key] = kinds.get(key, 0) + n

    def one(i0: int, i1: int) -> None:  # query blocks [i0, i1) one by one
        for i in range(i0, i1):
            r0, r1 = i * Br, min(Nq, (i + 1) * Br)
            lo, hi = kv_range(shape, r0, r1)
            if hi > lo:
                parts, mid = _pairs_of(shape, s, lo, hi)
                for sz, w in parts:
                    add((sz, r1 - r0, w), 1)
                add((a, r1 - r0, a), mid)

    n = Nq // Br  # whole query blocks; the short last one by itself
    if not shape.causal:
        parts, mid = _pairs_of(shape, s, 0, Nkv)
        for sz, w in parts:
            add((sz, Br, w), n)
        add((a, Br, a), n * mid)
        one(n, cdiv(Nq, Br))
        return kinds
    # unclipped ends of block i: lo = i·Br + cl (with a window), hi = i·Br + ch
    cl = None if W is None else off + 1 - W
    ch = Br + off
    cuts = {0, n}
    for x in (1, afull + 1, Nkv):  # hi >= x from i >= ceil((x - ch)/Br)
        cuts.add(min(n, max(0, -(-(x - ch) // Br))))
    if cl is not None:
        for x in (0, afull, Nkv):  # lo >= x
            cuts.add(min(n, max(0, -(-(x - cl) // Br))))
    P = a // math.gcd(Br, a)
    marks = sorted(cuts)
    for i0, i1 in zip(marks[:-1], marks[1:]):
        uh = i0 * Br + ch
        ul = None if cl is None else i0 * Br + cl
        hi_moves = 1 <= uh <= afull
        lo_moves = ul is not None and 0 <= ul < afull
        if (afull < uh < Nkv) or (ul is not None and afull <= ul < Nkv):
            one(i0, i1)  # an end inside the short last output block: a few blocks
            continue
        if not (hi_moves or lo_moves):  # both ends constant: alike
            lo, hi = kv_range(shape, i0 * Br, i0 * Br + Br)
            if hi > lo:
                parts, mid = _pairs_of(shape, s, lo, hi)
                for sz, w in parts:
                    add((sz, Br, w), i1 - i0)
                add((a, Br, a), (i1 - i0) * mid)
            continue
        step = P * Br // a  # output blocks an end moves over per member of a class
        grow = step * (int(hi_moves) - int(lo_moves))
        def pairs(i: int) -> tuple[list[tuple[int, int]], int] | None:
            lo, hi = kv_range(shape, i * Br, i * Br + Br)
            return _pairs_of(shape, s, lo, hi) if hi > lo else None

        for k in range(min(P, i1 - i0)):
            first = i0 + k
            m = -(-(i1 - first) // P)
            # a member whose run lies in one output block (one pair) can only be the first or
            # the last of its class: by itself
            if m > 1 and grow and (p := pairs(first)) is not None and len(p[0]) == 1:
                one(first, first + 1)
                first, m = first + P, m - 1
            if m > 1 and grow and (p := pairs(first + (m - 1) * P)) is not None \
                    and len(p[0]) == 1:
                one(first + (m - 1) * P, first + (m - 1) * P + 1)
                m -= 1
            got = pairs(first) if m else None
            if got is None:
                continue
            parts, mid = got
            for sz, w in parts:
                add((sz, Br, w), m)
            add((a, Br, a), m * mid + grow * (m * (m - 1) // 2))
    one(n, cdiv(Nq, Br))
    return kinds

BACKWARD = GroupSpillBackward()
