"""Theorem B′ (docs/bounds.md §6.1): Theorem B with a potential by level on the boundary words.

``qkpv_levelled`` charges the QKᵀ and P·V products (2·P·d, the root pieces priced by ν) like
Theorem B, but telescopes a potential ``Φ = λ_p·(pair-value words) + λ_o·(O words)`` held at the
segment boundaries (Lemma 6), so a segment that imports M words and exports M words no longer
gets both for free.  Its per-segment maximum has no closed form: it is certified offline by a
branch and bound (:func:`certified_lambda`, never below the true maximum) at the nodes of a table
of x = d²/M (``levelled.json`` beside this module, written by
``python benchmarks/levelled_params.py --write``), each node at its own (K/M, λ_p/√M, λ_o/√M,
ν/√M).  At run time the bound reads the table only (a bisection, then with few segments at most
the 32 nodes of the octave below and a few alternate rows):

* by scale invariance Λ/M^{3/2} depends only on (K/M, λ/√M, ν/√M, x), and at fixed M it is
  non-increasing in d (d enters only through ab/d², where a larger d shrinks the feasible work),
  so the node with the largest x at or below the actual d²/M gives a valid Λ, and so does every
  node below it (with few segments, where K·(h − 1) moves by whole segments, the nodes of the
  octave below and the table's alternate parameter sets there are tried as well and the largest
  value taken);
* the segment length is ``K = ⌊κ·M⌋ <= κ·M``, and every per-segment maximum is non-decreasing in
  K (the I/O budget only enlarges the feasible set), so the tabulated maxima at κ cover it.

About 3.2·N²d/√M for M << d² (Theorem B: 2.83), 2.29·N²d²/M at M = d² (Theorem A: 1.93).

>>> N, d, M = 4096, 256, 1024  # M = d²/64
>>> round(qkpv_levelled(N=N, d=d, M=M).value / (N * N * d / M ** 0.5), 2)
3.15
"""

from __future__ import annotations

import bisect
import functools
import math
from typing import Any

import numpy as np

from ..core.checks import check_int
from ..core.workload import Shape
from .base import Bound, attention_shape, check_M, keyword_sizes, pairs_of, regime_of
from .forward import ASSUMPTIONS
from .segments import INFLATE, MORE_MEMORY_SEGMENTS, more_memory, segments_bound

__all__ = ["THEOREM", "Node", "alternates", "certified_lambda", "closed_levelled", "node_for",
           "nodes", "qkpv_levelled", "qkpv_levelled_for", "qkpv_levelled_pairs",
           "qkpv_levelled_raw_for", "qkpv_levelled_raw_pairs", "qkpv_levelled_value",
           "segment_value"]

THEOREM = ("Theorem B′: QKᵀ and P·V products, a potential by level on pair-value and O words "
           "(docs/bounds.md §6.1)")

#: One node of the table: (x = d²/M, K/M, λ_p/√M, λ_o/√M, ν/√M, Λ, Λ_f, Λ_l), the three maxima
#: in units M^{3/2}, certified (never below the per-segment maxima at any d²/M >= x).
Node = tuple[float, float, float, float, float, float, float, float]


@functools.cache
def _load() -> dict[str, Any]:
    import json
    from importlib import resources

    return json.loads(resources.files(__name__.rpartition(".")[0]).joinpath("levelled.json")
                      .read_text(encoding="utf-8"))


@functools.cache
def _packed() -> dict[str, Any]:
    """The nodes and alternates from the table's packed copy ``levelled.f64`` (the same floats
    as the JSON's; much faster to read), as float64 arrays (rows × columns): the file read as
    :func:`attnio.bounds.params.read_packed` reads it, without its lists (the arrays are what
    the closure's envelope takes, :func:`_family_arrays`; the tuples come from them)."""
    import json

    from .params import MAGIC, packed_bytes

    data = packed_bytes("levelled.f64")
    if not data.startswith(MAGIC):
        raise ValueError("not a packed table file (attnio-f64)")
    end = data.index(b"\n", len(MAGIC))
    flat = np.frombuffer(data, dtype="<f8", offset=end + 1).astype(np.float64)
    out: dict[str, Any] = {}
    i = 0
    for key, rows, cols in json.loads(data[len(MAGIC):end]):
        n = rows * max(cols, 1)
        out[key] = flat[i:i + n].reshape(rows, max(cols, 1))
        i += n
    if i != len(flat):
        raise ValueError("packed table file: the header does not account for every number")
    return out


