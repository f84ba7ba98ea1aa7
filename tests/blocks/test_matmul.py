"""Blocked matmul (the small-cache building block): output, exact counts, COSMA's bound."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import attnio
from attnio import CapacityError, bounds
from attnio.blocks.matmul import ALGORITHM, MatmulTiling, cosma_bound, run_matmul
from attnio.core.errors import ParameterError


def _bound(m, k, n, M) -> float:
    """COSMA Theorem 1, as attnio.bounds states it."""
    return float(bounds.matmul_cosma(m=m, k=k, n=n, M=M).value)


def test_never_below_the_explicit_matmul_bound_of_the_bounds_module():
    for m, k, n, M in BOUND_GRID[::7]:
        b = bounds.matmul(m=m, k=k, n=n, M=M)
        assert b.explicit
        assert ALGORITHM.predicted_io((m, k, n), M).total >= b.value, (m, k, n, M)


SHAPES = [(1, 1, 1), (5, 3, 4), (17, 9, 13), (24, 20, 24), (100, 7, 33), (3, 200, 2), (40, 1, 50)]
TILINGS = ["auto", "square", "outer", None]


def _compute_cases():
    out = []
    for (m, k, n), M in itertools.product(SHAPES, (3, 4, 12, 50, 300, 5000)):
        for t in TILINGS + [MatmulTiling(2, 3, 1), MatmulTiling(5, 1, 4)]:
            try:
                tiling = ALGORITHM.coerce_tiling((m, k, n), M, t)
            except CapacityError:
                continue
            out.append((m, k, n, M, tiling))
    return list(dict.fromkeys(out))  # the tiling specs often coerce alike (all 1x1x1 at M=3)


CASES = _compute_cases()


def test_grid_is_large_enough():
    assert len(CASES) >= 140 and len(set(CASES)) == len(CASES)  # distinct cases (223 specs)


@pytest.mark.parametrize("m,k,n,M,tiling", CASES)
def test_matmul_output_and_counts_equal_numpy_and_closed_form(m, k, n, M, tiling):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    A, B = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    r = run_matmul(A, B, M=M, tiling=tiling)
    assert np.abs(r.output - A @ B).max() <= 1e-10
    assert (r.io.reads, r.io.writes) == (r.predicted.reads, r.predicted.writes)
    assert r.io.peak == ALGORITHM.footprint((m, k, n), tiling) <= M
    for bulk in (True, False):
        c = run_matmul(shape=(m, k, n), M=M, tiling=tiling, bulk=bulk)
        assert (c.io.reads, c.io.writes, c.io.peak) == (r.io.reads, r.io.writes, r.io.peak)
    assert r.io.reads == -(-n // tiling.bn) * m * k + -(-m // tiling.bm) * k * n
    assert r.io.writes == m * n


BOUND_GRID = list(itertools.product((1, 3, 8, 17, 64, 100, 257, 1000), (1, 5, 64, 300),
                                    (1, 2, 9, 64, 129, 700), (64, 100, 256, 1000, 4096, 65536)))


def test_never_below_cosma_bound_for_any_tiling():
    """COSMA Thm 1 with zero slack: reads >= 2mnk/sqrt(bm*bn) >= 2mnk/sqrt(M) (AM-GM)."""
    for m, k, n, M in BOUND_GRID:
        b = _bound(m, k, n, M)
        assert b == pytest.approx(2 * m * n * k / math.sqrt(M) + m * n)
        for t in ("auto", "square", "outer"):
            io = ALGORITHM.predicted_io((m, k, n), M, tiling=t).total
            assert io >= b, (m, k, n, M, t)
    # and the simulator agrees on a sample of the grid
    for m, k, n, M in BOUND_GRID[::37]:
        assert run_matmul(shape=(m, k, n), M=M).io.total >= _bound(m, k, n, M)


def test_best_tiles_within_2x_of_the_bound_when_M_at_least_64():
    worst = 0.0
    for m, k, n, M in BOUND_GRID:
        io = ALGORITHM.predicted_io((m, k, n), M).total
        b = _bound(m, k, n, M)
        floor = m * k + k * n + m * n  # read A and B once, write C once
        assert io <= 2 * max(b, floor), (m, k, n, M)
        if m >= math.sqrt(M) and n >= math.sqrt(M):  # a C tile of ~M words fits the problem
            assert io <= 2 * b, (m, k, n, M)
            worst = max(worst, io / b)
    assert worst < 1.5


@pytest.mark.parametrize("shape,M,ratios", [
    ((512, 512, 512), 64, (1.155, 1.992, 1.155)),
    ((512, 512, 512), 1024, (1.061, 1.788, 1.061)),
    ((512, 512, 512), 16384, (1.111, 1.889, 1.222)),
    ((1000, 300, 700), 4096, (1.055, 1.732, 1.055)),
])
def test_documented_ratios_are_what_the_simulator_measures(shape, M, ratios):
    got = tuple(round(run_matmul(shape=shape, M=M, tiling=t).ratio, 3)
                for t in ("auto", "square", "outer"))
    assert got == ratios


@pytest.mark.parametrize("M", [3, 8, 15, 63, 64, 80, 1000, 16383, 16384])
def test_outer_tiles_are_the_largest_square_with_a_column_and_row(M):
    t = ALGORITHM.outer_tiling((10**6, 10**6, 10**6), M)
    a = t.bm
    assert t.bn == a and t.bk == 1 and a == math.isqrt(M + 1) - 1
    assert a * a + 2 * a <= M < (a + 1) ** 2 + 2 * (a + 1)
    s = ALGORITHM.square_tiling((10**6, 10**6, 10**6), M)
    assert 3 * s.bm ** 2 <= M < 3 * (s.bm + 1) ** 2


def test_matmul_is_a_building_block_not_an_attention_algorithm():
    assert "matmul" not in attnio.algorithms.names()
    with pytest.raises(attnio.UnknownNameError):
        attnio.algorithms.get("matmul")
    assert not isinstance(ALGORITHM, attnio.Algorithm)
    with pytest.raises(ParameterError, match="not an attention algorithm"):
        attnio.experiments.sweep.parse_algorithms("matmul")


def test_bad_inputs_raise_parameter_errors():
    with pytest.raises(ParameterError, match="A's columns must equal B's rows"):
        run_matmul(np.ones((3, 4)), np.ones((5, 2)), M=64)
    with pytest.raises(ParameterError, match="needs M >= 3"):
        run_matmul(shape=(4, 4, 4), M=2)
    with pytest.raises(ParameterError, match="tiling for matmul"):
        run_matmul(shape=(4, 4, 4), M=64, tiling="diagonal")
    with pytest.raises(ParameterError, match="m must be an integer"):
        run_matmul(shape=(0, 4, 4), M=64)
    with pytest.raises(CapacityError):
        run_matmul(shape=(40, 40, 40), M=64, tiling={"bm": 8, "bn": 8, "bk": 8})


def test_cli_runs_matmul(capsys):
    import json

    from attnio.cli import main

    assert main(["run", "matmul", "--m", "30", "--k", "20", "--n", "10", "--M", "100",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_abs_err"] <= 1e-10 and out["peak"] <= 100
    assert out["total"] == ALGORITHM.predicted_io((30, 20, 10), 100).total
    assert out["ratio"] == pytest.approx(out["total"] / cosma_bound(30, 20, 10, 100))
    assert main(["run", "matmul", "--m", "30", "--M", "100"]) == 2
    assert "needs --k, --n" in capsys.readouterr().err
