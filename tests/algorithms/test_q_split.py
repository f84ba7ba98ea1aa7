"""q_split: Q-stationary with one block fewer than fits, the rows over M finished by a thin pass.

Output within 1e-10 of the float64 reference, counts (compute mode, bulk and step-by-step count
mode) equal to the closed form, peak within the declared footprint (equal to it unmasked), never
below an explicit bound, on hypothesis-drawn shapes (causal both alignments, GQA, Nq != Nkv) and
tilings with and without split rows, and with the searched tiling down to the least M; the
held-out grid's examples counted exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio import bounds
from attnio.algorithms import flash2, mapper, q_split
from attnio.core.errors import ParameterError
from attnio.core.workload import Shape, cdiv
from conftest import gqa_reference, gqa_shapes

ALG = q_split.ALGORITHM
T = q_split.QSplitTiling


@st.composite
def tilings(draw, Nq, d, group):
    Br = draw(st.integers(1, Nq + 2))
    split = d > 1 and min(Br, Nq) > 1 and draw(st.booleans())
    sigma = draw(st.integers(1, min(Br, Nq) - 1)) if split else 0
    delta = draw(st.integers(1, d - 1)) if split else 1
    G = draw(st.sampled_from([x for x in (1, 2, 3) if group % x == 0]))
    return T(Br, sigma, delta, draw(st.integers(1, Nq + 2)), G)


def _check(shape, M, tiling, seed):
    """Run ``tiling`` (None: the searched one) at M; every check of the spine."""
    rng = np.random.default_rng(seed)
    b, h, kvh = shape.batch, shape.heads, shape.kv_heads
    Q = rng.standard_normal((b, h, shape.Nq, shape.d))
    K, V = (rng.standard_normal((b, kvh, shape.Nkv, shape.d)) for _ in range(2))
    causal = shape.causal_align if shape.causal else False
    res = attnio.run("q_split", Q, K, V, M=M, tiling=tiling, causal=causal)
    err = np.abs(res.output - gqa_reference(Q, K, V, causal)).max()
    assert err <= 1e-10, err
    t = res.tiling
    pred = ALG.cost(shape, t).io
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    for bulk in (True, False):
        cnt = attnio.run("q_split", shape=shape, M=M, mode="count", tiling=t, bulk=bulk)
        assert (cnt.io.reads, cnt.io.writes) == (pred.reads, pred.writes)
    assert res.io.peak <= ALG.footprint(shape, t) <= M
    if not shape.causal:  # every block is met at its full size: the footprint is the peak
        assert res.io.peak == ALG.footprint(shape, t)
    for bd in bounds.applicable_to(shape, M):
        if bd.explicit:
            assert pred.total >= bd.value, (bd.name, pred.total, bd.value)
    return t


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), extra=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_output_and_counts_equal_closed_form(data, extra, seed):
    Nq, Nkv, d, causal, batch, heads, kvh = data.draw(gqa_shapes(16))
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kvh, batch=batch)
    tiling = data.draw(tilings(Nq, d, shape.group))
    _check(shape, ALG.footprint(shape, tiling) + extra, tiling, seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=gqa_shapes(16), extra=st.sampled_from([0, 1, 5, 30, 200]), seed=st.integers(0, 2**16))
def test_searched_tiling_from_the_least_M(w, extra, seed):
    """The default (searched) tiling, from M = min_M up: every check, and never worse than the
    same schedule without split rows."""
    Nq, Nkv, d, causal, batch, heads, kvh = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kvh, batch=batch)
    M = ALG.min_M(shape) + extra
    t = _check(shape, M, None, seed)
    plain = [c for c in ALG.candidate_tilings(shape, M) if c.sigma == 0]
    assert plain and all(ALG.cost(shape, t).io.total <= ALG.cost(shape, c).io.total
                         for c in plain if ALG.footprint(shape, c) <= M)


@settings(max_examples=60, deadline=None)
@given(Nq=st.integers(1, 400), Nkv=st.integers(1, 400), d=st.integers(2, 64),
       br=st.integers(1, 400), s=st.integers(0, 399), dl=st.integers(1, 63),
       br2=st.integers(1, 400), G=st.sampled_from([1, 2, 4]))
def test_unmasked_closed_form(Nq, Nkv, d, br, s, dl, br2, G):
    """``G·Nq·d + 2d·Nkv·T + G·S·d + (d + δ)·Nkv·⌈S/Br2⌉`` reads, ``G·Nq·d`` writes (a group)."""
    Br = min(br, Nq)
    sigma, delta = s % Br, 1 + dl % (d - 1)
    shape = Shape.make(Nq, d, Nkv=Nkv, heads=4, kv_heads=4 // G)
    t = T(br, sigma, delta, br2, G)
    Tm = cdiv(Nq, Br)
    S = (Tm - 1) * sigma + min(sigma, Nq - (Tm - 1) * Br)
    thin = G * S * d + (d + delta) * Nkv * cdiv(S, br2) if sigma else 0
    io = ALG._group_count(shape, t)
    assert io.reads == G * Nq * d + 2 * d * Nkv * Tm + thin and io.writes == G * Nq * d
    assert ALG.cost(shape, t).io.total == io.total * (4 // G)


@pytest.mark.parametrize("N,d,M,total", [(3000, 40, 60000, 1_360_040),
                                         (1000, 40, 20000, 454_680),
                                         (20000, 96, 960000, 21_519_680)])
def test_grid_examples_counted_exactly(N, d, M, total):
    """M = N·d/2: four blocks where FlashAttention-2 takes five (12·N·d); the simulator agrees."""
    shape = Shape.make(N, d)
    t = ALG.default_tiling(shape, M)
    assert t.sigma > 0 and cdiv(N, t.Br) == 4 and ALG.footprint(shape, t) <= M
    pred = ALG.cost(shape, t).io
    assert pred.total == total
    Tm, S = 4, 4 * t.sigma  # the last block is full: every block has sigma split rows
    assert pred.reads == N * d + 2 * d * N * Tm + S * d + (d + t.delta) * N * cdiv(S, t.Br2)
    assert pred.total < 12 * N * d == mapper.search(flash2.ALGORITHM, shape, M).predicted.total
    cnt = attnio.run("q_split", shape=shape, M=M, mode="count", tiling=t)
    assert cnt.io.total == total and cnt.io.peak <= M


def test_example_at_3000_40_is_the_documented_tiling():
    t = ALG.default_tiling(Shape.make(3000, 40), 60000)
    assert (t.Br, t.sigma, t.delta, t.Br2) == (750, 119, 7, 476)


def test_footprint_is_the_held_words():
    d, Br, sigma, delta, Br2, G = 10, 30, 7, 3, 20, 2
    shape = Shape.make(200, d, heads=2, kv_heads=1)
    t = T(Br, sigma, delta, Br2, G)
    main = G * (Br * (2 * d + 1) - sigma * delta) + 2 * d
    thin = G * Br2 * (d + delta + 1) + d + delta
    assert ALG.footprint(shape, t) == max(main, thin)
    assert ALG.footprint(shape, T(Br, group=G)) == G * Br * (2 * d + 1) + 2 * d
    assert ALG.min_M(shape) == 4 * d + 1


@pytest.mark.parametrize("tiling,match", [(T(4, 4, 1, 2), "sigma must be below"),
                                          (T(4, 2, 5, 2), "delta must be below"),
                                          (T(4, -1), "sigma"), (T(4, 1, 1, 0), "Br2")])
def test_invalid_tilings_are_refused(tiling, match):
    with pytest.raises(ParameterError, match=match):
        ALG.predicted_io((10, 5), 10**6, tiling=tiling)


def test_causal_split_rows_see_the_fewest_keys():
    """Causal: the split rows are the first rows, so the thin pass reads only the keys they see."""
    N, d, M = 3000, 40, 60000
    shape = Shape.make(N, d, causal=True)
    t = T(750, 119, 7, 476)
    unmasked = ALG.cost(Shape.make(N, d), t).io
    masked = ALG.cost(shape, t).io
    assert masked.total < unmasked.total
    cnt = attnio.run("q_split", shape=shape, M=M, mode="count", tiling=t, bulk=False)
    assert cnt.io.total == masked.total


def test_candidates_stay_few_at_a_billion_causal():
    shape = Shape.make(10**9, 128, causal=True)
    cands = ALG.candidate_tilings(shape, 65536)
    assert 0 < len(cands) <= 200
    assert mapper.search(ALG, shape, 65536) is not None


@settings(max_examples=80, deadline=None)
@given(Nq=st.integers(1, 3000), Nkv=st.integers(1, 3000), d=st.integers(1, 160),
       causal=st.sampled_from([False, True, "top_left"]), kvh=st.sampled_from([1, 2]),
       g=st.sampled_from([1, 2, 4]), scale=st.floats(1.0, 60.0), half=st.booleans())
def test_larger_shapes_count_mode_and_bounds(Nq, Nkv, d, causal, kvh, g, scale, half):
    """Count mode on the searched tiling equals the closed form, within M; no explicit bound is
    above it (M from the least to past Nq·d/2)."""
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, heads=kvh * g, kv_heads=kvh)
    lo = ALG.min_M(shape)
    M = lo + Nq * d // 2 if half else int(lo * scale)
    found = mapper.search(ALG, shape, M)
    assert found is not None
    pred = ALG.cost(shape, found.tiling).io
    cnt = attnio.run("q_split", shape=shape, M=M, mode="count", tiling=found.tiling)
    assert (cnt.io.reads, cnt.io.writes) == (pred.reads, pred.writes) and cnt.io.peak <= M
    for bd in bounds.applicable_to(shape, M):
        if bd.explicit:
            assert pred.total >= bd.value, (bd.name, pred.total, bd.value)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), extra=st.integers(0, 400), seed=st.integers(0, 2**16))
def test_writes_the_logsumexp_a_backward_pass_reads(data, extra, seed):
    from attnio.core.reference import attention_backward
    from attnio.runner import BackwardPass

    Nq, Nkv, d, causal, batch, heads, kvh = data.draw(gqa_shapes(16))
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kvh, batch=batch)
    tiling = data.draw(tilings(Nq, d, shape.group))
    bwd = attnio.algorithms.get_backward("flash2_backward")
    M = max(ALG.footprint(shape, tiling), bwd.min_M(shape)) + extra
    rng = np.random.default_rng(seed)
    Q, dO = (rng.standard_normal((batch, heads, Nq, d)) for _ in range(2))
    K, V = (rng.standard_normal((batch, kvh, Nkv, d)) for _ in range(2))
    res = attnio.run("q_split", Q, K, V, M=M, causal=causal, tiling=tiling,
                     backward=BackwardPass("flash2_backward"), grad_output=dO)
    assert np.abs(res.output - gqa_reference(Q, K, V, causal)).max() <= 1e-10
    for name, want in zip(("dQ", "dK", "dV"), attention_backward(Q, K, V, dO, causal=causal)):
        assert np.abs(np.asarray(res.grads[name]).reshape(want.shape) - want).max() <= 1e-10
    pred = ALG.cost(shape, tiling, lse=True).io
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    fwd = attnio.run("q_split", shape=shape, M=M, mode="count", tiling=tiling,
                     backward=BackwardPass("flash2_backward"))
    assert (fwd.io.reads, fwd.io.writes) == (pred.reads, pred.writes)
    plain = ALG.cost(shape, tiling).io
    assert pred.writes == plain.writes + shape.n_heads * Nq


def _dense(shape, M):
    """The least count over every tiling on a tiny shape (every Br, σ < Br, δ < d, Br2 <= S)."""
    from attnio.algorithms.q_split import _layout

    best = None
    for Br in range(1, shape.Nq + 1):
        for sigma in range(Br if shape.d > 1 else 1):
            for delta in (range(1, shape.d) if sigma else [1]):
                S = _layout(shape.Nq, T(Br, sigma)).S
                for Br2 in (range(1, S + 1) if sigma else [1]):
                    t = T(Br, sigma, delta, Br2)
                    if ALG.footprint(shape, t) <= M:
                        v = ALG.cost(shape, t).io.total
                        best = v if best is None else min(best, v)
    return best


@settings(max_examples=25, deadline=None)
@given(Nq=st.integers(1, 16), Nkv=st.integers(1, 16), d=st.integers(1, 5),
       causal=st.sampled_from([False, True, "top_left"]), frac=st.floats(0.0, 1.0))
def test_search_against_every_tiling_on_tiny_shapes(Nq, Nkv, d, causal, frac):
    """Unmasked the search finds the least count of any tiling.  With a mask it lists only even
    partitions of T0 - 1 and T0 - 2 blocks with split rows, and the dense search finds uneven
    ones that put the rows that see no key (Nq > Nkv, bottom-right) in the split region, whose
    thin pass is then free: measured on 300 drawn tiny causal shapes, at most 8% over the least
    count when every row sees a key and 19% when some do not."""
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal)
    lo = ALG.min_M(shape)
    M = lo + int(frac * ((2 * d + 1) * Nq + 3))
    found = mapper.search(ALG, shape, M).predicted.total
    best = _dense(shape, M)
    if not causal:
        assert found == best
    else:
        blind = max(0, min(Nq, -shape.offset))  # rows that see no key
        assert best <= found <= (1.25 if blind else 1.10) * best


def test_the_bounds_at_once_are_the_bounds_one_by_one_and_below_the_counts():
    """``_lower_totals`` (numpy over the candidates, the search's) equals ``_lower_total`` one
    tiling at a time within float rounding, below every candidate's count, on random shapes
    from tiny to N = 10^9, grouped heads, both causal alignments (unmasked there is none: the
    per-tiling bound is searched); and the search by it is the plain loop's (choice, count,
    steps, tried)."""
    import random

    alg = attnio.algorithms.get("q_split")
    rng = random.Random(31)
    checked = 0
    for _ in range(150):
        N = rng.choice([rng.randint(1, 60), rng.randint(1, 9000), 10**9])
        Nkv = rng.choice([N, rng.randint(1, 9000), 10**7])
        d = rng.choice([1, 2, 40, 64, 128, rng.randint(1, 300)])
        kvh = rng.choice([1, 2])
        shape = Shape.make(N, d, Nkv=Nkv, causal=rng.choice([False, True, "top_left"]),
                           heads=kvh * rng.choice([1, 4, 6]), kv_heads=kvh)
        M = rng.choice([rng.randint(4 * d + 1, 10**5), rng.randint(10**5, 10**7), 2**40])
        if mapper.can_run(alg, shape, M) is not None:
            continue
        lower, lowers = alg._lower_total(shape), alg._lower_totals(shape)
        tilings = list(alg.candidate_tilings(shape, M))
        fit = [t for t in tilings if alg.footprint(shape, t) <= M]
        if not shape.causal:  # unmasked the bound one tiling at a time is the cheaper
            assert lowers is None and lower is not None
            continue
        assert (lower is None) == (lowers is None)
        if lower is None or not fit:
            continue
        for t, lo in zip(fit, lowers(fit), strict=True):
            assert lo == pytest.approx(lower(t), rel=1e-12, abs=1e-6)
            if N < 10**9:  # (the exact count of every tiling at a billion is slow)
                assert lo <= alg.cost(shape, t).io.total * (1 + 1e-12)
        assert mapper.search(alg, shape, M, tilings) == mapper._least(alg, shape, M, tilings)
        checked += 1
    assert checked > 40


@pytest.mark.parametrize("mask", [False, True, "top_left", "window"])
def test_the_search_over_rows_is_the_search_over_the_tilings(mask):
    """q_split's candidates as numpy rows (mapper's TilingRows: footprints and bounds at once,
    a tiling made only when scored) give the same choice, count, steps and ``tried`` as the
    search over candidate_tilings; each row's footprint is the tiling's, its bound at most the
    count."""
    rng = np.random.default_rng(23)
    alg = q_split.ALGORITHM
    for _ in range(40):
        Nq, Nkv = (int(x) for x in rng.integers(1, 4000, size=2))
        d, M = int(rng.integers(1, 160)), int(rng.integers(4, 200000))
        kvh, g = int(rng.integers(1, 3)), int(rng.choice([1, 2, 4, 6]))
        causal = mask if mask in (True, "top_left") else (mask == "window")
        shape = Shape.make(Nq, d, Nkv=Nkv, heads=kvh * g, kv_heads=kvh, causal=causal,
                           window=int(rng.integers(1, 300)) if mask == "window" else None)
        if mapper.can_run(alg, shape, M) is not None:
            continue
        tilings = alg.candidate_tilings(shape, M)
        rows = alg._tiling_rows(shape, M)
        assert [q_split.QSplitTiling(*r) for r in rows.rows.tolist()] == tilings
        assert rows.footprints(rows.rows).tolist() == [alg.footprint(shape, t) for t in tilings]
        if rows.lowers is not None and tilings:
            for lo, t in zip(rows.lowers(rows.rows).tolist(), tilings):
                assert lo <= alg._total(shape, t).total * (1 + 1e-12)
        a, b = mapper.search(alg, shape, M), mapper.search(alg, shape, M, tilings)
        assert (a is None) == (b is None)
        if a is not None:
            assert (a.tiling, a.predicted, a.steps, a.tried) == (b.tiling, b.predicted, b.steps,
                                                                 b.tried)