@functools.cache
def nodes() -> tuple[Node, ...]:
    """The table's nodes, by increasing x = d²/M (read once: :func:`node_for` bisects them)."""
    return tuple(map(tuple, _packed()["nodes"].tolist()))


@functools.cache
def _xs() -> tuple[float, ...]:
    return tuple(_packed()["nodes"][:, 0].tolist())


def _alternate_rows() -> Any:
    """The alternates' array, by increasing x (a stable sort: equal x keep the file's order)."""
    alt = _packed().get("alternates")
    if alt is None:
        return np.empty((0, 8))
    return alt[np.argsort(alt[:, 0], kind="stable")]


@functools.cache
def alternates() -> tuple[Node, ...]:
    """The table's alternate rows, by increasing x: more certified parameter sets at a node's x
    (``levelled.json`` "alternates"; none in a table written before them), evaluated by the
    few-segment scan only (each a valid bound at any d²/M >= its x, like a node)."""
    return tuple(map(tuple, _alternate_rows().tolist()))


@functools.cache
def _alt_xs() -> tuple[float, ...]:
    return tuple(n[0] for n in alternates())


def _index(d: int, M: int) -> int:
    """The index of the node with the largest x at or below d²/M (-1 below the smallest node)."""
    # a node exactly at x (float equality of d²/M with a tabulated x) is included by bisect_right
    return bisect.bisect_right(_xs(), d * d / M) - 1


def node_for(d: int, M: int) -> Node | None:
    """The node with the largest x at or below d²/M (None below the smallest node).  Its maxima
    hold at d²/M: they are non-increasing in d at fixed M (docs/bounds.md §6.1)."""
    i = _index(d, M)
    return None if i < 0 else nodes()[i]


#: With fewer segments than MORE_MEMORY_SEGMENTS the count K·(h − 1) moves by whole segments, so
#: the nodes of the octave below the node for d²/M (x' >= OCTAVE·x, 0.499 not 1/2: the nodes are
#: rounded down to four decimals) and the alternates at x' in that octave up to the node are tried
#: as well (each is valid at d²/M: its x is at most d²/M) and the largest value is taken: at most
#: 32 nodes (2^(1/32) steps from x = 2 to 16) and the few alternates, a bounded number of reads.
OCTAVE = 0.499


def _value_at(node: Node, P: int, d: int, M: int) -> tuple[int, int, float]:
    _, kappa, _, _, nu_hat, lam, lam_f, lam_l = node
    K = math.floor(kappa * M)
    if K < 1:
        return 0, 0, 0.0
    nu = nu_hat * math.sqrt(M)
    if not 0.0 <= nu < 2 * d:  # cannot happen for x >= the node's x (the table keeps ν̂ < 2√x)
        return 0, 0, 0.0
    m32 = M ** 1.5 * INFLATE
    return segments_bound((2.0 * d - nu) * P, K, lam * m32, lam_f * m32, lam_l * m32), K, nu


def qkpv_levelled_value(P: int, d: int, M: int) -> tuple[int, int, float]:
    """(value, K, ν): Theorem B′ at the tabulated parameters of :func:`node_for` and of the node
    below it (valid at d²/M too; between two nodes its parameters can give more), and with fewer
    than MORE_MEMORY_SEGMENTS segments the best of those, the nodes of the octave below and the
    alternates from that octave up to the node (0, 0, 0.0 where d²/M is below the table)."""
    i = _index(d, M)
    if i < 0 or P == 0:
        return 0, 0, 0.0
    table = nodes()
    best = _value_at(table[i], P, d, M)
    if i > 0:  # the node below too: its parameters can win between the nodes (finer steps)
        got = _value_at(table[i - 1], P, d, M)
        if got[0] > best[0]:
            best = got
    if best[1] and best[0] >= MORE_MEMORY_SEGMENTS * best[1]:
        return best
    x = table[i][0]
    j0 = bisect.bisect_left(_xs(), OCTAVE * x)
    a0, a1 = bisect.bisect_left(_alt_xs(), OCTAVE * x), bisect.bisect_right(_alt_xs(), x)
    for node in (*table[j0:i], *alternates()[a0:a1]):
        got = _value_at(node, P, d, M)
        if got[0] > best[0]:
            best = got
    return best


