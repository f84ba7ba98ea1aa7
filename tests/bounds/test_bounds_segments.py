"""Bounds v2 (docs/bounds.md §5-§11): Theorems A-E, the matmul constants, the corrections, the
block-sparse certificate, and no schedule or pebbling optimum below any explicit bound.

The counts compared here are the closed forms (``cost(shape, tiling).io``), which other tests
hold equal to the simulator's counts; a few are simulated here too.  Any segment length K and
multiplier (μ, ν) give a valid bound (the tables only set tightness), so the proofs are also
tested at random parameters, where a wrong per-segment maximum would show first.
"""

from __future__ import annotations

import itertools
import math
import pathlib
import re
import statistics
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio import bounds as B
from attnio.algorithms import mapper
from attnio.bounds import backward as BK
from attnio.bounds import forward as F
from attnio.core import BlockMask
from attnio.core.workload import Shape
from attnio.runner import BackwardPass
from conftest import least_backward_count, least_forward_count

EXACT = [a for a in attnio.algorithms.all_algorithms() if a.exact]
NEW_FORWARD = {"pv_segment", "qkpv_pooled", "qkpv_levelled"}
NEW_BACKWARD = {"backward_trivial", "backward_inputs", "backward_accum", "backward_pooled"}


def explicit(shape: Shape, M: int) -> list[B.Bound]:
    bs = [b for b in B.applicable_to(shape, M) if b.explicit]
    assert NEW_FORWARD <= {b.name for b in bs}
    return bs


# ---------------------------------------------------------------- every schedule above every bound
SHAPES = [
    Shape(16, 16, 4), Shape(24, 9, 6), Shape(9, 24, 6), Shape(32, 32, 8),
    Shape.make(20, 4, causal=True), Shape.make(20, 4, Nkv=28, causal="top_left"),
    Shape.make(20, 4, Nkv=28, causal="bottom_right", window=5),
    Shape.make(24, 8, Nkv=16, causal="top_left", window=7),
    Shape.make(16, 4, heads=4, kv_heads=1), Shape.make(16, 4, heads=4, kv_heads=2, causal=True),
    Shape(32, 32, 4, block_mask=BlockMask.causal(32, 32, 8)),
    Shape(32, 48, 4, block_mask=BlockMask.random(32, 48, 8, density=0.4, seed=3)),
    Shape(40, 40, 8, block_mask=BlockMask([[1, 0, 0, 1, 0], [0, 1, 0, 0, 0], [1, 1, 1, 0, 0],
                                           [0, 0, 0, 0, 1], [0, 1, 0, 0, 1]], 8)),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.describe())
def test_every_forward_schedule_and_tiling_is_above_every_explicit_bound(shape):
    ran = 0
    for M in sorted({4 * shape.d + 8, shape.d * shape.d, 2 * shape.d * shape.d, 300, 1000, 5000,
                     shape.Nq * shape.d, 4 * shape.Nkv * shape.d}):
        least = least_forward_count(shape, M)
        if least is None:
            continue
        ran += 1
        for b in explicit(shape, M):
            assert least >= b.value, (shape.describe(), M, b.name, least, b.value)
    assert ran >= 3


@pytest.mark.parametrize("shape", SHAPES[::3], ids=lambda s: s.describe())
def test_simulated_counts_are_above_the_new_bounds(shape):
    for M in (300, 2000):
        for name in ("flash2", "standard"):
            alg = attnio.algorithms.get(name)
            if mapper.can_run(alg, shape, M) is not None:
                continue
            io = attnio.run(name, shape=shape, M=M, mode="count").io.total
            for b in explicit(shape, M):
                assert io >= b.value, (name, M, b.name, io, b.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(2, 48), dkv=st.integers(-6, 6), d=st.integers(1, 10),
       M=st.integers(8, 4000), causal=st.sampled_from([False, "bottom_right", "top_left"]),
       kfac=st.floats(0.05, 8.0), mfac=st.floats(0.0, 3.0), nfac=st.floats(0.0, 0.999))
def test_theorems_a_b_hold_at_any_parameters(N, dkv, d, M, causal, kfac, mfac, nfac):
    """Any K >= 1, μ >= 0, 0 <= ν < 2d is a valid bound: no schedule below it."""
    shape = Shape.make(N, d, Nkv=max(1, N + dkv), causal=causal)
    least = least_forward_count(shape, M)
    if least is None:
        return
    P = attnio.core.masks.row_counts(shape).pairs2
    K = max(1, round(kfac * M))
    mu = mfac * max(math.sqrt(M), M / d)
    assert F.pv_segment_value(P, d, M, K, mu) <= least
    assert F.qkpv_pooled_value(P, d, M, K, nfac * 2 * d) <= least


