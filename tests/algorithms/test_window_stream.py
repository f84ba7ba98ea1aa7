"""window_stream: sliding-window attention in the small-cache regime (stream tiling cut to the band).

It must give the float64 reference's output within 1e-10; count in compute mode, in bulk count
mode and step by step exactly its closed form; never exceed its footprint nor M; never fall below
an explicit bound; on hypothesis-drawn shapes: windows, both causal alignments, Nq != Nkv,
grouped-query heads, any tiling.  Each array's words are the derivation's sums, counted here by
brute force over the rows and keys; without a window it is stream_tiling word for word.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio.algorithms import window_stream as ws
from attnio.algorithms.stream_tiling import StreamTilingTiling
from attnio.core.reference import attention
from attnio.core.workload import Shape, cdiv, kv_range, q_range
from conftest import check_run_equals_closed_form

ALG = attnio.algorithms.get("window_stream")
T = ws.WindowStreamTiling
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw):
    Nq, Nkv = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    d = draw(st.integers(1, 5))
    causal = draw(st.sampled_from([True, "top_left", True, "top_left", False]))
    window = draw(st.sampled_from([None, 1, 2, 3, 5, 9, 30])) if causal else None
    kvh, g, batch = (draw(st.sampled_from(v)) for v in ([1, 2], [1, 2], [1, 2]))
    return Nq, Nkv, d, causal, window, batch, kvh * g, kvh


@SETTINGS
@given(w=workloads(), extra=st.integers(0, 400), seed=st.integers(0, 2**16),
       pick=st.integers(0, 10**6), sides=st.tuples(*(st.integers(1, 24),) * 4),
       free=st.booleans())
def test_output_and_counts_equal_closed_form(w, extra, seed, pick, sides, free):
    Nq, Nkv, d, causal, window, batch, heads, kvh = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window, heads=heads,
                       kv_heads=kvh, batch=batch)
    M = ALG.min_M(shape) + extra
    cands = [t for t in ALG.candidate_tilings(shape, M) if ALG.footprint(shape, t) <= M]
    assert cands, "min_M promises a candidate"
    tiling = T(*sides) if free else cands[pick % len(cands)]
    M = max(M, ALG.footprint(shape, tiling))
    check_run_equals_closed_form("window_stream", shape, M, tiling, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads(), sides=st.tuples(*(st.integers(1, 24),) * 4))
def test_each_array_moves_the_derivations_sums(w, sides):
    """Q: d words per row of each key block's q_range; K: d per key of each Phase-1 block's
    kv_range; V: d per key of each Phase-2 block's kv_range; the scores A written once and read
    once per output slice: all counted here row by row and key by key."""
    Nq, Nkv, d, causal, window, *_ = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window)
    t = T(*sides)
    qs = sum(np.subtract(*q_range(shape, c0, min(Nkv, c0 + t.Bc))[::-1])
             for c0 in range(0, Nkv, t.Bc))

    def ks(B):
        return sum(np.subtract(*kv_range(shape, r0, min(Nq, r0 + B))[::-1])
                   for r0 in range(0, Nq, B))

    H = sum(np.subtract(*kv_range(shape, r, r + 1)[::-1]) for r in range(Nq))
    cnt = attnio.run("window_stream", shape=shape, M=ALG.footprint(shape, t), mode="count",
                     tiling=t, bulk=False)
    pa = {k: (v.reads, v.writes) for k, v in cnt.io.per_array.items()}
    assert pa["Q"] == (d * qs, 0)
    assert pa["K"] == (d * ks(t.Br), 0)
    assert pa["V"] == (d * ks(t.Br2), 0)
    assert pa["A"] == (cdiv(d, t.Bd2) * H, H)
    assert pa["O"] == (0, Nq * d)
    assert H <= Nq * (window or Nkv)


@settings(max_examples=100, deadline=None)
@given(N=st.integers(1, 400), Nkv=st.integers(1, 400), d=st.integers(1, 40),
       causal=st.sampled_from([False, True, "top_left"]),
       sides=st.tuples(*(st.integers(1, 60),) * 4))
def test_without_a_window_it_is_stream_tiling_word_for_word(N, Nkv, d, causal, sides):
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    ours = ALG.cost(shape, T(*sides))
    theirs = attnio.algorithms.get("stream_tiling").cost(shape, StreamTilingTiling(*sides))
    assert (ours.io, ours.footprint) == (theirs.io, theirs.footprint)
    assert ALG.covered_by(shape) == "stream_tiling"
    assert ALG.covered_by(Shape.make(N, d, Nkv=Nkv, causal=True, window=8)) is None


def test_windowed_count_is_the_two_banded_matmuls():
    """N = 65,536, d = 128, W = 512, M = 4,096 (M < d²/4): about 4·N·W·d/√M + N·W + N·d, far
    below FlashAttention-2's streaming of the band; the planner picks it, below window_square."""
    N, d, W, M = 65536, 128, 512, 4096
    shape = Shape.make(N, d, causal=True, window=W)
    io = ALG.predicted_io(shape, M)
    ideal = 4 * N * W * d / M**0.5 + N * W + N * d
    assert ideal <= io.total <= 1.1 * ideal
    assert io.total < 0.6 * attnio.algorithms.get("flash2").predicted_io(shape, M).total
    p = attnio.plan(N=N, d=d, M=M, causal=True, window=W)
    assert p.chosen.algorithm == "window_stream"
    assert p.chosen.predicted.total == io.total
    assert io.total < attnio.algorithms.get("window_square").predicted_io(shape, M).total


