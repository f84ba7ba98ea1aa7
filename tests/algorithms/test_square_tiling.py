"""Square tiling (Saha & Ye Algorithm 1): output, exact counts, capacity, stability, tilings.

The registry-wide spine (tests/algorithms/test_exact_algorithms.py) already holds square_tiling's default
tiling to the reference and to its closed form; here every tiling knob is exercised: both
``stable`` values, both Phase-1 orders, the paper's rule, square sides, hand-made rectangular
tiles, rectangular and causal shapes, and the overflow behaviour of the literal version.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import attnio
from attnio import CapacityError
from attnio.algorithms import mapper
from attnio.algorithms.square_tiling import ExpOverflowError, SquareTilingTiling, paper_side
from attnio.core.errors import ParameterError
from attnio.core.workload import Shape
from conftest import random_qkv

ALG = attnio.algorithms.get("square_tiling")
SHAPES = [(1, 1, 1), (7, 7, 3), (33, 33, 8), (64, 64, 16), (29, 50, 5), (50, 29, 5), (40, 1, 4),
          (100, 100, 64)]


def _tilings(shape: Shape):
    """(M, tiling) pairs: auto (both stabilities), paper, square sides, orders, odd rectangles."""
    lo = ALG.min_M(shape)
    Ms = sorted({lo, 3 * lo + 1, 60, 250, 999})
    out = []
    for M in Ms:
        if mapper.can_run(ALG, shape, M) is not None:
            continue
        out.append((M, None))
        if mapper.needs_M(ALG, shape, M, stable=False) is None:
            out.append((M, {"stable": False}))
        out.append((M, "paper"))
    out += [(200, SquareTilingTiling(5, 3, 2, 4, 1, 3, "tile", True)),
            (200, SquareTilingTiling(5, 3, 2, 4, 3, 3, "tile", False)),
            (400, SquareTilingTiling(3, 6, 2, 7, 3, 5, "row", True)),
            (400, SquareTilingTiling(2, 9, 4, 7, 9, 5, "row", False)),
            (200, SquareTilingTiling(5, 3, 2, 4, 2, 3, "tile", True, "scores")),
            (400, SquareTilingTiling(3, 6, 2, 7, 4, 5, "row", True, "scores")),
            (300, {"B": 4, "stable": False}), (300, 6)]
    return out


def _compute_cases():
    cases = []
    for (Nq, Nkv, d), causal in itertools.product(SHAPES, (False, True)):
        shape = Shape(Nq, Nkv, d, causal=causal)
        for M, t in _tilings(shape):
            try:
                tiling = ALG.coerce_tiling(shape, M, t)
            except (CapacityError, ParameterError):
                continue  # e.g. a "row" tile that needs a whole query row of a large d
            if ALG.steps(shape, tiling) <= 4000:
                cases.append((Nq, Nkv, d, M, causal, tiling))
    return cases


COMPUTE_CASES = _compute_cases()


def test_compute_grid_is_large_and_covers_every_knob():
    assert len(COMPUTE_CASES) >= 200
    tilings = [c[5] for c in COMPUTE_CASES]
    for stable, order, causal in itertools.product((True, False), ("tile", "row"), (True, False)):
        assert any(t.stable == stable and t.order == order and c[4] == causal
                   for c, t in zip(COMPUTE_CASES, tilings)), (stable, order, causal)
    for order, causal in itertools.product(("tile", "row"), (True, False)):
        assert any(t.spill == "scores" and t.order == order and c[4] == causal
                   for c, t in zip(COMPUTE_CASES, tilings)), ("scores", order, causal)


@pytest.mark.parametrize("Nq,Nkv,d,M,causal,tiling", COMPUTE_CASES)
def test_square_tiling_output_and_counts_equal_reference_and_closed_form(Nq, Nkv, d, M, causal,
                                                                         tiling):
    Q, K, V = random_qkv(Nq, Nkv, d, seed=Nq * 7 + Nkv + d)
    res = attnio.run("square_tiling", Q, K, V, M=M, causal=causal, tiling=tiling)
    ref = attnio.reference.attention(Q, K, V, causal=causal)
    assert np.abs(res.output - ref).max() <= 1e-10
    pred = ALG.predicted_io(Shape(Nq, Nkv, d), M, causal=causal, tiling=tiling)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    assert res.io.peak <= M
    if not causal:
        assert res.io.peak == ALG.footprint(Shape(Nq, Nkv, d), tiling)
    for bulk in (True, False):
        cnt = attnio.run("square_tiling", shape=(Nq, Nkv, d), M=M, mode="count", causal=causal,
                         tiling=tiling, bulk=bulk)
        assert (cnt.io.reads, cnt.io.writes, cnt.io.peak) == (res.io.reads, res.io.writes,
                                                              res.io.peak)


def _count_cases():
    out = []
    for N, d, causal, f in itertools.product((64, 257, 1000), (16, 64, 256), (False, True),
                                             (1 / 16, 1 / 4, 1, 4)):
        M = max(ALG.min_M(Shape(N, N, d)), round(f * d * d))
        for stable in (True, False):
            out.append((N, d, M, causal, stable))
    return out


COUNT_CASES = _count_cases()


def test_count_mode_bulk_and_step_by_step_equal_closed_form_at_larger_sizes():
    assert len(COUNT_CASES) >= 140  # with COMPUTE_CASES: well over 200 configurations
    stepped = 0
    for N, d, M, causal, stable in COUNT_CASES:
        bulk = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", causal=causal,
                          tiling={"stable": stable})
        pred = ALG.predicted_io((N, d), M, causal=causal, tiling=bulk.tiling)
        assert (bulk.io.reads, bulk.io.writes) == (pred.reads, pred.writes), (N, d, M, causal)
        assert bulk.io.peak <= M
        assert bulk.tiling.stable == stable
        if ALG.steps(Shape(N, N, d), bulk.tiling) <= 3000:
            step = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", causal=causal,
                              tiling=bulk.tiling, bulk=False)
            assert (step.io.reads, step.io.writes, step.io.peak, step.io.steps) == (
                bulk.io.reads, bulk.io.writes, bulk.io.peak, bulk.io.steps)
            stepped += 1
    assert stepped >= 40


# ---------------------------------------------------------------------- the paper's rule
@pytest.mark.parametrize("M", [4, 15, 16, 100, 1000, 4096, 65536])
def test_paper_rule_side_and_cache_use(M):
    B = paper_side(M)
    assert B == math.isqrt(M // 4) and 4 * B * B <= M < 4 * (B + 1) ** 2
    shape = Shape(10**6, 10**6, 10**4)  # nothing clamps
    literal = SquareTilingTiling.square(B, stable=False)
    assert ALG.footprint(shape, literal) == 3 * B * B + B <= M  # the paper's cache use


@pytest.mark.parametrize("N,d,M", [(1024, 256, 4096), (4096, 128, 1024), (300, 64, 900)])
def test_paper_tiles_count_matches_its_formula(N, d, M):
    B = paper_side(M)
    t = SquareTilingTiling.square(B, stable=False)
    T, Td = -(-N // B), -(-d // B)
    p1 = 2 * T * N * d + N * N + N
    p2 = Td * N * N + Td * N + T * N * d + N * d
    res = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=t)
    assert res.io.total == p1 + p2
    # the design notes' estimate: ~4N²d/√M + N² (Phase 1) and ~4N²d/√M (Phase 2)
    est = 8 * N * N * d / math.sqrt(M) + N * N
    assert abs(res.io.total - est) / est < 0.15


def test_auto_is_never_worse_than_the_paper_rule_nor_any_candidate():
    for N, d, M, causal in itertools.product((100, 1000), (32, 256), (64, 1000, 16384),
                                             (False, True)):
        shape = Shape(N, N, d, causal=causal)
        auto = ALG.default_tiling(shape, M)
        best = ALG._predict(shape, auto).total
        paper = ALG.paper_tiling(shape, M)
        assert best <= ALG._predict(shape, paper).total
        for c in ALG.candidate_tilings(shape, M):
            if ALG.footprint(shape, c) <= M:
                assert ALG._predict(shape, c).total >= best


def test_stable_variant_counts_every_extra_word():
    """Same sides, stable vs literal: exactly the per-tile maxima (written, then read per
    output slice); l is replaced by g word for word."""
    N, d, M = 500, 64, 2000
    shape = Shape(N, N, d)
    t = mapper.search(ALG, shape, M, ALG.candidate_tilings(shape, M, spill="exp")).tiling
    assert t.spill == "exp"
    sc = mapper.search(ALG, shape, M).tiling  # the default search: the scores spill, never worse
    assert sc.spill == "scores"
    assert ALG.cost(shape, sc).io.total < ALG.cost(shape, t).io.total
    lit = SquareTilingTiling(*[getattr(t, f) for f in ("Br", "Bc", "Bd", "Br2", "Bk2", "Bd2")],
                             order=t.order, stable=False)
    a = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=t).io
    b = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=lit).io
    Tc, Td = -(-N // t.Bc), -(-d // t.Bd2)
    assert a.writes - b.writes == N * Tc
    assert a.reads - b.reads == Td * Tc * N
    assert a.per_array["m_tile"].writes == N * Tc and a.per_array["m_tile"].reads == Td * Tc * N
    assert a.per_array["g"].writes == b.per_array["l"].writes == N


@pytest.mark.parametrize("causal", [False, True])
def test_scores_spill_moves_what_the_literal_schedule_moves(causal):
    """spill="scores" writes the raw scores and forms exp(S - g) in Phase 2: no per-tile maxima,
    so with the same sides it moves exactly the literal schedule's words (g in place of l), and
    its output is the reference's even where the literal one overflows."""
    N, d, M = 300, 32, 3000
    sides = dict(Br=24, Bc=20, Bd=4, Br2=24, Bk2=7, Bd2=32, order="row")
    sc = SquareTilingTiling(**sides, stable=True, spill="scores")
    lit = SquareTilingTiling(**sides, stable=False)
    a = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=sc, causal=causal).io
    b = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=lit, causal=causal).io
    assert (a.reads, a.writes) == (b.reads, b.writes)
    assert "m_tile" not in a.per_array and a.per_array["g"].writes == N
    # Phase 1 (dominant here) holds m and l where the literal holds l: one more row vector
    assert ALG.footprint(Shape.make(N, d), sc) == ALG.footprint(Shape.make(N, d), lit) + 24
    rng = np.random.default_rng(3)
    Q, K, V = (rng.standard_normal((N, d)) * 6 for _ in range(3))  # logits in the hundreds
    r = attnio.run("square_tiling", Q, K, V, M=M, tiling=sc, causal=causal)
    assert np.abs(r.output - attnio.reference.attention(Q, K, V, causal=causal)).max() < 1e-10
    with pytest.raises(attnio.algorithms.square_tiling.ExpOverflowError):
        attnio.run("square_tiling", Q * 4, K * 4, V, M=M, tiling=lit, causal=causal)
    with pytest.raises(attnio.ParameterError, match="spill"):
        attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=SquareTilingTiling(
            **sides, stable=False, spill="scores"))


