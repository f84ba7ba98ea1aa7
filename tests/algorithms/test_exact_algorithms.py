"""Every registered exact attention algorithm: output, counts vs closed form, capacity, bounds.

The tests iterate the registry, so a new exact schedule is held to the same spine the day it
is registered: output equal to the float64 reference, simulated counts equal to its own closed
form in both modes (bulk and step by step), peak <= M, never below the trivial bound.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnio
from attnio import CapacityError
from attnio.core.errors import ParameterError
from attnio.core.workload import Shape
from conftest import exact_attention_names, random_qkv

ALGS = exact_attention_names()
STEP_BUDGET = 6000  # compute-mode cases above this many tile steps are left to count mode
#: compute-mode cases above this many tile steps (the least M at N = 100, mostly) run only with
#: ``-m slow``: the same schedules and tilings run in the default suite at N = 7 and 33, and their
#: counts at N = 100 are checked step by step in count mode (test_count_mode_...)
FAST_STEPS = 800
#: the compute grid: every (N, d, causal) at the M values of ``_m_values``.  A case's step count
#: (which run it belongs to) is known only once its count has run, so each test loops over the
#: grid's M values itself (the count run it needs anyway) instead of the collection running
#: every count in every xdist worker
GRID_N, GRID_D = (1, 7, 33, 100), (1, 3, 64)
PARTS = {"fast": (0, FAST_STEPS), "slow": (FAST_STEPS, STEP_BUDGET)}


def _m_values(alg, shape: Shape) -> list[int]:
    lo = alg.min_M(shape)
    top = max(lo, shape.Nq * shape.d + 2 * shape.Nkv * shape.d)
    vals = {lo, lo + 1, 2 * lo, 4 * lo + 3, 16 * lo, max(lo, shape.Nq * shape.d), top}
    return sorted(v for v in vals if v <= top)


def _check_compute(name: str, N: int, d: int, M: int, causal: bool, part: str) -> bool:
    """The count of ``name`` at (N, d, M, causal) with its default tiling; if its steps fall in
    ``PARTS[part]``, the compute run with that tiling: output within 1e-10 of the float64
    reference, reads, writes and peak equal to the closed form and to the count, peak <= M.
    Whether the case was checked."""
    cnt = attnio.run(name, shape=(N, d), M=M, mode="count", causal=causal)
    lo, hi = PARTS[part]
    if not lo < cnt.io.steps <= hi:
        return False
    Q, K, V = random_qkv(N, N, d, seed=N * 31 + d)
    res = attnio.run(name, Q, K, V, M=M, causal=causal)
    if res.tiling != cnt.tiling:  # the count with the compute run's tiling
        cnt = attnio.run(name, shape=(N, d), M=M, mode="count", causal=causal, tiling=res.tiling)
    ref = attnio.reference.attention(Q, K, V, causal=causal)
    err = np.abs(res.output - ref).max()
    assert err <= 1e-10, (name, N, d, M, causal, err)
    pred = attnio.algorithms.get(name).predicted_io((N, d), M, causal=causal, tiling=res.tiling)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes), (name, N, d, M, causal)
    assert res.io.peak <= M
    assert (cnt.io.reads, cnt.io.writes, cnt.io.peak) == (res.io.reads, res.io.writes, res.io.peak)
    return True


@pytest.mark.parametrize("name", ALGS)
def test_output_equals_reference_and_counts_equal_closed_form(name):
    """The grid's default-run cases (at most FAST_STEPS steps), and what they cover: every head
    dimension with the least M and with an M that holds the whole of Q, and an N = 33 case
    (ragged, several tiles)."""
    alg = attnio.algorithms.get(name)
    checked = []
    for N, d, causal in itertools.product(GRID_N, GRID_D, (False, True)):
        for M in _m_values(alg, Shape(N, N, d)):
            if _check_compute(name, N, d, M, causal, "fast"):
                checked.append((N, d, M))
    for d in GRID_D:
        ms = [c[2] for c in checked if c[1] == d]
        assert ms, (name, d)
        assert min(ms) == alg.min_M(Shape(7, 7, d)), (name, d)
        assert any(M >= N * dd for N, dd, M in checked if dd == d), (name, d)
    assert any(c[0] == 33 for c in checked), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ALGS)
def test_output_equals_reference_and_counts_equal_closed_form_up_to_the_step_budget(name):
    """The grid's cases of FAST_STEPS to STEP_BUDGET steps (the least M at N = 100, mostly)."""
    alg = attnio.algorithms.get(name)
    for N, d, causal in itertools.product(GRID_N, GRID_D, (False, True)):
        for M in _m_values(alg, Shape(N, N, d)):
            _check_compute(name, N, d, M, causal, "slow")