@functools.lru_cache(maxsize=4 * 4096)
def _closed(P: int, d: int, M: int) -> tuple[int, int, float, int]:
    if P == 0:
        return 0, 0, 0.0, M
    return more_memory(lambda M2, refine: qkpv_levelled_value(P, d, M2), M)


def _bound(d: int, M: int, got: tuple[int, int, float, int], how: str) -> Bound:
    value, K, nu, M2 = got
    where = "" if M2 == M else (f", evaluated at M' = {M2} >= M (a schedule for M runs "
                                f"unchanged with more memory){how}")
    words = (f"segments of K = {K} I/Os, root-piece multiplier ν = {nu:.4g}, maxima tabulated "
             f"at d²/M >= {d * d / M2:.4g}{where}" if K else
             "d²/M below the table's smallest node: no value (0)")
    return Bound(value, THEOREM, (*ASSUMPTIONS, words), True, name="qkpv_levelled",
                 regime=regime_of(d, M))


@keyword_sizes()
def qkpv_levelled_raw_pairs(*, P: int, d: int, M: int) -> Bound:
    """Theorem B′ as searched (not closed): the best of its values at M and at the larger M' of
    §12.1's grid, not monotone in M between those points nor in P (docs/bounds.md §12.1).
    :func:`qkpv_levelled_pairs` is never below it."""
    P, d, M = check_int("P", P, minimum=0), check_int("d", d), check_M(M)
    return _bound(d, M, _closed(P, d, M), "")


def qkpv_levelled_raw_for(shape: Shape, M: int) -> Bound:
    """:func:`qkpv_levelled_raw_pairs` for ``shape`` (all its query heads; P from its mask)."""
    return qkpv_levelled_raw_pairs(P=pairs_of(shape), d=shape.d, M=check_M(M))


@functools.lru_cache(maxsize=4 * 4096)
def _monotone(P: int, d: int, M: int) -> tuple[int, int, float, int]:
    return closed_levelled(P, d, M)


@keyword_sizes()
def qkpv_levelled_pairs(*, P: int, d: int, M: int) -> Bound:
    """Theorem B′ for P required pairs (over all query heads), head dimension d, M fast words,
    closed under more memory and fewer pairs (:func:`closed_levelled`): the largest value of any
    row of the table at any M' >= M where it holds, so non-increasing in M and non-decreasing in
    P (docs/bounds.md §12.1), and never below :func:`qkpv_levelled_raw_pairs`."""
    P, d, M = check_int("P", P, minimum=0), check_int("d", d), check_M(M)
    return _bound(d, M, _monotone(P, d, M), "; the closure over M' >= M")


def qkpv_levelled_for(shape: Shape, M: int) -> Bound:
    """Theorem B′ for ``shape`` (all its query heads; P from its mask), closed
    (:func:`qkpv_levelled_pairs`)."""
    return qkpv_levelled_pairs(P=pairs_of(shape), d=shape.d, M=check_M(M))


@keyword_sizes()
def qkpv_levelled(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
                  heads: int = 1, kv_heads: int | None = None, window: int | None = None) -> Bound:
    """Theorem B′: ``Q >= K·(h - 1)``, h the least number of segments with
    ``(2d - ν)·P <= Λ_f + Λ_l + (h - 2)·Λ``, the maxima of the levelled potential tabulated
    (docs/bounds.md §6.1).  Valid for every M and mask (0 for M > 4d², below the table)."""
    return qkpv_levelled_for(attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads,
                                             kv_heads=kv_heads, window=window), M)


