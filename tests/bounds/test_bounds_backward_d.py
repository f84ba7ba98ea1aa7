"""Theorem D (docs/bounds.md §10): its cubic lemma, its branches and its certified maxima Λ, Λ_f,
Λ_l against brute force.  A bound computed from a maximum below the true one would be false, so
every check here is "computed >= brute force" (and the cubic lemma is tight: equality is reached).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnio.bounds import backward as BK

C_D = 1.0 / (12.0 * math.sqrt(3.0))


def cubic(q, k, o, v):
    return o * q * k + (k + q) * np.minimum(q, o) * np.minimum(k, v)


def G_exact(s, d, n=20001):
    """max over τ in [0, 1] of τ(1-τ)s² + c_D·τ³s³/d² on a fine grid (<= the true G)."""
    t = np.linspace(0.0, 1.0, n)
    return float(np.max(t * (1 - t) * s * s + C_D * t ** 3 * s ** 3 / (d * d)))


def G_branches(s, d):
    return max(c2 * s * s + c3 * s ** 3 for c2, c3 in BK._d_branches(d))


def test_cubic_lemma_holds_and_is_tight():
    rng = np.random.default_rng(25)
    x = rng.dirichlet(np.full(4, 0.5), size=400_000)
    q, k, o, v = x.T  # m = 1
    assert float(np.max(cubic(q, k, o, v))) <= C_D * (1 + 1e-12)
    # and the old constant 1/(6√3) was twice too large: the maximum is reached
    a = 1 / (2 * math.sqrt(3))
    assert float(cubic(a, 0.5 - a, a, 0.5 - a)) == pytest.approx(C_D, rel=1e-12)
    # a grid through the corners and edges of the simplex too
    g = np.linspace(0, 1, 41)
    Q, K, O = np.meshgrid(g, g, g, indexing="ij")
    V = 1 - Q - K - O
    ok = V >= -1e-12
    assert float(np.max(cubic(Q[ok], K[ok], O[ok], np.maximum(V[ok], 0)))) <= C_D * (1 + 1e-12)


@pytest.mark.parametrize("d", [1, 3, 8, 40, 160])
def test_branches_cover_G_and_every_split_of_the_import_budget(d):
    rng = np.random.default_rng(d)
    for s in (1.0, 7.0, d * d / 4.0, float(d * d), 4.0 * d * d, 37.0 * d * d, 1000.0 * d * d):
        assert G_branches(s, d) >= G_exact(s, d)
        assert G_branches(s, d) <= 1.16 * G_exact(s, d)  # the cells cost < 16% (near s = 6.5d²)
        x = rng.dirichlet(np.full(6, 0.6), size=100_000) * s
        q, k, o, v, yp, yds = x.T
        U = o * (yp + q * k / d ** 2) + (k + q) * (yp + yds + np.minimum(q, o) * np.minimum(k, v) / d ** 2)
        assert float(np.max(U)) <= G_branches(s, d) * (1 + 1e-12)


@pytest.mark.parametrize("M,d,kfac,mfac", [(64, 2, 1.3, 0.5), (1000, 30, 1.26, 0.45),
                                          (500, 60, 4.0, 0.0), (4096, 8, 0.7, 2.0),
                                          (300, 16, 2.5, 0.1)])
def test_lambdas_are_never_below_a_brute_force_maximum(M, d, kfac, mfac):
    K = kfac * M
    mu = mfac * max(math.sqrt(M), M / d)
    lam, lam_f, lam_l = BK.backward_accum_lambdas(M, d, K, mu)
    xs = np.linspace(0, M, 41)
    Rs = np.linspace(0, K, 41)
    Gs = {}

    def G(s):
        if s not in Gs:
            Gs[s] = G_exact(s, d, 2001)
        return Gs[s]

    best = best_f = best_l = -math.inf
    for R in Rs:
        W = K - R
        for x in xs:  # x: accumulator words at the start, y: at the end
            g_mid = G(M - x + R)
            for y in xs:
                best = max(best, math.sqrt((y + W) * g_mid) - mu * (y - x))
            best_l = max(best_l, math.sqrt(W * g_mid) + mu * x)
        g_first = G(R)
        for y in xs:
            best_f = max(best_f, math.sqrt((y + W) * g_first) - mu * y)
    assert lam >= best and lam_f >= best_f and lam_l >= best_l
    # and not far above it (the certified maximum is tight up to the cells and the grid)
    assert lam <= 1.06 * best + 1e-9 * M


def test_theorem_d_is_stronger_than_its_first_version():
    # the first version: G = s²/4 + s³/(6√3·d²); every segment maximum shrinks, the bound grows
    from attnio.bounds.segments import potential_lambdas

    for M, d, K, mu in ((4096, 16, 5000, 30.0), (1024, 64, 1300, 20.0), (65536, 32, 80000, 600.0)):
        old = potential_lambdas(M, K, mu, ((0.25, 1.0 / (6.0 * math.sqrt(3.0) * d * d)),))
        new = BK.backward_accum_lambdas(M, d, K, mu)
        assert all(n < o for n, o in zip(new, old))


# ---------------------------------------------------------------- against every backward schedule
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from attnio.core.blockmask import BlockMask  # noqa: E402
from attnio.core.masks import row_counts  # noqa: E402
from attnio.core.workload import Shape  # noqa: E402
from conftest import least_backward_count  # noqa: E402


@st.composite
def backward_shapes(draw):
    Nq = draw(st.integers(2, 40))
    Nkv = draw(st.sampled_from([Nq, max(1, Nq - draw(st.integers(1, 8))), Nq + draw(st.integers(1, 8))]))
    d = draw(st.integers(1, 10))
    group, kvh = draw(st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 1)]))
    kind = draw(st.sampled_from(["none", "causal", "top_left", "window", "sparse"]))
    if kind == "sparse":
        b = draw(st.sampled_from([2, 4, 8]))
        layout = BlockMask.random(Nq, Nkv, b, density=draw(st.floats(0.2, 1.0)),
                                  seed=draw(st.integers(0, 99)))
        return Shape(Nq, Nkv, d, heads=group * kvh, kv_heads=kvh, block_mask=layout)
    causal = {"none": False, "causal": True, "top_left": "top_left", "window": True}[kind]
    window = draw(st.integers(1, 12)) if kind == "window" else None
    return Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window, heads=group * kvh,
                      kv_heads=kvh)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=backward_shapes(), M=st.integers(8, 4000), kfac=st.floats(0.05, 8.0),
       mfac=st.floats(0.0, 3.0))
def test_theorem_d_is_below_every_backward_schedule_on_random_shapes(shape, M, kfac, mfac):
    """Masked, windowed, grouped-query, Nq != Nkv and block-sparse shapes: Theorem D at its
    tabulated parameters (closed under more memory) and at random (K, μ) is at most the least
    count of every backward schedule and tiling that fits."""
    least = least_backward_count(shape, M)
    if least is None:
        return
    assert BK.backward_accum_for(shape, M).value <= least
    P, d = row_counts(shape).pairs2 * shape.n_heads, shape.d
    assert BK.backward_accum_pairs(P=P, d=d, M=M).value == BK.backward_accum_for(shape, M).value
    K = max(1, round(kfac * M))
    assert BK.backward_accum_value(P, d, M, K, mfac * max(math.sqrt(M), M / d)) <= least


def test_dropping_dominated_branches_changes_no_maximum():
    from attnio.bounds.segments import potential_lambdas

    for M, d, K, mu in ((24000, 160, 47000, 300.0), (48000, 96, 60000, 900.0), (600, 40, 800, 10.0),
                        (4096, 8, 5000, 1500.0), (100, 1, 300, 20.0)):
        every = potential_lambdas(M, K, mu, BK._d_branches(d))
        assert BK.backward_accum_lambdas(M, d, K, mu) == pytest.approx(every, rel=1e-12)
    # equal branches: one is kept
    assert BK._dominated((0.2, 0.1), (0.2, 0.1), 5.0) and not BK._dominated((0.3, 0.0), (0.2, 0.1), 5.0)


# ---------------------------------------------------------------- the fine few-segment search
# (its value at its parameters and never below the narrower search: tests/bounds/test_bounds_segments.py)
def test_fine_search_raises_theorem_d_at_the_worst_held_out_point():
    """N = 300, d = 160, M = 13,615, causal, one head: the tabulated K sat low on a tooth of
    the sawtooth K·(h − 1); the fine search finds 359,124 words (was 346,896)."""
    shape = Shape(300, 300, 160, causal=True)
    assert BK.backward_accum_for(shape, 13615).value == 359_124
    P = row_counts(shape).pairs2
    assert BK._D.closed(P, 160, 13615)[0] == 359_124
