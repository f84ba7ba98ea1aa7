"""The vectorised evaluation of Theorems A-E (issue 31) gives the same integers as the scalar one.

``tests/data/bound_values.json`` holds every explicit bound value of :mod:`attnio.bounds`
(forward and backward, and the (value, K, multiplier, M') Theorems A, B, B′, D and E chose) on 420
shapes, written by ``benchmarks/bound_values.py`` from the scalar evaluation before the searches
were vectorised; the current code must reproduce every one.  The batched per-segment maxima are
compared with the scalar functions (kept as the reference: :func:`segments.potential_lambdas`,
:func:`segments.segments_bound`, the theorems' ``value``) on drawn inputs.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnio import bounds
from attnio.bounds import backward as BK
from attnio.bounds import forward as F
from attnio.bounds import segments as S

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
import bound_values  # noqa: E402

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
        assert bounds.matmul_potential(m, k, n, M).value == v


_branch_sets = st.sampled_from(["A", "C", "D", "cubic"])


def _branches(kind: str, d: int) -> tuple[tuple[float, float], ...]:
    return {"A": F._a_branches(d), "C": ((0.25, 0.0),), "D": BK._d_branches(d),
            "cubic": ((0.0, 1.0 / (27.0 * d * d)),)}[kind]


_M = st.one_of(st.integers(1, 10**7), st.integers(1, 2**60))
_mu = st.one_of(st.just(0.0), st.just(5e-324), st.floats(0.0, 1e-150),
                st.floats(0.0, 1e7, allow_nan=False))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=_branch_sets, d=st.integers(1, 300),
       pts=st.lists(st.tuples(_M, st.one_of(st.integers(1, 10**7), st.integers(1, 2**40)), _mu),
                    min_size=1, max_size=6))
def test_batched_potential_lambdas_equal_the_scalar_ones(kind, d, pts):
    br = _branches(kind, d)
    Ms, Ks, mus = zip(*pts)
    got = S.potential_lambdas_many(np.array(Ms, dtype=float), np.array(Ks, dtype=float),
                                   np.array(mus), br)
    for i, (M, K, mu) in enumerate(pts):
        assert tuple(float(g[i]) for g in got) == S.potential_lambdas(M, K, mu, br)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 300),
       pts=st.lists(st.tuples(_M, st.integers(1, 10**7), _mu), min_size=1, max_size=6))
def test_theorem_d_batched_lambdas_keep_the_same_branches(d, pts):
    Ms, Ks, mus = (list(t) for t in zip(*pts))
    got = BK._d_lambdas(d, Ms, Ks, mus)
    for i, (M, K, mu) in enumerate(pts):
        assert tuple(float(g[i]) for g in got) == BK.backward_accum_lambdas(M, d, K, mu)


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


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(P=st.integers(1, 5_000_000), d=st.integers(1, 200), M=st.integers(8, 300_000),
       wide=st.booleans())
def test_batched_fine_search_is_the_scalar_one(P, d, M, wide):
    """fine_best on a batch (samples and bisections batched) chooses as one at a time."""
    th = F._A
    kappa, p0 = S._tabulated(th, d, M)
    K0 = max(1, round(kappa * M))
    start = (th.value(P, d, M, K0, p0), K0, p0)

    def value(K, q):
        return th.value(P, d, M, K, q)

    scalar = S.fine_best(value, M, kappa, p0, start, wide)
    batched = S.fine_best(value, M, kappa, p0, start, wide,
                          values=lambda Ks, qs: th.values(P, d, [M] * len(Ks), Ks, qs))
    assert batched == scalar