def test_count_is_linear_in_N_for_a_fixed_window():
    totals = [ALG.predicted_io(Shape.make(N, 64, causal=True, window=256), 2048).total
              for N in (4096, 8192, 16384)]
    assert totals[2] - totals[1] == pytest.approx(2 * (totals[1] - totals[0]), rel=0.01)


@pytest.mark.parametrize("Nq,Nkv,align,W,sides", [
    (240, 240, "bottom_right", 37, (7, 5, 9, 3)), (301, 257, "top_left", 50, (12, 8, 6, 2)),
    (199, 260, "bottom_right", 16, (5, 7, 11, 4)), (180, 180, "bottom_right", 90, (9, 6, 8, 5))])
def test_bulk_classes_of_interior_blocks_count_as_step_by_step(Nq, Nkv, align, W, sides):
    """Long enough for interior blocks in several classes (Bc/gcd(Br, Bc) of them)."""
    shape = Shape(Nq, Nkv, 4, causal=True, causal_align=align, window=W)
    t = T(*sides)
    M = ALG.footprint(shape, t)
    bulk = attnio.run("window_stream", shape=shape, M=M, mode="count", tiling=t)
    step = attnio.run("window_stream", shape=shape, M=M, mode="count", tiling=t, bulk=False)
    pred = ALG.cost(shape, t).io
    assert (bulk.io.reads, bulk.io.writes) == (step.io.reads, step.io.writes) == (
        pred.reads, pred.writes)
    assert (bulk.io.steps, bulk.io.per_array, bulk.io.peak) == (
        step.io.steps, step.io.per_array, step.io.peak)


def test_windowed_count_at_a_billion_equals_the_closed_form():
    shape = Shape(10**9, 10**9 + 12345, 128, causal=True, window=4096, heads=2, kv_heads=1)
    t = ALG.default_tiling(shape, 4096)
    res = attnio.run("window_stream", shape=shape, M=4096, mode="count", tiling=t)
    pred = ALG.cost(shape, t).io
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)


def test_the_score_ring_is_narrow_under_a_window():
    shape = Shape.make(4096, 16, causal=True, window=100)
    t = T(32, 30, 32, 16)
    assert ws.ring_width(shape, 30) == 120  # ⌈100/30⌉·30
    assert ALG.slow_workspace(shape, t) == 4096 * 120
    assert ws.ring_width(Shape.make(64, 16, causal=True), 30) == 64  # no window: every key


def test_a_tiling_that_does_not_fit_is_refused_naming_it():
    shape = Shape.make(64, 8, causal=True, window=8)
    with pytest.raises(attnio.CapacityError):
        ALG.predicted_io(shape, 100, tiling=T(16, 16, 4, 4))
    with pytest.raises(attnio.ParameterError, match="tiling.Bd2"):
        ALG.predicted_io(shape, 10_000, tiling={"Br": 4, "Bc": 4, "Br2": 4, "Bd2": 0})