#: Nq < Nkv, Nq > Nkv, one key, few queries, d = 1; the largest (113 x 203, 4 s for all the
#: schedules) with ``-m slow``, a smaller ragged Nq < Nkv (53 x 97) in the default run
ODD_SHAPES = [pytest.param(113, 203, 8, marks=pytest.mark.slow), (53, 97, 8), (128, 37, 16),
              (239, 1, 4), (5, 80, 3), (64, 64, 1)]


@pytest.mark.parametrize("name", ALGS)
@pytest.mark.parametrize("Nq,Nkv,d", ODD_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_rectangular_shapes_bottom_right_causal(name, Nq, Nkv, d, causal):
    alg = attnio.algorithms.get(name)
    shape = Shape(Nq, Nkv, d)
    M = max(alg.min_M(shape) * 8, 24 * d)
    Q, K, V = random_qkv(Nq, Nkv, d, seed=Nq + Nkv)
    res = attnio.run(name, Q, K, V, M=M, causal=causal)
    ref = attnio.reference.attention(Q, K, V, causal=causal)
    assert np.abs(res.output - ref).max() <= 1e-10
    pred = alg.predicted_io(shape, M, causal=causal, tiling=res.tiling)
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)


def _count_grid():
    out = []
    for name in ALGS:
        for N, d, causal, mult in itertools.product((1, 5, 64, 100, 257), (1, 4, 32, 128),
                                                    (False, True), (1, 3, 17, 200)):
            alg = attnio.algorithms.get(name)
            M = alg.min_M(Shape(N, N, d)) * mult
            out.append((name, N, d, M, causal))
    return out


COUNT_GRID = _count_grid()


def test_count_grid_is_large_enough():
    per_alg = len(COUNT_GRID) // len(ALGS)
    assert per_alg >= 160 and len(COUNT_GRID) >= 200


#: Step by step (bulk=False) replays every block; runs of up to 2,000 steps in the default run
#: (59-124 points per algorithm, 2.6 s of CPU for all), those of 2,000-5,000 steps with ``-m slow``
#: (another 4 s).
STEP_LIMITS = [pytest.param((0, 2000), id="steps<=2000"),
               pytest.param((2000, 5000), id="steps<=5000",
                            marks=pytest.mark.slow)]


@pytest.mark.parametrize("steps", STEP_LIMITS)
@pytest.mark.parametrize("name", ALGS)
def test_count_mode_equals_closed_form_and_step_by_step(name, steps):
    """Every point of the count grid: the bulk count equal to the closed form, the peak within M
    (the footprint, unmasked), never below the trivial bound (O written once; the count of the
    same run, so one run checks both); step by step equal to bulk where the run has ``steps``
    steps."""
    from attnio import bounds

    lo, hi = steps
    checked = 0
    for alg_name, N, d, M, causal in COUNT_GRID:
        if alg_name != name:
            continue
        alg = attnio.algorithms.get(name)
        bulk = attnio.run(name, shape=(N, d), M=M, mode="count", causal=causal)
        pred = alg.predicted_io((N, d), M, causal=causal, tiling=bulk.tiling)
        assert (bulk.io.reads, bulk.io.writes) == (pred.reads, pred.writes), (N, d, M, causal)
        assert bulk.io.peak <= M
        assert bulk.io.peak == alg.footprint(Shape(N, N, d), bulk.tiling) or causal
        assert bulk.io.writes >= N * d  # O written once
        assert bulk.io.total >= bounds.trivial(N=N, Nkv=N, d=d, causal=causal).value
        if lo < bulk.io.steps <= hi:
            step = attnio.run(name, shape=(N, d), M=M, mode="count", causal=causal, bulk=False,
                              tiling=bulk.tiling)
            assert (step.io.reads, step.io.writes, step.io.peak, step.io.steps) == (
                bulk.io.reads, bulk.io.writes, bulk.io.peak, bulk.io.steps)
        checked += 1
    assert checked >= 80