# ---------------------------------------------------------------------------- the per-segment problem
def segment_value(v: Any, x: float, kappa: float, lp: float, lo: float, nu: float,
                  kind: str = "mid") -> float:
    """The per-segment quantity of §6.1 at one configuration, M = 1 (for tests: every feasible
    configuration must stay <= the certified maximum).  ``v`` = (i, p, o, p', o', R_in, R_y, W_e,
    W_z, a, b, c, y, e, z, r): start words (inputs, pair values, O), end words (pair values, O),
    reads and writes by kind, imported a, b, c (Q, K, V entries) and y (pair values), exported e
    (pair values) and z (O pieces), root pieces r.  Returns -inf where the budgets of §6.1 steps
    1-3 fail, else √(ab(e + r)) + √(c·z·(y + ab/x)) − ν·r − (Φ_end − Φ_start); the first segment
    starts empty, the last has e = 0, z <= W_z and no end potential."""
    i, p, o, p2, o2, rin, ry, we, wz, a, b, c, y, e, z, r = (float(t) for t in v)
    tol = 1e-12
    if min(i, p, o, p2, o2, rin, ry, we, wz, a, b, c, y, e, z, r) < 0:
        return -math.inf
    if kind == "first" and i + p + o > 0:
        return -math.inf
    if kind == "last" and (e > 0 or z > wz + tol or p2 + o2 > 0):
        return -math.inf
    piv = y + a * b / x
    ok = (i + p + o <= 1 + tol and p2 + o2 <= 1 + tol and rin + ry + we + wz <= kappa + tol
          and a + b + c <= i + rin + tol and y <= p + ry + tol and e <= p2 + we + tol
          and z <= o2 + wz + tol and r <= piv + tol)
    if not ok:
        return -math.inf
    work = math.sqrt(a * b * (e + r)) + math.sqrt(c * z * piv) - nu * r
    return work - (lp * p2 + lo * o2) + (lp * p + lo * o)


def _f1(s, e, piv, nu):
    """max over 0 <= r <= piv of s·√(e + r) − ν·r (concave in r): non-decreasing in s, e, piv."""
    r = np.clip(s * s / (4 * nu * nu) - e, 0.0, piv) if nu > 0 else piv
    return s * np.sqrt(e + r) - nu * r


def _cost(Qb, y, e, z, kappa, lp, lo, kind):
    """The least potential change Φ_end − Φ_start with which a segment reaches the aggregates
    (Qb, y, e, z) (vectorised; +inf where no configuration does), λ_o >= λ_p >= 0, M = 1.  The start
    memory not holding inputs (i) or pair values (p) holds O values (credit λ_o each); a unit held
    at a boundary instead of read or written costs λ_o (input, start), λ_o − λ_p (pair value,
    start), λ_p (pair value, end), λ_o (O value, end); the K I/Os cover the rest, so the deficit
    δ = Qb + y + e + z − κ is held, cheapest first within the start (i + p <= 1) and end
    (p' + o' <= 1) capacities (a laminar polymatroid: greedy is optimal).  Non-decreasing in each
    aggregate.  kind: "mid", "first" (nothing held at the start), "last" (no end potential, e = 0
    and z written)."""
    delta = np.maximum(Qb + y + e + z - kappa, 0.0)
    items = []  # (unit cost, cap, side)
    if kind != "first":
        items += [(lo - lp, y, 0), (lo, Qb, 0)]
    if kind != "last":
        items += [(lp, e, 1), (lo, z, 1)]
    items.sort(key=lambda t: t[0])
    left = [np.ones_like(delta), np.ones_like(delta)]
    need = delta.copy()
    cost = np.zeros_like(delta)
    for c, cap, side in items:
        h = np.minimum(np.minimum(cap, left[side]), need)
        cost += c * h
        need -= h
        left[side] = left[side] - h
    cost = np.where(need > 1e-12, np.inf, cost)
    return cost - (lo if kind != "first" else 0.0)


