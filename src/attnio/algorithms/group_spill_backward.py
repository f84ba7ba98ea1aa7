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
unevenly near the diagonal), so count mode executes them block by block.  Masks (causal of both
alignments, sliding windows) and grouped-query attention; block-sparse layouts are not
supported (use ``flash2_backward``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import masks
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from .base import BackwardSchedule, kv_head_groups
from .group_split_backward import _fpA, _stack, dq_pass, pass_a_sides

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
    return _Sides(_stack(shape, t.group), Br, Bc2, min(t.ka * Bc2, shape.Nkv),
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
        return max(_fpA(shape.d, s.G, s.Br, s.Bc2), _fp_matmul(s.a, s.bc, s.r))

    def min_M(self, shape: Shape) -> int:
        return max(_fpA(shape.d, 1, 1, 1), _fp_matmul(1, 1, 1))

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

    def predict(self, shape: Shape, t: GroupSpillTiling) -> IOCount:
        s = _sides(shape, t)
        io, SW = self._passA(shape, s.G, s.Br, s.Bc2)
        return (io + self._matmuls(shape, s.Br, s.a, s.bc, SW)).scaled(shape.n_kv_heads)

    # ------------------------------------------------------------------ tilings
    def candidate_tilings(self, shape: Shape, M: int) -> list[GroupSpillTiling]:
        """Pass A's (G, Br, Bc2) as group_split_backward's candidates (G a divisor of g that
        fits, Br over powers of two and the sizes of the fewest blocks, the widest Bc2 that fits
        and half of it); for each, the output block of least count: bc = d or ⌈d/2⌉, a the
        largest multiple of Bc2 that fits with one-row slices, or the fewest blocks of that
        size; r the most rows that fit (r changes no count)."""
        d, Nkv = shape.d, shape.Nkv
        if M < self.min_M(shape):
            return []
        out: list[tuple[int, GroupSpillTiling]] = []
        for G, br, bc2_max in pass_a_sides(shape, M):
            for bc2 in sorted({bc2_max, max(1, bc2_max // 2)}):
                io, SW = self._passA(shape, G, br, bc2)
                best = None
                for bc in sorted({d, cdiv(d, 2)}):
                    a_fit = (M - bc) // (bc + 1)  # r = 1
                    ka_max = a_fit // bc2
                    if ka_max < 1:
                        continue
                    ka_few = cdiv(cdiv(Nkv, cdiv(Nkv, ka_max * bc2)), bc2)
                    for ka in {ka_max, min(ka_max, ka_few)}:
                        a = min(ka * bc2, Nkv)
                        total = (io + self._matmuls(shape, br, a, bc, SW)).total
                        if best is None or total < best[0]:
                            r = max(1, min(br, (M - a * bc) // (a + bc)))
                            best = (total, GroupSpillTiling(G, br, bc2, ka, bc, r))
                if best is not None:
                    out.append(best)
        out.sort(key=lambda x: x[0])
        return [t for _, t in out[:8]]

    # ------------------------------------------------------------------ the schedule
    def run_schedule(self, mem: TwoLevelMemory, arrays: dict[str, SlowArray], *, shape: Shape,
                     tiling: GroupSpillTiling, scale: float) -> None:
        """``arrays``: Q, K, V, O, dO, L (inputs) and dQ, dK, dV (outputs), stacked by head."""
        self.check_shape(shape)
        s = _sides(shape, tiling)
        for qv, kv in kv_head_groups(mem, arrays, shape, {"P": shape.Nkv, "dS": shape.Nkv}):
            dq_pass(mem, qv, kv, shape=shape, G=s.G, Br=s.Br, Bc2=s.Bc2, scale=scale,
                    spill=True)
            self._by_keys(mem, qv["P"], qv["dO"], kv["dV"], shape, s, 1.0)
            self._by_keys(mem, qv["dS"], qv["Q"], kv["dK"], shape, s, scale)

    def _by_keys(self, mem: TwoLevelMemory, X: list[SlowArray], Y: list[SlowArray],
                 out: SlowArray, shape: Shape, s: _Sides, alpha: float) -> None:
        """out[A] = alpha·Σ_h X_h[:, A]ᵀ Y_h over the written runs, output-stationary."""
        d, Nq = shape.d, shape.Nq
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
                        for rb in mem.blocks(qb.size, s.r):
                            rows = slice(qb.start + rb.start, qb.start + rb.stop)
                            x = mem.load(X[h], rows, slice(w0, w1), label="X_rw")
                            y = mem.load(Y[h], rows, cb, label="Y_rc")
                            c0, c1 = w0 - A.start, w1 - A.start
                            mem.compute(lambda c, a, b, c0=c0, c1=c1:
                                        c[c0:c1].__iadd__(alpha * (a.T @ b)),
                                        acc, x, y, writes=1)
                            mem.free(x, y)
                mem.store(acc, out, A, cb)
                mem.free(acc)


BACKWARD = GroupSpillBackward()
