"""The machinery the segment bounds share (docs/bounds.md §1.2, Lemma A.3 in §5, §12).

An execution is cut into h segments of K I/Os each (the last one shorter): ``Q >= K·(h - 1)``.
Each bound caps what one segment can do by a per-segment maximum Λ (a middle segment), Λ_f (the
first: fast memory starts empty) and Λ_l (the last: the outputs end in slow memory), and the
telescoping lemma (Lemma 6) turns ``work <= Λ_f + Λ_l + (h - 2)·Λ`` into the least h.

Every maximum here is computed exactly, from closed-form candidates (no search), and multiplied
by ``INFLATE`` = 1 + 10⁻⁹ against rounding, so the integer ``h`` can only be under-counted: the
bound stays valid.  Any parameters (K, μ, ν) give a valid bound; the parameters only decide how
tight it is.

* :func:`potential_lambdas`: Λ, Λ_f, Λ_l of the potential arguments (Theorems A, C, D): maxima of
  ``F(p, q) = √(q·g(p)) - μ(p + q)`` over a hexagon and two parallelograms, g a maximum of
  "branches" ``c2·p² + c3·p³``;
* :func:`pooled_lambdas`: Λ, Λ_f, Λ_l of the pooled arguments (Theorems B, E): maxima over R of
  ``E(I, X) = max_{0 <= r <= ρ(I)} √(J(I)·(X + r)) - ν·r`` with I + X fixed;
* :func:`segments_bound`: the least h and ``K·(h - 1)``;
* :func:`tabulated_best`: a theorem at its tabulated (K, multiplier), plus a few more segment
  lengths when the execution has few segments (docs/bounds.md §12);
* :func:`more_memory`: a bound at M closed under more memory: the maximum of its values at M and
  at larger M' (any schedule for M runs unchanged with M' >= M words, docs/bounds.md §12.1);
* :class:`PairsTheorem`: Theorems A, B, D, E as data (their work, table, kind, words), evaluated
  for P required pairs or a Shape: what each theorem's three public functions return.

The searches run on batches (docs/bounds.md §12.2): :func:`potential_lambdas_many`,
:func:`pooled_lambdas_many` and :func:`segments_bound_many` are the scalar functions above
elementwise, with the same floats and integers bit for bit (the scalar ones stay, the reference:
``tests/bounds/test_bounds_values.py``); what does not depend on P is cached per (theorem, d, M).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

import numpy as np

if TYPE_CHECKING:  # numpy.typing costs ~15 ms at import: annotations only
    import numpy.typing as npt

from ..core.checks import check_int
from ..core.workload import MAX_M, Shape
from . import params
from .base import Bound, check_M, pairs_of, regime_of

__all__ = ["FEW_SEGMENTS", "INFLATE", "K_FACTORS", "MORE_MEMORY_SEGMENTS", "Branch",
           "PairsTheorem", "fine_best", "fine_ks", "fine_multipliers", "more_memory",
           "more_memory_grid", "pooled_lambdas", "pooled_lambdas_batch", "pooled_lambdas_many",
           "potential_lambdas",
           "potential_lambdas_many", "segments_bound", "segments_bound_many", "segments_h",
           "sum_line_peak", "tabulated_best", "tabulated_candidates", "tabulated_pick"]

#: Every per-segment maximum is multiplied by this before it divides (rounding safety).
INFLATE = 1.0 + 1e-9

#: A branch ``c2·p² + c3·p³`` of the function g of a potential argument.
Branch = tuple[float, float]


def segments_bound(work: float, K: int, lam: float, lam_f: float, lam_l: float) -> int:
    """``K·(h - 1)`` for the least h with ``work <= Λ_f + Λ_l + (h - 2)·Λ`` (h >= 2), or
    ``work <= Λ_f`` (h = 1): a lower bound on the I/O of any execution doing ``work`` units of
    work when a segment of K I/Os does at most Λ (Λ_f first, Λ_l last).  Lemma 6."""
    if work <= lam_f:
        return 0
    if work <= lam_f + lam_l:
        return K
    return K * (1 + math.ceil((work - lam_f - lam_l) / lam))


# ---------------------------------------------------------------------------- potential (A, C, D)
def sum_line_peak(T: float, c2: float, c3: float) -> float:
    """The p maximising ``(T - p)·(c2·p² + c3·p³)`` on [0, T] (log-concave: one maximum).

    d/dp = p·(-4·c3·p² + 3·(c3·T - c2)·p + 2·c2·T): the positive root of the quadratic."""
    if c3 == 0.0:
        return 2.0 * T / 3.0
    if c2 == 0.0:
        return 0.75 * T
    b = 3.0 * (c3 * T - c2)
    return (b + math.sqrt(b * b + 32.0 * c2 * c3 * T)) / (8.0 * c3)


def _polygon_max(poly: Sequence[tuple[float, float]], branches: Sequence[Branch], mu: float,
                 g: Callable[[float], float]) -> float:
    """max over polygon ``poly`` (edges p = const, q = const or p + q = const) of
    ``F(p, q) = √(q·g(p)) - μ(p + q)``, g = max over ``branches`` of c2·p² + c3·p³.

    Each branch's F_b has no local maximum inside (∂²/∂q² < 0 and √g_b convex in p: indefinite
    Hessian), so its maximum over the polygon is on an edge: at a vertex, at the peak of a
    concave section p = const (q = g_b(p)/(4μ²)), or at the peak of a section p + q = T
    (:func:`sum_line_peak`); sections q = const are convex in p (vertices).  F >= F_b, so the
    largest F over all these points is max F exactly."""
    pts = list(poly)
    n = len(poly)
    mu4 = 4.0 * mu * mu
    for i in range(n):
        (p0, q0), (p1, q1) = poly[i], poly[i + 1 if i + 1 < n else 0]
        if p0 == p1:
            if mu4 > 0.0 and p0 > 0.0:  # (μ so small that μ² underflows: no peak)
                lo, hi = (q0, q1) if q0 < q1 else (q1, q0)
                cube = p0 ** 3
                for c2, c3 in branches:
                    qs = (c2 * p0 * p0 + c3 * cube) / mu4
                    if lo < qs < hi:
                        pts.append((p0, qs))
        elif q0 != q1:  # p + q = T
            T = p0 + q0
            lo, hi = (p0, p1) if p0 < p1 else (p1, p0)
            for c2, c3 in branches:
                ps = sum_line_peak(T, c2, c3)
                if lo < ps < hi:
                    pts.append((ps, T - ps))
    best = -math.inf
    sqrt = math.sqrt
    for p, q in pts:
        if 0.0 > p:  # (as max(p, 0.0): p unless 0 is larger)
            p = 0.0
        if 0.0 > q:
            q = 0.0
        v = sqrt(q * g(p)) - mu * (p + q)
        if v > best:
            best = v
    return best


def potential_lambdas(M: float, K: float, mu: float,
                      branches: Sequence[Branch]) -> tuple[float, float, float]:
    """(Λ, Λ_f, Λ_l) of a potential argument, inflated (docs/bounds.md, Lemma A.3).

    A segment with p imported non-accumulator words and q exported accumulator words does at most
    ``√(q·g(p))`` units of work; the potential ``μ·(accumulator words held at a boundary)``
    telescopes.  With x, y the accumulator words held at the segment's start and end, R + W = K:
    ``p = M - x + R``, ``q = y + W``, so (p, q) ranges over the hexagon (0,K), (0,M+K), (M,M+K),
    (M+K,M), (M+K,0), (K,0) and ``Λ = μ(M + K) + max F``; the first segment (x = 0, nothing
    resident) over the parallelogram (0,K), (0,K+M), (K,M), (K,0), ``Λ_f = μK + max F``; the last
    (every accumulator written, q = W) over (K,0), (K+M,0), (M,K), (0,K), ``Λ_l = μ(M+K) + max F``.
    """
    (a2, a3), *rest = branches

    def g(p: float) -> float:  # (as max() over the branches: the first of equal ones)
        top = a2 * p * p + a3 * p * p * p
        for c2, c3 in rest:
            x = c2 * p * p + c3 * p * p * p
            if x > top:
                top = x
        return top

    M, K = float(M), float(K)
    hexa = ((0.0, K), (0.0, M + K), (M, M + K), (M + K, M), (M + K, 0.0), (K, 0.0))
    par_f = ((0.0, K), (0.0, K + M), (K, M), (K, 0.0))
    par_l = ((K, 0.0), (K + M, 0.0), (M, K), (0.0, K))
    lam = mu * (M + K) + _polygon_max(hexa, branches, mu, g)
    lam_f = mu * K + _polygon_max(par_f, branches, mu, g)
    lam_l = mu * (M + K) + _polygon_max(par_l, branches, mu, g)
    return lam * INFLATE, lam_f * INFLATE, lam_l * INFLATE


# ---------------------------------------------------------------------------- vectorised (numpy)
# The searches below evaluate a theorem at many (M, K, multiplier) at once.  Every value equals the
# scalar code's bit for bit: the same floating-point operations in the same order, elementwise
# (numpy's +, -, *, /, sqrt and comparisons are IEEE double like Python's), the cubes of the
# vertical edges' peaks by the C pow that Python's float power calls (numpy's may round
# differently) or, where the cube is an integer below 2⁵³, by products (exact, so the same:
# :func:`_cubes`), every degenerate case of the scalar code (coinciding vertices, μ²
# underflowing) decided per element, NaN candidates skipped as the scalar ``v > best`` skips them
# (``fmax``), and the integer arithmetic of segments_bound exact
# (tests/bounds/test_bounds_values.py).
if TYPE_CHECKING:
    FloatArray = npt.NDArray[np.float64]


#: The largest integer whose cube is below 2⁵³: for an integer 0 <= v <= this, v³ is a float64
#: exactly, so ``v*v*v`` (each product exact) is it, and so is C's ``pow(v, 3.0)`` (within one
#: unit in the last place of the true value: the true value itself where that is a float; checked
#: for every such v by tests/bounds/test_bounds_values.py).
EXACT_CUBE_MAX = 208063.0
#: :func:`_cubes` takes the exact products from this many values on (below, the test costs more).
EXACT_CUBE_MIN = 64


def _cubes(x: FloatArray) -> FloatArray:
    """``x ** 3`` elementwise (1-d), rounded as the scalar code's ``p0 ** 3`` (Python's float
    power, C's ``pow(v, 3.0)``; for v >= 0, every value cubed here, ``math.pow(v, 3.0)`` calls
    the same and is faster; mapped without a Python-level loop), or, from EXACT_CUBE_MIN values
    on, ``v*v*v`` where v is an integer in [0, EXACT_CUBE_MAX] (the same float: exact) and
    ``math.pow`` elsewhere (segment lengths and memories are integers: most values are)."""
    if len(x) < EXACT_CUBE_MIN:
        vals = x.tolist()
        return np.fromiter(map(math.pow, vals, itertools.repeat(3.0)), dtype=np.float64,
                           count=len(vals))
    out: FloatArray = x * x * x
    other = ~((x >= 0.0) & (x <= EXACT_CUBE_MAX) & (x == np.floor(x)))
    if other.any():
        idx = np.flatnonzero(other)
        vals = x[idx].tolist()
        out[idx] = np.fromiter(map(math.pow, vals, itertools.repeat(3.0)), dtype=np.float64,
                               count=len(vals))
    return out


def _branch_cases(c2: tuple[float, ...], c3: tuple[float, ...]
                  ) -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    """Which of :func:`sum_line_peak`'s cases each branch takes: (every branch a special case,
    the branches with c3 = 0, those with c2 = 0 and c3 != 0)."""
    lin = tuple(b for b, x in enumerate(c3) if x == 0.0)
    sq = tuple(b for b, (x, y) in enumerate(zip(c2, c3)) if x == 0.0 and y != 0.0)
    return len(lin) + len(sq) == len(c2), lin, sq


def _line_peaks(T: FloatArray, c2: FloatArray, c3: FloatArray,
                cases: tuple[bool, tuple[int, ...], tuple[int, ...]]) -> FloatArray:
    """:func:`sum_line_peak` elementwise, lines T (lines × pairs) × branches (c2, c3): (lines ×
    branches × pairs), the same operations (its two special cases by branch, ``cases``:
    :func:`_branch_cases`)."""
    Tc = T[:, None, :]
    special, lin, sq = cases
    if special:  # (every branch one of the special cases: no root)
        out: FloatArray = np.empty((T.shape[0], len(c2), T.shape[1]))
    else:
        c2c, c3c = c2[:, None], c3[:, None]
        b = 3.0 * (c3c * Tc - c2c)
        out = (b + np.sqrt(b * b + 32.0 * c2c * c3c * Tc)) / (8.0 * c3c)
    if lin:
        v = 2.0 * T / 3.0
        for j in lin:
            out[:, j, :] = v
    if sq:
        v = 0.75 * T
        for j in sq:
            out[:, j, :] = v
    return out


#: :func:`_potential_lambdas_many` shares the μ-free work between the elements of a grid (k
#: pairs (M, K) repeated alike, the fine search's samples) from GRID_MIN elements on, and
#: between elements of one (M, K) otherwise from SHARE_MIN elements on where they have at most
#: half as many distinct (M, K) (below, or else, finding them or the gathers cost more than
#: they save: the same floats).
GRID_MIN = 96
SHARE_MIN = 256
#: Below this many elements its groups' maxima are one ``fmax.reduceat`` (above, row by row).
REDUCEAT_MAX = 64


def _potential_lambdas_many(Ma: FloatArray, Ka: FloatArray, mua: FloatArray,
                            branches: Sequence[Branch],
                            kept: npt.NDArray[np.bool_] | None = None,
                            ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`potential_lambdas_many` on 1-d float arrays of one length (floating-point warnings
    off: every edge case is masked as the scalar code decides it).

    Per (M, K): the candidates that do not depend on μ (the 8 vertices; the sum lines' peaks:
    T = M + (M + K) and T = K of the hexagon, T = M + K of the first and of the last polygon,
    each with its own range, T = K of both), √(q·g(p)) and p + q each (−∞ where a peak is not
    inside its edge: its F is −∞, never the maximum), in groups of the polygons that take them
    (:func:`_potential_layout`); per element F = √(q·g(p)) − μ(p + q) and each group's
    maximum, then the vertical edges' peaks (which depend on μ) and each polygon's maximum over
    its groups.  NaNs are skipped (``fmax``), as the scalar code's ``v > best`` never takes one,
    and a polygon without a candidate is −∞ as there."""
    n, nb = len(Ma), len(branches)
    c2, c3, c2c, c3c, c2t, c3t, cases = _potential_layout(tuple(branches))
    sel, lim_rows, starts, kept_rows, poly = _potential_rows(nb, bool((mua >= 0.0).all()))
    # the distinct (M, K): u maps each element to its pair (None: all distinct, in order); or
    # a grid (the fine search's samples): element r·k + j is the pair j, for k pairs
    u: npt.NDArray[np.intp] | None = None
    k = _grid_period(Ma, Ka, kept) if n >= GRID_MIN else 0
    if k:
        Ma, Ka = Ma[:k], Ka[:k]
        if kept is not None:
            kept = kept[:, :k]
    elif n >= SHARE_MIN:
        order = np.lexsort((Ka, Ma))
        Ms, Ks = Ma[order], Ka[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(Ms[1:], Ms[:-1], out=new[1:])
        new[1:] |= Ks[1:] != Ks[:-1]
        if 2 * int(np.count_nonzero(new)) <= n:  # (else the gathers cost more than they save)
            u = np.empty(n, dtype=np.intp)
            u[order] = np.cumsum(new) - 1
            first = order[new]
            if kept is not None and not (kept[:, first][:, u] == kept).all():
                u = None  # kept not a function of (M, K): no sharing
            else:
                Ma, Ka = Ma[first], Ka[first]
                if kept is not None:
                    kept = kept[:, first]
    m = len(Ma)
    # B: 0, K, M, M + K, M + (M + K), -inf, inf, then M, 0 where M + K != M (else inf: the
    # lines T = M + K and M + (M + K) are edges only there) and K where M + K rounds to M
    # (else 0: the last polygon's vertical edge only there)
    B = np.empty((10, m))
    B[0] = 0.0
    B[1] = Ka
    B[2] = Ma
    np.add(Ma, Ka, out=B[3])
    np.add(Ma, B[3], out=B[4])
    B[5] = -np.inf
    B[6] = np.inf
    MK = B[3]
    edge = MK != Ma
    ne = ~edge
    B[7] = Ma
    np.copyto(B[7], np.inf, where=ne)
    B[8] = 0.0
    np.copyto(B[8], np.inf, where=ne)
    np.multiply(Ka, ne, out=B[9])  # (K·1 = K, K·0 = 0: K finite)
    # the sum lines' peaks: T = K, M + K, M + (M + K), branches each (3·nb × pairs)
    # (gathers by ``take``, the rows repeated per branch in its indices: cheaper than fancy
    # indexing and ``repeat``, the same values)
    t_rows, p0_rows, cube_rows, gp0_rows, hi_rows = _vertical_rows(nb)
    peaks = _line_peaks(B.take(_T_ROWS, axis=0), c2, c3, cases).reshape(3 * nb, m)
    T3 = B.take(t_rows, axis=0)
    # the points: the vertices, then the peaks (clamped at 0)
    vp = B.take(_VP_ROWS, axis=0)
    Pp = np.concatenate([vp, np.maximum(peaks, 0.0)])
    Qq = np.concatenate([B.take(_VQ_ROWS, axis=0), np.maximum(T3 - peaks, 0.0)])
    G = c2c * Pp * Pp + c3c * Pp * Pp * Pp  # branches × points × pairs
    if kept is None:
        g = G.max(axis=0)
    else:
        g = np.where(kept[:, None, :], G, -np.inf).max(axis=0)
    # the candidates in their groups; a peak is one where lo < p < hi (vertices: -inf, inf)
    X = np.concatenate([vp, peaks]).take(sel, axis=0)
    lim = B.take(lim_rows, axis=0)
    R = len(sel)
    inside = (lim[:R] < X) & (X < lim[R:])
    if kept is not None:
        inside &= np.concatenate([np.ones((1, m), dtype=bool), kept])[kept_rows]
    S = np.sqrt(Qq * g).take(sel, axis=0)
    np.copyto(S, -np.inf, where=~inside)
    W = (Pp + Qq).take(sel, axis=0)
    # the vertical edges' peaks (p = p0, q = g_b(p0)/(4μ²), q in (0, hi)): hexagon p0 = M + K,
    # hi = M; first p0 = K, hi = M; last (where M + K rounds to M) p0 = M + K, hi = K (0 else)
    # (the last one's only where M + K rounds to M: without one, its peaks are −∞, hi = 0)
    nv = 3 if ne.any() else 2
    v = nv * nb
    p0 = B.take(p0_rows[:v], axis=0)  # nv·nb × pairs
    cubes = _cubes(B.take(_C_ROWS, axis=0).ravel()).reshape(2, m).take(cube_rows[:v], axis=0)
    num = c2t[:v] * p0 * p0 + c3t[:v] * cubes
    gp0 = g.take(gp0_rows[:v], axis=0)
    hi = B.take(hi_rows[:v], axis=0)
    np.copyto(hi, 0.0, where=~(p0 > 0.0))
    if kept is not None:
        hi = np.where(np.tile(kept, (nv, 1)), hi, 0.0)
    if u is not None:  # to the elements, in one gather
        Z = np.concatenate([S, W, num, p0, gp0, hi])[:, u]
        S, W = Z[:R], Z[R:2 * R]
        num, p0, gp0, hi = Z[2 * R:2 * R + v], Z[2 * R + v:2 * R + 2 * v], \
            Z[2 * R + 2 * v:2 * R + 3 * v], Z[2 * R + 3 * v:]
        MKe, Ke = MK[u], Ka[u]
    else:
        MKe, Ke = MK, Ka
    # per element (a grid: the pairs' rows broadcast against μ as multipliers × pairs)
    mux = mua.reshape(-1, k) if k else mua
    if k:
        S, W, num, p0, gp0, hi = (x[:, None, :] for x in (S, W, num, p0, gp0, hi))
    F = (S - mux * W).reshape(R, -1)
    # Z: the groups' maxima, the vertical edges' peaks (3 polygons × branches) and −∞
    ng = len(starts)
    Z = np.empty((ng + 3 * nb + 1, len(mua)))
    if len(F[0]) < REDUCEAT_MAX:  # 6 groups × elements
        np.fmax.reduceat(F, starts, axis=0, out=Z[:ng])
    else:  # (numpy's reduceat along the first axis is slow on long rows: row by row)
        for i, (a, b) in enumerate(zip(starts.tolist(), [*starts[1:].tolist(), len(F)])):
            acc = F[a]
            for r in range(a + 1, b):
                acc = np.fmax(acc, F[r])
            Z[i] = acc
    mu4 = 4.0 * mux * mux
    qv = num / mu4
    okv = (mu4 > 0.0) & (0.0 < qv) & (qv < hi)
    qc = np.maximum(qv, 0.0)
    Fv = Z[ng:ng + v].reshape(qv.shape)
    np.subtract(np.sqrt(qc * gp0), mux * (p0 + qc), out=Fv)
    np.copyto(Fv, -np.inf, where=~okv)
    Z[ng + v:] = -np.inf
    # each polygon's maximum over its groups and vertical peaks (poly: its rows of Z, padded
    # with −∞); fmax with −∞: a polygon whose every candidate is NaN is −∞, as the scalar best
    best = np.fmax(np.fmax.reduce(Z.take(poly, axis=0), axis=1), -np.inf)
    lam = np.empty((3, len(mua)))
    np.multiply(mux, MKe, out=lam[0].reshape(mux.shape))
    np.multiply(mux, Ke, out=lam[1].reshape(mux.shape))
    lam[2] = lam[0]
    lam += best
    lam *= INFLATE
    return lam[0], lam[1], lam[2]


def _grid_period(Ma: FloatArray, Ka: FloatArray, kept: npt.NDArray[np.bool_] | None) -> int:
    """k where the elements are k pairs (M, K) repeated, each repetition alike (the fine
    search's samples: multiplier-major, K increasing), at least twice (and ``kept`` alike);
    else 0.  Found where K first does not increase, then checked on every element."""
    n = len(Ka)
    down = np.flatnonzero(Ka[1:] <= Ka[:-1])
    if not len(down):
        return 0
    k = int(down[0]) + 1
    if n % k or 2 * k > n:
        return 0
    if not ((Ka.reshape(-1, k) == Ka[:k]).all() and (Ma.reshape(-1, k) == Ma[:k]).all()):
        return 0
    if kept is not None and not (kept.reshape(len(kept), -1, k) == kept[:, None, :k]).all():
        return 0
    return k


#: Rows of :func:`_potential_lambdas_many`'s table B (0, K, M, M + K, M + (M + K), -inf, inf,
#: M or inf, 0 or inf, K or 0): the sum lines T = K, M + K, M + (M + K); the p and q of the
#: vertices (0,K), (0,M+K), (M,M+K), (M+K,M), (M+K,0), (K,0), (K,M), (M,K); the vertical edges'
#: p0 (M + K, K, M + K) and q ranges' hi (M, M, K where M + K rounds to M); the p0 whose cubes
#: are taken (M + K, K) and which of them each vertical edge reads; the vertices where g is at
#: p0 (M + K, K, M + K).
_T_ROWS = np.array([1, 3, 4], dtype=np.intp)
_VP_ROWS = np.array([0, 0, 2, 3, 3, 1, 1, 2], dtype=np.intp)
_VQ_ROWS = np.array([1, 3, 3, 2, 0, 0, 2, 1], dtype=np.intp)
_P0_ROWS = np.array([3, 1, 3], dtype=np.intp)
_HI_ROWS = np.array([2, 2, 9], dtype=np.intp)
_C_ROWS = np.array([3, 1], dtype=np.intp)
_CUBE_ROWS = np.array([0, 1, 0], dtype=np.intp)
_GP0_ROWS = np.array([3, 5, 3], dtype=np.intp)


@functools.lru_cache(maxsize=32)
def _vertical_rows(nb: int) -> tuple[npt.NDArray[np.intp], ...]:
    """The gathers of :func:`_potential_lambdas_many` with nb branches, each row repeated nb
    times (the row-major order of ``B[rows].repeat(nb, axis=0)``): T = K, M + K, M + (M + K)
    of table B; the vertical edges' p0, cubes, g at p0 and hi (all three edges: the first
    nv·nb where there are nv)."""
    return tuple(np.repeat(r, nb) for r in (_T_ROWS, _P0_ROWS, _CUBE_ROWS, _GP0_ROWS, _HI_ROWS))


@functools.lru_cache(maxsize=64)
def _potential_layout(branches: tuple[Branch, ...]) -> tuple[Any, ...]:
    """For :func:`_potential_lambdas_many` with these branches: c2 and c3 (flat, as columns
    branches × 1 × 1, and per vertical peak row) and the branches' :func:`_branch_cases`."""
    c2l = [b[0] for b in branches]
    c3l = [b[1] for b in branches]
    c2 = np.array(c2l, dtype=np.float64)
    c3 = np.array(c3l, dtype=np.float64)
    return (c2, c3, c2[:, None, None], c3[:, None, None],
            np.array(c2l * 3, dtype=np.float64)[:, None],
            np.array(c3l * 3, dtype=np.float64)[:, None], _branch_cases(tuple(c2l), tuple(c3l)))


@functools.lru_cache(maxsize=32)
def _potential_rows(nb: int, lean: bool) -> tuple[Any, ...]:
    """:func:`_potential_lambdas_many`'s candidate table for nb branches: the rows of (vertices,
    peaks on T = K, M + K, M + (M + K)) it takes, grouped by the polygons that take them (all
    three: (0,K), (K,0), the peaks on T = K; hexagon and first: (0,M+K); hexagon and last:
    (M+K,0); hexagon: (M,M+K), (M+K,M), the peaks on T2; first: (K,M), the peaks on T = M + K;
    last: (M,K), the peaks on T = M + K), each row's lo and hi rows of table B, where each group
    starts, each row's branch (row 0 of ``[True, kept]`` for a vertex), and each polygon's rows
    (hexagon, first, last) of the groups' maxima and vertical peaks, padded with the row of −∞.

    ``lean`` (every μ >= 0): without the vertices (K,0), (0,M+K) and (M+K,0), where no work is
    done (p = 0 or q = 0: F = √0 − μ(p + q)), so F = −μK, −μ(M+K), −μ(M+K), never above
    F(0,K) = −μK, a candidate of every polygon: the same maxima from fewer candidates."""
    line = [list(range(8 + i * nb, 8 + (i + 1) * nb)) for i in range(3)]  # T = K, M + K, T2
    if lean:
        groups = [[0, *line[0]], [2, 3, *line[2]], [6, *line[1]], [7, *line[1]]]
        first, of_poly = 2, [[0, 1], [0, 2], [0, 3]]
    else:
        groups = [[0, 5, *line[0]], [1], [4], [2, 3, *line[2]], [6, *line[1]], [7, *line[1]]]
        first, of_poly = 4, [[0, 1, 2, 3], [0, 1, 4], [0, 2, 5]]
    sel = [r for grp in groups for r in grp]
    # lo, hi per row (B rows): vertices -inf, inf; T = K: 0, K; T2: M (inf off an edge),
    # M + K; T = M + K: first 0 (inf off an edge), K; last M (inf off an edge), M + K
    lims: list[tuple[int, int]] = []
    for gi, grp in enumerate(groups):
        for r in grp:
            if r < 8:
                lims.append((5, 6))
            elif r in line[0]:
                lims.append((0, 1))
            elif r in line[2] or gi != first:
                lims.append((7, 3))
            else:
                lims.append((8, 1))
    lo, hi = [x for x, _ in lims], [y for _, y in lims]
    kept_rows = [0 if r < 8 else 1 + (r - 8) % nb for r in sel]
    starts = [0]
    for grp in groups[:-1]:
        starts.append(starts[-1] + len(grp))
    # the polygons' rows of the groups' maxima, then the vertical peaks (3·nb), then −∞
    ng = len(groups)
    pad = ng + 3 * nb
    poly = [[*gs, *(ng + i * nb + b for b in range(nb))] for i, gs in enumerate(of_poly)]
    width = max(len(x) for x in poly)
    poly = [x + [pad] * (width - len(x)) for x in poly]
    return (np.array(sel, dtype=np.intp), np.array(lo + hi, dtype=np.intp),
            np.array(starts, dtype=np.intp), np.array(kept_rows, dtype=np.intp),
            np.array(poly, dtype=np.intp))


def potential_lambdas_many(M: npt.ArrayLike, K: npt.ArrayLike, mu: npt.ArrayLike,
                           branches: Sequence[Branch],
                           kept: npt.NDArray[np.bool_] | None = None,
                           ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`potential_lambdas` elementwise over arrays M, K, μ (broadcast): the same floats.
    ``kept`` (branches × elements): the branches in effect per element (default all).

    The candidate points of :func:`_polygon_max` are the scalar code's, per element: the
    vertices, the peaks of the sum lines T = K, M + K and M + (M + K), the peaks of the vertical
    edges p = M + K and p = K (and p = M + K on the last segment's polygon where M + K rounds to
    M: the scalar code's edge tests, decided per element), each with the same operations; their
    maximum is the same float (a maximum does not depend on the order of its candidates).  What
    does not depend on μ (the points, g there, √(q·g(p)), p + q) is computed once per distinct
    (M, K)."""
    if (type(M) is np.ndarray and type(K) is np.ndarray and type(mu) is np.ndarray
            and M.dtype == K.dtype == mu.dtype == np.float64 and M.ndim == K.ndim == mu.ndim == 1
            and len(M) == len(K) == len(mu)):
        Ma, Ka, mua = M, K, mu  # (already what the broadcast below makes)
    else:
        Ma, Ka, mua = (np.asarray(a, dtype=np.float64).ravel()
                       for a in np.broadcast_arrays(M, K, mu))
    if not len(Ma):
        return Ma.copy(), Ma.copy(), Ma.copy()
    with np.errstate(all="ignore"):
        return _potential_lambdas_many(Ma, Ka, mua, branches, kept)


def segments_bound_many(work: float | int | FloatArray, K: Sequence[int], lam: FloatArray,
                        lam_f: FloatArray, lam_l: FloatArray) -> list[int]:
    """:func:`segments_bound` elementwise: the same integers.  An int ``work`` is compared with
    the floats exactly, as Python compares an int with a float (by the least float >= work), and
    subtracted as ``float(work)``, as Python does; the products K·(h - 1) are Python ints."""
    if isinstance(work, int):
        wf = float(work)
        w_cmp = wf if wf >= work else math.nextafter(wf, math.inf)
        w: float | FloatArray = wf
    else:
        w = w_cmp = work  # type: ignore[assignment]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = np.ceil((w - lam_f - lam_l) / lam)  # h - 2 (h >= 3)
    c = np.where(w_cmp <= lam_f + lam_l, 0.0, c)
    c = np.where(w_cmp <= lam_f, -1.0, c)
    Ks = np.asarray(K, dtype=np.int64)
    if len(Ks) and (float(c.max()) + 1.0) * float(Ks.max()) < 2.0 ** 62:
        out: list[int] = ((c.astype(np.int64) + 1) * Ks).tolist()
        return out
    return [k * (1 + int(h)) for k, h in zip(Ks.tolist(), c.tolist())]


def segments_h(work: float | int | FloatArray, lam: FloatArray, lam_f: FloatArray,
               lam_l: FloatArray) -> list[tuple[float, float]]:
    """Per element the real-valued number of segments ``2 + (work − Λ_f − Λ_l)/Λ`` (its ceiling
    is h where h >= 3) and ``work/Λ_f`` (h >= 2 where it exceeds 1): estimates that steer the
    batched bisections, no bound depends on them."""
    w = float(work) if isinstance(work, int) else work
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        h = 2.0 + (w - lam_f - lam_l) / lam
        z = w / lam_f
    return list(zip(np.broadcast_to(h, lam.shape).tolist(),
                    np.broadcast_to(z, lam.shape).tolist()))


# ---------------------------------------------------------------------------- pooled (B, E)
def _max_increasing_difference(A: Callable[[float], float], B: Callable[[float], float],
                               lo: float, hi: float, floor: float, *, cells: int = 8,
                               levels: int = 8, split: int = 4, rtol: float = 1e-4,
                               AB: Callable[[float], tuple[float, float]] | None = None
                               ) -> float:
    """An upper bound on ``max(floor, max over [lo, hi] of A(x) - B(x))``, A, B non-decreasing.

    On a cell [u, v] the difference is at most ``A(v) - B(u)``.  Cells whose bound exceeds the
    best value seen (``floor``, or ``A(x) - B(x)`` at cell ends) by more than ``rtol·A(hi)`` are
    split ``split`` ways, ``levels`` times; the result is the best value plus that tolerance, or
    the largest bound of the cells left if larger: never below the true maximum.  (A and B are
    evaluated once per point, both: a cell's ends are points evaluated before; ``AB(x)``: both
    at once, ``(A(x), B(x))``.)"""
    if hi <= lo:
        return max(floor, A(lo) - B(lo))
    memo: dict[float, tuple[float, float]] = {}
    both = AB if AB is not None else (lambda x: (A(x), B(x)))

    def ab(x: float) -> tuple[float, float]:
        v = memo.get(x)
        if v is None:
            v = memo[x] = both(x)
        return v

    tol = rtol * abs(ab(hi)[0])
    edges = [lo + (hi - lo) * i / cells for i in range(cells + 1)]
    cand = list(zip(edges[:-1], edges[1:]))
    best = floor
    for x in edges:  # (max(floor, max(...)): floor unless a difference exceeds it, the first)
        a, b = ab(x)
        d = a - b
        if d > best:
            best = d
    for level in range(levels + 1):
        thr = best + tol
        # (every cell's ends evaluated before: read from the memo, not through ab)
        keep = [(u, v) for u, v in cand if memo[v][0] - memo[u][1] > thr]
        if not keep:
            return thr
        if level == levels:
            return max(thr, max(memo[v][0] - memo[u][1] for u, v in keep))
        cand = []
        for u, v in keep:
            w = v - u
            pts = [u + w * i / split for i in range(split + 1)]
            for x in pts[1:-1]:
                a, b = ab(x)
                d = a - b
                if d > best:
                    best = d
            cand.extend(zip(pts[:-1], pts[1:]))
    return best + tol  # pragma: no cover


def _pooled_max(T: float, lo: float, hi: float, nu: float, J: Callable[[float], float],
                J_peaks: Callable[[float, float, float], Sequence[float]],
                rho: Callable[[float], float], breaks: Sequence[float],
                flat_until: float) -> float:
    """max over I in [lo, hi] of ``E(I, T - I)`` (minus the constant ν·T), exactly or from above.

    With Y = X + r: ``E = √(J(I)·Y) - ν·(Y + I) + ν·T`` over T - I <= Y <= T - I + ρ(I).  For fixed
    I the expression is concave in Y (peak Y* = J/(4ν²)); where the peak is inside, the value
    J/(4ν) - ν·I is convex in I, so the maximum over I sits at lo, hi, or on the lower line
    Y = T - I or the upper curve Y = T - I + ρ(I).  The lower line: ``J(I)·(T - I)`` has one peak
    per smooth piece of J (``J_peaks``).  The upper curve: where ρ(I) = I (I <= ``flat_until``)
    it is Y = T and ``√(J(I)·T) - ν(T + I)`` is convex (its ends); elsewhere certified cells (its
    two parts are non-decreasing in I)."""
    def at(I: float, Y: float, JI: float | None = None) -> float:
        JI = J(I) if JI is None else JI  # (J(I) given: the same float, computed once)
        return math.sqrt(max(JI, 0.0) * max(Y, 0.0)) - nu * (Y + I)

    seen: dict[float, float] = {}  # (best_y of each cut once: a cut ends a piece, starts one)

    def best_y(I: float) -> float:
        v = seen.get(I)
        if v is not None:
            return v
        ylo, yhi = T - I, T - I + rho(I)
        JI = J(I)
        if not 4.0 * nu * nu > 0.0:  # ν = 0 (or ν² underflows): the peak is beyond yhi
            v = at(I, yhi, JI)
        else:
            v = at(I, min(max(JI / (4.0 * nu * nu), ylo), yhi), JI)
        seen[I] = v
        return v

    best = max(best_y(lo), best_y(hi))
    cuts = sorted({lo, hi, *(b for b in breaks if lo < b < hi)})
    for a, b in zip(cuts[:-1], cuts[1:]):
        for I in J_peaks(T, a, b):
            if a < I < b:
                best = max(best, at(I, T - I))
        best = max(best, best_y(a), best_y(b))
        if b <= flat_until:
            continue

        def up_a(I: float) -> float:
            return math.sqrt(max(J(I), 0.0) * max(T - I + rho(I), 0.0))

        def up_b(I: float) -> float:
            return nu * (T + rho(I))

        def up(I: float) -> tuple[float, float]:  # (up_a(I), up_b(I)), ρ(I) once
            r = rho(I)
            return math.sqrt(max(J(I), 0.0) * max(T - I + r, 0.0)), nu * (T + r)

        best = _max_increasing_difference(up_a, up_b, a, b, best, AB=up)
    return best


def pooled_lambdas(M: float, K: float, nu: float, J: Callable[[float], float],
                   J_peaks: Callable[[float, float, float], Sequence[float]],
                   rho: Callable[[float], float], breaks: Sequence[float],
                   flat_until: float = 0.0) -> tuple[float, float, float]:
    """(Λ, Λ_f, Λ_l) of a pooled argument, inflated: the maxima over R in [0, K] of
    ``E(I, X)`` with I = M + R, X = M + K - R (middle), I = R, X = M + K - R (first: nothing
    resident), I = M + R, X = K - R (last: every output written, no pair value exported).

    ``J`` bounds the products' import factor, ``rho`` the root pieces, ``J_peaks(T, a, b)`` the
    maximisers of ``J(I)·(T - I)`` on a smooth piece [a, b] of J, ``breaks`` the points where J or
    ρ change formula.  J must be non-decreasing and convex with ``J(I)·(T - I)`` log-concave on each
    piece, and ρ' >= 1 (so the upper curve's ``√(J(I)·(T - I + ρ(I)))`` is non-decreasing): true of
    Theorem B's and E's J and ρ (docs/bounds.md).  ``flat_until``: ρ(I) = I for I below it."""
    M, K = float(M), float(K)
    args = (nu, J, J_peaks, rho, breaks, flat_until)
    lam = _pooled_max(2 * M + K, M, M + K, *args) + nu * (2 * M + K)
    lam_f = _pooled_max(M + K, 0.0, K, *args) + nu * (M + K)
    lam_l = _pooled_max(M + K, M, M + K, *args) + nu * (M + K)
    return lam * INFLATE, lam_f * INFLATE, lam_l * INFLATE


def _pymax(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """Python's ``max(a, b)`` elementwise: a unless b > a."""
    out: FloatArray = np.where(np.greater(b, a), b, a)
    return out


def _pymin(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """Python's ``min(a, b)`` elementwise: a unless b < a."""
    out: FloatArray = np.where(np.less(b, a), b, a)
    return out


#: Batches of fewer (M, K, ν) than this are evaluated one at a time by the theorems (the
#: vectorised pooled maxima cost a fixed ~0.5 ms a call, the scalar ones ~0.08 ms each).
POOLED_BATCH = 8

#: The array forms of a pooled argument's functions (:func:`pooled_lambdas_many`): J(I), the
#: maximisers of J(I)·(T − I) (every smooth piece: the scalar ``J_peaks`` must not depend on the
#: piece), ρ(I), elementwise with the scalar code's operations.
if TYPE_CHECKING:
    ArrayFn = Callable[[FloatArray], FloatArray]


class PooledFunctions(NamedTuple):
    """A pooled theorem's functions in array form (B: ``forward._b_functions_many``, E:
    ``backward._e_functions_many``), as :func:`pooled_lambdas_many` takes them."""

    J: ArrayFn  #: J(I), elementwise
    J_peaks: Callable[[FloatArray], Sequence[FloatArray]]  #: the maximisers of J(I)·(T − I)
    rho: ArrayFn  #: ρ(I), elementwise
    breaks: Sequence[float]  #: where J changes piece, increasing
    flat_until: float = 0.0  #: ρ(I) = I up to here (the upper curve's convex part)
    #: J within a few units of 2⁻⁵³ relative (its cubes multiplied out, not by the C pow), to
    #: screen the certified cells where ν = 0 (:func:`_mid_flat`); None: no screen
    J_fast: ArrayFn | None = None


def _mid_many(AB: Callable[[FloatArray, npt.NDArray[np.intp]], tuple[FloatArray, FloatArray]],
              lo: FloatArray, hi: FloatArray, floor: FloatArray, *, cells: int = 8,
              levels: int = 8, split: int = 4, rtol: float = 1e-4) -> FloatArray:
    """:func:`_max_increasing_difference` of many problems at once, level by level (a level's
    cells are kept against the best value before it, as there): the same floats.  ``AB(x, i)``:
    the functions A and B of problem i at x, both (one call per level: every point of a level,
    elementwise, so the same floats as one call per point)."""
    n = len(lo)
    ids = np.arange(n)
    out = np.empty(n)
    deg = hi <= lo
    if deg.any():
        di = ids[deg]
        Ad, Bd = AB(lo[deg], di)
        out[deg] = _pymax(floor[deg], Ad - Bd)
        live = ids[~deg]
        if not len(live):
            return out
    else:
        live = ids
    nl = len(live)
    lo_l, hi_l = lo[live], hi[live]
    E = lo_l[:, None] + (hi_l - lo_l)[:, None] * np.arange(cells + 1) / cells
    # the cells' ends and hi (for the tolerance) in one evaluation
    m = nl * (cells + 1)
    AX, BX = AB(np.concatenate([E.ravel(), hi_l]),
                np.concatenate([np.repeat(live, cells + 1), live]))
    tol = np.zeros(n)
    tol[live] = rtol * np.abs(AX[m:])
    best = floor.copy()
    AE = AX[:m].reshape(nl, cells + 1)
    BE = BX[:m].reshape(nl, cells + 1)
    best[live] = _pymax(floor[live], (AE - BE).max(axis=1))
    u, v = E[:, :-1].ravel(), E[:, 1:].ravel()
    pid = np.repeat(live, cells)
    # A at the cells' right ends and B at their left ends, known from the points evaluated
    # before (the same points and problems: the same values, not evaluated again)
    Av, Bu = AE[:, 1:].ravel(), BE[:, :-1].ravel()
    steps = np.arange(split + 1)[:, None]
    for level in range(levels + 1):
        bound = Av - Bu
        keep = bound > (best + tol)[pid]
        has = np.zeros(n, dtype=bool)
        has[pid[keep]] = True
        active = np.zeros(n, dtype=bool)
        active[pid] = True
        stop = active & ~has
        out[stop] = best[stop] + tol[stop]
        if level == levels:
            mk = np.full(n, -np.inf)
            np.maximum.at(mk, pid[keep], bound[keep])
            out[has] = _pymax(best[has] + tol[has], mk[has])
            return out
        u, v, pid, Bu = u[keep], v[keep], pid[keep], Bu[keep]
        k = len(pid)
        if not k:
            return out
        w = v - u
        pts = u + w * steps / split  # (split + 1) × cells: row i is u + w·i/split
        pidt = np.tile(pid, split)
        # the interior points and the last ends (u + w·split/split need not round to v)
        Ap, Bp = AB(pts[1:].ravel(), pidt)
        inner = (split - 1) * k
        mx = np.full(n, -np.inf)
        np.maximum.at(mx, pidt[:inner], Ap[:inner] - Bp[:inner])
        best[has] = _pymax(best[has], mx[has])
        Av = Ap
        Bu = np.concatenate([Bu, Bp[:inner]])
        u = pts[:-1].ravel()
        v = pts[1:].ravel()
        pid = pidt
    return out  # pragma: no cover


def pooled_lambdas_batch(one: Callable[[int, int, int, float], tuple[float, float, float]],
                         functions: Callable[[int], PooledFunctions], d: int,
                         Ms: Sequence[int], Ks: Sequence[int], nus: Sequence[float],
                         ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(Λ, Λ_f, Λ_l) of a pooled theorem (B, E) on a batch, the same floats either way: below
    :data:`POOLED_BATCH` one at a time by ``one(d, M, K, ν)`` (the theorem's cached scalar
    maxima), else :func:`pooled_lambdas_many` with the theorem's :class:`PooledFunctions`
    (``functions(d)``)."""
    if len(Ms) < POOLED_BATCH:
        rows = np.array([one(d, M, K, nu) for M, K, nu in zip(Ms, Ks, nus)],
                        dtype=np.float64).reshape(-1, 3)
        return rows[:, 0], rows[:, 1], rows[:, 2]
    return pooled_lambdas_many(np.asarray(Ms, dtype=np.float64),
                               np.asarray(Ks, dtype=np.float64),
                               np.asarray(nus, dtype=np.float64), functions(d))


def pooled_lambdas_many(M: npt.ArrayLike, K: npt.ArrayLike, nu: npt.ArrayLike,
                        fns: PooledFunctions) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`pooled_lambdas` elementwise over arrays M, K, ν (broadcast): the same floats.
    ``fns``: J, ρ elementwise; ``J_peaks(T)`` the maximisers of J(I)·(T − I) (the same on every
    piece, as for Theorems B and E); ``breaks`` increasing.  Every step of :func:`_pooled_max`
    runs on all the problems (three per element) at once, with Python's max and min
    elementwise.  ``fns.J_fast`` screens the certified cells where ν = 0 (:func:`_mid_flat`: J
    itself wherever a value depends on it, so the same floats)."""
    Ma, Ka, nua = (np.asarray(a, dtype=np.float64).ravel()
                   for a in np.broadcast_arrays(M, K, nu))
    n = len(Ma)
    if not n:
        return Ma.copy(), Ma.copy(), Ma.copy()
    with np.errstate(all="ignore"):
        MK = Ma + Ka
        T2 = 2 * Ma + Ka
        T = np.concatenate([T2, MK, MK])  # the middle, first and last segments' problems
        lo = np.concatenate([Ma, np.zeros(n), Ma])
        hi = np.concatenate([MK, Ka, MK])
        best = _pooled_max_many((T, lo, hi, np.tile(nua, 3)), fns)
        lam = best[:n] + nua * T2
        lam_f = best[n:2 * n] + nua * MK
        lam_l = best[2 * n:] + nua * MK
    return lam * INFLATE, lam_f * INFLATE, lam_l * INFLATE


def _pooled_max_many(problems: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
                     fns: PooledFunctions) -> FloatArray:
    """:func:`_pooled_max` of each problem (T, lo, hi, ν): ``problems`` holds the four arrays
    (``fns``: :func:`pooled_lambdas_many`)."""
    T, lo, hi, nu = problems
    J, J_peaks, rho, breaks, flat_until, J_fast = fns
    if J_fast is not None and max(breaks, default=-math.inf) <= flat_until:
        z = nu == 0.0  # (these at once from a screen: _flat_max_many)
        if z.any():
            zi = np.flatnonzero(z)
            got = _flat_max_many(T[zi], lo[zi], hi[zi], fns)
            if got is not None:
                if z.all():
                    return got
                out = np.empty(len(T))
                out[zi] = got
                oi = np.flatnonzero(~z)
                out[oi] = _pooled_max_many((T[oi], lo[oi], hi[oi], nu[oi]),
                                           fns._replace(J_fast=None))
                return out
    nu4 = 4.0 * nu * nu

    def at(I: FloatArray, Y: FloatArray, i: npt.NDArray[np.intp],
           JI: FloatArray | None = None) -> FloatArray:
        JI = J(I) if JI is None else JI  # (J(I) given: the same array, computed once)
        out: FloatArray = np.sqrt(_pymax(JI, 0.0) * _pymax(Y, 0.0)) - nu[i] * (Y + I)
        return out

    def best_y(I: FloatArray, i: npt.NDArray[np.intp]) -> FloatArray:
        ylo = T[i] - I
        yhi = T[i] - I + rho(I)
        JI = J(I)
        Y = np.where(nu4[i] > 0.0, _pymin(_pymax(JI / nu4[i], ylo), yhi), yhi)
        return at(I, Y, i, JI)

    n = len(T)
    ids = np.arange(n)
    # the cuts: lo, the breaks strictly inside, hi (none where lo == hi: no piece)
    C = np.full((n, len(breaks) + 2), np.nan)
    C[:, 0] = lo
    pos = np.ones(n, dtype=np.intp)
    for b in breaks:
        m = (lo < b) & (b < hi)
        C[m, pos[m]] = b
        pos[m] += 1
    valid = hi > lo
    C[ids[valid], pos[valid]] = hi[valid]
    pieces = np.where(valid, pos, 0)
    # best_y at every cut (each cut ends one piece and starts the next) and at hi where there
    # is no piece, the value on the lower line at each peak of J(I)·(T − I): each once (an
    # elementwise function of its point and problem: the floats of evaluating it per piece)
    cr, cc = np.nonzero(~np.isnan(C))
    Y = np.full(C.shape, np.nan)
    Y[cr, cc] = best_y(C[cr, cc], cr)
    y_hi = Y[ids, pieces]
    none = ~valid
    if none.any():
        y_hi[none] = best_y(hi[none], ids[none])
    best = _pymax(Y[:, 0], y_hi)
    maxp = int(pieces.max(initial=0))
    # where every break is <= flat_until, only a problem's last piece has certified cells, and
    # they are its last step: all problems' in one batch after the loop (the same steps each)
    last_only = max(breaks, default=-math.inf) <= flat_until
    if last_only:
        if maxp:
            best = _before_cells(best, (Y, C), problems, breaks, J_peaks(T), at)
            i = ids[valid]
            r = C[i, pieces[i]] > flat_until
            if r.any():
                i = i[r]
                _mid_pieces(best, i, C[i, pieces[i] - 1], C[i, pieces[i]], problems, fns)
        return best
    peaks = [(I, at(I, T - I, ids)) for I in J_peaks(T)] if maxp else []
    for k in range(maxp):
        i = ids[pieces > k]
        a, b = C[i, k], C[i, k + 1]
        bi = best[i]
        for I, v in peaks:
            Ii = I[i]
            ok = (a < Ii) & (Ii < b)
            if ok.any():
                bi = np.where(ok, _pymax(bi, v[i]), bi)
        bi = _pymax(_pymax(bi, Y[i, k]), Y[i, k + 1])
        best[i] = bi
        r = b > flat_until
        if r.any():
            _mid_pieces(best, i[r], a[r], b[r], problems, fns)
    return best


def _flat_max_many(T: FloatArray, lo: FloatArray, hi: FloatArray, fns: PooledFunctions, *,
                   cells: int = 8, rtol: float = 1e-4) -> FloatArray | None:
    """:func:`_pooled_max_many` of problems with ν = 0 where only the last piece has certified
    cells (Theorem B), the same floats.  With ν = 0 every value it takes is a square root less
    0·(…) = 0: best_y at a cut is A(I) = √(J(I)·(T − I + ρ(I))), the lower line's value at a
    peak √(J(I)·(T − I)), and the cells' first level keeps nothing (:func:`_mid_flat`), so the
    result is the largest of those values at the cuts (lo, the breaks inside, hi), the peaks
    inside a piece and the cells' ends of the last piece, plus rtol·|A(hi)| where that piece
    has cells.  The largest is taken among the values whose ``J_fast`` form is within the
    screen's error (:data:`SCREEN_RTOL`) of the row's largest, evaluated with J; A(hi) with J
    always.  None where a fast value is not finite."""
    J, J_peaks, rho, breaks, flat_until, J_fast = fns
    assert J_fast is not None
    n = len(T)
    valid = hi > lo
    xs: list[FloatArray] = [lo]
    oks: list[npt.NDArray[np.bool_]] = [np.ones(n, dtype=bool)]
    a = lo  # the last piece's start: the last cut below hi
    for b in breaks:
        m = (lo < b) & (b < hi)
        xs.append(np.full(n, b))
        oks.append(m)
        a = np.where(m, b, a)
    xs.append(hi)  # (the last cut, or where there is no piece best_y(hi))
    oks.append(np.ones(n, dtype=bool))
    h = len(xs) - 1
    npk = 0
    for I in J_peaks(T):
        ok = (lo < I) & (I < hi)
        for b in breaks:
            ok &= I != b
        xs.append(I)
        oks.append(ok)
        npk += 1
    cut_end = len(xs)
    has = valid & (hi > flat_until)
    E = a[:, None] + (hi - a)[:, None] * np.arange(cells + 1) / cells
    X = np.concatenate([np.stack(xs, axis=1), E], axis=1)
    OK = np.concatenate([np.stack(oks, axis=1), np.repeat(has[:, None], cells + 1, axis=1)],
                        axis=1)
    peak = np.zeros(X.shape[1], dtype=bool)
    peak[h + 1:cut_end] = True
    Tm = np.broadcast_to(T[:, None], X.shape)

    def values(Jf: ArrayFn, x: FloatArray, t: FloatArray, p: npt.NDArray[np.bool_]
               ) -> FloatArray:
        y = np.where(p, t - x, t - x + rho(x))  # (the peaks: the lower line, Y = T − I)
        out: FloatArray = np.sqrt(_pymax(Jf(x), 0.0) * _pymax(y, 0.0))
        return out

    pk = np.broadcast_to(peak, X.shape)
    Vf = values(J_fast, X.ravel(), Tm.ravel(), pk.ravel()).reshape(X.shape)
    if not np.isfinite(np.where(OK, Vf, 0.0)).all():
        return None
    want = _screened(Vf, OK)
    want[:, h] = True  # A(hi) always (the tolerance)
    r, c = np.nonzero(want)
    Vx = values(J, X[r, c], T[r], peak[c])
    if not np.isfinite(Vx).all():
        return None
    V = np.full(X.shape, -np.inf)
    V[r, c] = Vx
    best = V.max(axis=1)
    out: FloatArray = np.where(has, best + rtol * np.abs(V[:, h]), best)
    return out


def _before_cells(best: FloatArray, cuts: tuple[FloatArray, FloatArray],
                  problems: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
                  breaks: Sequence[float], peaks: Sequence[FloatArray],
                  at: Callable[[FloatArray, FloatArray, npt.NDArray[np.intp]], FloatArray]
                  ) -> FloatArray:
    """:func:`_pooled_max_many`'s best value before the certified cells where only the last
    piece has them: the piece loop's maximum over best_y at every cut (``cuts`` = (Y, C): Y
    NaN where C has no cut) and the lower line's value at each peak inside a piece (strictly
    between two cuts: in (lo, hi) and not a break; ``problems`` = (T, lo, hi, ν)), taken at
    once (all finite, none −0: the same float as the loop's sequence of Python maxima).  The
    peaks' values in one evaluation."""
    Y, C = cuts
    T, lo, hi, _ = problems
    n = len(T)
    npk = len(peaks)
    Ip = np.concatenate(peaks)
    vp = at(Ip, np.tile(T, npk) - Ip, np.tile(np.arange(n), npk))
    ok = (np.tile(lo, npk) < Ip) & (Ip < np.tile(hi, npk))
    for b in breaks:
        ok &= Ip != b
    top = np.where(ok, vp, -np.inf).reshape(npk, n).max(axis=0)
    top = np.maximum(top, np.where(np.isnan(C), -np.inf, Y).max(axis=1))
    return _pymax(best, top)


def _mid_pieces(best: FloatArray, i: npt.NDArray[np.intp], a: FloatArray, b: FloatArray,
                problems: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
                fns: PooledFunctions) -> None:
    """The certified cells of :func:`_pooled_max_many` on the pieces [a, b] of the problems
    ``i`` (of ``problems`` = (T, lo, hi, ν)), from their best values so far (updated in
    place): A(x) = √(J(x)·(T − x + ρ(x))), B(x) = ν·(T + ρ(x)), ρ(x) computed once for both.
    ``fns.J_fast`` (J within a few units of 2⁻⁵³, its cubes multiplied out): the problems
    with ν = 0 from a screen (:func:`_mid_flat`)."""
    T, _, _, nu = problems
    J, rho, J_fast = fns.J, fns.rho, fns.J_fast
    Ti, nui = T[i], nu[i]

    def A_of(Jf: ArrayFn, x: FloatArray, Tj: FloatArray) -> FloatArray:
        out: FloatArray = np.sqrt(_pymax(Jf(x), 0.0) * _pymax(Tj - x + rho(x), 0.0))
        return out

    if J_fast is not None:
        z = (nui == 0.0) & (b > a)
        if z.any():
            zi = np.flatnonzero(z)
            got = _mid_flat(lambda x, j: A_of(J, x, Ti[zi[j]]),
                            lambda x, j: A_of(J_fast, x, Ti[zi[j]]), a[zi], b[zi],
                            best[i[zi]])
            if got is not None:
                best[i[zi]] = got
                if z.all():
                    return
                keep = ~z
                i, a, b, Ti, nui = i[keep], a[keep], b[keep], Ti[keep], nui[keep]

    def AB(x: FloatArray, j: npt.NDArray[np.intp]) -> tuple[FloatArray, FloatArray]:
        r = rho(x)
        Tj = Ti[j]
        A: FloatArray = np.sqrt(_pymax(J(x), 0.0) * _pymax(Tj - x + r, 0.0))
        B: FloatArray = nui[j] * (Tj + r)
        return A, B

    best[i] = _mid_many(AB, a, b, best[i])


def _screened(fast: FloatArray, ok: npt.NDArray[np.bool_] | None = None
              ) -> npt.NDArray[np.bool_]:
    """Where a row's exact maximum can be (:func:`_flat_max_many`, :func:`_mid_flat`): the
    entries (of ``ok``, default all) whose fast value (within :data:`SCREEN_RTOL` relative of
    the exact one, values >= 0) is within that error of the row's largest least-possible
    value; an entry outside is below some exact value, never the maximum.  (The absolute
    1e-300: tiny values' roundings.)"""
    err = SCREEN_RTOL * fast + 1e-300
    low = fast - err if ok is None else np.where(ok, fast - err, -np.inf)
    want = fast + err >= low.max(axis=1)[:, None]
    return want if ok is None else ok & want


#: :func:`_mid_flat`'s screen: the fast A is within this relative distance of the exact one (the
#: cubes multiplied out, two roundings, against the C pow's one unit: a few units of 2⁻⁵³ through
#: J, the product and the square root; this leaves a factor of thousands).
SCREEN_RTOL = 1e-12


def _mid_flat(A: Callable[[FloatArray, npt.NDArray[np.intp]], FloatArray],
              A_fast: Callable[[FloatArray, npt.NDArray[np.intp]], FloatArray],
              lo: FloatArray, hi: FloatArray, floor: FloatArray, *, cells: int = 8,
              rtol: float = 1e-4) -> FloatArray | None:
    """:func:`_mid_many` of problems with B = 0 (ν = 0: B = 0·(T + ρ) = 0) and lo < hi, the same
    floats: the best value at the cells' ends is at least A at every right end, so its first
    level keeps no cell (A(v) − 0 > best + tol never holds) and the result is
    ``max(floor, max A at the ends) + rtol·|A(hi)|``.  That maximum is taken among the ends
    whose ``A_fast`` (within :data:`SCREEN_RTOL` of A) is within the screen's error of the
    row's largest, evaluated by A, and A(hi) by A (the last end is usually hi: taken from
    it): a few exact evaluations a row instead of every end's.  None where a fast value is
    not finite (then :func:`_mid_many`)."""
    n = len(lo)
    E = lo[:, None] + (hi - lo)[:, None] * np.arange(cells + 1) / cells
    pe = np.repeat(np.arange(n), cells + 1)
    Af = A_fast(E.ravel(), pe).reshape(n, cells + 1)
    if not np.isfinite(Af).all():
        return None
    cand = _screened(Af)
    at_hi = E[:, -1] == hi
    last = at_hi & cand[:, -1]  # (screened ends at hi: A(hi))
    cand[:, -1] &= ~at_hi  # (A there is A(hi), evaluated below)
    ci = np.flatnonzero(cand.ravel())
    Ax = A(np.concatenate([hi, E.ravel()[ci]]), np.concatenate([np.arange(n), pe[ci]]))
    if not np.isfinite(Ax).all():
        return None
    A_hi = Ax[:n]
    vals = np.full((n, cells + 1), -np.inf)
    vals.ravel()[ci] = Ax[n:]
    vals[last, -1] = A_hi[last]
    out: FloatArray = _pymax(floor, vals.max(axis=1)) + rtol * np.abs(A_hi)
    return out


# ---------------------------------------------------------------------------- evaluation (A-E)
#: Fewer segments than this (value < FEW_SEGMENTS·K): the first and last segments weigh, and
#: :func:`tabulated_best` tries the segment lengths ``K_FACTORS`` times the tabulated one too.
FEW_SEGMENTS = 64
K_FACTORS = (0.5, 0.7, 1.4, 2.0, 3.0)


#: The fine few-segment search (:func:`fine_best`): multiples of the tabulated multiplier tried,
#: segment lengths sampled per multiple (f·κ·M, f geometric in [FINE_F[0], FINE_F[1]]), and for
#: the FINE_BEST best multiples the teeth within FINE_TEETH of the best sample's bisected for their
#: right edge.  The samples include those of the earlier search (multiples 0.8, 1, 1.2; every other
#: f), so the result is never below it.
FINE_MULTIPLIERS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.7, 2.0)
FINE_F = (0.35, 4.0)
FINE_SAMPLES = 47
FINE_BEST = 2
FINE_TEETH = 6
#: The fine search runs below this many segments (a tooth's relative depth is about 1/(h − 1):
#: still 0.4% at 256 segments).
FINE_SEGMENTS = 256
#: Below this much work (P·d products) the search is the earlier, narrower one (multiples 0.8, 1,
#: 1.2 of the tabulated multiplier, every other sample, the best sample's tooth only): about 80
#: evaluations instead of about 700, where the whole workload is small.
FINE_MIN_WORK = 1 << 20


#: The batched bisections of :func:`fine_best` evaluate, per batch, the nodes of each bisection's
#: tree it can visit next: the next EDGE_DEPTH levels, or with a guide (estimates of h near the
#: bracket) every node on the way to a window around the interpolated edge.  Each bisection
#: then walks the nodes evaluated, step by step as it would one point at a time, and goes on in the
#: next batch where a node it needs is missing: the same steps, the same result.
EDGE_DEPTH = 3

#: ``values(Ks, qs)``: the theorem's value at each (K, multiplier) pair, at one M (a batch).
Values = Callable[[Sequence[int], Sequence[float]], list[int]]
#: ``guide(Ks, qs)``: the values and, there, the real-valued h = 2 + (work − Λ_f − Λ_l)/Λ and
#: work/Λ_f (h − 1 >= 1 where it exceeds 1): :func:`segments_h`.
Guide = Callable[[Sequence[int], Sequence[float]],
                 tuple[list[int], list[tuple[float, float]]]]


def _batched(value: Callable[[int, float], int]) -> Values:
    """A batch evaluation by ``value`` one pair at a time."""
    def values(Ks: Sequence[int], qs: Sequence[float]) -> list[int]:
        return [value(K, q) for K, q in zip(Ks, qs)]
    return values


def _right_edge(value: Callable[[int, float], int], q: float, n: int, a: int,
                b: int) -> tuple[int, int]:
    """(value, K) at the largest K in [a, b) with h − 1 >= n (``value(K, q) >= n·K``), given that
    a has it and b has not: a bisection (h − 1 does not increase with K)."""
    return _right_edges(_batched(value), [(q, n, a, value(a, q), b, ())])[0]


#: A bisection of :func:`_right_edges`: (q, n, a, value(a, q), b, points) with points the
#: (K, (h, work/Λ_f)) known near [a, b) (:func:`segments_h`), or ().
EdgeJob = tuple[float, int, int, int, int, tuple[tuple[int, tuple[float, float]], ...]]

#: The half-width of the window around the interpolated edge whose every node is evaluated.
EDGE_WINDOW = 2


def _window(a: int, b: int, n: int, pts: Sequence[tuple[int, tuple[float, float]]]
            ) -> tuple[int, int] | None:
    """Where the edge of tooth n is expected in [a, b) (h − 1 >= n: h > n for n >= 2, work > Λ_f
    for n = 1): K as a function of 1/h (1/h is about linear in K; Λ_f/work for n = 1) through the
    three known points nearest the bracket, at 1/n, then :data:`EDGE_WINDOW` either side; None
    without estimates."""
    k = 1 if n == 1 else 0
    near = sorted(((K, e[k]) for K, e in pts if e[k] > 0.0 and math.isfinite(e[k])),
                  key=lambda p: abs(2 * p[0] - a - b))[:3]
    if len(near) < 2:
        return None
    ys = [1.0 / h for _, h in near]
    y = 1.0 / n if n > 1 else 1.0
    if len(set(ys)) < len(ys):
        return None
    t = 0.0
    for i, (Ki, _) in enumerate(near):
        w = float(Ki)
        for j in range(len(near)):
            if j != i:
                w *= (y - ys[j]) / (ys[i] - ys[j])
        t += w
    if not math.isfinite(t):
        return None
    c = min(max(int(round(t)), a), b - 1)
    return c - EDGE_WINDOW, c + EDGE_WINDOW


def _right_edges(values: Values, jobs: Sequence[EdgeJob], *, guide: Guide | None = None,
                 depth: int = EDGE_DEPTH) -> list[tuple[int, int]]:
    """:func:`_right_edge` of every job at once (:data:`EDGE_DEPTH`): the bisections advance
    together, one batch of evaluations per round."""
    state = [[a, b, va] for _, _, a, va, b, _ in jobs]
    known = [list(pts) for *_, pts in jobs]
    while True:
        Ks: list[int] = []
        qs: list[float] = []
        owner: list[int] = []
        for i, ((q, n, *_), st) in enumerate(zip(jobs, state)):
            a0, b0 = st[0], st[1]
            if b0 - a0 <= 1:
                continue
            win = _window(a0, b0, n, known[i]) if guide is not None else None
            stack = [(a0, b0, depth if win is None else 1)]
            while stack:
                a, b, left = stack.pop()
                c = (a + b) // 2
                Ks.append(c)
                qs.append(q)
                owner.append(i)
                # the next levels, and the children whose [a, c - 1], [c, b - 1] meet the window
                if c - a > 1 and (left > 1 or (win is not None and a <= win[1]
                                               and win[0] <= c - 1)):
                    stack.append((a, c, left - 1))
                if b - c > 1 and (left > 1 or (win is not None and c <= win[1]
                                               and win[0] <= b - 1)):
                    stack.append((c, b, left - 1))
        if not Ks:
            return [(va, a) for a, _, va in state]
        if guide is not None:
            vals, hs = guide(Ks, qs)
        else:
            vals, hs = values(Ks, qs), None
        got: list[dict[int, int]] = [{} for _ in jobs]
        for j, (i, c, v) in enumerate(zip(owner, Ks, vals)):
            got[i][c] = v
            if hs is not None:
                known[i].append((c, hs[j]))
        for (_, n, *_), st, seen in zip(jobs, state, got):
            a, b, va = st
            while b - a > 1:
                c = (a + b) // 2
                vc = seen.get(c)
                if vc is None:
                    break
                if vc >= n * c:
                    a, va = c, vc
                else:
                    b = c
            st[:] = [a, b, va]


def fine_ks(M: int, kappa: float, wide: bool = True) -> list[int]:
    """The segment lengths :func:`fine_best` samples at each multiple (sorted, distinct)."""
    return sorted({K if K >= 1 else 1 for K in [round(f * kappa * M) for f in _fine_fs(wide)]})


@functools.lru_cache(maxsize=2)
def _fine_fs(wide: bool) -> tuple[float, ...]:
    """The factors f of :func:`fine_ks` (K = f·κ·M): FINE_SAMPLES geometric steps over FINE_F
    (every other one unless ``wide``)."""
    lo, hi = FINE_F
    fs = [lo * (hi / lo) ** (i / (FINE_SAMPLES - 1)) for i in range(FINE_SAMPLES)]
    return tuple(fs if wide else fs[::2])


def fine_multipliers(p: float, wide: bool = True) -> list[float]:
    """The multipliers :func:`fine_best` tries: the multiples of p."""
    return [m * p for m in (FINE_MULTIPLIERS if wide else (0.8, 1.0, 1.2))]


def _sample_rows(samples: Sequence[int], Ks: Sequence[int], qs: Sequence[float],
                 best: tuple[int, int, float]) -> tuple[tuple[int, int, float], list[Any]]:
    """The samples (multiplier-major over ``Ks`` x ``qs``) row by row: each multiplier's best
    sample (the first of equal ones) as ``(value, q, its row, its index, the row's index)``,
    and the best (value, K, q) of them and ``best``."""
    top = best
    rows = []
    nk = len(Ks)
    for r, q in enumerate(qs):
        vals = samples[r * nk:(r + 1) * nk]
        i = vals.index(max(vals))  # (the first of equal ones)
        rows.append((vals[i], q, vals, i, r))
        if vals[i] > top[0]:
            top = (vals[i], Ks[i], q)
    return top, rows


def fine_best(value: Callable[[int, float], int], M: int, kappa: float, p: float,
              best: tuple[int, int, float], wide: bool = True, *,
              values: Values | None = None, samples: list[int] | None = None,
              guide: Guide | None = None,
              sample_h: list[tuple[float, float]] | None = None) -> tuple[int, int, float]:
    """``best`` improved by a wider search of (K, multiplier), for an execution of few segments.

    ``value(K, q) = K·(h − 1)``, h the least number of segments the theorem allows: for fixed q
    h − 1 does not increase with K, so the value is a sawtooth in K (each tooth one value n of
    h − 1, rising linearly until h drops), the tabulated K (tuned for many segments) can sit low
    on a tooth, and the tabulated multiplier need not be the best either.  This samples K over
    ``FINE_F``·κ·M at each multiple of p in ``FINE_MULTIPLIERS``; then, for the FINE_BEST
    multiples with the best samples, it finds the right edge of every tooth n within FINE_TEETH
    of the best sample's (bracketed by the samples, then bisected) and keeps the largest
    n·K_edge.  Every (K, q) gives a valid bound (docs/bounds.md §12): the search only picks a
    tighter one, at a bounded number of evaluations (O(1) in N).  ``wide=False``: the earlier,
    narrower search (multiples 0.8, 1, 1.2, every other f, the best sample's tooth only).

    ``values``: the same function on a batch (``values(Ks, qs)``, one call for every sample, one
    per few levels of all the bisections together); ``samples``: its values at the grid
    :func:`fine_ks` × :func:`fine_multipliers` (multiplier-major), if already known;
    ``guide``, ``sample_h``: the values with the real-valued h (:data:`Guide`) on a batch and h
    at the samples, which steer the batches of the bisections (fewer batches, the same steps)."""
    Ks = fine_ks(M, kappa, wide)
    batch = values if values is not None else _batched(value)
    qs_all = fine_multipliers(p, wide)
    if samples is None:
        samples = batch([K for _ in qs_all for K in Ks], [q for q in qs_all for _ in Ks])
    top, rows = _sample_rows(samples, Ks, qs_all, best)
    nk = len(Ks)
    reach = FINE_TEETH if wide else 0
    jobs = []
    for _, q, vals, i, r in sorted(rows, key=lambda t: t[0], reverse=True)[:FINE_BEST if wide else 1]:
        if vals[i] <= 0:
            continue
        ns = [v // K for v, K in zip(vals, Ks)]  # h − 1 at each sample: non-increasing
        n0 = ns[i]
        hs = None if sample_h is None else sample_h[r * nk:(r + 1) * nk]
        for n in range(max(1, n0 - reach), n0 + reach + 1):
            # the last sample with h − 1 >= n, and the next one (which has less)
            a = max((j for j in range(nk) if ns[j] >= n), default=-1)
            if a < 0:
                continue
            b = Ks[a + 1] if a + 1 < nk else 2 * Ks[a]
            near = () if hs is None else tuple((Ks[j], hs[j]) for j in (a - 1, a, a + 1)
                                               if 0 <= j < nk)
            jobs.append((q, n, Ks[a], vals[a], b, near))
    for (q, *_), (v, K) in zip(jobs, _right_edges(batch, jobs, guide=guide)):
        if v > top[0]:
            top = (v, K, q)
    return top


def tabulated_candidates(M: int, kappa: float, p: float, *, zero_too: bool,
                         retry: bool) -> list[tuple[int, float]]:
    """The (K, multiplier) pairs :func:`tabulated_best` may try, in its order: the tabulated one
    first, then (with ``retry``) the other segment lengths."""
    K = max(1, round(kappa * M))
    out = [(K, p)]
    if retry:
        for f in K_FACTORS:
            K2 = max(1, round(f * kappa * M))
            for p2 in ((p, 0.0) if zero_too else (p,)):
                out.append((K2, p2))
    return out


def tabulated_pick(cands: Sequence[tuple[int, float]], vals: Sequence[int]
                   ) -> tuple[int, int, float]:
    """:func:`tabulated_best`'s choice among its candidates, given all their values: the first
    unless it has few segments, then the largest (the first of equal ones)."""
    K, p = cands[0]
    best = (vals[0], K, p)
    if best[0] < FEW_SEGMENTS * K:
        for (K2, p2), v in zip(cands[1:], vals[1:]):
            if v > best[0]:
                best = (v, K2, p2)
    return best


def tabulated_best(value: Callable[[int, float], int], M: int, kappa: float, p: float, *,
                   zero_too: bool, retry: bool = True) -> tuple[int, int, float]:
    """(value, K, multiplier): the largest ``value(K, multiplier)`` at the tabulated segment length
    ``K = κ·M`` and multiplier p and, when the execution has few segments (and ``retry``), at
    ``K = f·κ·M`` for f in :data:`K_FACTORS`, with p and, if ``zero_too``, with 0 (no potential).
    Every (K, multiplier) gives a valid bound: this only picks the tightest of a few."""
    cands = tabulated_candidates(M, kappa, p, zero_too=zero_too, retry=retry)
    K, p = cands[0]
    v = value(K, p)
    if v >= FEW_SEGMENTS * K:
        return v, K, p
    return tabulated_pick(cands, [v] + [value(K2, p2) for K2, p2 in cands[1:]])


#: Closure under more memory is tried only when the bound at M spans fewer segments than this: with
#: h segments a larger M' can add at most about a factor 1 + O(1/h) (the many-segment value falls
#: like 1/M' or 1/√M'), so at large h the scan would only cost time.
MORE_MEMORY_SEGMENTS = 256
#: The M' tried: the points ⌈2^(j/8)⌉ > M of one fixed grid (the same for every input), at most
#: this many, stopping after three in a row give 0.
MORE_MEMORY_STEPS = 48


@functools.lru_cache(maxsize=4096)
def _grid(M: int, steps: int) -> tuple[int, ...]:
    j = max(0, math.floor(8.0 * math.log2(M)))
    out: list[int] = []
    while len(out) < steps:
        g = math.ceil(2.0 ** (j / 8.0))
        if g > M and (not out or g > out[-1]):
            out.append(g)
        j += 1
    return tuple(out)


def more_memory_grid(M: int, steps: int = MORE_MEMORY_STEPS) -> list[int]:
    """The larger fast memories M' > M that :func:`more_memory` tries: ⌈2^(j/8)⌉ > M, a fixed grid
    (so that for M₁ < M₂ the points tried at M₂ are among those tried at M₁)."""
    return list(_grid(M, steps))


def more_memory(at: Callable[[int, bool], tuple[int, int, float]], M: int,
                at_many: Callable[[Sequence[int], bool], list[tuple[int, int, float]]] | None = None,
                ) -> tuple[int, int, float, int]:
    """(value, K, multiplier, M'): a bound at M closed under more memory.

    Any schedule that runs with M words of fast memory runs unchanged with M' >= M words (it
    never holds more than M), so ``I/O(M) >= OPT(M') >= bound(M')`` for every M' >= M: the
    maximum over any M' >= M is a valid bound at M (docs/bounds.md §12.1).  ``at(M', refine)``
    evaluates the theorem at M' (``refine``: also its few-segment parameter refinements).  The
    scan runs only when the bound at M spans fewer than :data:`MORE_MEMORY_SEGMENTS` segments,
    over :func:`more_memory_grid`, cheaply (no refinement), and the three best M' found are
    then refined.  ``at_many(Ms, refine)``: ``at`` on a batch (the scan's every M' in one call,
    the same choices)."""
    v, K, p = at(M, True)
    best = (v, K, p, M)
    if K > 0 and v >= MORE_MEMORY_SEGMENTS * K:
        return best
    grid = [M2 for M2 in more_memory_grid(M) if M2 <= MAX_M]  # (the grid increases)
    if at_many is not None:
        scanned = [r[0] for r in at_many(grid, False)]
    found: list[tuple[int, int]] = []
    zeros = 0
    for i, M2 in enumerate(grid):
        v2 = scanned[i] if at_many is not None else at(M2, False)[0]
        zeros = zeros + 1 if v2 == 0 else 0
        if v2 > 0:
            found.append((v2, M2))
        if zeros >= 3:
            break
    top = [M2 for _, M2 in sorted(found, reverse=True)[:3]]  # refine the three best
    refined = at_many(top, True) if at_many is not None else [at(M2, True) for M2 in top]
    for M2, (v2, K2, p2) in zip(top, refined):
        if v2 > best[0]:
            best = (v2, K2, p2, M2)
    return best


@dataclass(frozen=True, eq=False)
class PairsTheorem:
    """One of Theorems A, B, D, E: ``Q >= K·(h - 1)`` for a workload of P required pairs (over all
    query heads), evaluated at the parameters tabulated for x = d²/M (:mod:`attnio.bounds.params`).

    ``value(P, d, M, K, multiplier)`` is the theorem at any segment length and multiplier.  The
    ``kind`` says what the multiplier is and how the few-segment refinement runs:

    * "potential" (A, D): a potential μ per accumulator word, ``tabulated·max(√M, M/d)``; with few
      segments the other K are tried with μ and with μ = 0;
    * "pooled" (B, E): the root-piece multiplier ``ν = min(tabulated·√M, nu_max·d)``; the other K
      only for M <= 16d² (beyond, the potential bound is the stronger one by far and this one only
      costs time).

    Each theorem's module exposes :meth:`pairs` as ``<name>_pairs``, :meth:`for_shape` as
    ``<name>_for``, and a function ``<name>(N, d, M, ...)`` stating the theorem.
    """

    name: str  #: the public function's name (Bound.name)
    theorem: str  #: Bound.theorem
    assumptions: tuple[str, ...]  #: the class of algorithms it speaks of
    table: str  #: its table in params ("A", "B", "D", "E")
    value: Callable[[int, int, int, int, float], int]
    kind: Literal["potential", "pooled"]
    nu_max: float = 0.0  #: pooled: ν is capped at nu_max·d (the theorem needs ν below c·d)
    #: with few segments, also :func:`fine_best`'s wider (K, multiplier) search at the M' chosen
    #: (kind "potential" only: a pooled ν must stay below nu_max·d)
    fine: bool = False
    #: the work the segments must do, ``work(P, d, multipliers)`` (an int, or floats per
    #: multiplier), and the per-segment maxima (Λ, Λ_f, Λ_l) on a batch,
    #: ``lambdas(d, Ms, Ks, multipliers)``: together the vectorised ``value`` (the same integers,
    #: :func:`segments_bound_many`); None: ``value`` one at a time
    work: Callable[[int, int, FloatArray], int | FloatArray] | None = None
    lambdas: Callable[[int, Sequence[int], Sequence[int], Sequence[float]],
                      tuple[FloatArray, FloatArray, FloatArray]] | None = None

    def values(self, P: int, d: int, Ms: Sequence[int], Ks: Sequence[int],
               qs: Sequence[float]) -> list[int]:
        """``[value(P, d, M, K, q) for (M, K, q) in zip(Ms, Ks, qs)]``, vectorised (the same
        integers; no argument checks: the searches stay in range)."""
        if self.work is None or self.lambdas is None:
            return [self.value(P, d, M, K, q) for M, K, q in zip(Ms, Ks, qs)]
        return segments_bound_many(self.work(P, d, np.asarray(qs, dtype=np.float64)), Ks,
                                   *self.lambdas(d, Ms, Ks, qs))

    def values_h(self, P: int, d: int, Ms: Sequence[int], Ks: Sequence[int],
                 qs: Sequence[float]) -> tuple[list[int], list[tuple[float, float]]]:
        """:meth:`values` and the real-valued h there (:func:`segments_h`; NaN without a
        vectorised ``lambdas``)."""
        if self.work is None or self.lambdas is None:
            return self.values(P, d, Ms, Ks, qs), [(math.nan, math.nan)] * len(Ks)
        w = self.work(P, d, np.asarray(qs, dtype=np.float64))
        lams = self.lambdas(d, Ms, Ks, qs)
        return segments_bound_many(w, Ks, *lams), segments_h(w, *lams)

    def search(self, P: int, d: int, M: int, refine: bool = True) -> tuple[int, int, float]:
        """(value, K, multiplier) of the best of the few parameters tried at M itself (cached);
        ``refine=False``: the tabulated parameters only."""
        return _search(self, P, d, M, refine)

    def closed(self, P: int, d: int, M: int) -> tuple[int, int, float, int]:
        """(value, K, multiplier, M'): the best value at M or at a larger M' (cached), a valid
        bound at M (:func:`more_memory`)."""
        return _closed(self, P, d, M)

    def prepare(self, workloads: Iterable[tuple[int, int, int]]) -> None:
        """Evaluate :meth:`closed` at every (P, d, M) of ``workloads`` now, in batches (the fine
        searches of all that share d in the same rounds of evaluations, :func:`_fine_many`): a
        later :meth:`closed` (or :meth:`pairs`, :meth:`for_shape`) there takes its result, the
        same.  A sweep calls it with the workloads of a task.  Arguments out of range are left
        to the later call (which names them)."""
        by_d: dict[int, list[tuple[int, int]]] = {}
        for P, d, M in dict.fromkeys(workloads):
            if (type(P) is int and type(d) is int and type(M) is int and P >= 0 and d >= 1
                    and 1 <= M <= MAX_M):
                by_d.setdefault(d, []).append((P, M))
        store = _prepared()
        for d, PMs in by_d.items():
            if len(store) + len(PMs) > PREPARED_SIZE:
                store.clear()
            for (P, M), got in zip(PMs, _closed_many(self, d, PMs)):
                store[self, P, d, M] = got

    def pairs(self, P: int, d: int, M: int) -> Bound:
        """The theorem for P required pairs (over all query heads), head dimension d, M fast
        words; P, d and M checked (a ParameterError names the bad one)."""
        P, d, M = check_int("P", P, minimum=0), check_int("d", d), check_M(M)
        value, K, p, M2 = self.closed(P, d, M)
        if self.kind == "potential":
            parameter = f"potential μ = {p:.4g} per accumulator word"
        else:
            parameter = f"root-piece multiplier ν = {p:.4g}"
        where = "" if M2 == M else (f", evaluated at M' = {M2} >= M (a schedule for M runs "
                                    "unchanged with more memory)")
        return Bound(value, self.theorem,
                     (*self.assumptions, f"segments of K = {K} I/Os, {parameter}{where}"),
                     True, name=self.name, regime=regime_of(d, M))

    def for_shape(self, shape: Shape, M: int) -> Bound:
        """The theorem for ``shape`` (all its query heads; P from its mask)."""
        return self.pairs(pairs_of(shape), shape.d, check_M(M))


@functools.lru_cache(maxsize=4 * 4096)
def _closed(theorem: PairsTheorem, P: int, d: int, M: int) -> tuple[int, int, float, int]:
    got = _prepared().get((theorem, P, d, M))
    if got is not None:
        return got
    return _closed_many(theorem, d, [(P, M)])[0]


@functools.lru_cache(maxsize=1)
def _prepared() -> dict[tuple[PairsTheorem, int, int, int], tuple[int, int, float, int]]:
    """The results of :meth:`PairsTheorem.prepare` not asked for yet (an lru_cache of a dict:
    cleared with the other caches)."""
    return {}


#: At most this many results wait in :func:`_prepared` (then it starts again).
PREPARED_SIZE = 4096


def _closed_many(theorem: PairsTheorem, d: int, PMs: Sequence[tuple[int, int]]
                 ) -> list[tuple[int, int, float, int]]:
    """:func:`_closed` of each (P, M) at one d: the closure under more memory one at a time,
    then the fine searches of all together (:func:`_fine_many`)."""
    out: list[tuple[int, int, float, int]] = [(0, 0, 0.0, M) for _, M in PMs]
    by_M: dict[int, list[int]] = {}
    for i, (P, M) in enumerate(PMs):
        if P > 0:
            by_M.setdefault(M, []).append(i)
    for M, idx in by_M.items():
        for i, got in zip(idx, _more_memory_many(theorem, [PMs[i][0] for i in idx], d, M)):
            out[i] = got
    fine: list[tuple[int, int, int, bool, tuple[int, int, float]]] = []
    for i, ((P, _), (v, K, p, M2)) in enumerate(zip(PMs, out)):
        if theorem.fine and P > 0 and K > 0 and v < FINE_SEGMENTS * K:  # at the M' chosen
            fine.append((i, P, M2, P * d >= FINE_MIN_WORK, (v, K, p)))
    if len(fine) == 1 and theorem.lambdas is not None:
        i, P, M2, wide, best = fine[0]
        v, K, p = _fine_single(theorem, P, d, M2, wide, best)
        out[i] = (v, K, p, M2)
    elif fine:
        for (i, _, M2, _, _), (v, K, p) in zip(fine, _fine_many(theorem, d, fine)):
            out[i] = (v, K, p, M2)
    return out


def _works(theorem: PairsTheorem, P: int, d: int, qs: Sequence[float]
           ) -> tuple[FloatArray, FloatArray]:
    """The work at each multiplier as :func:`segments_bound_many` uses it: (subtracted,
    compared); an int work is subtracted as its float and compared exactly (by the least float
    >= it), a float one is both."""
    w = _work(theorem, P, d, qs)
    if isinstance(w, int):
        wf = float(w)
        wc = wf if wf >= w else math.nextafter(wf, math.inf)
        return np.full(len(qs), wf), np.full(len(qs), wc)
    w = np.broadcast_to(np.asarray(w, dtype=np.float64), (len(qs),))
    return w, w


def _bound_elems(w: FloatArray, w_cmp: FloatArray, K: Sequence[int] | npt.NDArray[np.int64],
                 lam: FloatArray, lam_f: FloatArray, lam_l: FloatArray) -> list[Any]:
    """:func:`segments_bound_many` elementwise with a work per element (:func:`_works`; arrays
    of one shape, 1-d or 2-d): the same integers."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = np.ceil((w - lam_f - lam_l) / lam)
    c = np.where(w_cmp <= lam_f + lam_l, 0.0, c)
    c = np.where(w_cmp <= lam_f, -1.0, c)
    Ks = np.broadcast_to(np.asarray(K, dtype=np.int64), c.shape)
    if c.size and (float(c.max()) + 1.0) * float(Ks.max()) < 2.0 ** 62:
        out: list[Any] = ((c.astype(np.int64) + 1) * Ks).tolist()
        return out
    if c.ndim == 1:
        return [k * (1 + int(h)) for k, h in zip(Ks.tolist(), c.tolist())]
    return [[k * (1 + int(h)) for k, h in zip(kr, row)] for kr, row in zip(Ks.tolist(),
                                                                            c.tolist())]


def _rows_bound(theorem: PairsTheorem, Ps: Sequence[int], d: int, K: Sequence[int],
                qs: Sequence[float], lams: tuple[FloatArray, FloatArray, FloatArray] | None
                ) -> list[list[int]]:
    """``[segments_bound_many(work(P), K, *lams) for P in Ps]`` at the multipliers qs, in one
    batch: the same integers."""
    if not len(K) or lams is None:
        return [[] for _ in Ps]
    ws = [_works(theorem, P, d, qs) for P in Ps]
    shape = (len(Ps), len(K))
    return _bound_elems(np.array([w for w, _ in ws]), np.array([c for _, c in ws]), K,
                        *(np.broadcast_to(x, shape) for x in lams))


def _more_memory_many(theorem: PairsTheorem, Ps: Sequence[int], d: int, M: int
                      ) -> list[tuple[int, int, float, int]]:
    """:func:`more_memory` of the theorem (at its :func:`_search`) for every P of ``Ps`` (each
    > 0) at one (d, M), each step for all of them in one batch: the same choices.  A theorem
    whose work is not an int, or without a vectorised ``lambdas``, goes one P at a time."""
    if theorem.lambdas is not None and len(Ps) == 1:
        return [_more_memory_one(theorem, Ps[0], d, M)]
    if theorem.lambdas is None:
        return [more_memory(lambda M3, refine: _search(theorem, P, d, M3, refine), M,
                            lambda Ms, refine: _search_many(theorem, P, d, tuple(Ms), refine))
                for P in Ps]
    # at M: the tabulated candidate, then (where it has few segments) the others
    (first,), _, fK, fq, lams = _flat(theorem, d, (M,), True, 0)
    K0, p0 = first[0][0]
    v0 = [row[0] for row in _rows_bound(theorem, Ps, d, fK, fq, lams)]
    at_M: list[tuple[int, int, float]] = [(v, K0, p0) for v in v0]
    more = [i for i, v in enumerate(v0) if v < FEW_SEGMENTS * K0]
    if more:
        (rest,), _, rK, rq, rl = _flat(theorem, d, (M,), True, 1)
        if rK:
            for i, vals in zip(more, _rows_bound(theorem, [Ps[i] for i in more], d, rK, rq,
                                                 rl)):
                at_M[i] = tabulated_pick([(K0, p0), *rest[0]], [v0[i], *vals])
    out: list[tuple[int, int, float, int] | None] = [None] * len(Ps)
    scan = []
    for i, (v, K, p) in enumerate(at_M):
        if K > 0 and v >= MORE_MEMORY_SEGMENTS * K:
            out[i] = (v, K, p, M)
        else:
            scan.append(i)
    if scan:
        grid = tuple(M2 for M2 in more_memory_grid(M) if M2 <= MAX_M)
        got, _, gK, gq, gl = _flat(theorem, d, grid, False, 0)
        scanned = _rows_bound(theorem, [Ps[i] for i in scan], d, gK, gq, gl)
        tops: list[list[int]] = []
        for vals in scanned:
            found: list[tuple[int, int]] = []
            zeros = 0
            for v2, M2 in zip(vals, grid):
                zeros = zeros + 1 if v2 == 0 else 0
                if v2 > 0:
                    found.append((v2, M2))
                if zeros >= 3:
                    break
            tops.append([M2 for _, M2 in sorted(found, reverse=True)[:3]])
        # the three best refined: their tabulated candidates' values are the scan's; the
        # others where those have few segments
        cand0 = {M2: g[0][0] for M2, g in zip(grid, got)}
        v_at = [dict(zip(grid, vals)) for vals in scanned]
        need = sorted({M2 for s, top in enumerate(tops) for M2 in top
                       if v_at[s][M2] < FEW_SEGMENTS * cand0[M2][0]})
        part1 = dict(zip(need, _stored(theorem, d, need, True, 1))) if need else {}
        jobs: list[tuple[int, int]] = [(s, M2) for s, top in enumerate(tops) for M2 in top
                                       if M2 in part1 and part1[M2][1]]
        vals1: list[list[int]] = []
        if jobs:
            lam_rows = [np.concatenate([part1[M2][3][k] for _, M2 in jobs])  # type: ignore[index]
                        for k in range(3)]
            Kcat = [K for _, M2 in jobs for K in part1[M2][1]]
            ws = [_works(theorem, Ps[scan[s]], d, part1[M2][2]) for s, M2 in jobs]
            flat = _bound_elems(np.concatenate([w for w, _ in ws]),
                                np.concatenate([c for _, c in ws]), Kcat, *lam_rows)
            j0 = 0
            for _, M2 in jobs:
                n1 = len(part1[M2][1])
                vals1.append(flat[j0:j0 + n1])
                j0 += n1
        refined_of = {}
        for (s, M2), vals in zip(jobs, vals1):
            K, p = cand0[M2]
            refined_of[s, M2] = tabulated_pick([(K, p), *part1[M2][0]], [v_at[s][M2], *vals])
        for s, top in enumerate(tops):
            i = scan[s]
            v, K, p = at_M[i]
            best = (v, K, p, M)
            for M2 in top:
                v2, K2, p2 = refined_of.get((s, M2), (v_at[s][M2], *cand0[M2]))
                if v2 > best[0]:
                    best = (v2, K2, p2, M2)
            out[i] = best
    return [o for o in out if o is not None]


def _values_one(theorem: PairsTheorem, P: int, d: int, Ms: Sequence[int], Ks: Sequence[int],
                qs: Sequence[float]) -> list[int]:
    """:meth:`PairsTheorem.values` of a theorem with a vectorised ``lambdas`` (one call of it)."""
    assert theorem.lambdas is not None
    return segments_bound_many(_work(theorem, P, d, qs), Ks, *theorem.lambdas(d, Ms, Ks, qs))


#: :func:`_more_memory_one` evaluates the refinement's candidates at the first this many M' of
#: the scan with the scan (the three best M' are most often the first three).
SCAN_AHEAD = 3


@functools.lru_cache(maxsize=4096)
def _one_first(theorem: PairsTheorem, d: int, M: int) -> tuple[float, float, int]:
    """:func:`_more_memory_one`'s tabulated (κ, multiplier) at M and the tabulated K there."""
    (kappa, p0), = _tabulated_many(theorem, d, (M,))
    return kappa, p0, max(1, round(kappa * M))


#: One batch of :func:`_more_memory_one` at M (:func:`_one_batch`): the other candidates at M,
#: the scan's M' with their tabulated (κ, multiplier) and candidate (K, multiplier), the other
#: candidates at the first SCAN_AHEAD M', and every element's K, multiplier and (Λ, Λ_f, Λ_l).
OneBatch = tuple[list[tuple[int, float]], list[int], list[tuple[float, float]], list[int],
                 list[float], list[list[tuple[int, float]]], list[int], list[float],
                 "tuple[FloatArray, FloatArray, FloatArray] | None"]


@functools.lru_cache(maxsize=1024)
def _one_batch(theorem: PairsTheorem, d: int, M: int, rest: bool) -> OneBatch:
    """What :func:`_more_memory_one` evaluates at M in one call of ``lambdas``: with ``rest``,
    the other candidates at M (:func:`tabulated_candidates`), and the closure's scan
    (:func:`more_memory_grid`: the tabulated candidate at each M') with the other candidates at
    its first SCAN_AHEAD M' (they do not depend on P: cached)."""
    assert theorem.lambdas is not None
    potential = theorem.kind == "potential"
    dd16 = 16 * d * d
    kappa, p0 = _one_first(theorem, d, M)[:2]
    others = (tabulated_candidates(M, kappa, p0, zero_too=potential,
                                   retry=potential or M <= dd16)[1:] if rest else [])
    grid = [M2 for M2 in more_memory_grid(M) if M2 <= MAX_M]
    gt = _tabulated_many(theorem, d, grid)
    gK = [K if K >= 1 else 1 for K in [round(k * M2) for M2, (k, _) in zip(grid, gt)]]
    gq = [q for _, q in gt]
    ahead = [tabulated_candidates(M2, k, q, zero_too=potential, retry=potential or M2 <= dd16)[1:]
             for M2, (k, q) in zip(grid[:SCAN_AHEAD], gt)]
    Ms = [M] * len(others) + grid + [M2 for M2, cs in zip(grid, ahead) for _ in cs]
    Ks = [K for K, _ in others] + gK + [K for cs in ahead for K, _ in cs]
    qs = [q for _, q in others] + gq + [q for cs in ahead for _, q in cs]
    lams = theorem.lambdas(d, Ms, Ks, qs) if Ks else None
    return others, grid, gt, gK, gq, ahead, Ks, qs, lams


def _more_memory_one(theorem: PairsTheorem, P: int, d: int, M: int
                     ) -> tuple[int, int, float, int]:
    """:func:`more_memory` of the theorem at :func:`_search` for one P > 0 (a theorem with a
    vectorised ``lambdas``): the same steps and choices, straight on lists, with at most two
    batches of maxima (three where the three best M' are not among the first SCAN_AHEAD): the
    tabulated candidate at M (:func:`_one_first`; the scalar value for a potential); where it
    has few segments, the other candidates at M with the tabulated candidates of the whole scan
    and the other candidates at its first M' (:func:`_one_batch`); the other candidates at the
    rest of the three best M' where they have few segments.  (Each element's maxima do not
    depend on the others of a batch: the same floats; what does not depend on P is cached.)"""
    potential = theorem.kind == "potential"
    kappa, p0, K0 = _one_first(theorem, d, M)
    # (one element: the scalar value, the same integer, faster than a batch of one)
    v0 = (theorem.value(P, d, M, K0, p0) if potential else
          _values_one(theorem, P, d, (M,), (K0,), (p0,))[0])
    best = (v0, K0, p0)
    if K0 > 0 and v0 >= MORE_MEMORY_SEGMENTS * K0 and v0 >= FEW_SEGMENTS * K0:
        return v0, K0, p0, M
    # the others at M where the tabulated candidate has few segments, and the scan
    others, grid, gt, gK, gq, ahead, Ks, qs, lams = _one_batch(theorem, d, M,
                                                               v0 < FEW_SEGMENTS * K0)
    vals = segments_bound_many(_work(theorem, P, d, qs), Ks, *lams) if lams is not None else []
    n, ng = len(others), len(grid)
    if n:
        best = tabulated_pick([(K0, p0), *others], [v0, *vals[:n]])
    v, K, p = best
    if K > 0 and v >= MORE_MEMORY_SEGMENTS * K:
        return v, K, p, M
    gv = vals[n:n + ng]
    found: list[tuple[int, int]] = []
    zeros = 0
    for i, v2 in enumerate(gv):
        zeros = zeros + 1 if v2 == 0 else 0
        if v2 > 0:
            found.append((v2, i))
        if zeros >= 3:
            break
    # the three best M' (the grid increases: by value, then by M' the larger first), refined
    top = [i for _, i in sorted(found, reverse=True)[:3]]
    refined = {i: (gv[i], gK[i], gq[i]) for i in top}
    j = n + ng
    done = {}
    for i, cs in enumerate(ahead):
        done[i] = (cs, vals[j:j + len(cs)])
        j += len(cs)
    more = []
    for i in top:
        if gv[i] < FEW_SEGMENTS * gK[i]:
            if i in done:
                cs, vs = done[i]
                refined[i] = tabulated_pick([(gK[i], gq[i]), *cs], [gv[i], *vs])
            else:
                cs = tabulated_candidates(grid[i], gt[i][0], gt[i][1], zero_too=potential,
                                          retry=potential or grid[i] <= 16 * d * d)[1:]
                if cs:
                    more.append((i, cs))
    if more:
        vs = _values_one(theorem, P, d, [grid[i] for i, cs in more for _ in cs],
                         [K2 for _, cs in more for K2, _ in cs],
                         [q for _, cs in more for _, q in cs])
        j = 0
        for i, cs in more:
            refined[i] = tabulated_pick([(gK[i], gq[i]), *cs], [gv[i], *vs[j:j + len(cs)]])
            j += len(cs)
    out = (v, K, p, M)
    for i in top:
        v2, K2, p2 = refined[i]
        if v2 > out[0]:
            out = (v2, K2, p2, grid[i])
    return out


def _fine_one(theorem: PairsTheorem, P: int, d: int, M2: int, wide: bool,
              best: tuple[int, int, float]) -> tuple[int, int, float]:
    """:func:`fine_best` of the theorem at M2, one evaluation batch at a time (the reference of
    :func:`_fine_many`)."""
    kappa, p0 = _tabulated(theorem, d, M2)
    Ks, qs, lams = _fine_lambdas(theorem, d, M2, wide)
    if lams is None:
        samples, sample_h = theorem.values(P, d, [M2] * len(Ks), Ks, qs), None
    else:
        w = _work(theorem, P, d, qs)
        samples, sample_h = segments_bound_many(w, Ks, *lams), segments_h(w, *lams)

    def guide(K2s: Sequence[int], q2s: Sequence[float]
              ) -> tuple[list[int], list[tuple[float, float]]]:
        return theorem.values_h(P, d, [M2] * len(K2s), K2s, q2s)

    return fine_best(lambda K2, q: theorem.value(P, d, M2, K2, q), M2, kappa, p0, best,
                     wide=wide, samples=samples, sample_h=sample_h,
                     values=lambda K2s, q2s: theorem.values(P, d, [M2] * len(K2s), K2s, q2s),
                     guide=guide if lams is not None else None)


#: The targets, around the interpolated edge t, whose bisection paths a round of
#: :func:`_fine_many` evaluates for a bisection that needs nodes.
EDGE_TARGETS = (0,)


def _teeth(vals: Sequence[int], ks: Sequence[int], i: int, reach: int
           ) -> list[tuple[int, int]]:
    """The teeth a fine search bisects on one multiplier's samples (values ``vals`` at the
    segment lengths ``ks``, the best at index i): for every n within ``reach`` of the best
    sample's h − 1 (n >= 1), ``(n, j)`` with j the last sample with h − 1 >= n, where there is
    one (h − 1 = value // K does not increase along the samples: from its suffix maxima)."""
    ns = [v // K for v, K in zip(vals, ks)]
    n0 = ns[i]
    n_lo, n_hi = max(1, n0 - reach), n0 + reach
    last: dict[int, int] = {}
    top_n = n_lo - 1
    for j in range(len(ns) - 1, -1, -1):
        while ns[j] > top_n and top_n < n_hi:
            top_n += 1
            last[top_n] = j
    return [(n, last[n]) for n in range(n_lo, n_hi + 1) if n in last]


def _fine_many(theorem: PairsTheorem, d: int,
               reqs: Sequence[tuple[int, int, int, bool, tuple[int, int, float]]]
               ) -> list[tuple[int, int, float]]:
    """:func:`fine_best` for each request (_, P, M', wide, best) at one d, as :func:`_fine_one`
    chooses, with every request's bisections in the same rounds: one evaluation of the
    theorem's maxima per round for all of them.

    Each bisection takes the scalar code's steps exactly (its nodes are evaluated before it
    steps on them); a round evaluates, for every bisection that needs a node, the nodes on its
    way to the edge interpolated from the real-valued h at its bracket's ends (and to its
    neighbours, :data:`EDGE_TARGETS`): the interpolation only decides how many rounds it takes.
    Theorems without a vectorised ``lambdas`` or with a work per multiplier go one at a time."""
    if theorem.lambdas is None:
        return [_fine_one(theorem, P, d, M2, wide, best) for _, P, M2, wide, best in reqs]
    tops: list[tuple[int, int, float]] = []
    # the bisections: q, n, a, va, b, M', (float work, work compared), owner, and the
    # real-valued estimates known per K: (h, work/Λ_f)
    jobs: list[list[Any]] = []
    for _, P, M2, wide, best in reqs:
        Ks, qs_grid, lams = _fine_lambdas(theorem, d, M2, wide)
        w = _work(theorem, P, d, qs_grid)
        if not isinstance(w, int):
            tops.append(_fine_one(theorem, P, d, M2, wide, best))
            continue
        assert lams is not None
        samples = segments_bound_many(w, Ks, *lams)
        sample_h = segments_h(w, *lams)
        kappa, p0 = _tabulated(theorem, d, M2)
        ks = fine_ks(M2, kappa, wide)
        qs_all = fine_multipliers(p0, wide)
        top, rows = _sample_rows(samples, ks, qs_all, best)
        nk = len(ks)
        tops.append(top)
        reach = FINE_TEETH if wide else 0
        wf = float(w)
        w_cmp = wf if wf >= w else math.nextafter(wf, math.inf)
        for _, q, vals, i, i_q in sorted(rows, key=lambda t: t[0],
                                         reverse=True)[:FINE_BEST if wide else 1]:
            if vals[i] <= 0:
                continue
            hs = sample_h[i_q * nk:(i_q + 1) * nk]
            for n, a in _teeth(vals, ks, i, reach):
                b = ks[a + 1] if a + 1 < nk else 2 * ks[a]
                near = tuple((ks[j], hs[j]) for j in (a - 1, a, a + 1) if 0 <= j < nk)
                jobs.append([q, n, ks[a], vals[a], b, M2, wf, w_cmp, len(tops) - 1, near, {}])
    _edges_vec(theorem, d, jobs, [tops[job[8]][0] for job in jobs])
    for q, _, a, va, *_, r, _, _ in jobs:  # in the order of fine_best's jobs
        if va > tops[r][0]:
            tops[r] = (va, a, q)
    return tops


@functools.lru_cache(maxsize=256)
def _fine_grid(theorem: PairsTheorem, d: int, M: int, wide: bool
               ) -> tuple[list[int], list[float], FloatArray, FloatArray, FloatArray, FloatArray]:
    """:func:`_fine_lambdas` as arrays: the segment lengths and multipliers of the sample grid
    (:func:`fine_ks`, :func:`fine_multipliers`), K at every sample (multiplier-major), and the
    theorem's (Λ, Λ_f, Λ_l) there (a theorem with a vectorised ``lambdas``; cached, they do not
    depend on P)."""
    assert theorem.lambdas is not None
    kappa, p0 = _tabulated(theorem, d, M)
    ks, mults = fine_ks(M, kappa, wide), fine_multipliers(p0, wide)
    Ka = np.empty(len(mults) * len(ks))
    Ka.reshape(len(mults), len(ks))[:] = np.array(ks, dtype=np.float64)  # (np.tile, cheaper)
    lam, lam_f, lam_l = _lambdas_on_arrays(theorem, d, np.full(len(Ka), float(M)), Ka,
                                           np.repeat(np.array(mults, dtype=np.float64),
                                                     len(ks)))
    return ks, mults, Ka, lam, lam_f, lam_l


def _lambdas_on_arrays(theorem: PairsTheorem, d: int, Ma: FloatArray, Ka: FloatArray,
                       qa: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The theorem's ``lambdas`` on float arrays (each theorem's takes them as its sequences:
    its first step is ``np.asarray``)."""
    f = cast("Callable[[int, FloatArray, FloatArray, FloatArray], "
             "tuple[FloatArray, FloatArray, FloatArray]]", theorem.lambdas)
    return f(d, Ma, Ka, qa)


def _h_minus_2(w: float, w_cmp: float, lam: FloatArray, lam_f: FloatArray, lam_l: FloatArray
               ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """At one work (its float and the float it is compared as, :func:`segments_bound_many`):
    h − 2 as segments_bound_many computes it (−1: h = 1, 0: h = 2; an integral float), and the
    real-valued h and work/Λ_f (:func:`segments_h`), elementwise."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = (w - lam_f - lam_l) / lam
        c = np.ceil(x)
        h = 2.0 + x
        z = w / lam_f
    c = np.where(w_cmp <= lam_f + lam_l, 0.0, c)
    c = np.where(w_cmp <= lam_f, -1.0, c)
    return c, h, z


def _c_values(c: FloatArray, K: FloatArray) -> list[int]:
    """The values ``K·(h − 1)`` from h − 2 (:func:`_h_minus_2`) and K (integral floats) as
    :func:`segments_bound_many` computes them: the same integers."""
    if len(K) and (float(c.max()) + 1.0) * float(K.max()) < 2.0 ** 62:
        out: list[int] = ((c.astype(np.int64) + 1) * K.astype(np.int64)).tolist()
        return out
    return [k * (1 + int(h)) for k, h in zip(K.astype(np.int64).tolist(), c.tolist())]


def _fine_single(theorem: PairsTheorem, P: int, d: int, M2: int, wide: bool,
                 best: tuple[int, int, float]) -> tuple[int, int, float]:
    """:func:`_fine_many` of one request (the cold one-workload case): the same samples, jobs,
    bisection steps and result, on arrays (:func:`_fine_grid`, :func:`_edges_one`)."""
    ks, mults, Ka, lam, lam_f, lam_l = _fine_grid(theorem, d, M2, wide)
    w = _work(theorem, P, d, mults)
    if not isinstance(w, int):
        return _fine_many(theorem, d, [(0, P, M2, wide, best)])[0]
    wf = float(w)
    w_cmp = wf if wf >= w else math.nextafter(wf, math.inf)
    c, h, z = _h_minus_2(wf, w_cmp, lam, lam_f, lam_l)
    nk, nq = len(ks), len(mults)
    if (float(c.max()) + 1.0) * float(ks[-1]) < 2.0 ** 62:  # (the values in int64, as _c_values)
        V = (c.reshape(nq, nk).astype(np.int64) + 1) * np.array(ks, dtype=np.int64)
        im = V.argmax(axis=1).tolist()  # (the first of equal ones, as list.index(max))
        vm = V.max(axis=1).tolist()
        top = best
        rows: list[Any] = []
        for r, (q, i, v) in enumerate(zip(mults, im, vm)):
            rows.append((v, q, None, i, r))
            if v > top[0]:
                top = (v, ks[i], q)
    else:
        top, rows = _sample_rows(_c_values(c, Ka), ks, mults, best)
    reach = FINE_TEETH if wide else 0
    # the bisections: q, n, a, v(a), b, and 1/h (Λ_f/work for n = 1) at a and b
    jq: list[float] = []
    jn: list[int] = []
    ja: list[int] = []
    jv: list[int] = []
    jb: list[int] = []
    ya: list[float] = []
    yb: list[float] = []
    nan = math.nan
    isfinite = math.isfinite
    for _, q, vals, i, i_q in sorted(rows, key=lambda t: t[0],
                                     reverse=True)[:FINE_BEST if wide else 1]:
        if vals is None:
            vals = V[i_q].tolist()
        if vals[i] <= 0:
            continue
        o = i_q * nk
        hl, zl = h[o:o + nk].tolist(), z[o:o + nk].tolist()
        for n, a in _teeth(vals, ks, i, reach):
            e = hl if n > 1 else zl
            jq.append(q)
            jn.append(n)
            ja.append(ks[a])
            jv.append(vals[a])
            va = e[a]
            ya.append(1.0 / va if va > 0.0 and isfinite(va) else nan)
            if a + 1 < nk:
                jb.append(ks[a + 1])
                vb = e[a + 1]
                yb.append(1.0 / vb if vb > 0.0 and isfinite(vb) else nan)
            else:
                jb.append(2 * ks[a])
                yb.append(nan)
    if jq:
        _edges_one(theorem, d, M2, wf, w_cmp, top[0], Bisections(jq, jn, ja, jv, jb, ya, yb))
    for q, a, va in zip(jq, ja, jv):  # in the order of fine_best's jobs
        if va > top[0]:
            top = (va, a, q)
    return top


def _recip(y: float) -> float:
    """1/y as the bisections keep it (numpy's: ±inf at 0), NaN unless finite and > 0."""
    r = 1.0 / y if y != 0.0 else math.inf
    return r if r > 0.0 and math.isfinite(r) else math.nan


def _node_eval_one(theorem: PairsTheorem, d: int, M: int, w: float, w_cmp: float,
                   Ks: list[int], qs: list[float]) -> tuple[list[float], list[float], list[float]]:
    """:func:`_node_eval` at one (M, work), as lists."""
    assert theorem.lambdas is not None
    Ka = np.array(Ks, dtype=np.float64)
    c, h, z = _h_minus_2(w, w_cmp, *_lambdas_on_arrays(theorem, d, np.full(len(Ka), float(M)),
                                                       Ka, np.array(qs, dtype=np.float64)))
    if not np.isfinite(c).all():  # (segments_bound would raise: so does this)
        raise ValueError("fine search: a segment count is not finite")
    return c.tolist(), h.tolist(), z.tolist()


class Bisections(NamedTuple):
    """The bisections of :func:`_edges_one`, as parallel lists (a, va, b, ya, yb updated in
    place): job i bisects [a[i], b[i]) at multiplier q[i] for the edge of tooth n[i]; va[i]
    is the value at a[i]; ya, yb: 1/h (Λ_f/work for n = 1) at the bracket's ends."""

    q: list[float]
    n: list[int]
    a: list[int]
    va: list[int]
    b: list[int]
    ya: list[float]
    yb: list[float]


def _edges_one(theorem: PairsTheorem, d: int, M: int, w: float, w_cmp: float,
               floor: int | None, jobs: Bisections) -> None:
    """:func:`_edges_vec` of the bisections of one owner at one (M, work), on lists (``jobs``):
    each job ends with a[i], va[i] its right edge and the value there, or va[i] = −1 where it
    cannot give the owner's result (``floor``: the owner's best before the bisections,
    :func:`_prune_edges`; None: every job bisected).  The same steps, rounds and values as
    :func:`_edges_vec`."""
    qs, ns, a, va, b, ya, yb = jobs
    if max(b) >= _K_VEC:
        rows: list[list[Any]] = [[q, n, a0, v0, b0, M, w, w_cmp, 0, (), {}]
                                 for q, n, a0, v0, b0 in zip(qs, ns, a, va, b)]
        _edges_many(theorem, d, rows)
        a[:], va[:] = [row[2] for row in rows], [row[3] for row in rows]
        return
    assert theorem.lambdas is not None
    yt = [1.0 if n == 1 else 1.0 / n for n in ns]
    live = [i for i in range(len(ns)) if b[i] - a[i] > 1]
    owners = [0] * len(ns)  # (one owner, one floor)
    floors = None if floor is None else [floor] * len(ns)
    while live:
        if floors is not None:
            live = _prune_edges(ns, owners, live, a, b, va, floors)
            if not live:
                break
        paths: list[tuple[int, int, list[int]]] = []
        Ks: list[int] = []
        qn: list[float] = []
        for i in live:
            T, path = _edge_path(a[i], b[i], ya[i], yb[i], yt[i])
            paths.append((i, T, path))
            Ks.extend(path)
            qn.extend([qs[i]] * len(path))
        cl, hl, zl = _node_eval_one(theorem, d, M, w, w_cmp, Ks, qn)
        k = 0
        for i, T, path in paths:
            # the scalar steps along the path, up to the first that differs from the path's:
            # a is then the last node up (h − 1 >= n: c >= n − 1), b the last one down
            nf = ns[i] - 1.0
            ju = jd = -1
            for j in range(k, k + len(path)):
                c = Ks[j]
                up = cl[j] >= nf
                if up:
                    ju = j
                else:
                    jd = j
                if up != (c <= T):  # the path's guess was wrong here: the next round
                    break
            e = hl if ns[i] > 1 else zl
            if ju >= 0:
                c = Ks[ju]
                a[i], va[i], ya[i] = c, c * (int(cl[ju]) + 1), _recip(e[ju])
            if jd >= 0:
                b[i], yb[i] = Ks[jd], _recip(e[jd])
            k += len(path)
        live = [i for i in live if b[i] - a[i] > 1]


def _edge_path(A: int, B: int, ya: float, yb: float, yt: float) -> tuple[int, list[int]]:
    """The target T in [A, B) of a bisection of :func:`_edges_vec` and :func:`_edges_one`
    (1/h, or Λ_f/work for n = 1, linear in K between the bracket's ends ``ya``, ``yb``, at
    ``yt``; the middle where that is not finite) and the nodes of the scalar bisection's path
    towards it."""
    den = yb - ya
    T = A + (B - A) // 2
    if den != 0.0:
        t = A + (B - A) * ((yt - ya) / den)
        if math.isfinite(t):
            T = math.floor(t)
    T = min(max(T, A), B - 1)
    path = []
    while B - A > 1:
        c = A + (B - A) // 2
        path.append(c)
        if c <= T:
            A = c
        else:
            B = c
    return T, path


def _prune_edges(ns: Sequence[int], owners: Sequence[int], live: Sequence[int],
                 a: Sequence[int], b: Sequence[int], va: list[int], floor: Sequence[int]
                 ) -> list[int]:
    """The jobs of ``live`` (brackets [a, b) of :func:`_edges_vec`, for tooth ``ns[i]`` of
    owner ``owners[i]``) that can still give their owner's result, the others marked (value
    −1: never taken, docs/bounds.md §12.2).

    A job's edge K_e lies in [a, b − 1] and h − 1 does not increase with K, so its value
    K_e·(h(K_e) − 1) is at most ``ub = (b − 1)·(va // a)`` (va // a = h(a) − 1) and at least
    ``n·a`` (h(K_e) − 1 >= n; exactly ``va`` once done).  :func:`_fine_many` takes a job's value
    only where it exceeds the owner's best before the bisections (``floor``) and every job
    before it: a job with ``ub <= floor``, or ``ub`` below another job's least value, is never
    taken (its value is below that job's, which is taken or itself below another, up to one
    that stays), so it need not be bisected: the same result."""
    best: dict[int, int] = {}
    live_set = set(live)
    for i, r in enumerate(owners):
        if va[i] < 0:
            continue
        low = ns[i] * a[i] if i in live_set else va[i]
        if low > best.get(r, -1):
            best[r] = low
    keep = []
    for i in live:
        ub = (b[i] - 1) * (va[i] // a[i])
        r = owners[i]
        if ub <= floor[i] or ub < best.get(r, -1):
            va[i] = -1
        else:
            keep.append(i)
    return keep


def _edge_target(a: int, b: int, n: int,
                 est: dict[int, tuple[float, float]] | tuple[tuple[int, tuple[float, float]], ...]
                 ) -> int:
    """The K in [a, b) where the edge of tooth n is expected: at first (``est`` the samples near
    the bracket) as :func:`_window`, then 1/h (Λ_f/work for n = 1) linear in K between the
    bracket's ends (``est`` the estimates at every node evaluated), or the middle without
    estimates there."""
    if isinstance(est, tuple):
        win = _window(a, b, n, est)
        return (a + b) // 2 if win is None else min(max(win[0] + EDGE_WINDOW, a), b - 1)
    ea, eb = est.get(a), est.get(b)
    if ea is not None and eb is not None:
        k = 1 if n == 1 else 0
        ha, hb = ea[k], eb[k]
        if ha > 0.0 and hb > 0.0 and math.isfinite(ha) and math.isfinite(hb):
            ya, yb = 1.0 / ha, 1.0 / hb
            y = 1.0 / n if n > 1 else 1.0
            if yb != ya:
                t = a + (b - a) * (y - ya) / (yb - ya)
                if math.isfinite(t):
                    return min(max(int(t), a), b - 1)
    return (a + b) // 2


def _edges_many(theorem: PairsTheorem, d: int, jobs: list[list[Any]],
                floor: Sequence[int] | None = None) -> None:
    """The bisections of :func:`_fine_many`, in rounds: each job ``[q, n, a, va, b, M, w,
    w_cmp, owner, estimates, nodes]`` ends with a, va its right edge and the value there, as
    :func:`_right_edge` (h − 1 >= n at a; the steps of the scalar bisection).  Every job is
    bisected (``floor``, :func:`_edges_vec`'s early stop, is not used here)."""
    assert theorem.lambdas is not None
    while True:
        Ks: list[int] = []
        who: list[int] = []
        spans: list[tuple[int, int, int]] = []  # (job, its first and past-the-last node)
        for j, job in enumerate(jobs):
            n, a, va, b, nodes = job[1], job[2], job[3], job[4], job[10]
            while b - a > 1:  # the scalar steps, as far as the nodes evaluated go
                c = (a + b) // 2
                hc = nodes.get(c)
                if hc is None:
                    break
                if hc >= n:
                    a, va = c, c * hc
                else:
                    b = c
            job[2], job[3], job[4] = a, va, b
            if b - a <= 1:
                continue
            t = _edge_target(a, b, n, job[9])
            want = set()
            for dt in EDGE_TARGETS:
                x, y, tt = a, b, t + dt
                while y - x > 1:
                    c = (x + y) // 2
                    if c not in nodes:
                        want.add(c)
                    if c <= tt:
                        x = c
                    else:
                        y = c
            spans.append((j, len(Ks), len(Ks) + len(want)))
            Ks.extend(want)
            who.extend([j] * len(want))
        if not Ks:
            return
        q = [jobs[j][0] for j in who]
        Ms = [jobs[j][5] for j in who]
        c, h, z = _node_eval(theorem, d, Ms, Ks, q, np.array([jobs[j][6] for j in who]),
                             np.array([jobs[j][7] for j in who]))
        hm1 = [int(v) + 1 for v in c.tolist()]
        hz = list(zip(h.tolist(), z.tolist()))
        for j, i0, i1 in spans:
            job = jobs[j]
            job[10].update(zip(Ks[i0:i1], hm1[i0:i1]))
            if isinstance(job[9], tuple):  # (the samples near: now every node's estimates)
                job[9] = {K: e for K, e in job[9]}
            job[9].update(zip(Ks[i0:i1], hz[i0:i1]))


def _node_eval(theorem: PairsTheorem, d: int, Ms: Sequence[int], Ks: Sequence[int],
               qs: Sequence[float], w: FloatArray, w_cmp: FloatArray
               ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """At each node (M, K, q) with its work (float, and compared, as :func:`segments_bound_many`):
    h − 2 as segments_bound_many computes it (−1: h = 1, 0: h = 2; an integral float), and the
    real-valued h and work/Λ_f (:func:`segments_h`)."""
    assert theorem.lambdas is not None
    lam, lam_f, lam_l = theorem.lambdas(d, Ms, Ks, qs)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = (w - lam_f - lam_l) / lam
        c = np.ceil(x)  # h - 2 (h >= 3), as segments_bound_many
        h = 2.0 + x
        z = w / lam_f
    c = np.where(w_cmp <= lam_f + lam_l, 0.0, c)
    c = np.where(w_cmp <= lam_f, -1.0, c)
    if not np.isfinite(c).all():  # (segments_bound would raise: so does this)
        raise ValueError("fine search: a segment count is not finite")
    return c, h, z


#: :func:`_edges_vec` keeps K in int64: brackets reaching this go to :func:`_edges_many`.
_K_VEC = 1 << 61


def _edges_vec(theorem: PairsTheorem, d: int, jobs: list[list[Any]],
               floor: Sequence[int] | None = None) -> None:
    """:func:`_edges_many` in few rounds: each round, every bisection that is not done takes
    the path of the scalar bisection towards its interpolated edge (1/h, or Λ_f/work for
    n = 1, linear in K between the bracket's ends), all the paths' nodes are evaluated at once
    (one call of the theorem's maxima), and each bisection follows its path as long as the
    scalar steps do: where a node's decision differs from the path's, it takes the scalar step
    there and starts the next round from that bracket (the nodes further on the path are in the
    other half: never needed).  The same steps, values and edges as :func:`_edges_many`; with
    ``floor`` (per job, its owner's best value before the bisections), the jobs that cannot
    give their owner's result stop, each round, with the value −1 (:func:`_prune_edges`).
    (The paths and steps are Python integers: a few dozen bisections of a few dozen levels,
    where numpy's cost per call would dominate.)"""
    if not jobs:
        return
    if max(job[4] for job in jobs) >= _K_VEC:
        _edges_many(theorem, d, jobs)
        return

    def y_of(e: tuple[float, float] | None, first: bool) -> float:
        if e is None:
            return math.nan
        v = e[1] if first else e[0]
        return 1.0 / v if v > 0.0 and math.isfinite(v) else math.nan

    a = [job[2] for job in jobs]
    b = [job[4] for job in jobs]
    va: list[int] = [job[3] for job in jobs]
    ns = [job[1] for job in jobs]
    yt = [1.0 if n == 1 else 1.0 / n for n in ns]
    ya = [y_of(dict(job[9]).get(job[2]), job[1] == 1) for job in jobs]
    yb = [y_of(dict(job[9]).get(job[4]), job[1] == 1) for job in jobs]
    owners = [job[8] for job in jobs]
    live = [i for i in range(len(jobs)) if b[i] - a[i] > 1]
    while live:
        if floor is not None:
            live = _prune_edges(ns, owners, live, a, b, va, floor)
            if not live:
                break
        paths: list[tuple[int, int, list[int]]] = []  # (job, its target, its path's nodes)
        Ks: list[int] = []
        who: list[int] = []
        for i in live:
            T, path = _edge_path(a[i], b[i], ya[i], yb[i], yt[i])
            paths.append((i, T, path))
            Ks.extend(path)
            who.extend([i] * len(path))
        cv, hv, zv = _node_eval(theorem, d, [jobs[i][5] for i in who], Ks,
                                [jobs[i][0] for i in who],
                                np.array([jobs[i][6] for i in who], dtype=np.float64),
                                np.array([jobs[i][7] for i in who], dtype=np.float64))
        one = np.array([ns[i] == 1 for i in who], dtype=bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            yv = np.where(one, 1.0 / zv, 1.0 / hv)
        yv = np.where(np.isfinite(yv) & (yv > 0.0), yv, np.nan)
        cl, yl = cv.tolist(), yv.tolist()
        k = 0
        for i, T, path in paths:
            nf = ns[i] - 1.0  # h − 1 >= n: c >= n − 1
            for j, c in enumerate(path):
                up = cl[k + j] >= nf
                if up:
                    a[i], va[i], ya[i] = c, c * (int(cl[k + j]) + 1), yl[k + j]
                else:
                    b[i], yb[i] = c, yl[k + j]
                if up != (c <= T):  # the path's guess was wrong here: the next round
                    break
            k += len(path)
        live = [i for i in live if b[i] - a[i] > 1]
    for job, ai, vi in zip(jobs, a, va):
        job[2], job[3] = ai, vi


def _work(theorem: PairsTheorem, P: int, d: int, qs: Sequence[float]) -> int | FloatArray:
    assert theorem.work is not None
    return theorem.work(P, d, np.asarray(qs, dtype=np.float64))


@functools.lru_cache(maxsize=256)
def _fine_lambdas(theorem: PairsTheorem, d: int, M: int, wide: bool
                  ) -> tuple[list[int], list[float],
                             tuple[FloatArray, FloatArray, FloatArray] | None]:
    """The sample grid of :func:`fine_best` at M, multiplier-major, and the theorem's (Λ, Λ_f,
    Λ_l) there (None without a vectorised ``lambdas``): they do not depend on P (cached)."""
    kappa, p0 = _tabulated(theorem, d, M)
    ks, mults = fine_ks(M, kappa, wide), fine_multipliers(p0, wide)
    Ks = [K for _ in mults for K in ks]
    qs = [q for q in mults for _ in ks]
    if theorem.lambdas is None:
        return Ks, qs, None
    return Ks, qs, theorem.lambdas(d, [M] * len(Ks), Ks, qs)


@functools.lru_cache(maxsize=4 * 4096)
def _search(theorem: PairsTheorem, P: int, d: int, M: int,
            refine: bool = True) -> tuple[int, int, float]:
    return _search_many(theorem, P, d, (M,), refine)[0]


#: At most this many entries per (theorem, d, refine) in :func:`_store` (then it starts again).
STORE_SIZE = 1024

#: One entry of :func:`_store`: candidates of :func:`tabulated_candidates` at one M (the first, or
#: the others), their K and multipliers, and the theorem's (Λ, Λ_f, Λ_l) at them, the rows of
#: one array (None without a vectorised ``lambdas``).
Stored = tuple[list[tuple[int, float]], list[int], list[float], "FloatArray | None"]


@functools.lru_cache(maxsize=64)
def _store(theorem: PairsTheorem, d: int, refine: bool) -> dict[tuple[int, int], Stored]:
    """Per (M, part), what :func:`_search_many` evaluates there that does not depend on P (part
    0: the tabulated candidate, part 1: the others, evaluated only where the first has few
    segments): filled in batches (every entry a search asks for that is not there yet, in one
    call of ``lambdas``), so a sweep that repeats (d, M) with other P, or the closure's scans
    over the same M', reuse it.  (An lru_cache of dicts: cleared with the other caches.)"""
    return {}


def _stored(theorem: PairsTheorem, d: int, Ms: Sequence[int], refine: bool,
            part: int) -> list[Stored]:
    # (part 0, the tabulated candidate, does not depend on refine: one store for both)
    store = _store(theorem, d, refine or part == 0)
    _fill(theorem, d, refine or part == 0, [(M, part) for M in Ms])
    return [store[M, part] for M in Ms]


def _fill(theorem: PairsTheorem, d: int, refine: bool, want: Sequence[tuple[int, int]]) -> None:
    """Put every (M, part) of ``want`` that is not there yet into :func:`_store` (theorem, d,
    refine), all in one call of the theorem's ``lambdas`` (each element's maxima do not depend
    on the others of a batch: the same floats)."""
    store = _store(theorem, d, refine)
    missing = [Mp for Mp in dict.fromkeys(want) if Mp not in store]
    if not missing:
        return
    if len(store) + len(missing) > STORE_SIZE:
        store.clear()  # (and every entry asked for is evaluated again: none is lost)
        missing = list(dict.fromkeys(want))
    potential = theorem.kind == "potential"
    per = []
    for (M, part), (kappa, p) in zip(missing, _tabulated_many(theorem, d,
                                                               [M for M, _ in missing])):
        if part == 0:  # (the first candidate does not depend on the retries)
            per.append([(max(1, round(kappa * M)), p)])
            continue
        cands = tabulated_candidates(M, kappa, p, zero_too=potential,
                                     retry=refine and (potential or M <= 16 * d * d))
        per.append(cands[1:])
    fM = [M for (M, _), c in zip(missing, per) for _ in c]
    fK = [K for c in per for K, _ in c]
    fq = [q for c in per for _, q in c]
    # (Λ, Λ_f, Λ_l) as the rows of one array: each entry's one slice of it
    lams = None
    if theorem.lambdas is not None and fK:
        lams = np.empty((3, len(fK)))
        lams[0], lams[1], lams[2] = theorem.lambdas(d, fM, fK, fq)
    i = 0
    for Mp, cands in zip(missing, per):
        j = i + len(cands)
        store[Mp] = (cands, fK[i:j], fq[i:j], None if lams is None else lams[:, i:j])
        i = j


@functools.lru_cache(maxsize=256)
def _flat(theorem: PairsTheorem, d: int, Ms: tuple[int, ...], refine: bool, part: int
          ) -> tuple[list[Stored], list[int], list[int], list[float],
                     tuple[FloatArray, FloatArray, FloatArray] | None]:
    """:func:`_stored` at Ms, flattened: (per M, the M, K, multipliers, maxima of all)."""
    got = _stored(theorem, d, Ms, refine, part)
    fM = [M for M, g in zip(Ms, got) for _ in g[1]]
    fK = [K for g in got for K in g[1]]
    fq = [q for g in got for q in g[2]]
    lams = None
    if theorem.lambdas is not None and fK:
        parts = [g[3] for g in got if g[1] and g[3] is not None]
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        lams = (rows[0], rows[1], rows[2])
    return got, fM, fK, fq, lams


def _flat_values(theorem: PairsTheorem, P: int, d: int, Ms: tuple[int, ...], refine: bool,
                 part: int) -> tuple[list[Stored], list[int]]:
    got, fM, fK, fq, lams = _flat(theorem, d, Ms, refine, part)
    if not fK:
        return got, []
    vals = (theorem.values(P, d, fM, fK, fq) if lams is None else
            segments_bound_many(_work(theorem, P, d, fq), fK, *lams))
    return got, vals


def _search_many(theorem: PairsTheorem, P: int, d: int, Ms: tuple[int, ...],
                 refine: bool = True) -> list[tuple[int, int, float]]:
    """:func:`tabulated_best` at each M of Ms (its parameters tabulated there), in batches: the
    tabulated candidates of all, then the others where the first has few segments."""
    if P == 0 or not Ms:
        return [(0, 0, 0.0) for _ in Ms]
    first, v0 = _flat_values(theorem, P, d, Ms, refine, 0)
    out = [(v, g[0][0][0], g[0][0][1]) for v, g in zip(v0, first)]
    more = tuple(M for M, (v, K, _) in zip(Ms, out) if v < FEW_SEGMENTS * K)
    if not refine or not more:
        return out
    rest, v1 = _flat_values(theorem, P, d, more, refine, 1)
    picks = {}
    i = 0
    for M, g in zip(more, rest):
        picks[M] = (g[0], v1[i:i + len(g[0])])
        i += len(g[0])
    for k, (M, (v, K, p)) in enumerate(zip(Ms, out)):
        if M in picks:
            cands, vals = picks[M]
            out[k] = tabulated_pick([(K, p), *cands], [v, *vals])
    return out


def _tabulated(theorem: PairsTheorem, d: int, M: int) -> tuple[float, float]:
    """(κ, the multiplier) tabulated for the theorem at x = d²/M (:func:`params.interpolate`)."""
    return _tabulated_many(theorem, d, (M,))[0]


def _tabulated_many(theorem: PairsTheorem, d: int, Ms: Sequence[int]
                    ) -> list[tuple[float, float]]:
    """:func:`_tabulated` at each M of Ms (one table lookup, one loop: the same floats)."""
    dd = d * d
    tab = params.interpolate_many(params.lookup_parts(theorem.table), [dd / M for M in Ms])
    sqrt = math.sqrt
    if theorem.kind == "potential":
        return [(kappa, m * max(sqrt(M), M / d)) for M, (kappa, m) in zip(Ms, tab)]
    cap = theorem.nu_max * d
    return [(kappa, min(m * sqrt(M), cap)) for M, (kappa, m) in zip(Ms, tab)]
