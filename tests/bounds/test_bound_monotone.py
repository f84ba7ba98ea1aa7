"""Monotonicity of the explicit bounds (issue 36 item 3; docs/bounds.md §12.1): the bounds the
docs mark monotone never rise when M grows nor fall when N grows, on a modest grid of shapes
(the full scan of every bound is ``benchmarks/bench_bound_monotone.py``); and the two lemmas any
closure rests on: at a fixed segment length and multiplier, Theorems A, B, D and E are
non-decreasing in the pairs P and non-increasing in M."""

from __future__ import annotations

import random

import pytest

from attnio import bounds as B
from attnio.bounds import backward as BK
from attnio.bounds import forward as F
from attnio.bounds import levelled as L
from attnio.bounds.base import attention_shape

#: The bounds docs/bounds.md §12.1 marks monotone, and in which of M, N.
MONOTONE = {"trivial": "MN", "backward_trivial": "MN", "backward_inputs": "MN",
            "standard_matmul_small_cache": "MN", "standard_matmul_large_cache": "MN",
            "reread_cut": "M", "qkpv_levelled": "MN"}

SHAPES = ({}, {"causal": True}, {"causal": "top_left"}, {"causal": True, "window": 48},
          {"heads": 4, "kv_heads": 2, "causal": True})


def _values(kw, N, d, M):
    """The MONOTONE bounds' values, each evaluated as applicable_to and backward_applicable_to
    evaluate it (only those: the unclosed theorems' searches are not asked for here)."""
    sh = attention_shape(N, d, **kw)
    bounds = [B.trivial_for(sh), B.qkpv_levelled_for(sh, M), B.reread_cut_for(sh, M),
              B.large_cache_for(sh, M), B.small_cache_for(sh, M), BK.backward_trivial_for(sh),
              BK.backward_inputs_for(sh)]
    return {b.name: b.value for b in bounds if b.name in MONOTONE}


def test_the_scan_evaluates_the_bounds_applicable_to_lists():
    """_values' bounds are the MONOTONE ones of applicable_to and backward_applicable_to, with
    the same values."""
    for kw in SHAPES:
        sh = attention_shape(150, 40, **kw)
        every = {b.name: b.value for b in [*B.applicable_to(sh, 800),
                                           *BK.backward_applicable_to(sh, 800)]}
        assert _values(kw, 150, 40, 800) == {n: every[n] for n in MONOTONE if n in every}


def _steps(lo, hi, ratio):
    out, x = [], float(lo)
    while x <= hi:
        out.append(int(x))
        x = max(x * ratio, x + 1)
    return sorted(set(out))


@pytest.mark.parametrize("kw", SHAPES, ids=[str(s) or "none" for s in SHAPES])
@pytest.mark.parametrize("d", [4, 40])
def test_monotone_bounds_never_rise_in_M_nor_fall_in_N(kw, d):
    N0, M0 = 150, 20 * d
    prev: dict[str, tuple[int, float]] = {}
    for M in _steps(d, 4 * N0 * d, 1.07):
        for name, v in _values(kw, N0, d, M).items():
            if "M" in MONOTONE[name] and name in prev:
                assert v <= prev[name][1], (name, "rises", prev[name], (M, v))
            prev[name] = (M, v)
    assert set(prev) == set(MONOTONE)
    prev = {}
    for N in [*range(2, 60), *_steps(60, 600, 1.07)]:
        for name, v in _values(kw, N, d, M0).items():
            if "N" in MONOTONE[name] and name in prev:
                assert v >= prev[name][1], (name, "falls", prev[name], (N, v))
            prev[name] = (N, v)