def certified_lambda(kappa: float, lp: float, lo: float, nu: float, x: float, kind: str = "mid",
                     rtol: float = 2e-3, max_boxes: int = 50_000_000) -> float:
    """An upper bound on the per-segment maximum of §6.1 at M = 1, x = d²/M (``math.inf``: the
    limit M << d²), never below it: a branch and bound over boxes of the aggregates
    (Qb, y, e, z, s), Qb = a + b + c, s = (a + b)/2 <= Qb/2.  On a box the work is at most
    f1(s⁺, e⁺, y⁺ + s⁺²/x) + √((Qb⁺ − 2s⁻)·z⁺·(y⁺ + s⁺²/x)) (every factor non-decreasing in the
    aggregates, ab <= s², c <= Qb − 2s) and the potential's change at least its value at the lower
    corner (:func:`_cost`, non-decreasing; +inf there means no point of the box is feasible).  A
    box is dropped when its bound is within ``rtol`` of the best feasible value found; the result
    is that value plus the tolerance, inflated by 10⁻⁹ (rounding)."""
    if not lo >= lp >= 0 or nu < 0 or kappa <= 0:
        raise ValueError("certified_lambda needs lo >= lp >= 0, nu >= 0, kappa > 0")
    top = 1.0 + kappa
    lo_b = np.zeros((1, 5))
    hi_b = np.array([[top, top, top, top, top / 2]])
    if kind == "first":
        hi_b[0] = [kappa, kappa, top, top, kappa / 2]
    elif kind == "last":
        hi_b[0, 2] = 0.0  # no pair value is exported by the last segment
        hi_b[0, 3] = kappa  # its O pieces are all written
    inv_x = 0.0 if x == math.inf else 1.0 / x
    best = -math.inf
    boxes = 0
    scale = np.array([top, top, top, top, top / 2])
    while len(lo_b):
        boxes += len(lo_b)
        if boxes > max_boxes:
            raise RuntimeError("certified_lambda: too many boxes")
        Ql, yl, el, zl, sl = lo_b.T
        Qh, yh, eh, zh, sh = hi_b.T
        c_lo = _cost(Ql, yl, el, zl, kappa, lp, lo, kind)
        piv_h = yh + sh * sh * inv_x
        ub = _f1(sh, eh, piv_h, nu) + np.sqrt(np.maximum(Qh - 2 * sl, 0.0) * zh * piv_h) - c_lo
        ub = np.where(2 * sl <= Qh, ub, -np.inf)
        # a feasible point of the box: its lower corner, s = min(s⁻, Q⁻/2)
        s0 = np.minimum(sl, Ql / 2)
        piv0 = yl + s0 * s0 * inv_x
        val = _f1(s0, el, piv0, nu) + np.sqrt(np.maximum(Ql - 2 * s0, 0.0) * zl * piv0) - c_lo
        val = np.where(np.isfinite(c_lo), val, -np.inf)
        best = max(best, float(val.max()))
        keep = ub > best + rtol * abs(best)
        lo_b, hi_b = lo_b[keep], hi_b[keep]
        if not len(lo_b):
            break
        k = np.argmax((hi_b - lo_b) / scale, axis=1)
        rows = np.arange(len(k))
        mid = (lo_b[rows, k] + hi_b[rows, k]) / 2
        lo2, hi2 = lo_b.copy(), hi_b.copy()
        hi_b[rows, k] = mid
        lo2[rows, k] = mid
        lo_b, hi_b = np.concatenate([lo_b, lo2]), np.concatenate([hi_b, hi2])
    return (best + rtol * abs(best)) * (1 + 1e-9) + 1e-12


# ---------------------------------------------------------------------------- the closure (§12.1)
@functools.cache
def _family_matrix() -> Any:
    """The nodes, then the alternates by increasing x: one row each (float64)."""
    return np.concatenate([_packed()["nodes"], _alternate_rows()])


@functools.cache
def _families() -> tuple[Node, ...]:
    """Every certified parameter set of the table: the nodes, then the alternates
    (``(*nodes(), *alternates())``: the same rows, from the same arrays)."""
    return tuple(map(tuple, _family_matrix().tolist()))