# ---------------------------------------------------------------- backward
BACKWARD_SHAPES = [
    Shape(32, 32, 8), Shape(24, 40, 4), Shape.make(32, 8, causal=True),
    Shape.make(24, 4, Nkv=30, causal="top_left", window=6),
    Shape.make(16, 4, heads=4, kv_heads=2, causal=True),
    Shape(32, 32, 4, block_mask=BlockMask.causal(32, 32, 8)),
    Shape(32, 48, 8, block_mask=BlockMask.random(32, 48, 8, density=0.5, seed=1)),
]




@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=lambda s: s.describe())
def test_every_backward_schedule_is_above_every_explicit_backward_bound(shape):
    ran = 0
    for M in (4 * shape.d + 8, 8 * shape.d, shape.d * shape.d // 4, shape.d * shape.d,
              4 * shape.d * shape.d, 50 * shape.d * shape.d):
        least = least_backward_count(shape, M)
        if least is None:
            continue
        ran += 1
        bs = B.backward_applicable_to(shape, M)
        assert NEW_BACKWARD <= {b.name for b in bs if b.explicit}
        assert any(b.name == "li_backward" and not b.explicit for b in bs)
        for b in bs:
            if b.explicit:
                assert least >= b.value, (shape.describe(), M, b.name, least, b.value)
    assert ran >= 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(2, 40), d=st.integers(1, 8), M=st.integers(8, 3000),
       causal=st.booleans(), kfac=st.floats(0.05, 8.0), mfac=st.floats(0.0, 3.0),
       nfac=st.floats(0.0, 0.999))
def test_theorems_d_e_hold_at_any_parameters(N, d, M, causal, kfac, mfac, nfac):
    shape = Shape.make(N, d, causal=causal)
    least = least_backward_count(shape, M)
    if least is None:
        return
    P = attnio.core.masks.row_counts(shape).pairs2
    K = max(1, round(kfac * M))
    assert BK.backward_accum_value(P, d, M, K, mfac * max(math.sqrt(M), M / d)) <= least
    assert BK.backward_pooled_value(P, d, M, K, nfac * 2.5 * d) <= least


def test_flash2_backward_simulated_is_above_the_backward_bounds():
    shape = Shape.make(40, 8, causal=True)
    for M in (200, 1000, 4000):
        res = attnio.run("flash2", shape=shape, M=M, mode="count",
                         backward=BackwardPass("flash2_backward"))
        assert res.backward_algorithm == "flash2_backward"
        bwd = res.backward_io.total
        for b in B.backward_applicable_to(shape, M):
            if b.explicit:
                assert bwd >= b.value, (M, b.name, bwd, b.value)


# ---------------------------------------------------------------- pebbling optima
DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "pebbling.md"


def _pebble_upper_ends() -> dict[tuple[str, str], int]:
    """The documented optimum (or the upper end U of [L, U]: a legal schedule) of each instance
    of docs/pebbling.md, the least of the game and its sliding variant."""
    out = {}
    for ln in DOC.read_text().splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("| ") and len(cells) == 10 and cells[0] != "instance":
            ends = [int(re.findall(r"\d+", cells[k])[-1]) for k in (3, 5)]
            out[cells[0], cells[1]] = min(ends)
    return out


def _scan_forward(P: int, d: int, M: int) -> int:
    """Theorems A and B at many parameters: each value is a valid bound, so is their maximum."""
    best = 0
    for K in range(1, 41):
        for mu in (0.0, 0.1, 0.3, 0.6, 1.0, 2.0):
            best = max(best, F.pv_segment_value(P, d, M, K, mu))
        for nu in (0.0, 0.5, 1.0, 1.5):
            if nu < 2 * d:
                best = max(best, F.qkpv_pooled_value(P, d, M, K, nu))
    return best


def test_no_explicit_bound_is_above_a_documented_pebbling_optimum():
    from attnio import pebble

    ends = _pebble_upper_ends()
    checked = 0
    for inst, M in pebble.TABLE_INSTANCES:
        ref = ends[inst.label, str(M)]
        vals = [v for _, v, e in pebble.seed_bounds(inst, M) if e]
        if inst.kind == "matmul":
            mkn = dict(zip("mkn", inst.sizes))
            vals += [B.matmul_potential(**mkn, M=M).value, B.matmul_smith(**mkn, M=M).value]
        else:
            Nq, Nkv, d = inst.sizes
            vals.append(_scan_forward(Nq * Nkv, d, M))
        assert max(vals) <= ref, (inst.label, M, vals, ref)
        checked += 1
    assert checked == len(pebble.TABLE_INSTANCES) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("sizes,M", [((2, 2, 1), 4), ((2, 2, 1), 5), ((3, 3, 1), 12)])