def test_causal_skips_fully_masked_tiles():
    N, d, M = 512, 64, 1400
    t = SquareTilingTiling(32, 32, 4, 32, 4, 32, "tile", True)
    full = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=t).io
    caus = attnio.run("square_tiling", shape=(N, d), M=M, mode="count", tiling=t, causal=True).io
    T = N // 32
    # A is written only on the T(T+1)/2 tiles on or below the diagonal
    assert caus.per_array["A"].writes == 32 * 32 * T * (T + 1) // 2
    assert full.per_array["A"].writes == N * N
    assert caus.total < 0.6 * full.total


# ---------------------------------------------------------------------- numerical stability
def _big_logits(N, d, top, seed=3, dtype=np.float64):
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((N, d)) for _ in range(3))
    s = top / (Q @ K.T).max()  # the largest logit is +top, the smallest about -top
    return Q.astype(dtype), K.astype(dtype), V.astype(dtype), s


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tiling", [None, "paper", SquareTilingTiling(3, 4, 2, 5, 2, 3, "row")])
def test_stable_handles_logits_of_1e3(causal, tiling):
    Q, K, V, s = _big_logits(41, 6, 1e3)
    res = attnio.run("square_tiling", Q, K, V, M=120, causal=causal, scale=s, tiling=tiling)
    ref = attnio.reference.attention(Q, K, V, causal=causal, scale=s)
    assert np.isfinite(res.output).all()
    assert np.abs(res.output - ref).max() <= 1e-10


