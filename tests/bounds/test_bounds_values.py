"""The vectorised evaluation of Theorems A-E (issue 31) gives the same integers as the scalar one.

``tests/data/bound_values.json`` holds every explicit bound value of :mod:`attnio.bounds`
(forward and backward, and the (value, K, multiplier, M') Theorems A, B, B′, D and E chose) on 420
shapes, written by ``benchmarks/bound_values.py`` from the scalar evaluation before the searches
were vectorised; the current code must reproduce every one.  The batched per-segment maxima are
compared with the scalar functions (kept as the reference: :func:`segments.potential_lambdas`,
:func:`segments.segments_bound`, the theorems' ``value``) on drawn inputs.
"""

from __future__ import annotations

import itertools
import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attnio import bounds
from attnio.bounds import backward as BK
from attnio.bounds import forward as F
from attnio.bounds import segments as S
from conftest import load_script

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
bound_values = load_script("benchmarks/bound_values.py")

with open(os.path.join(HERE, "data", "bound_values.json"), encoding="utf-8") as _f:
    REFERENCE = json.load(_f)


def test_the_reference_grid_is_the_script_s_grid():
    assert [r["shape"] for r in REFERENCE["shapes"]] == bound_values.grid()
    assert len(REFERENCE["shapes"]) == 420


@pytest.mark.parametrize("chunk", range(6))
def test_every_bound_value_is_unchanged_on_the_grid(chunk):
    """Every explicit forward and backward bound, and Theorems A-E's chosen parameters, value for
    value (integers, and the multipliers as floats, bit for bit)."""
    rows = REFERENCE["shapes"][chunk::6]
    for row in rows:
        got = bound_values.values(row["shape"])
        assert got == row, row["shape"]


def test_theorem_c_values_are_unchanged():
    for m, k, n, M, v in REFERENCE["matmul_potential"]:
        assert bounds.matmul_potential(m=m, k=k, n=n, M=M).value == v


_branch_sets = st.sampled_from(["A", "C", "D", "cubic"])


def _branches(kind: str, d: int) -> tuple[tuple[float, float], ...]:
    return {"A": F._a_branches(d), "C": ((0.25, 0.0),), "D": BK._d_branches(d),
            "cubic": ((0.0, 1.0 / (27.0 * d * d)),)}[kind]


_M = st.one_of(st.integers(1, 10**7), st.integers(1, 2**60))
_mu = st.one_of(st.just(0.0), st.just(5e-324), st.floats(0.0, 1e-150),
                st.floats(0.0, 1e7, allow_nan=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=_branch_sets, d=st.integers(1, 300), Ms=st.lists(_M, min_size=1, max_size=3),
       Ks=st.lists(st.one_of(st.integers(1, 10**7), st.integers(1, 2**40)), min_size=1,
                   max_size=3),
       pts=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), _mu), min_size=1,
                    max_size=12))
def test_batched_potential_lambdas_equal_the_scalar_ones(kind, d, Ms, Ks, pts):
    """Elementwise the scalar floats, with repeated (M, K) (shared per distinct pair) too."""
    br = _branches(kind, d)
    pts = [(Ms[i % len(Ms)], Ks[j % len(Ks)], mu) for i, j, mu in pts]
    M, K, mus = (np.array(t, dtype=float) for t in zip(*pts))
    got = S.potential_lambdas_many(M, K, mus, br)
    for i, (Mi, Ki, mu) in enumerate(pts):
        assert tuple(float(g[i]) for g in got) == S.potential_lambdas(Mi, Ki, mu, br)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=_branch_sets, d=st.integers(1, 300), Ms=st.lists(_M, min_size=1, max_size=3),
       Ks=st.lists(st.one_of(st.integers(1, 10**7), st.integers(1, 2**40)), min_size=1,
                   max_size=4),
       mus=st.lists(_mu, min_size=1, max_size=5), distinct=st.booleans())