@pytest.mark.slow
def test_issue_shape_runs_and_equals_reference_and_closed_form():
    """The windowed small-cache run of issue 36 at a size compute mode takes in seconds (N =
    2,048, d = 64, W = 512, M = 4,096 = d²), and the count at N = 65,536, d = 128, M = 4,096."""
    rng = np.random.default_rng(36)
    Q, K, V = (rng.standard_normal((2048, 64)) for _ in range(3))
    res = attnio.run("window_stream", Q, K, V, M=4096, causal=True, window=512)
    assert np.abs(res.output - attention(Q, K, V, causal=True, window=512)).max() <= 1e-10
    shape = Shape.make(2048, 64, causal=True, window=512)
    assert res.io.total == ALG.cost(shape, res.tiling).io.total
    big = Shape.make(65536, 128, causal=True, window=512)
    cnt = attnio.run("window_stream", shape=big, M=4096, mode="count")
    assert cnt.io.total == ALG.predicted_io(big, 4096).total == 337_265_920


@settings(max_examples=300, deadline=None)
@given(x0=st.integers(-30, 30), n=st.integers(0, 40), lo=st.integers(-10, 40),
       width=st.integers(0, 40), v=st.one_of(st.none(), st.integers(-40, 40)),
       span=st.one_of(st.none(), st.integers(1, 50)))
def test_overlap_sum_is_the_sum_of_the_overlaps(x0, n, lo, width, v, span):
    """The words of a tile's lines in closed form equal the overlaps summed one by one."""
    hi = lo + width
    u = None if span is None else (span if v is None else v + span)
    brute = sum(max(0, min(hi, x + u if u is not None else hi)
                    - max(lo, x + v if v is not None else lo)) for x in range(x0, x0 + n))
    assert ws.overlap_sum(x0, x0 + n, lo, hi, v, u) == brute


# (Nq, Nkv, W, Br, Bc, Br2, Bd2): gcd(Br, Bc) = 1 and not, Br above and below Bc (both ways of
# holding a tile), N not a multiple of the tiles, Nq != Nkv, W below, between and above the
# sides (bands with a full tile: every block by its sums; thinner ones: the interior by its
# sums, the ends walked), Phase 2 holding a V slice (Bd2 <= Br2) or a score column (Bd2 > Br2)
BULK_CASES = [
    (303, 303, 37, 7, 5, 9, 3), (303, 303, 37, 5, 7, 4, 6), (256, 256, 64, 16, 16, 8, 8),
    (331, 290, 3, 13, 11, 6, 5), (290, 331, 50, 11, 13, 17, 2), (397, 397, 80, 6, 27, 5, 7),
    (397, 397, 9, 27, 6, 30, 4), (280, 280, 1, 4, 9, 3, 4), (200, 233, 58, 24, 8, 12, 12),
    (189, 189, 20, 1, 17, 1, 5), (189, 189, 20, 17, 1, 19, 1), (150, 400, 35, 9, 12, 10, 3),
    (300, 300, 15, 7, 13, 6, 3), (310, 280, 12, 11, 5, 9, 4),
]


# Phase 2 holding a score column (Bd2 > Br2 <= d): the end keys' columns differ in height, the
# tallest sets the peak (W below Br2: no key every row of a block sees)
COLUMN_CASES = [(150, 150, 2, 6, 4, 5, 8, 8), (150, 161, 3, 4, 6, 7, 9, 9),
                (140, 140, 11, 5, 5, 6, 8, 8), (131, 120, 1, 3, 7, 4, 6, 6)]


@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("Nq,Nkv,W,Br,Bc,Br2,Bd2,d",
                         [(*c, 2) for c in BULK_CASES] + COLUMN_CASES)