def test_literal_version_reports_overflow_instead_of_nan():
    Q, K, V, s = _big_logits(41, 6, 1e3)
    with pytest.raises(ExpOverflowError, match="overflowed.*use stable=True"):
        attnio.run("square_tiling", Q, K, V, M=120, scale=s, tiling={"stable": False})
    # a logit of 700 still fits in float64 exp: the literal version is exact there
    Q, K, V, s = _big_logits(20, 4, 700.0)
    res = attnio.run("square_tiling", Q, K, V, M=120, scale=s, tiling={"stable": False})
    assert np.abs(res.output - attnio.reference.attention(Q, K, V, scale=s)).max() <= 1e-10


def test_literal_version_overflows_in_float32_above_88():
    Q, K, V, s = _big_logits(20, 4, 100.0, dtype=np.float32)
    with pytest.raises(ExpOverflowError, match="float32"):
        attnio.run("square_tiling", Q, K, V, M=120, scale=s, tiling={"stable": False})
    res = attnio.run("square_tiling", Q, K, V, M=120, scale=s)  # stable
    assert np.isfinite(res.output).all()


def test_literal_version_reports_a_row_that_underflows():
    rng = np.random.default_rng(5)
    Q = rng.standard_normal((8, 2))
    K = np.array([[1.0, 0.0]] * 8)
    Q[3] = [-1000.0, 0.0]  # every score of row 3 is -1000·scale-free: exp underflows to 0
    V = rng.standard_normal((8, 2))
    with pytest.raises(ExpOverflowError, match="row 3 underflowed"):
        attnio.run("square_tiling", Q, K, V, M=60, scale=1.0, tiling={"stable": False})
    res = attnio.run("square_tiling", Q, K, V, M=60, scale=1.0)
    assert np.abs(res.output - attnio.reference.attention(Q, K, V, scale=1.0)).max() <= 1e-10