@functools.cache
def _family_arrays() -> tuple[Any, ...]:
    """The columns of :func:`_families`' rows (the same floats)."""
    fam = _family_matrix()
    return tuple(fam[:, j] for j in range(fam.shape[1]))


def _m_max(x: float, d: int) -> int:
    """The largest M' with ``d·d/M' >= x`` in floats (where a row of x is valid, as
    :func:`_index` decides it); 0 if none."""
    dd = d * d
    m = max(0, math.floor(dd / x) + 2)
    while m >= 1 and not dd / m >= x:
        m -= 1
    return m


def _level(f: Node, P: int, d: int, M: int) -> int:
    """h − 1 of the row ``f`` at M' = M (``value // K``; 0 where K = 0)."""
    v, K, _ = _value_at(f, P, d, M)
    return v // K if K else 0


def _right_edge(f: Node, P: int, d: int, n: int, lo: int, hi: int, guess: float) -> int:
    """The largest M' in [lo, hi] with h − 1 >= n for the row f (h − 1 is non-increasing in M':
    :func:`closed_levelled`), given that lo has it: from ``guess``, a gallop then a bisection."""
    g = min(hi, max(lo, int(guess)))
    if _level(f, P, d, g) >= n:
        a, step = g, 1
        while True:  # a has it; look for one that does not
            b = a + step
            if b > hi:
                b = hi + 1
                break
            if _level(f, P, d, b) < n:
                break
            a, step = b, 2 * step
    else:
        b, step = g, 1
        while True:  # b does not; look for one that does
            a = b - step
            if a <= lo:
                a = lo
                break
            if _level(f, P, d, a) >= n:
                break
            b, step = a, 2 * step
    while b - a > 1:  # a has it, b does not (or is hi + 1)
        c = (a + b) // 2
        if _level(f, P, d, c) >= n:
            a = c
        else:
            b = c
    return a


#: The relative room the closure's envelope leaves for floating-point rounding (the envelope's
#: float errors are a few units of 2⁻⁵³; a larger room only costs candidates).
SLACK = 1e-12