def test_large_cache_is_the_exact_best_segment_length_and_never_below_the_raw_one():
    """The first-generation large-cache bound is the maximum over every K >= 1 (brute force on
    small P), at least its raw evaluation (grid of K, K = M, K = 4M), and the issue's example no
    longer rises: N = 373, d = 4 was 2,920 at M = 730 and 2,980 at M = 745."""
    from attnio.bounds import exact as E
    rng = random.Random(7)
    for _ in range(300):
        d, P, M = rng.choice((1, 2, 4, 8, 40)), rng.randint(0, 6000), rng.randint(1, 2000)
        Q, D = P - 1, 4 * d * d
        brute = max([K * (Q // max(K + M, (K + M) ** 2 // D)) for K in range(1, P + 2)] + [0])
        value, K = E._large_cache_best(P, d, M)
        assert value == brute >= E._large_cache(P, d, M)[0], (P, d, M)
        if value:
            assert K * (Q // max(K + M, (K + M) ** 2 // D)) == value
    a, b = (B.standard_matmul_large_cache(N=373, d=4, M=M).value for M in (730, 745))
    assert a >= b >= 2980


def test_large_cache_answers_past_int64_and_past_its_enumeration_budget():
    """P >= 2^63 once crashed (an int64 conversion: ``attnio bound --N 3936118705 --d 1 --M
    440095``) and N = 2^40 at d = 8 tried to list ~10^12 candidates.  Past the budget the value is
    the best over a window of segment lengths: a term of the bound at a real K, at least the
    first-generation grid's, and where the exact maximum is still computable (P = 2^62, d = 8,
    9 million candidates) the same."""
    from attnio.bounds import exact as E
    for N, d, M in ((3936118705, 1, 440095), (2**40, 8, 440095), (2**50, 1, 1000),
                    (2**50, 64, 2**20)):
        P = N * N
        value, K = E._large_cache_best(P, d, M)
        Q, D = P - 1, 4 * d * d
        assert value > 0 and value == K * (Q // max(K + M, (K + M) ** 2 // D)), (N, d, M)
        assert value >= E._large_cache(P, d, M)[0]
    assert E._large_cache_best(2**62, 8, 440095) == (670645895123848, 440104)
    assert B.standard_matmul_large_cache(N=3936118705, d=1, M=440095).value == 35203832027514


def test_approximate_w_stationary_is_monotone():
    for N in (64, 1000):
        vals = [B.approx_w_stationary(N=N, d=16, M=M, r=64).value for M in range(1, 3 * N)]
        assert all(a >= b for a, b in zip(vals, vals[1:]))
    vals = [B.approx_w_stationary(N=N, d=16, M=300, r=64).value for N in range(1, 2000, 7)]
    assert all(a <= b for a, b in zip(vals, vals[1:]))


THEOREMS = [("A", F.pv_segment_value, lambda d: 1.0 * d),
            ("B", F.qkpv_pooled_value, lambda d: 1.9 * d),
            ("D", BK.backward_accum_value, lambda d: 1.0 * d),
            ("E", BK.backward_pooled_value, lambda d: 2.4 * d)]


@pytest.mark.parametrize("name,value,qmax", THEOREMS, ids=[t[0] for t in THEOREMS])
def test_theorems_at_fixed_parameters_grow_with_P_and_fall_with_M(name, value, qmax):
    """The lemmas of docs/bounds.md §12.1 (fewer pairs, more memory) at random (K, multiplier):
    the facts that make a closure over P' <= P and M' >= M valid."""
    rng = random.Random(36)
    checked = 0
    for _ in range(400):
        d = rng.choice((1, 4, 16, 40, 64, 128))
        M = rng.randint(1, 64 * d * d)
        K = max(1, int(M * rng.uniform(0.05, 6.0)))
        q = rng.uniform(0.0, qmax(d)) * rng.choice((0.0, 1.0))
        P = rng.randint(2, 10**9)
        v = value(P, d, M, K, q)
        for P2 in (P + 1, P + rng.randint(1, P)):
            assert value(P2, d, M, K, q) >= v, (name, P, P2, d, M, K, q)
        for M2 in (M + 1, M + rng.randint(1, M)):
            assert value(P, d, M2, K, q) <= v, (name, P, d, M, M2, K, q)
        checked += v > 0
    assert checked > 100  # most draws give a positive bound


def test_large_cache_integer_square_roots_are_exact():
    import math

    import numpy as np

    from attnio.bounds import exact as E
    rng = np.random.default_rng(36)
    for d in (1, 3, 64, 128, 4095):
        cs = np.unique(np.concatenate([rng.integers(0, 2**61, 500), rng.integers(0, 10**6, 500),
                                       np.array([0, 1, 2, 2**61])])).astype(np.int64)
        assert E._m_many(cs, d).tolist() == [math.isqrt(4 * d * d * (int(c) + 1) - 1)
                                             for c in cs]


def _levelled_brute(P, d, M):
    """Theorem B′'s closure by its definition: every row of the table at every M' >= M where
    it holds (d²/M' >= its x)."""
    best = 0
    for f in L._families():
        for M2 in range(M, L._m_max(f[0], d) + 1):
            best = max(best, L._value_at(f, P, d, M2)[0])
    return best


def test_levelled_closure_is_the_brute_force_maximum_and_never_below_the_search():
    """closed_levelled (docs/bounds.md §12.1) equals the maximum over every row and every M' on
    random small cases, names a row and an M' >= M that give its value, and is never below the
    search (qkpv_levelled_raw_pairs)."""
    rng = random.Random(27)
    above = 0
    for _ in range(120):
        d = rng.randint(1, 24)
        M = rng.randint(1, 4 * d * d)
        P = rng.choice((rng.randint(1, 60), rng.randint(1, 6000), rng.randint(1, 10**6),
                        rng.randint(1, 10**12)))
        value, K, nu, M2 = L.closed_levelled(P, d, M)
        assert value == _levelled_brute(P, d, M), (P, d, M)
        raw = L.qkpv_levelled_raw_pairs(P=P, d=d, M=M).value
        assert value >= raw, (P, d, M)
        above += value > raw
        if value:
            assert M2 >= M and any(L._value_at(f, P, d, M2) == (value, K, nu)
                                   for f in L._families())
    assert above > 10  # the closure is higher than the search somewhere


def test_levelled_closure_in_P_and_M_on_a_line():
    """Non-increasing in M integer by integer, non-decreasing in P, at d = 40 and d = 128 (a
    stretch of the scan of benchmarks/bench_bound_monotone.py, where the search rose)."""
    for d, P in ((40, 321 * 321), (128, 10**7)):
        vals = [L.closed_levelled(P, d, M)[0] for M in range(d * d // 8, d * d // 8 + 400)]
        assert all(a >= b for a, b in zip(vals, vals[1:]))
        vals = [L.closed_levelled(p, d, d * d // 2)[0] for p in range(P, P + 3000, 7)]
        assert all(a <= b for a, b in zip(vals, vals[1:]))
    a, b = (L.qkpv_levelled_raw_pairs(P=10**6, d=64, M=M).value for M in (4096, 4103))
    assert L.qkpv_levelled_pairs(P=10**6, d=64, M=4096).value >= max(a, b)


def test_levelled_closure_is_never_below_the_frozen_search_values():
    """On the 420 shapes of tests/data/bound_values.json (the search's values, frozen), the
    public, closed Theorem B′ is never lower, and higher somewhere."""
    import json
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                        "bound_values.json")
    with open(path, encoding="utf-8") as fh:
        rows = json.load(fh)["shapes"]
    higher = 0
    for row in rows:
        s = dict(row["shape"])
        M, N, d = s.pop("M"), s.pop("N"), s.pop("d")
        got = L.qkpv_levelled_for(attention_shape(N, d, **s), M).value
        assert got >= row["forward"]["qkpv_levelled"], row["shape"]
        higher += got > row["forward"]["qkpv_levelled"]
    assert higher > 0