# ---------------------------------------------------------------------- parameters
def test_tiling_errors_name_the_parameter():
    shape = (64, 16)
    with pytest.raises(ParameterError, match="Bk2=3 must divide tiling.Bc=4"):
        attnio.run("square_tiling", shape=shape, M=500, mode="count",
                   tiling=SquareTilingTiling(4, 4, 4, 4, 3, 4))
    with pytest.raises(ParameterError, match="unknown field"):
        attnio.run("square_tiling", shape=shape, M=500, mode="count", tiling={"Bx": 3})
    with pytest.raises(ParameterError, match="missing"):
        attnio.run("square_tiling", shape=shape, M=500, mode="count", tiling={"Br": 3})
    with pytest.raises(ParameterError, match="order"):
        attnio.run("square_tiling", shape=shape, M=500, mode="count",
                   tiling=SquareTilingTiling(4, 4, 4, 4, 4, 4, "diagonal"))
    with pytest.raises(CapacityError):
        attnio.run("square_tiling", shape=shape, M=100, mode="count", tiling=16)
    with pytest.raises(ParameterError, match="needs M >= 6"):
        attnio.run("square_tiling", shape=shape, M=5, mode="count")
    with pytest.raises(ParameterError, match="needs M >= 4"):
        attnio.run("square_tiling", shape=shape, M=3, mode="count", tiling={"stable": False})
    # the literal version runs where the stable one cannot
    r = attnio.run("square_tiling", shape=shape, M=4, mode="count", tiling={"stable": False})
    assert r.io.peak <= 4