def test_new_bounds_are_below_a_solved_pebbling_optimum(sizes, M):
    pytest.importorskip("ortools", reason="the exact pebbling solver needs the 'pebble' extra")
    from attnio import pebble

    r = pebble.solve(pebble.Instance("attention", sizes).dag(), M, time_limit=40)
    if not r.globally_optimal:  # pragma: no cover - a loaded machine
        pytest.skip("the solver did not prove its optimum in time")
    Nq, Nkv, d = sizes
    assert _scan_forward(Nq * Nkv, d, M) <= r.io
    for b in B.applicable(N=Nq, d=d, M=M, Nkv=Nkv):
        if b.explicit:
            assert b.value <= r.io, (b.name, b.value, r.io)


# ---------------------------------------------------------------- matmul
@settings(max_examples=150, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40), M=st.integers(3, 2000))
def test_blocked_matmul_is_above_theorem_c_and_smith(m, k, n, M):
    from attnio.blocks.matmul import ALGORITHM, run_matmul

    if M < ALGORITHM.min_M((m, k, n)):
        return
    total = run_matmul(shape=(m, k, n), M=M).io.total
    assert total >= B.matmul_potential(m=m, k=k, n=n, M=M).value
    assert total >= B.matmul_smith(m=m, k=k, n=n, M=M).value


def test_matmul_constants():
    n, M = 512, 1024
    lead = n**3 / math.sqrt(M)
    assert 1.90 <= B.matmul_potential(m=n, k=n, n=n, M=M).value / lead <= 1.93
    assert B.matmul_potential(m=n, k=n, n=n, M=M).value > B.matmul(m=n, k=n, n=n, M=M).value
    s = B.matmul_smith(m=n, k=n, n=n, M=M)
    assert s.value == 2 * lead - 2 * M - n * n and s.explicit
    assert B.matmul_smith(m=n, k=n, n=n, M=M, accumulate=True).value == 2 * lead - 2 * M
    # COSMA's statement is still not explicit, and the floor holds for tiny k
    assert B.matmul_smith(m=100, k=1, n=100, M=100).value == 100 + 100 + 100 * 100


# ---------------------------------------------------------------- leading constants, speed-free
def test_leading_constants_of_theorems_a_b_d_e():
    N = 2**16
    d, M = 64, 16 * 64 * 64  # M = 16d²: large cache
    assert 3.3 <= F.pv_segment(N=N, d=d, M=M).value / (N * N * d * d / M) <= 3.35
    assert 8.6 <= BK.backward_accum(N=N, d=d, M=M).value / (N * N * d * d / M) <= 8.82
    d, M = 256, 256  # M = d²/256: small cache
    assert 2.7 <= F.qkpv_pooled(N=N, d=d, M=M).value / (N * N * d / math.sqrt(M)) <= 2.83
    assert 5.8 <= BK.backward_pooled(N=N, d=d, M=M).value / (N * N * d / math.sqrt(M)) <= 6.11
    # both beat the first generation where they win
    assert F.pv_segment(N=N, d=64, M=65536).value > 3 * B.standard_matmul_large_cache(N=N, d=64, M=65536).value
    assert F.qkpv_pooled(N=N, d=d, M=M).value > 1.9 * B.standard_matmul_small_cache(N=N, d=d, M=M).value


def test_bounds_depend_on_the_mask_only_through_the_pairs():
    causal = Shape.make(256, 32, causal=True)
    P = attnio.core.masks.row_counts(causal).pairs2
    assert F.pv_segment_for(causal, 4096).value == F.pv_segment_pairs(P=P, d=32, M=4096).value
    gqa = Shape.make(256, 32, heads=4, kv_heads=1)
    assert F.qkpv_pooled_for(gqa, 512).value == F.qkpv_pooled_pairs(P=4 * 256 * 256, d=32, M=512).value