def test_large_batched_potential_lambdas_share_and_equal_the_scalar_ones(kind, d, Ms, Ks, mus,
                                                                          distinct):
    """From SHARE_MIN elements on the μ-free work is shared per distinct (M, K) (the path below
    it computes each element alone): elementwise the scalar floats on both paths."""
    br = _branches(kind, d)
    n = S.SHARE_MIN + 7
    if distinct:  # (every (M, K) once: nothing to share)
        pts = [(Ms[i % len(Ms)], Ks[0] + i, mus[i % len(mus)]) for i in range(n)]
    else:
        pts = [(Ms[i % len(Ms)], Ks[(i // 3) % len(Ks)], mus[(i // 2) % len(mus)])
               for i in range(n)]
    M, K, mu = (np.array(t, dtype=float) for t in zip(*pts))
    got = S.potential_lambdas_many(M, K, mu, br)
    for i, (Mi, Ki, mui) in enumerate(pts):
        assert tuple(float(g[i]) for g in got) == S.potential_lambdas(Mi, Ki, mui, br)
    # Theorem D keeps some branches per element (kept): the same on a large batch
    got = BK._d_lambdas(d, [int(p[0]) for p in pts], [int(p[1]) for p in pts],
                        [p[2] for p in pts])
    for i, (Mi, Ki, mui) in enumerate(pts[:20]):
        assert tuple(float(g[i]) for g in got) == BK.backward_accum_lambdas(Mi, d, Ki, mui)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=_branch_sets, d=st.integers(1, 300), Ms=st.lists(_M, min_size=1, max_size=2),
       Ks=st.lists(st.one_of(st.integers(1, 10**7), st.integers(1, 2**40)), min_size=2,
                   max_size=40, unique=True),
       mus=st.lists(_mu, min_size=2, max_size=12), odd=st.integers(-1, 200))
def test_grid_batched_potential_lambdas_equal_the_scalar_ones(kind, d, Ms, Ks, mus, odd):
    """A grid (k pairs (M, K), K increasing, repeated alike per multiplier: the fine search's
    samples) from GRID_MIN elements on shares the μ-free work by broadcasting (and an element
    off the pattern, ``odd``, falls back): elementwise the scalar floats, Theorem D's too."""
    br = _branches(kind, d)
    Ks = sorted(Ks)
    pairs = [(Ms[j % len(Ms)], K) for j, K in enumerate(Ks)]
    reps = -(-S.GRID_MIN // len(pairs))
    pts = [(M, K, mus[r % len(mus)]) for r in range(reps) for M, K in pairs]
    if 0 <= odd < len(pts):
        pts[odd] = (pts[odd][0] + 1, pts[odd][1], pts[odd][2])
    M, K, mu = (np.array(t, dtype=float) for t in zip(*pts))
    if odd < 0:
        assert S._grid_period(M, K, None) == len(pairs)
    got = S.potential_lambdas_many(M, K, mu, br)
    for i, (Mi, Ki, mui) in enumerate(pts):
        assert tuple(float(g[i]) for g in got) == S.potential_lambdas(Mi, Ki, mui, br)
    got = BK._d_lambdas(d, [int(p[0]) for p in pts], [int(p[1]) for p in pts],
                        [p[2] for p in pts])
    for i, (Mi, Ki, mui) in enumerate(pts[:30]):
        assert tuple(float(g[i]) for g in got) == BK.backward_accum_lambdas(Mi, d, Ki, mui)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 300),
       pts=st.lists(st.tuples(_M, st.integers(1, 10**7), _mu), min_size=1, max_size=6))
def test_theorem_d_batched_lambdas_keep_the_same_branches(d, pts):
    Ms, Ks, mus = (list(t) for t in zip(*pts))
    got = BK._d_lambdas(d, Ms, Ks, mus)
    for i, (M, K, mu) in enumerate(pts):
        assert tuple(float(g[i]) for g in got) == BK.backward_accum_lambdas(M, d, K, mu)


@pytest.mark.parametrize("theorem", ["B", "E"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 300),
       pts=st.lists(st.tuples(st.one_of(st.integers(1, 10**7), st.integers(1, 2**50)),
                              st.integers(1, 10**7), st.floats(0.0, 1.0),
                              st.sampled_from([None, 0.0, 1e-170])),
                    min_size=1, max_size=12))
def test_batched_pooled_lambdas_equal_the_scalar_ones(theorem, d, pts):
    """Theorems B and E's vectorised pooled maxima (:func:`segments.pooled_lambdas_many`, every
    batch size) are the scalar floats."""
    many, one, cap = ((F._b_lambdas, F.qkpv_pooled_lambdas, 1.9 * d) if theorem == "B" else
                      (BK._e_lambdas, BK.backward_pooled_lambdas, 2.4 * d))
    rows = [(M, K, f * cap if nu is None else nu) for M, K, f, nu in pts]
    fns = F._b_functions_many(d) if theorem == "B" else BK._e_functions_many(d)
    Ms, Ks, nus = (list(t) for t in zip(*rows))
    vec = S.pooled_lambdas_many(np.array(Ms, dtype=float), np.array(Ks, dtype=float),
                                np.array(nus), fns)
    got = many(d, Ms, Ks, nus)
    for i, (M, K, nu) in enumerate(rows):
        ref = one(M, d, K, nu)
        assert tuple(float(g[i]) for g in vec) == ref
        assert tuple(float(g[i]) for g in got) == ref


_work = st.one_of(st.integers(0, 10**6), st.integers(0, 2**70),
                  st.integers(2**53 - 5, 2**53 + 5))


@settings(max_examples=300, deadline=None)
@given(work=_work, K=st.integers(1, 10**9),
       lam=st.floats(1e-3, 1e30), lam_f=st.floats(0.0, 1e30), lam_l=st.floats(0.0, 1e30),
       as_float=st.booleans())
def test_batched_segments_bound_is_the_scalar_one(work, K, lam, lam_f, lam_l, as_float):
    """Exact for int work beyond 2^53 too (compared as Python compares an int with a float)."""
    w = float(work) if as_float else work
    if math.isinf(float(work)):
        return
    got = S.segments_bound_many(np.array([w]) if as_float else w, [K], np.array([lam]),
                                np.array([lam_f]), np.array([lam_l]))
    assert got == [S.segments_bound(w, K, lam, lam_f, lam_l)]


def test_segments_bound_near_a_float_boundary():
    """An int work just above a float: Python's int/float comparison is exact."""
    w = 2**53 + 1
    f = float(2**53)
    got = S.segments_bound_many(w, [7], np.array([1.0]), np.array([f]), np.array([0.0]))
    assert got == [S.segments_bound(w, 7, 1.0, f, 0.0)] == [7]  # (a float comparison: [0])


@pytest.mark.parametrize("theorem", [F._A, F._B, BK._D, BK._E], ids=["A", "B", "D", "E"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(P=st.integers(1, 10**12), d=st.integers(1, 256), M=st.integers(1, 10**7),
       pts=st.lists(st.tuples(st.integers(1, 10**7), st.floats(0.0, 1.0)), min_size=1,
                    max_size=5))
def test_theorem_values_on_a_batch_equal_value(theorem, P, d, M, pts):
    """``PairsTheorem.values`` (the searches' batch evaluation) is ``value`` at each point."""
    Ks = [K for K, _ in pts]
    cap = theorem.nu_max * d if theorem.kind == "pooled" else 10.0 * math.sqrt(M)
    qs = [f * cap for _, f in pts]
    assert theorem.values(P, d, [M] * len(Ks), Ks, qs) == [theorem.value(P, d, M, K, q)
                                                           for K, q in zip(Ks, qs)]


@pytest.mark.parametrize("theorem", [F._A, BK._D], ids=["A", "D"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(P=st.integers(1, 5_000_000), d=st.integers(1, 200), M=st.integers(8, 300_000),
       wide=st.booleans())
def test_batched_fine_search_is_the_scalar_one(theorem, P, d, M, wide):
    """fine_best on a batch (samples and bisections batched, with and without the guide that
    steers the bisections' batches) chooses as one evaluation at a time."""
    th = theorem
    kappa, p0 = S._tabulated(th, d, M)
    K0 = max(1, round(kappa * M))
    start = (th.value(P, d, M, K0, p0), K0, p0)

    def value(K, q):
        return th.value(P, d, M, K, q)

    def values(Ks, qs):
        return th.values(P, d, [M] * len(Ks), Ks, qs)

    def guide(Ks, qs):
        return th.values_h(P, d, [M] * len(Ks), Ks, qs)

    scalar = S.fine_best(value, M, kappa, p0, start, wide)
    assert S.fine_best(value, M, kappa, p0, start, wide, values=values) == scalar
    Ks = S.fine_ks(M, kappa, wide)
    qs = S.fine_multipliers(p0, wide)
    samples, hs = guide([K for _ in qs for K in Ks], [q for q in qs for _ in Ks])
    assert S.fine_best(value, M, kappa, p0, start, wide, values=values, guide=guide,
                       samples=samples, sample_h=hs) == scalar


def test_the_bisections_take_the_scalar_steps_with_a_misleading_guide():
    """The guide only chooses which nodes a batch evaluates: a wrong one costs batches, not
    values."""
    th = F._A
    P, d, M = 4096 * 4095, 64, 65536
    kappa, p0 = S._tabulated(th, d, M)
    K0 = max(1, round(kappa * M))
    start = (th.value(P, d, M, K0, p0), K0, p0)

    def value(K, q):
        return th.value(P, d, M, K, q)

    def values(Ks, qs):
        return th.values(P, d, [M] * len(Ks), Ks, qs)

    def wrong(Ks, qs):
        return values(Ks, qs), [(1.0 + 1e-3 * (K % 7), 0.5) for K in Ks]

    Ks = S.fine_ks(M, kappa)
    qs = S.fine_multipliers(p0)
    grid_K, grid_q = [K for _ in qs for K in Ks], [q for q in qs for _ in Ks]
    scalar = S.fine_best(value, M, kappa, p0, start)
    assert S.fine_best(value, M, kappa, p0, start, values=values, guide=wrong,
                       samples=values(grid_K, grid_q),
                       sample_h=wrong(grid_K, grid_q)[1]) == scalar


def _closed_one_at_a_time(theorem, P, d, M):
    """The closure and the fine search as before the batches (segments.more_memory at
    _search, then segments.fine_best through _fine_one): the reference of the batched ones."""
    if P == 0:
        return 0, 0, 0.0, M
    v, K, p, M2 = S.more_memory(lambda M3, refine: S._search(theorem, P, d, M3, refine), M,
                                lambda Ms, refine: S._search_many(theorem, P, d, tuple(Ms),
                                                                  refine))
    if theorem.fine and K > 0 and v < S.FINE_SEGMENTS * K:
        v, K, p = S._fine_one(theorem, P, d, M2, P * d >= S.FINE_MIN_WORK, (v, K, p))
    return v, K, p, M2


@pytest.mark.parametrize("theorem", [F._A, F._B, BK._D, BK._E], ids=["A", "B", "D", "E"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(work=st.lists(st.tuples(st.integers(0, 10**10), st.sampled_from([8, 40, 64, 128]),
                               st.sampled_from([256, 4096, 60000, 65536, 1 << 20])),
                     min_size=1, max_size=14))
@example(work=[(4096 * 4095, 64, 65536), (3000 * 3000, 40, 60000), (10**6, 16, 4096),
               (5 * 10**7, 64, 65536), (0, 64, 65536), (2048 * 2048, 128, 16384)])
def test_prepared_closures_choose_as_one_at_a_time(theorem, work):
    """PairsTheorem.prepare (the closure of every P that shares (d, M) step by step together,
    the fine searches of every workload that shares d in the same rounds, the bisections in
    numpy) gives each workload the (value, K, multiplier, M') of one at a time."""
    ref = [_closed_one_at_a_time(theorem, P, d, M) for P, d, M in work]
    S._closed.cache_clear()
    S._prepared().clear()
    theorem.prepare(work)
    assert [theorem.closed(P, d, M) for P, d, M in work] == ref
    S._closed.cache_clear()
    S._prepared().clear()
    assert [theorem.closed(P, d, M) for P, d, M in work] == ref  # and one at a time


def _clear_segment_caches() -> None:
    for v in vars(S).values():
        if hasattr(v, "cache_clear"):
            v.cache_clear()


@pytest.mark.parametrize("theorem", [F._A, F._B, BK._D, BK._E], ids=["A", "B", "D", "E"])
def test_the_one_workload_path_chooses_as_the_generic_one(theorem, monkeypatch):
    """A cold closure of one (P, d, M) (_more_memory_one: the candidates at M and the closure's
    scan in one batch of maxima; _fine_single, _edges_one: the fine search on arrays) gives the
    (value, K, multiplier, M') of more_memory at _search and _fine_one, and it runs where the
    closure scans and where the fine search runs."""
    work = [(4096 * 4096, 64, 65536), (3000 * 3000, 40, 60000), (4096 * 2048, 64, 65536),
            (10**6, 16, 4096), (5 * 10**7, 64, 65536), (2048 * 2048, 128, 16384),
            (8192 * 8192 * 16, 128, 65536), (300 * 300, 96, 8169), (0, 64, 65536),
            (1000 * 999, 8, 1000), (2**40, 40, 2**20)]
    calls = {"more": 0, "fine": 0}
    more, fine = S._more_memory_one, S._fine_single

    def counted_more(*args):
        calls["more"] += 1
        return more(*args)

    def counted_fine(*args):
        calls["fine"] += 1
        return fine(*args)

    monkeypatch.setattr(S, "_more_memory_one", counted_more)
    monkeypatch.setattr(S, "_fine_single", counted_fine)
    _clear_segment_caches()
    got = [theorem.closed(P, d, M) for P, d, M in work]
    assert calls["more"] and (calls["fine"] or not theorem.fine)
    _clear_segment_caches()
    assert got == [_closed_one_at_a_time(theorem, P, d, M) for P, d, M in work]
    _clear_segment_caches()


def test_a_full_store_starts_again_without_losing_an_entry(monkeypatch):
    """When segments._store is full it is cleared, and the entries asked for that were there
    before are evaluated again with the missing ones (a KeyError before: a long sweep at one d
    could hit it), the same values as a fresh store's."""
    _clear_segment_caches()
    want = [S._stored(F._A, 64, [M], True, 0)[0][1] for M in (65536, 80000, 90000, 100000)]
    _clear_segment_caches()
    monkeypatch.setattr(S, "STORE_SIZE", 4)
    S._stored(F._A, 64, [65536, 70000], True, 0)
    got = S._stored(F._A, 64, [65536, 80000, 90000, 100000], True, 0)
    assert [g[1] for g in got] == want
    _clear_segment_caches()


def test_bounds_prepare_serves_the_certificate_s_values():
    """bounds.prepare for a sweep task's workloads: applicable_to then returns the values it
    returns without it (and out-of-range entries are left to the later call)."""
    from attnio.core.errors import ParameterError
    from attnio.core.workload import Shape

    loads = [(Shape.make(N, d, causal=c), M) for N in (300, 4096) for d in (16, 64)
             for c in (False, True) for M in (1024, 65536)]
    want = [[b.value for b in bounds.applicable_to(s, M)] for s, M in loads]
    S._closed.cache_clear()
    S._prepared().clear()
    bounds.prepare([*loads, (Shape.make(64, 8), 0)], backward=True)
    assert [[b.value for b in bounds.applicable_to(s, M)] for s, M in loads] == want
    with pytest.raises(ParameterError, match="M"):
        bounds.applicable_to(Shape.make(64, 8), 0)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(work=st.lists(st.tuples(st.integers(1, 10**10), st.sampled_from([16, 64]),
                               st.sampled_from([4096, 65536])), min_size=1, max_size=8))
@example(work=[(4096 * 4095, 64, 65536), (5 * 10**7, 64, 65536), (10**6, 16, 4096)])
def test_the_python_bisections_step_as_the_numpy_ones(work, monkeypatch):
    """segments._edges_many (the fine search's bisections one step at a time in Python, used
    where K leaves int64) ends where _edges_vec and _edges_one do: all are the scalar steps."""
    ref = [_closed_one_at_a_time(F._A, P, d, M) for P, d, M in work]
    with monkeypatch.context() as m:
        m.setattr(S, "_edges_vec", S._edges_many)
        S._closed.cache_clear()
        S._prepared().clear()
        F._A.prepare(work)
        assert [F._A.closed(P, d, M) for P, d, M in work] == ref
    with monkeypatch.context() as m:  # (one workload at a time: _edges_one's way there)
        m.setattr(S, "_K_VEC", 0)
        _clear_segment_caches()
        assert [F._A.closed(P, d, M) for P, d, M in work] == ref
    S._closed.cache_clear()
    S._prepared().clear()


@pytest.mark.parametrize("theorem", [F._A, BK._D], ids=["A", "D"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(work=st.lists(st.tuples(st.integers(10**5, 10**10), st.sampled_from([16, 40, 64, 128]),
                               st.sampled_from([4096, 13615, 60000, 65536])),
                     min_size=1, max_size=6))
@example(work=[(4096 * 4096, 64, 65536), (3000 * 3000, 40, 60000)])
def test_the_bisections_early_stop_changes_no_result(theorem, work, monkeypatch):
    """_edges_vec with its floors (a bisection stops once its bound (b − 1)·(h(a) − 1) cannot
    beat its owner's best, docs/bounds.md §12.2) gives every (P, d, M) the result of bisecting
    every tooth, and at the issue's shapes it evaluates fewer nodes."""
    nodes = []
    node_eval, node_eval_one = S._node_eval, S._node_eval_one

    def counted(theorem, d, Ms, *rest):
        nodes.append(len(Ms))
        return node_eval(theorem, d, Ms, *rest)

    def counted_one(theorem, d, M, w, w_cmp, Ks, qs):  # (one workload: _edges_one)
        nodes.append(len(Ks))
        return node_eval_one(theorem, d, M, w, w_cmp, Ks, qs)

    monkeypatch.setattr(S, "_node_eval", counted)
    monkeypatch.setattr(S, "_node_eval_one", counted_one)
    _clear_segment_caches()
    S._prepared().clear()
    got = [theorem.closed(P, d, M) for P, d, M in work]
    pruned = sum(nodes)
    vec, one = S._edges_vec, S._edges_one
    monkeypatch.setattr(S, "_edges_vec", lambda th, d, jobs, floor=None: vec(th, d, jobs))
    monkeypatch.setattr(S, "_edges_one", lambda th, d, M, w, w_cmp, floor, *rest:
                        one(th, d, M, w, w_cmp, None, *rest))
    _clear_segment_caches()
    nodes.clear()
    assert [theorem.closed(P, d, M) for P, d, M in work] == got
    assert pruned <= sum(nodes)
    if work[0] == (4096 * 4096, 64, 65536) and theorem is F._A:
        assert pruned < sum(nodes)
    _clear_segment_caches()


@pytest.mark.parametrize("theorem", [F._A, F._B, BK._D, BK._E], ids=["A", "B", "D", "E"])
def test_tabulated_parameters_are_params_lookup_s(theorem):
    """segments._tabulated repeats params.lookup's operations inline: the same floats at every
    d²/M, inside the table, on its nodes and beyond both ends."""
    from attnio.bounds import params

    def ref(d, M):
        kappa, t = params.lookup(params.table(theorem.table), d * d / M)
        if theorem.kind == "potential":
            return kappa, t * max(math.sqrt(M), M / d)
        return kappa, min(t * math.sqrt(M), theorem.nu_max * d)

    cases = [(d, M) for d in (1, 3, 8, 40, 64, 128, 256, 1000) for M in
             (1, 2, 7, 100, 1024, 4096, 13615, 60000, 65536, 65537, 10**6, 2**30, 2**50)]
    cases += [(64, round(64 * 64 / 2.0 ** (g / 4))) for g in range(-70, 45)]
    for d, M in cases:
        assert S._tabulated(theorem, d, M) == ref(d, M), (d, M)


def test_exact_cubes_are_pow_s_and_the_rest_by_pow():
    """segments._cubes takes v*v*v for the integers 0 <= v <= EXACT_CUBE_MAX (their cubes are
    below 2⁵³: floats exactly): C's pow (Python's float power) gives the same float for every
    one of them, and the largest is the last such integer; elsewhere (fractions, larger, NaN)
    _cubes is math.pow's, on batches above and below EXACT_CUBE_MIN."""
    v = np.arange(int(S.EXACT_CUBE_MAX) + 1, dtype=np.float64)
    by_pow = np.fromiter(map(math.pow, v.tolist(), itertools.repeat(3.0)), dtype=np.float64,
                         count=len(v))
    assert (by_pow == v * v * v).all()
    assert S.EXACT_CUBE_MAX ** 3 < 2.0 ** 53 <= (S.EXACT_CUBE_MAX + 1) ** 3
    assert (S._cubes(v) == by_pow).all()
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(0.0, 1e7, 40), rng.integers(0, 2**40, 40).astype(float),
                        rng.integers(0, int(S.EXACT_CUBE_MAX) + 1, 40).astype(float),
                        [S.EXACT_CUBE_MAX + 1, 2.0**52 + 1, 0.5, math.nan]])
    for part in (x, x[:S.EXACT_CUBE_MIN - 1], x[-S.EXACT_CUBE_MIN:]):
        want = np.array([math.pow(t, 3.0) for t in part.tolist()])
        assert np.array_equal(S._cubes(part), want, equal_nan=True)