@pytest.mark.parametrize("name", ALGS)
def test_too_small_M_states_the_minimum(name):
    alg = attnio.algorithms.get(name)
    m = alg.min_M(Shape(16, 16, 8))
    if m <= 1:
        pytest.skip("workable at every M")
    with pytest.raises(ParameterError, match=f"needs M >= {m}"):
        attnio.run(name, shape=(16, 8), M=m - 1, mode="count")


def test_tiling_that_overflows_M_raises_capacity_error():
    with pytest.raises(CapacityError):
        attnio.run("flash2", shape=(64, 16), M=1000, mode="count", tiling={"Br": 64, "Bc": 64})


def test_simulator_refuses_an_overflowing_schedule_itself():
    """Bypass the up-front footprint check: the memory must still refuse the step."""
    from attnio.algorithms.flash2 import ALGORITHM, Flash2Tiling
    from attnio.core.memory import TwoLevelMemory

    mem = TwoLevelMemory(500, mode="count")
    Q, K, V, O = (mem.slow(n, (64, 16)) for n in "QKVO")
    with pytest.raises(CapacityError, match="M=500"):
        ALGORITHM.schedule(mem, Q, K, V, O, shape=Shape(64, 64, 16), tiling=Flash2Tiling(16, 16),
                           scale=0.25)


def test_flash1_total_near_published_estimate():
    N, d, M = 4096, 64, 65536
    res = attnio.run("flash1", shape=(N, d), M=M, mode="count")
    Bc = M // (4 * d)
    estimate = 2 * N * d + (N // Bc) * N * (3 * d + 4)
    assert res.tiling.Bc == Bc and res.tiling.Br == d and res.tiling.M_rule == M
    assert abs(res.io.total - estimate) / estimate <= 0.10
    # the exact difference is the initialisation of O, l, m (module docstring)
    assert res.io.total - estimate == N * (d + 2)


def test_flash1_rule_shrinks_M_when_tiles_do_not_fit():
    res = attnio.run("flash1", shape=(1024, 64), M=16384, mode="count")
    t = res.tiling
    assert t.M_rule < 16384 and res.io.peak <= 16384
    from attnio.algorithms.flash1 import published_rule

    assert (t.Br, t.Bc) == published_rule(t.M_rule, 64)
    Br, Bc = published_rule(t.M_rule + 1, 64)
    assert attnio.algorithms.get("flash1").footprint(Shape(1024, 1024, 64),
                                                     type(t)(Br, Bc)) > 16384


def test_flash2_beats_flash1_when_M_at_least_4d2():
    for N, d, causal in itertools.product((64, 257, 1024, 4096), (16, 64, 128), (False, True)):
        for M in (4 * d * d, 8 * d * d, 16 * d * d, 64 * d * d):
            f1 = attnio.run("flash1", shape=(N, d), M=M, mode="count", causal=causal).io.total
            f2 = attnio.run("flash2", shape=(N, d), M=M, mode="count", causal=causal).io.total
            assert f2 < f1, (N, d, M, causal, f1, f2)


@pytest.mark.parametrize("name", ["flash1", "flash2"])
@pytest.mark.parametrize("causal", [False, True])
def test_online_softmax_finite_for_logits_1e4(name, causal):
    rng = np.random.default_rng(7)
    N, d = 40, 4
    Q = rng.standard_normal((N, d))
    K = rng.standard_normal((N, d))
    V = rng.standard_normal((N, d))
    # scale so that the logits reach about 1e4 in magnitude
    logits = Q @ K.T
    s = 1e4 / np.abs(logits).max()
    res = attnio.run(name, Q, K, V, M=200, causal=causal, scale=s)
    ref = attnio.reference.attention(Q, K, V, causal=causal, scale=s)
    assert np.isfinite(res.output).all()
    assert np.abs(res.output - ref).max() <= 1e-10


def test_default_tiling_is_least_io_with_fewest_steps_on_ties():
    alg = attnio.algorithms.get("flash2")
    shape = Shape(1000, 1000, 32)
    t = alg.default_tiling(shape, 20000)
    best = alg._predict(shape, t).total
    for c in alg.candidate_tilings(shape, 20000):
        io = alg._predict(shape, c).total
        assert io >= best
        if io == best:
            assert alg.steps(shape, c) >= alg.steps(shape, t)