def test_parameter_tables_cover_the_grid_and_interpolate_between_nodes():
    from attnio.bounds import params

    grid = params.grid()
    assert grid[0] == -16 and grid[-1] == 10 and len(grid) == 105
    for name in "ABDE":
        tab = params.table(name)
        assert len(tab) == len(grid) and all(k > 0 and p >= 0 for k, p in tab), name
        i = 40
        assert params.lookup(tab, 2.0 ** grid[i]) == tab[i]
        mid = params.lookup(tab, 2.0 ** ((grid[i] + grid[i + 1]) / 2))
        assert mid == pytest.approx(((tab[i][0] + tab[i + 1][0]) / 2,
                                     (tab[i][1] + tab[i + 1][1]) / 2))
        assert params.lookup(tab, 2.0 ** -40) == tab[0] and params.lookup(tab, 2.0 ** 40) == tab[-1]
    kappa, mu = params.matmul()
    assert kappa > 0 and mu > 0


@pytest.mark.parametrize("fn", [F.pv_segment_pairs, F.qkpv_pooled_pairs, BK.backward_accum_pairs,
                                BK.backward_pooled_pairs])
def test_pairs_functions_name_a_bad_argument(fn):
    for args, param in (((-1, 4, 16), "P"), ((4, 0, 16), "d"), ((4, 4, 0), "M"),
                        ((4.0, 4, 16), "P")):
        with pytest.raises(attnio.ParameterError) as e:
            fn(**dict(zip(("P", "d", "M"), args)))
        assert e.value.param == param
    with pytest.raises(TypeError, match=r"by keyword: \w+_pairs\(P=\.\.\., d=\.\.\., M=\.\.\."):
        fn(4, 4, 16)

def test_few_segments_never_beat_the_trivial_bound_by_more_than_the_schedules():
    # M = Nd: one segment holds everything; the segment bounds fall under 4Nd there
    for N, d in ((256, 32), (4096, 64)):
        M = N * d
        t = B.trivial(N=N, Nkv=N, d=d).value
        for b in (F.pv_segment(N=N, d=d, M=M), F.qkpv_pooled(N=N, d=d, M=M)):
            assert 0 <= b.value <= t


# ---------------------------------------------------------------- corrections (docs/bounds.md §3, §7)
def test_binary_inputs_checks_its_precondition():
    N = 1000
    assert B.binary_min_d(N) == math.ceil(math.log2(N + 1)) == 10
    assert B.binary_inputs(N=N, d=10, M=4096).value > 0
    with pytest.raises(attnio.ParameterError, match=r"d must be >= ⌈log2\(N \+ 1\)⌉ = 10"):
        B.binary_inputs(N=N, d=9, M=4096)
    with pytest.raises(attnio.ParameterError, match="d must be"):
        B.applicable(N=N, d=9, M=4096, binary=True)


@pytest.mark.parametrize("N,d", [(256, 32), (4096, 64), (65536, 128)])
def test_asymptotic_standard_matmul_is_never_below_reading_the_input(N, d):
    for M in (4 * d, d * d, N * d, 4 * N * d):
        b = B.standard_matmul(N=N, d=d, M=M)
        assert not b.explicit and b.value >= B.trivial(N=N, Nkv=N, d=d).value == 4 * N * d


def test_large_cache_bound_evaluates_k_equal_m_off_the_grid():
    # M = 692 is off the fixed K grid: the closed form N²d²/M - M holds with K = M evaluated
    N, d, M = 4096, 16, 692
    assert B.standard_matmul_large_cache(N=N, d=d, M=M).value >= N * N * d * d / M - M
    for N, d, M in itertools.product((1024, 4096), (16, 32), (2 * 32 * 32 + 7, 3001, 5555)):
        if M >= 2 * d * d:
            assert B.standard_matmul_large_cache(N=N, d=d, M=M).value >= N * N * d * d / M - M


def test_large_cache_bound_degrades_to_about_n_squared_not_half():
    N, d = 4096, 128
    for M in (512, 2048, 8192):
        v = B.standard_matmul_large_cache(N=N, d=d, M=M).value
        assert 0.9 * (N - math.sqrt(M)) ** 2 <= v <= N * N
        assert v > 0.75 * N * N