def test_bulk_count_by_sums_equals_the_walked_count(Nq, Nkv, W, Br, Bc, Br2, Bd2, d, align):
    """The bulk count (interior tiles by their sums, end tiles and end keys by theirs) moves the
    words, steps, per-array words and peak of the count walked tile by tile and key by key, and
    both equal the closed form."""
    shape = Shape(Nq, Nkv, d, causal=True, causal_align=align, window=W)
    t = T(Br, Bc, Br2, Bd2)
    M = ALG.footprint(shape, t)
    bulk = attnio.run("window_stream", shape=shape, M=M, mode="count", tiling=t).io
    step = attnio.run("window_stream", shape=shape, M=M, mode="count", tiling=t, bulk=False).io
    pred = ALG.cost(shape, t).io
    assert (bulk.reads, bulk.writes) == (step.reads, step.writes) == (pred.reads, pred.writes)
    assert (bulk.steps, bulk.peak, bulk.per_array) == (step.steps, step.peak, step.per_array)


@settings(max_examples=60, deadline=None)
@given(N=st.integers(60, 700), extra=st.integers(0, 40), W=st.integers(1, 90),
       Br=st.integers(1, 30), Bc=st.integers(1, 30), top_left=st.booleans())
def test_the_peak_tile_is_the_largest_interior_tile(N, extra, W, Br, Bc, top_left):
    """_peak_tile's choice has the largest footprint (lines + held column) of every tile of
    the interior query blocks, found here by trying them all."""
    shape = Shape(N, N + extra, 2, causal=True, window=W,
                  causal_align="top_left" if top_left else "bottom_right")
    t = T(Br, Bc, 1, 1)
    Bc = min(Bc, shape.Nkv)
    i_a, i_b, _ = ws._interior(shape, Br, Bc, (shape.Nkv // Bc) * Bc)
    if i_b <= i_a:
        return
    rows = ws._row_offsets(shape)

    def footprint(ib, jb):
        r0, r1, k0, k1 = ws._tile_box(shape, ib, jb, kv_range(shape, ib.start, ib.stop))
        side = (k1 - k0) if ws._rows_held(shape, t) else (r1 - r0)
        return ws.overlap_sum(r0, r1, k0, k1, *rows) + side

    best = 0
    for i in range(i_a, i_b):
        lo, hi = kv_range(shape, i * Br, (i + 1) * Br)
        for j in range(lo // Bc, cdiv(hi, Bc)):
            best = max(best, footprint(ws.Block(i, i * Br, (i + 1) * Br),
                                       ws.Block(j, j * Bc, (j + 1) * Bc)))
    assert footprint(*ws._peak_tile(shape, t, i_a, i_b)) == best


def test_a_band_with_a_full_tile_is_counted_whole_by_its_sums():
    """Where some block holds a full tile, Phase 1 of every full block is counted at once; the
    thin bands of BULK_CASES without one take the interior's way (both held to the walk
    above)."""
    assert ws._full_tile(Shape.make(300, 4, causal=True, window=37), T(7, 5, 1, 1)) is not None
    for case in ((300, 300, 15, 7, 13), (310, 280, 12, 11, 5), (331, 290, 3, 13, 11)):
        Nq, Nkv, W, Br, Bc = case
        shape = Shape(Nq, Nkv, 2, causal=True, window=W)
        assert ws._full_tile(shape, T(Br, Bc, 1, 1)) is None
        i_a, i_b, _ = ws._interior(shape, Br, Bc, (Nkv // Bc) * Bc)
        assert i_b - i_a >= Bc  # an interior of several classes


def test_windowed_count_at_a_billion_walks_a_few_dozen_blocks():
    """The runner's estimate of the bulk count's walk (what issue 31 measured at 2.9 s, now
    milliseconds) does not grow with N under a window."""
    shapes = [Shape(N, N, 128, causal=True, window=W)
              for N in (10**6, 10**9) for W in (64, 4096, 65536)]
    walks = [ALG.count_walk(s, ALG.default_tiling(s, 65536)) for s in shapes]
    assert max(walks) <= 100
    big = Shape(10**9, 10**9, 128, causal=True, window=10**8)  # the walk does not grow with W
    t = ALG.default_tiling(big, 65536)
    assert ALG.count_walk(big, t) <= 100
    res = attnio.run("window_stream", shape=big, M=65536, mode="count", tiling=t)
    assert (res.io.reads, res.io.writes) == (ALG.cost(big, t).io.reads, ALG.cost(big, t).io.writes)