def closed_levelled(P: int, d: int, M: int) -> tuple[int, int, float, int]:
    """(value, K, ν, M'): Theorem B′ closed under more memory and fewer pairs, exactly.

    The value is C(P, M) = the maximum, over every row f of the table (nodes and alternates)
    and every integer M' >= M where f is valid (d²/M' >= x_f), of the row's value
    ``T_f(P, M') = ⌊κ_f·M'⌋·(h − 1)`` (:func:`_value_at`): each is a valid bound at M' and so at
    M (any schedule for M runs with M' words).  For a row, K = ⌊κM'⌋ does not decrease with M'
    and h − 1 does not increase (the work (2d − ν̂√M')·P falls, the maxima λ·M'^{3/2} grow), so
    the maximum over M' is at the right edge R_n of a level n of h − 1, and R_n <
    (W₀/c_n)^{2/3} with W₀ = (2d − ν̂√M)·P and c_n = λ_f + λ_l + (n − 2)·λ (c₁ = λ_f): the
    level's value is at most U(n) = κ·n·min(M'_max, (W₀/c_n)^{2/3}).  n/c_n^{2/3} decreases up
    to n* = −3(λ_f + λ_l − 2λ)/λ <= 6 and increases after, so the levels with U(n) above the
    best value found are those below n* checked one by one and a run down from the level at M
    that stops at the first U(n) below the best: a finite candidate set, evaluated exactly.
    Docs: docs/bounds.md §12.1.  C is non-increasing in M (fewer (f, M')) and non-decreasing in
    P (each T_f is), and never below the search :func:`qkpv_levelled_raw_pairs` (its value is
    one T_f at one M' >= M)."""
    if P == 0 or d * d / M < _xs()[0]:
        return 0, 0, 0.0, M
    fam = _family_matrix()  # (the rows tried become tuples, as _families()'s: the same floats)
    xs, kap, _, _, nuh, lam, lam_f, lam_l = _family_arrays()
    sq = math.sqrt(M)
    w0 = np.maximum((2.0 * d - nuh * sq) * P, 0.0) * (1 + 1e-12)  # W₀ >= work at every M' >= M
    valid = (d * d / M >= xs) & (w0 > 0)
    m32 = M ** 1.5 * INFLATE
    # h − 1 at M (a float evaluation close to the exact one, for the envelope only)
    lf, ll, lm = lam_f * m32, lam_l * m32, lam * m32
    with np.errstate(divide="ignore", invalid="ignore"):
        n_top = np.where(w0 <= lf, 0.0, np.where(w0 <= lf + ll, 1.0,
                                                  1.0 + np.ceil((w0 - lf - ll) / lm)))
    # an upper bound on every level's value, per row (U at the top level + 1 and at the levels
    # 1..6 below n*; the exact levels are decided below, this only orders and prunes the rows)
    rows = np.flatnonzero(valid & (n_top >= 1))
    mcap = np.floor(d * d / xs[rows]) + 1.0
    top = n_top[rows] + 1.0
    ns = np.minimum(np.arange(1.0, 8.0)[:, None], top)  # levels 1..6 (capped at top), and top
    ns[-1] = top
    c = np.where(ns <= 1, lam_f[rows], lam_f[rows] + lam_l[rows] + (ns - 2) * lam[rows])
    r = np.minimum(mcap, (w0[rows] / (c * INFLATE)) ** (2.0 / 3.0) * (1 + SLACK))
    u = (kap[rows] * ns * r).max(axis=0) * (1 + SLACK)
    best = (0, 0, 0.0, M)
    order = list(zip(u.tolist(), rows.tolist()))
    order.sort(reverse=True)
    for ub, i in order:
        if ub <= best[0]:
            break
        f = tuple(fam[i].tolist())
        mmax = _m_max(f[0], d)
        v, K, nu = _value_at(f, P, d, M)
        if v > best[0]:
            best = (v, K, nu, M)
        n_hi = v // K if K else 0
        if n_hi < 1 or mmax < M:
            continue
        k, w, a = f[1], float(w0[i]), f[6] + f[7] - 2 * f[5]

        def cap(n: int) -> float:  # R_n < cap(n)
            c = f[6] if n == 1 else f[6] + f[7] + (n - 2) * f[5]
            return min(float(mmax), (w / (c * INFLATE)) ** (2.0 / 3.0) * (1 + SLACK))

        def bound_at(n: int) -> float:  # U(n) (rounding: SLACK, far above the float errors)
            return k * n * cap(n) * (1 + SLACK)

        n_star = max(1, min(n_hi, math.ceil(-3.0 * a / f[5]) if a < 0 else 1))
        levels = [n for n in range(1, n_star + 1) if bound_at(n) > best[0]]
        # the levels n_star < n <= n_hi with U(n) > best: U increases there, so they are
        # [low, n_hi]: low found by bisection on n
        low = n_hi + 1
        while low - 1 > max(n_star, n_hi - 8) and bound_at(low - 1) > best[0]:
            low -= 1
        if low - 1 > n_star and low == n_hi - 7:  # still above: bisection
            a_, b_ = n_star, low  # U(b_) > best; U(a_) <= best or a_ = n_star (not in the run)
            while b_ - a_ > 1:
                c_ = (a_ + b_) // 2
                if bound_at(c_) > best[0]:
                    b_ = c_
                else:
                    a_ = c_
            low = b_
        found: list[tuple[int, int]] = []  # (n, M') to evaluate exactly
        if low <= n_hi:
            top_m = min(mmax, math.floor(cap(low)))
            if top_m - M + 1 < n_hi - low + 1:  # fewer integers than levels: every M' there
                found += [(0, m) for m in range(M, top_m + 1)]
            else:
                levels += range(low, n_hi + 1)
        for n in sorted(set(levels), reverse=True):
            if bound_at(n) > best[0]:
                found.append((n, _right_edge(f, P, d, n, M, mmax, cap(n))))
        for _, R in found:
            v, K, nu = _value_at(f, P, d, R)
            if v > best[0]:
                best = (v, K, nu, R)
    return best