def test_large_cache_bound_overtakes_the_small_cache_one_just_above_d_squared():
    N = 4096
    for d in (32, 64, 128):
        def diff(M):
            return (B.standard_matmul_large_cache(N=N, d=d, M=M).value
                    - B.standard_matmul_small_cache(N=N, d=d, M=M).value)
        assert diff(d * d // 2) < 0 and diff(d * d) < 0
        assert diff(int(1.06 * d * d)) > 0


# ---------------------------------------------------------------- block-sparse certificate
def test_block_sparse_shape_reports_its_bounds_and_the_planner_certificate():
    bm = BlockMask.random(1024, 1024, 64, density=0.25, seed=0)
    shape = Shape(1024, 1024, 64, block_mask=bm)
    dense = Shape(1024, 1024, 64)
    M = 16384
    bs = B.applicable_to(shape, M)
    names = [b.name for b in bs]
    assert "flash_block_sparse" in names and not bs[names.index("flash_block_sparse")].explicit
    rc = attnio.core.masks.row_counts(shape)
    assert rc.pairs2 == bm.kept * 64 * 64
    best = B.best(bs)
    assert best.value < B.best(B.applicable_to(dense, M)).value
    assert F.pv_segment_for(shape, M).value == F.pv_segment_pairs(P=rc.pairs2, d=64, M=M).value
    bb = B.backward_applicable_to(shape, M)
    assert BK.backward_accum_for(shape, M).value == BK.backward_accum_pairs(P=rc.pairs2, d=64, M=M).value
    assert B.best(bb).value > 0
    # the block layout of a causal mask gives the same bounds as the causal Shape when the
    # layout leaves the same pairs visible (block size 1)
    cm = BlockMask.causal(64, 64, 1)
    assert (B.best(B.applicable_to(Shape(64, 64, 8, block_mask=cm), 512)).value
            == B.best(B.applicable_to(Shape.make(64, 8, causal=True), 512)).value)


def test_flash_block_sparse_precondition():
    bm = BlockMask.causal(256, 256, 64)
    with pytest.raises(attnio.ParameterError, match="M must be in"):
        B.flash_block_sparse_for(Shape(256, 256, 64, block_mask=bm), 32)
    with pytest.raises(attnio.ParameterError, match="block_mask"):
        B.flash_block_sparse_for(Shape(256, 256, 64), 1024)


# ---------------------------------------------------------------- the certificate on the grid
def _ratio(N: int, d: int, M: int) -> Fraction:
    p = attnio.plan(N, d, M)
    best = B.best(B.applicable(N=N, d=d, M=M))
    assert p.certificate.best_bound.value == best.value
    return Fraction(p.chosen.predicted.total, int(best.value))


@pytest.mark.parametrize("N,d,M", [(256, 128, 16384), (512, 256, 65536), (256, 32, 1024),
                                   (1024, 32, 4096), (4096, 64, 256)])
def test_certificate_at_the_hardest_points_is_at_most_three(N, d, M):
    assert 1 <= _ratio(N, d, M) <= 3


@pytest.mark.slow
def test_certificate_over_the_issue_grid_median_2_max_3():
    ratios = []
    for e in range(8, 17):
        N = 2**e
        for d in (32, 64, 128, 256):
            M = 4 * d
            while M <= N * d:
                ratios.append(_ratio(N, d, M))
                M *= 2
    assert len(ratios) == 396
    assert min(ratios) >= 1
    assert statistics.median(ratios) <= 2 and max(ratios) <= 3


# ---------------------------------------------------------------- Theorems A and D: the fine search
@pytest.mark.parametrize("theorem", [F._A, BK._D], ids=["A", "D"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(P=st.integers(1, 2_000_000), d=st.integers(1, 200), M=st.integers(8, 200_000))
def test_fine_search_reports_the_theorem_at_its_parameters_and_never_lowers_it(theorem, P, d, M):
    """With fewer than 256 segments Theorems A and D also run the wider (K, multiplier) search of
    segments.fine_best at the M' chosen (docs/bounds.md §12): the value returned is the theorem's
    value at the (K, μ, M') it names, M' >= M, and never below the value without that search."""
    import dataclasses

    v, K, mu, M2 = theorem.closed(P, d, M)
    assert M2 >= M
    assert v == (theorem.value(P, d, M2, K, mu) if K > 0 else 0)
    coarse = dataclasses.replace(theorem, fine=False)
    assert v >= coarse.closed(P, d, M)[0]


def test_theorem_a_fine_search_at_held_out_points():
    """The tabulated (K, μ) sat low on a tooth of K·(h − 1): at M = N·d/2 without a mask (11
    segments) Theorem A rises from 7.06·Nd to 7.134·Nd; at N = 1000, d = 40, M = 4309, causal
    (78 segments), from 565,488 to 571,038 words."""
    assert F.pv_segment_for(Shape.make(3000, 40), 60000).value == 856_086
    assert F.pv_segment_for(Shape.make(1000, 40, causal=True), 4309).value == 571_038
    import dataclasses

    coarse = dataclasses.replace(F._A, fine=False)
    assert coarse.for_shape(Shape.make(1000, 40, causal=True), 4309).value == 565_488