def test_cli_runs_square_tiling_with_a_tiling(capsys):
    from attnio.cli import main

    assert main(["run", "square_tiling", "--N", "40", "--d", "8", "--M", "100", "--tiling",
                 '{"stable": false}', "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"] == "square_tiling" and out["tiling"]["stable"] is False
    assert out["max_abs_err"] <= 1e-10 and out["peak"] <= 100
    assert main(["run", "square_tiling", "--N", "40", "--d", "8", "--M", "100", "--tiling",
                 "{bad"]) == 2


def test_the_masked_phase1_bound_is_below_every_candidates_count():
    """``_phase1_lower`` (the branch and bound that picks the best Phase-1 choices under a
    causal mask) is at most each candidate's exact Phase-1 count, both orders, every variant."""
    import random

    from attnio.algorithms import square_tiling as sq

    rng = random.Random(10)
    alg = sq.ALGORITHM
    for _ in range(120):
        Nq, d = rng.randint(1, 9000), rng.randint(1, 160)
        shape = Shape.make(Nq, d, Nkv=rng.choice([Nq, rng.randint(1, 9000)]),
                           causal=rng.choice(["bottom_right", "top_left"]))
        M = rng.randint(4 * d + 20, 300000)
        for stable, spill in ((True, "scores"), (True, "exp"), (False, "exp")):
            low = sq._phase1_lower(shape, sq._maxima(stable, spill))
            for c in alg._phase1_candidates(shape, M, stable, spill):
                exact = sum(sq._phase1_io(shape, c[0], c[1], c[3], stable, spill))
                assert low(c) <= exact * (1 + 1e-12), (shape, M, c)


def test_phase1_grid_is_the_sorted_union_of_the_candidates_and_plain_least_their_ranking():
    """The search's Phase-1 grid (numpy, both spills at once) is exactly the sorted set of the
    choices :meth:`_phase1_candidates` lists for the scores and exp spills, on random shapes
    from tiny to N = 10^9 and M up to 2^60; and :meth:`_plain_least` (float64 first, the near
    ones exact) keeps the same choices in the same order as ``mapper.preranked`` by the exact
    unmasked (count, tiles) over that sorted list."""
    import random

    from attnio.algorithms import square_tiling as sq

    rng = random.Random(44)
    alg = sq.ALGORITHM
    checked = 0
    for _ in range(150):
        Nq = rng.choice([rng.randint(1, 60), rng.randint(1, 9000), 10**9])
        Nkv = rng.choice([Nq, rng.randint(1, 9000), 3 * 10**8])
        d = rng.choice([1, 3, 40, 64, 128, rng.randint(1, 300)])
        M = rng.choice([rng.randint(4 * d + 20, 300000), 2**40, 2**60])
        shape = Shape.make(Nq, d, Nkv=Nkv, causal=rng.choice([False, True]))
        if M < alg.min_M(shape):
            continue
        grid = alg._phase1_grid(shape, M, True, ("scores", "exp"))
        listed = sorted(set(alg._phase1_candidates(shape, M, True, "scores"))
                        | set(alg._phase1_candidates(shape, M, True, "exp")))
        assert [(a, b, c, "row" if k == 0 else "tile") for a, b, c, k in grid.tolist()] == listed
        for maxima in (False, True):
            def key(c, maxima=maxima):
                return (sq._phase1_plain(shape, maxima, c),
                        -(-shape.Nq // c[0]) * -(-shape.Nkv // c[1]))
            for keep in (1, 12, 64):
                want = mapper.preranked(listed, key, keep)
                got = alg._plain_least(shape, maxima, grid, keep)
                assert [c for c, _ in got] == want, (shape, M, keep)
                assert [k for _, k in got] == [key(c) for c in want]
        checked += 1
    assert checked > 100
