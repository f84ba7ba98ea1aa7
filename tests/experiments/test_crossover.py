"""The M = d² crossover between square tiling and FlashAttention, and the scaling slopes.

All counts are simulated (count mode, bulk counting) and equal to the closed forms (checked in
tests/algorithms/test_square_tiling.py and tests/algorithms/test_exact_algorithms.py).
"""

from __future__ import annotations

import functools
import itertools
import pathlib
import re

import numpy as np
import pytest

import attnio
from attnio.algorithms import square_tiling
from attnio.core.workload import Shape
from attnio.experiments import crossover as st

ROOT = pathlib.Path(__file__).resolve().parents[2]
NS, DS, FACTORS = (1024, 4096), (64, 128, 256), (1 / 16, 1 / 4, 1, 4, 16)


@functools.lru_cache(maxsize=None)
def _cmp(N: int, d: int, M: int) -> dict:
    return st.flash_comparison(N, d, M)


def test_grid_is_the_issues_grid():
    assert (st.CROSSOVER_NS, st.CROSSOVER_DS, st.CROSSOVER_FACTORS) == (NS, DS, FACTORS)


@pytest.mark.parametrize("N,d", list(itertools.product(NS, DS)))
def test_square_tiling_wins_below_d2_over_4_and_flash2_wins_above_4d2(N, d):
    for f in FACTORS:
        M = round(f * d * d)
        c = _cmp(N, d, M)
        sq, f1, f2 = c["square_tiling"], c["flash1"], c["flash2"]
        assert sq == square_tiling.ALGORITHM.predicted_io((N, d), M).total
        if f <= 1 / 4:
            runnable = [x for x in (f1, f2) if x is not None]
            assert all(sq < x for x in runnable), (N, d, M, c)
        if f >= 4:
            assert f2 is not None and f2 < sq, (N, d, M, c)


def test_where_flash_cannot_run_is_recorded():
    """M = d²/16 = 256 at d = 64 is below FlashAttention's 4d + 4 = 260 words: a row of Q, K, V
    and O does not fit.  Square tiling runs there; that is part of the result."""
    for N, d, f in itertools.product(NS, DS, FACTORS):
        M = round(f * d * d)
        c = _cmp(N, d, M)
        fa_min = attnio.algorithms.get("flash2").min_M(Shape(N, N, d))
        assert fa_min == 4 * d + 4 == attnio.algorithms.get("flash1").min_M(Shape(N, N, d)) - 1
        assert (c["flash2"] is None) == (M < fa_min)
        assert (c["flash1"] is None) == (M < fa_min + 1)
        if c["flash1"] is None and c["flash2"] is None:
            assert c["ratio_best_flash"] is None and c["square_tiling"] > 0
    missing = [(N, d, round(f * d * d)) for N, d, f in itertools.product(NS, DS, FACTORS)
               if _cmp(N, d, round(f * d * d))["best_flash"] is None]
    assert missing == [(1024, 64, 256), (4096, 64, 256)]


@pytest.mark.parametrize("N,d", list(itertools.product(NS, DS)))
def test_crossover_lies_between_d2_over_4_and_4d2(N, d):
    x = st.crossover(N, d)
    assert d * d / 4 < x["last_square_win"] < x["first_flash_win"] < 4 * d * d
    assert x["monotone"]  # one crossing on the scanned grid
    # neighbours on the grid: the crossing is pinned to one step of 2^(1/8)
    grid = x["grid"]
    assert grid.index(x["first_flash_win"]) == grid.index(x["last_square_win"]) + 1


def _block(text: str, start: str, end: str) -> str:
    m = re.search(re.escape(start) + r"(.*?)" + re.escape(end), text, re.S)
    assert m, (start, end)
    return m.group(1)


def test_reported_tables_are_what_the_simulator_measures():
    """docs/small_cache.md carries the generated tables (python benchmarks/bench_small_cache.py
    --write): they must not drift, and no docstring carries a copy that could."""
    report = st.crossover_report()
    doc = (ROOT / "docs" / "small_cache.md").read_text()
    body = _block(doc, "<!-- crossover-table-start -->", "<!-- crossover-table-end -->")
    assert body.strip() == "```text\n" + report + "\n```"
    assert "crossover-table" not in (square_tiling.__doc__ or "")


# ---------------------------------------------------------------------- scaling
def _total(name: str, N: int, d: int, M: int) -> int:
    return attnio.run(name, shape=(N, d), M=M, mode="count").io.total


def _fit(xs, ys, floor):
    keep = [(x, y) for x, y, f in zip(xs, ys, floor) if f < 0.1 * y]
    assert len(keep) >= 3, "too few points above the read-once floor"
    x, y = zip(*keep)
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


@pytest.mark.parametrize("N", [1024, 4096])
def test_square_tiling_slope_in_M_is_minus_half(N):
    d = 256
    Ms = [m for m in (round(64 * 2 ** (k / 2)) for k in range(17)) if m <= d * d // 4]
    ys = [_total("square_tiling", N, d, M) for M in Ms]
    slope = _fit(Ms, ys, [4 * N * d] * len(Ms))
    assert abs(slope + 0.5) <= 0.05, slope


def test_flash2_slope_in_M_is_minus_one():
    d, N = 256, 2 ** 18
    Ms = [4 * d * d * 2 ** k for k in range(6)]
    ys = [_total("flash2", N, d, M) for M in Ms]
    slope = _fit(Ms, ys, [4 * N * d] * len(Ms))
    assert abs(slope + 1) <= 0.1, slope


@pytest.mark.parametrize("name,d,M", [("square_tiling", 256, 64), ("square_tiling", 256, 4096),
                                      ("square_tiling", 256, 256 * 256 // 4),
                                      ("flash2", 256, 4 * 256 * 256),
                                      ("flash2", 256, 16 * 256 * 256)])
def test_slope_in_N_is_two(name, d, M):
    Ns = [1024 * 2 ** k for k in range(9)]  # up to 2^18
    if name == "square_tiling":
        Ns = Ns[:5]  # to 16384: already far above the floor
    ys = [_total(name, N, d, M) for N in Ns]
    slope = _fit(Ns, ys, [4 * N * d for N in Ns])
    assert abs(slope - 2) <= 0.05, slope
